"""A pre-training run as MLPerf sees it: evaluation during training at a sample
interval, the stop at a target accuracy, the MLPerf log that MLPerf's own
compliance checker accepts, and the options' refusals."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.pretraining.mlperf import default_eval_interval_samples
from packed_bert_tf.pretraining.run import run_pretraining
from packed_bert_tf.training.trainer import Trainer
from tests.conftest import write_unpacked_dataset
from tests.pretraining.tiny_runs import options

pytest.importorskip("mlperf_logging")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


# 12 steps of 4 packs (about 2 sequences each): evaluations every 24 sequences.
# The one-layer model (the conftest's config_file) uncompiled, at a learning
# rate high enough for its masked-LM accuracy to rise over the 12 steps (at
# BERT's usual rates it stays near 0): the stop threshold is the second
# evaluation's. No claim here is about XLA, which costs seconds a run.
RUN = dict(do_train=True, num_train_steps=12, save_checkpoints_steps=0,
           iterations_per_loop=4, log_every_n_steps=4, learning_rate=0.1,
           jit_compile=False)


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    """64 unpacked evaluation records (4 batches of 16): each run evaluates
    several times, and no claim here is about the evaluation set's size."""
    return write_unpacked_dataset(tmp_path_factory.mktemp("eval"), num_files=1,
                                  per_file=64, seed=7)[0]


def mllog_lines(path) -> list:
    return [json.loads(line.split(":::MLLOG ", 1)[1])
            for line in open(path) if line.startswith(":::MLLOG ")]


@pytest.fixture(scope="module")
def runs(config_file, packed_files, eval_file, tmp_path_factory):
    """The same run trained without evaluation, with evaluation during training,
    and with a stop threshold that its second evaluation reaches."""
    root = tmp_path_factory.mktemp("mlperf")
    plain = run_pretraining(options(config_file, root / "plain", input_file=packed_files[0],
                                    **RUN))
    evaluated_args = dict(input_file=packed_files[0], do_eval=True,
                          eval_input_file=eval_file, eval_interval_samples=24, **RUN)
    evaluated = run_pretraining(options(config_file, root / "evaluated", **evaluated_args))
    target = evaluated["train"]["evaluations"][1]["masked_lm_accuracy"]
    log = root / "mlperf.log"
    stopped = run_pretraining(options(config_file, root / "stopped", stop_threshold=target,
                                      mlperf_log_file=str(log), **evaluated_args))
    return dict(plain=plain, evaluated=evaluated, stopped=stopped, log=log, root=root,
                target=target)


def test_evaluations_come_every_interval_and_at_the_end(runs):
    evaluations = runs["evaluated"]["train"]["evaluations"]
    samples = [e["samples_count"] for e in evaluations]
    history = runs["plain"]["train"]["history"]
    total = runs["plain"]["train"]["sequences"]
    # The first update at or after each multiple of 24 sequences, and the end.
    assert samples[-1] == total and evaluations[-1]["step"] == 12
    assert all(b > a for a, b in zip(samples, samples[1:]))
    multiples = [s // 24 for s in samples[:-1]]
    assert multiples == list(range(1, len(multiples) + 1))
    assert len(evaluations) >= 3 and history  # the run is long enough to tell
    # Every evaluation reads all the evaluation records.
    assert {e["sequences"] for e in evaluations} == {runs["evaluated"]["eval"]["sequences"]}
    assert runs["evaluated"]["eval"]["masked_lm_accuracy"] == \
        evaluations[-1]["masked_lm_accuracy"]


def test_evaluation_leaves_the_training_trajectory_alone(runs):
    plain, evaluated = runs["plain"]["train"], runs["evaluated"]["train"]
    assert plain["sequences"] == evaluated["sequences"]
    # The same weights, bit for bit.
    want = tf.train.load_checkpoint(plain["google_checkpoint"])
    got = tf.train.load_checkpoint(evaluated["google_checkpoint"])
    names = sorted(want.get_variable_to_shape_map())
    assert names == sorted(got.get_variable_to_shape_map()) and len(names) > 10
    for name in names:
        np.testing.assert_array_equal(want.get_tensor(name), got.get_tensor(name), name)
    # The logged means differ in float32 summation order only (shorter chunks).
    np.testing.assert_allclose([p["loss"] for p in evaluated["history"]],
                               [p["loss"] for p in plain["history"]], rtol=1e-6)


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_threshold(runs):
    stopped = runs["stopped"]["train"]
    evaluations = runs["evaluated"]["train"]["evaluations"]
    first_reaching = next(i for i, e in enumerate(evaluations)
                          if e["masked_lm_accuracy"] >= runs["target"])
    assert stopped["stopped_at_target"]
    assert [e["samples_count"] for e in stopped["evaluations"]] == \
        [e["samples_count"] for e in evaluations[:first_reaching + 1]]
    assert stopped["final_step"] == evaluations[first_reaching]["step"] < 12
    assert (runs["root"] / "stopped" / f"model.ckpt-{stopped['final_step']}.index").exists()


def test_the_mlperf_log_holds_the_run(runs):
    lines = mllog_lines(runs["log"])
    keys = [line["key"] for line in lines]
    assert keys[:2] == ["cache_clear", "init_start"]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    assert keys[-1] == "run_stop"
    assert lines[-1]["metadata"]["status"] == "success"
    # run_stop comes at the evaluation that reached the target, before the
    # checkpoint written after it: saving is not part of the time to train.
    final_step = runs["stopped"]["train"]["final_step"]
    checkpoint = runs["root"] / "stopped" / f"model.ckpt-{final_step}.index"
    assert lines[-1]["time_ms"] / 1000 <= checkpoint.stat().st_mtime
    values = {line["key"]: line["value"] for line in lines}
    assert values["submission_benchmark"] == "bert"
    assert values["submission_division"] == "open"
    assert values["seed"] == 3
    assert values["opt_lamb_learning_rate_decay_poly_power"] == 1.0
    assert values["opt_learning_rate_training_steps"] == 12
    packing_factor = runs["stopped"]["packing_factor"]
    assert values["packing_factor"] == packing_factor
    assert values["global_batch_size"] == pytest.approx(4 * packing_factor)
    assert values["eval_samples"] == runs["evaluated"]["eval"]["sequences"]
    accuracies = [line for line in lines if line["key"] == "eval_accuracy"]
    evaluations = runs["stopped"]["train"]["evaluations"]
    assert [a["value"] for a in accuracies] == [e["masked_lm_accuracy"] for e in evaluations]
    assert [a["metadata"]["epoch_num"] for a in accuracies] == \
        [int(e["samples_count"]) for e in evaluations]
    assert all(line["metadata"]["file"].endswith(".py") for line in lines)
    assert keys.count("eval_samples") == 1 and keys.count("run_start") == 1


def test_mlperf_compliance_checker_accepts_the_log(runs, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", "5.0.0", "--log_output", str(tmp_path / "checker.log"),
         str(runs["log"])], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stderr


def test_the_default_interval_is_mlperfs():
    assert default_eval_interval_samples(256) == 150_000
    assert default_eval_interval_samples(4096) == np.floor(
        0.05 * (230.23 * 4096 + 3_000_000) / 25_000) * 25_000


@pytest.mark.parametrize("overrides, message", [
    (dict(stop_threshold=1.5), r"--stop_threshold must be in \(0, 1\], got 1.5"),
    (dict(stop_threshold=0.0), r"--stop_threshold must be in \(0, 1\], got 0.0"),
    (dict(eval_interval_samples=-1), "--eval_interval_samples must be >= 0, got -1"),
    (dict(stop_threshold=0.5, do_eval=False),
     "--stop_threshold needs --do_train, --do_eval and --eval_input_file"),
])
def test_bad_options_are_refused_before_training(config_file, packed_files, unpacked_files,
                                                 tmp_path, overrides, message):
    values = dict(input_file=packed_files[0], do_eval=True,
                  eval_input_file=unpacked_files[0], **RUN)
    values.update(overrides)
    with pytest.raises(ValueError, match=message):
        run_pretraining(options(config_file, tmp_path / "run", **values))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_log_file_in_a_missing_folder_is_refused(config_file, packed_files, tmp_path):
    log = tmp_path / "missing" / "mlperf.log"
    with pytest.raises(ValueError, match=f"--mlperf_log_file={log} cannot be written"):
        run_pretraining(options(config_file, tmp_path / "run", input_file=packed_files[0],
                                mlperf_log_file=str(log), **RUN))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_killed_run_resumes_with_the_same_evaluations_and_one_log(
        runs, config_file, packed_files, eval_file, tmp_path, monkeypatch):
    """Killed after its second evaluation's checkpoint, resumed: the evaluations
    and the log are those of a run never stopped (the log appended to)."""
    want = runs["evaluated"]["train"]["evaluations"]
    original = Trainer.train_steps

    def dies_after_the_second_evaluation(self, iterator, num_steps):
        if int(self.step.numpy()) >= want[1]["step"]:
            raise KeyboardInterrupt("killed")
        return original(self, iterator, num_steps)

    log = tmp_path / "mlperf.log"
    args = dict(input_file=packed_files[0], do_eval=True, eval_input_file=eval_file,
                eval_interval_samples=24, mlperf_log_file=str(log), **RUN)
    monkeypatch.setattr(Trainer, "train_steps", dies_after_the_second_evaluation)
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(options(config_file, tmp_path / "run", **args))
    monkeypatch.setattr(Trainer, "train_steps", original)
    resumed = run_pretraining(options(config_file, tmp_path / "run", **args))
    assert resumed["train"]["start_step"] == want[1]["step"]
    assert [(e["step"], e["samples_count"], e["masked_lm_accuracy"])
            for e in resumed["train"]["evaluations"]] == \
        [(e["step"], e["samples_count"], e["masked_lm_accuracy"]) for e in want]
    keys = [line["key"] for line in mllog_lines(log)]
    assert keys.count("run_start") == 1 and keys.count("init_stop") == 1
    assert keys.count("eval_accuracy") == len(want) and keys.count("eval_samples") == 1
    assert keys[-1] == "run_stop"


def test_evaluation_records_of_another_length_are_refused(config_file, packed_files,
                                                          tmp_path):
    other = write_unpacked_dataset(tmp_path / "eval", num_files=1, per_file=20,
                                   max_seq_length=32, max_predictions_per_seq=5)
    with pytest.raises(ValueError, match=f"{other[0]}"):
        run_pretraining(options(config_file, tmp_path / "run", input_file=packed_files[0],
                                do_eval=True, eval_input_file=other[0], **RUN))
    assert not (tmp_path / "run" / "checkpoints").exists()
