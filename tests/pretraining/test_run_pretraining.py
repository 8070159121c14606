"""run_pretraining end to end on small generated data (tiny model, S = 64)."""

import json
import types

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import BertConfig
from packed_bert_tf.pretraining.run import run_pretraining
from packed_bert_tf.training.loop import NonFiniteLossError
from packed_bert_tf.training.trainer import Trainer
from tests.pretraining.tiny_runs import CONFIG, options
from tests.tool_runs import run_main

#: The runs whose claims are about data, batching, steps, evaluation and stopping,
#: not about XLA, run their steps uncompiled (XLA compiles each run again: seconds
#: of CPU, once per batch shape when bucketing). The default, compiled, is the
#: first test's training runs (a killed run resumes exactly, traced once); the
#: trainer's tests compare the compiled steps with these (tests/training).
NOT_COMPILED = dict(jit_compile=False)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


def google_weights(path):
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def kill_in_second_chunk(monkeypatch):
    """Makes the next run die (KeyboardInterrupt) when its second chunk of
    steps starts; returns the real `Trainer.train_steps`."""
    calls = []
    original = Trainer.train_steps

    def dies_on_second_call(self, iterator, num_steps):
        calls.append(num_steps)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return original(self, iterator, num_steps)

    monkeypatch.setattr(Trainer, "train_steps", dies_on_second_call)
    return original


def test_a_killed_run_resumes_and_ends_where_an_uninterrupted_one_does(
        config_file, packed_files, tmp_path, monkeypatch):
    train = dict(do_train=True, input_file=",".join(packed_files),
                 packing_hyperparameter_adjustment="lamb_betas")
    straight = run_pretraining(options(config_file, tmp_path / "straight", **train))
    assert straight["train"]["final_step"] == 6
    assert straight["train"]["train_steps_function_traces"] == 1
    packing_factor = straight["packing_factor"]
    assert 1.2 < packing_factor < 3  # a third of the sequences are full length
    assert straight["adjustment"]["beta_1"] == pytest.approx(0.9 ** packing_factor)
    assert straight["train"]["sequences"] == pytest.approx(
        straight["train"]["history"][-1]["sequences_seen"])
    files = {str(p.relative_to(tmp_path / "straight"))
             for p in (tmp_path / "straight").rglob("*")}
    assert {"train_summary.json", "model.ckpt-6.index", "checkpoints/ckpt-3.index",
            "checkpoints/ckpt-6.index"} <= files
    assert any(name.startswith("train/events.out.tfevents") for name in files)

    # The same run, killed during its second chunk of steps (after ckpt-3).
    original = kill_in_second_chunk(monkeypatch)
    killed_dir = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(options(config_file, killed_dir, **train))
    assert not (killed_dir / "train_summary.json").exists()
    assert tf.train.latest_checkpoint(str(killed_dir / "checkpoints")).endswith("ckpt-3")
    monkeypatch.setattr(Trainer, "train_steps", original)

    # Restarted with the same flags (and an init checkpoint, which is ignored).
    resumed = run_pretraining(options(config_file, killed_dir,
                                      init_checkpoint=str(tmp_path / "nothing"), **train))
    assert (resumed["train"]["start_step"], resumed["train"]["final_step"]) == (3, 6)
    want = google_weights(str(tmp_path / "straight" / "model.ckpt-6"))
    got = google_weights(str(killed_dir / "model.ckpt-6"))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # The summary covers the whole run, both segments: the same sequences and
    # logged points as the uninterrupted run.
    for name in ("sequences", "tokens", "padded_tokens"):
        assert resumed["train"][name] == straight["train"][name], name
    assert [(point["step"], point["sequences_seen"])
            for point in resumed["train"]["history"]] == \
        [(point["step"], point["sequences_seen"]) for point in straight["train"]["history"]]
    assert [point["step"] for point in straight["train"]["history"]] == [3, 6]
    assert resumed["train"]["sequences_per_second"] > 0

    # A rerun asking for fewer steps than done trains nothing and keeps the figures.
    rerun = run_pretraining(options(config_file, killed_dir, num_train_steps=3, **train))
    assert rerun["train"]["final_step"] == 6
    kept = {key: value for key, value in resumed["train"].items()
            if key not in ("start_step", "train_steps_function_traces")}
    assert {key: rerun["train"][key] for key in kept} == kept
    assert json.loads((killed_dir / "train_summary.json").read_text())["train"][
        "sequences"] == straight["train"]["sequences"]
    # So does an evaluation of the trained run.
    run_pretraining(options(config_file, killed_dir, do_eval=True,
                            eval_input_file=packed_files[0], max_eval_steps=1,
                            **NOT_COMPILED))
    written = json.loads((killed_dir / "train_summary.json").read_text())
    assert written["train"] == json.loads(json.dumps(rerun["train"]))
    assert written["eval"]["steps"] == 1


def test_init_checkpoint_takes_every_folder_of_a_run(config_file, packed_files,
                                                     tmp_path):
    trained = tmp_path / "trained"
    run_pretraining(options(config_file, trained, do_train=True, input_file=packed_files[0],
                            num_train_steps=3, **NOT_COMPILED))
    evaluate = dict(do_eval=True, eval_input_file=packed_files[0], max_eval_steps=2,
                    **NOT_COMPILED)
    metrics = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
               "next_sentence_loss")
    results = {}
    # The exported weights, then the run's folder, its checkpoints and one of them.
    for index, where in enumerate(("model.ckpt-3", ".", "checkpoints",
                                   "checkpoints/ckpt-3")):
        summary = run_pretraining(options(config_file, tmp_path / f"eval{index}",
                                          init_checkpoint=str(trained / where), **evaluate))
        results[where] = {name: summary["eval"][name] for name in metrics}
    assert all(result == results["model.ckpt-3"] for result in results.values()), results
    untrained = run_pretraining(options(config_file, tmp_path / "untrained", **evaluate))
    assert untrained["eval"]["masked_lm_loss"] != results["."]["masked_lm_loss"]
    # A folder with none of the forms: one line, before anything is written.
    (tmp_path / "notes").mkdir()
    with pytest.raises(ValueError, match=rf"^--init_checkpoint={tmp_path}/notes: no BERT "
                                         rf"weights in a known form \(it is empty\)"):
        run_pretraining(options(config_file, tmp_path / "refused",
                                init_checkpoint=str(tmp_path / "notes"), **evaluate))
    assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new"])
def test_a_hugging_face_folder_evaluates_with_no_config_file(config_file, packed_files,
                                                             tmp_path, hidden_act):
    from packed_bert_tf.data.tokenization import SPECIAL_TOKENS
    from packed_bert_tf.models import BertPretrainingModel
    from tests.hugging_face_folders import as_google_checkpoint, write_transformers_folder

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *(f"w{i}" for i in range(
        CONFIG.vocab_size - len(SPECIAL_TOKENS)))]) + "\n")
    folder = write_transformers_folder(tmp_path / "hf", CONFIG, vocab, hidden_act=hidden_act)
    ours = {"gelu": "gelu_exact", "gelu_new": "gelu"}[hidden_act]
    config = BertConfig(**{**CONFIG.to_dict(), "hidden_act": ours})
    config.to_json_file(str(tmp_path / "bert_config.json"))
    model = BertPretrainingModel.from_bert_config(config)
    model.build()
    checkpoint = as_google_checkpoint(folder, model, tmp_path / "google" / "bert_model.ckpt")
    evaluate = dict(do_eval=True, eval_input_file=packed_files[0], max_eval_steps=2,
                    **NOT_COMPILED)
    metrics = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
               "next_sentence_loss")

    def evaluation(bert_config_file, output_dir, init_checkpoint):
        summary = run_pretraining(options(bert_config_file, tmp_path / output_dir,
                                          init_checkpoint=init_checkpoint, **evaluate))
        return {metric: summary["eval"][metric] for metric in metrics}

    from_folder = evaluation(None, "from_folder", folder)
    from_checkpoint = evaluation(str(tmp_path / "bert_config.json"), "from_checkpoint",
                                 checkpoint)
    for metric in metrics:
        assert from_folder[metric] == pytest.approx(from_checkpoint[metric], rel=1e-6)
    # Pre-training goes on from the folder too, with no config file.
    trained = run_pretraining(options(None, tmp_path / "trained", init_checkpoint=folder,
                                      do_train=True, input_file=packed_files[0],
                                      num_train_steps=3, save_checkpoints_steps=0,
                                      **NOT_COMPILED))
    assert trained["train"]["final_step"] == 3
    # With a config file too: accepted where it agrees, else one line naming the key.
    if ours == "gelu":
        assert evaluation(config_file, "with_config", folder) == from_folder
        return
    with pytest.raises(ValueError, match=rf"^--bert_config_file={config_file}: key "
                                         rf"'hidden_act' is 'gelu' but --init_checkpoint="
                                         rf"{folder} \(a Hugging Face BERT folder "
                                         rf"\(model.safetensors\)\) has 'gelu_exact'$"):
        evaluation(config_file, "with_config", folder)


def test_packed_and_unpacked_evaluation_give_the_same_numbers(
        config_file, unpacked_files, packed_files, tmp_path):
    results = {}
    for name, files in (("unpacked", unpacked_files), ("packed", packed_files)):
        summary = run_pretraining(options(config_file, tmp_path / name, do_eval=True,
                                          eval_input_file=",".join(files), **NOT_COMPILED))
        results[name] = summary["eval"]
        assert json.loads((tmp_path / name / "eval_results.json").read_text()) == \
            summary["eval"]
    # Every sequence once (900 of them; 16 does not divide the record counts).
    assert results["unpacked"]["sequences"] == results["packed"]["sequences"] == 900
    for metric in ("masked_lm_accuracy", "next_sentence_accuracy", "masked_lm_loss",
                   "next_sentence_loss"):
        assert results["packed"][metric] == pytest.approx(results["unpacked"][metric],
                                                          rel=1e-5), metric


def test_a_nan_loss_stops_the_run_keeping_the_last_good_checkpoint(
        config_file, unpacked_files, tmp_path):
    with pytest.raises(NonFiniteLossError, match="not finite at step 2") as error:
        run_pretraining(options(config_file, tmp_path, do_train=True,
                                input_file=unpacked_files[0], batching="padded",
                                learning_rate=1e30,
                                num_warmup_steps=0, iterations_per_loop=1,
                                save_checkpoints_steps=1, **NOT_COMPILED))
    assert error.value.checkpoint.endswith("ckpt-1")
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-1")


@pytest.mark.parametrize("overrides, message", [
    (dict(bert_config_file="/nonexistent/bert_config.json"),
     "--bert_config_file=/nonexistent/bert_config.json: no such file"),
    (dict(input_file="/nonexistent/*.tfrecord"), "--input_file: '/nonexistent/"),
    (dict(max_sequences_per_pack=2), "max_sequences_per_pack 3 but the flags give 2"),
    (dict(max_predictions_per_seq=20), "max_masked_tokens 12 but the flags give 22"),
    (dict(max_seq_length=32), "max_seq_length 64 but the flags give 32"),
    (dict(packed_input=False), "holds packed records but --packed_input=False"),
    (dict(do_train=False), "nothing to do"),
    (dict(train_batch_size=3), "--train_batch_size=3 is not a positive multiple of the "
                               "2 replicas"),
    (dict(packing_hyperparameter_adjustment="betas"), "is not one of none"),
    (dict(steps_per_update=4), "--num_train_steps=6 is not a multiple of "
                               "--steps_per_update=4: steps count micro-batches"),
    (dict(step_unit="epoch"), "--step_unit='epoch' is not one of micro_batch, update"),
])
def test_bad_input_is_rejected_before_training(config_file, packed_files, tmp_path,
                                               overrides, message):
    values = dict(do_train=True, input_file=",".join(packed_files))
    values.update(overrides)
    two_replicas = types.SimpleNamespace(num_replicas_in_sync=2)
    with pytest.raises(ValueError, match=message):
        run_pretraining(options(config_file, tmp_path, **values), strategy=two_replicas)
    assert not (tmp_path / "checkpoints").exists()


def test_a_vocabulary_smaller_than_the_data_is_rejected(packed_files, tmp_path):
    small = tmp_path / "small_vocab.json"
    BertConfig(**{**CONFIG.to_dict(), "vocab_size": 100}).to_json_file(str(small))
    with pytest.raises(ValueError, match=r"packed-000.tfrecord record \d+: token id \d+ "
                                         r"is out of range for vocab_size 100"):
        run_pretraining(options(str(small), tmp_path, do_train=True,
                                input_file=packed_files[0]))


def test_the_script_reports_bad_input_in_one_line(tmp_path):
    # In this process: the check is the script's last line, not what its
    # imports print.
    result = run_main("run_pretraining.py", "--bert_config_file=/nonexistent.json",
                      f"--output_dir={tmp_path}", "--do_train", "--input_file=x")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == \
        "run_pretraining: --bert_config_file=/nonexistent.json: no such file"


def length_aware_flags(unpacked_files, batching) -> dict:
    return dict(do_train=True, input_file=",".join(unpacked_files), batching=batching,
                bucket_boundaries=(16, 32, 64), pool_size=64, num_train_steps=6,
                **NOT_COMPILED)


@pytest.fixture(scope="module")
def padded_run(config_file, unpacked_files, tmp_path_factory):
    """A padded run of six steps: its folder and summary. The padded case of
    length-aware batching checks the summary; the resume with other flags goes
    on in the folder (one run fewer to trace)."""
    output_dir = tmp_path_factory.mktemp("padded")
    return output_dir, run_pretraining(options(
        config_file, output_dir, **length_aware_flags(unpacked_files, "padded")))


@pytest.mark.parametrize("batching", ["bucketed", "padded"])
def test_length_aware_batching_trains_on_unpacked_records(config_file, unpacked_files,
                                                          tmp_path, batching, request):
    if batching == "padded":
        summary = request.getfixturevalue("padded_run")[1]
    else:
        summary = run_pretraining(options(config_file, tmp_path,
                                          **length_aware_flags(unpacked_files, batching)))
    train = summary["train"]
    assert train["final_step"] == 6 and train["train_steps_function_traces"] == 1
    # Bucketing pads less: occupancy above the padded batches' (about 0.6 here).
    if batching == "bucketed":
        assert train["occupancy"] > 0.8
    else:
        assert train["occupancy"] < 0.75


def test_length_aware_batching_needs_unpacked_records(config_file, packed_files, tmp_path):
    with pytest.raises(ValueError, match="--batching=bucketed needs unpacked records"):
        run_pretraining(options(config_file, tmp_path, do_train=True,
                                input_file=packed_files[0], batching="bucketed"))


def test_packed_batching_packs_unpacked_records_on_the_fly_and_resumes_exactly(
        config_file, unpacked_files, tmp_path, monkeypatch):
    train = dict(do_train=True, input_file=",".join(unpacked_files), batching="packed",
                 packing_buffer_size=60, packing_hyperparameter_adjustment="lamb_betas",
                 **NOT_COMPILED)
    straight = run_pretraining(options(config_file, tmp_path / "straight", **train))
    factor = straight["packing_factor"]
    assert 1.2 < factor < 3  # estimated by packing the first records' lengths
    assert straight["adjustment"]["beta_1"] == pytest.approx(0.9 ** factor)
    summary = straight["train"]
    assert summary["final_step"] == 6
    # 6 steps of 4 packs: more sequences than rows, little padding.
    assert summary["sequences"] > 24 * 1.2
    assert summary["occupancy"] > 0.8

    # Killed after the checkpoint at step 3 and restarted: the resumed input
    # pipeline packs and skips the first 3 steps' packs, then goes on with
    # exactly the packs of the uninterrupted run.
    original = kill_in_second_chunk(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(options(config_file, tmp_path / "killed", **train))
    monkeypatch.setattr(Trainer, "train_steps", original)
    resumed = run_pretraining(options(config_file, tmp_path / "killed", **train))
    assert resumed["train"]["start_step"] == 3
    assert resumed["train"]["sequences"] == summary["sequences"]
    want = google_weights(str(tmp_path / "straight" / "model.ckpt-6"))
    got = google_weights(str(tmp_path / "killed" / "model.ckpt-6"))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_steps_count_micro_batches_as_in_the_mlperf_reference(config_file, unpacked_files,
                                                             tmp_path):
    # 6 steps of 2 micro-batches of 4 rows: 3 updates, 24 sequences; log points
    # and checkpoints every 3 steps fall at the ends of updates (steps 4 and 6).
    flags = dict(do_train=True, input_file=",".join(unpacked_files), batching="padded",
                 steps_per_update=2, **NOT_COMPILED)
    summary = run_pretraining(options(config_file, tmp_path / "micro", **flags))
    train = summary["train"]
    assert (train["final_step"], train["sequences"]) == (6, 24)
    assert [point["step"] for point in train["history"]] == [4, 6]
    # The rate of each logged update is the schedule's at the step it ends
    # (warm-up 2 steps, then linear decay to 0 at step 6: steps 3 and 5).
    assert [point["learning_rate"] for point in train["history"]] == pytest.approx(
        [1e-3 * 3 / 6, 1e-3 * 1 / 6])
    assert (tmp_path / "micro" / "checkpoints" / "ckpt-4.index").exists()
    assert (tmp_path / "micro" / "model.ckpt-6.index").exists()
    assert summary["steps"] == {"unit": "micro_batch", "steps_per_update": 2,
                                "micro_batches_per_update": 2, "optimizer_clipnorm": None,
                                "micro_batch_clipnorm": 1.0}

    # The former meaning, one step per update and clipping once per update:
    # 3 steps of 2 micro-batches are the same 24 sequences.
    summary = run_pretraining(options(
        config_file, tmp_path / "updates", num_train_steps=3, step_unit="update",
        clip_by_global_norm_after_gradient_allreduce=True, **flags))
    train = summary["train"]
    assert (train["final_step"], train["sequences"]) == (3, 24)
    assert [point["step"] for point in train["history"]] == [3]
    assert summary["steps"]["optimizer_clipnorm"] == 1.0
    assert summary["steps"]["micro_batch_clipnorm"] is None


def test_a_resume_with_other_flags_is_refused_naming_each(config_file, unpacked_files,
                                                           padded_run):
    tmp_path, first = padded_run
    train = length_aware_flags(unpacked_files, "padded")
    assert first["train"]["final_step"] == 6
    written = json.loads((tmp_path / "trajectory.json").read_text())["segments"]
    assert [(s["start_step"], s["rows_per_update"]) for s in written] == [(0, 4)]
    assert written[0]["values"]["--train_batch_size"] == 4

    other_config = tmp_path / "other_config.json"
    CONFIG.__class__(**{**CONFIG.to_dict(), "hidden_dropout_prob": 0.0}).to_json_file(
        str(other_config))
    with pytest.raises(ValueError, match=(
            rf"^--output_dir={tmp_path} was trained to step 6 with other values: "
            r"--bert_config_file \(hidden_dropout_prob 0.1 \(now 0.0\)\); --seed 3 "
            r"\(now 4\); --train_batch_size 4 \(now 8\)\. Resume with the same flags, or "
            r"pass --resume_with_changed_flags to go on with these \(the records already "
            r"read are skipped\)$")):
        run_pretraining(options(other_config, tmp_path, **{
            **train, "num_train_steps": 12, "train_batch_size": 8, "seed": 4}))
    assert json.loads((tmp_path / "trajectory.json").read_text())["segments"] == written

    # Asked for: a second segment; the 6 updates of 4 records are what it skips.
    resumed = run_pretraining(options(config_file, tmp_path, **{
        **train, "num_train_steps": 12, "train_batch_size": 8,
        "resume_with_changed_flags": True}))
    assert (resumed["train"]["start_step"], resumed["train"]["final_step"]) == (6, 12)
    segments = json.loads((tmp_path / "trajectory.json").read_text())["segments"]
    assert [(s["start_step"], s["rows_per_update"]) for s in segments] == [(0, 4), (6, 8)]
