"""run_squad.py (packed, --do_train --do_predict) as 2 worker processes on
127.0.0.1 against one process with 2 replicas (`tests.multi_worker.workers`).

Rows are shared between replicas, not processes
(`packed_bert_tf.data.inputs.rows_dataset.rows_dataset`), so both train on the same
global batches (4 epochs of 11 rows: reshuffled, 5 updates of 2
micro-batches); prediction gathers every replica's rows on every worker
(``strategy.gather``, 2 batches). Dropout stays on (the same masks per
replica) and --jit_compile is the default's, as a user runs it. One layer:
what is compared (weights, predictions) needs no second one, and each
process traces and compiles every layer.
"""

import json

import numpy as np
import pytest

from tests.multi_worker.workers import max_difference, run_both_ways, weights, worker_folder
from tests.squad import squad_data

pytestmark = pytest.mark.slow

#: --do_predict's files, written by the chief alone.
PREDICTIONS = ("predictions.json", "nbest_predictions.json", "eval_results.json")


def squad_flags(files, output_dir) -> list:
    """Packed rows of 2 features or so, 2 per replica, updates of 2 micro-batches."""
    values = dict(files, output_dir=output_dir, max_seq_length=32, doc_stride=16,
                  max_query_length=4, train_batch_size=4, predict_batch_size=4,
                  steps_per_update=2, num_train_epochs=4, learning_rate=5e-3,
                  warmup_proportion=0.1, save_checkpoints_steps=4, iterations_per_loop=2,
                  log_every_n_steps=2, seed=3, cluster_timeout_seconds=120)
    return ["--do_train", "--do_predict", "--jit_compile",
            *(f"--{name}={value}" for name, value in values.items())]


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    """Two workers and one process of 2 replicas, the same fine-tuning."""
    root = tmp_path_factory.mktemp("squad_multi_worker")
    files = squad_data.write_learnable_files(
        root, train_paragraphs=32, predict_paragraphs=16, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, num_hidden_layers=1)
    results = run_both_ways("run_squad.py",
                            lambda name: squad_flags(files, str(root / name)))
    return {"root": root, **results}


def test_two_workers_predict_and_train_as_one_process_with_two_replicas(squad):
    two, one = (squad["root"] / name for name in ("two_workers", "one_process"))
    summaries = [json.loads((folder / "squad_summary.json").read_text())
                 for folder in (two, one)]
    assert [s["replicas"] for s in summaries] == [2, 2]
    train = [s["train"] for s in summaries]
    steps = train[0]["num_train_steps"]
    assert steps >= 4 and [t["final_step"] for t in train] == [steps, steps]
    assert train[0]["sequences"] == train[1]["sequences"]
    assert max_difference(weights(two / f"model.ckpt-{steps}"),
                          weights(one / f"model.ckpt-{steps}")) <= 1e-5

    assert (two / "predictions.json").read_text() == (one / "predictions.json").read_text()
    results = [json.loads((folder / "eval_results.json").read_text())
               for folder in (two, one)]
    assert results[0] == results[1]
    nbest = [json.loads((folder / "nbest_predictions.json").read_text())
             for folder in (two, one)]
    assert sorted(nbest[0]) == sorted(nbest[1]) and len(nbest[0]) == 16
    for qas_id, entries in nbest[1].items():
        assert [e["text"] for e in nbest[0][qas_id]] == [e["text"] for e in entries]
        for key in ("start_logit", "end_logit", "probability"):
            np.testing.assert_allclose([e[key] for e in nbest[0][qas_id]],
                                       [e[key] for e in entries], atol=1e-5)


def test_only_the_chief_writes_into_the_output_folder(squad):
    output_dir = squad["root"] / "two_workers"
    chief, other = squad["workers"]
    written = {path.name for path in output_dir.iterdir()}
    assert written == {path.name for path in (squad["root"] / "one_process").iterdir()}
    assert set(PREDICTIONS) <= written
    assert f"saved checkpoint {output_dir}" in chief.stderr
    assert str(output_dir) not in other.stderr.split("its own files go to")[1]
    assert not worker_folder(other).exists()  # removed at the end
    assert len(list((output_dir / "train").iterdir())) == 1  # one events file
