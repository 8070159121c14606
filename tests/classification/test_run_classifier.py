"""run_classifier.py end to end on a small learnable SST-2-format set (tiny model)."""

import json

import numpy as np
import pytest

from packed_bert_tf.classification.run import ClassifierOptions, run_classifier
from tests.classification.classifier_data import write_files
from tests.classification.glue_files import write_glue_files, write_tsv
from tests.tool_runs import one_line_error_problems, run_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


# About 80-100 steps either way (packing factor ~3.3); without XLA (10 s less
# to compile each; the compiled steps are tested in
# tests.training.distributed_fine_tuning_check).
RUNS = {"packed": ["--train_batch_size=8", "--num_train_epochs=8", "--nojit_compile"],
        "padded": ["--train_batch_size=8", "--num_train_epochs=3", "--nojit_compile"]}


def _arguments(files, output_dir, *more):
    return [f"--{name}={value}" for name, value in files.items()] + [
        f"--output_dir={output_dir}", "--max_seq_length=32", "--learning_rate=5e-3",
        "--iterations_per_loop=10", "--log_every_n_steps=10", "--seed=0", *more]


#: The tiny model with one layer: it learns the toy task, and every traced
#: function (train, evaluate, predict, export) costs half as much as with two.
ONE_LAYER = dict(num_hidden_layers=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_files(tmp_path_factory.mktemp("sst2"), **ONE_LAYER)


def _bad_inputs(files, folder):
    """run_classifier.py command lines on bad inputs, with what their one error
    line must say. The other errors are ValueErrors too
    (test_bad_options_are_rejected_...), which run_or_exit turns into the same
    one line."""
    bad_columns = folder / "bad_columns"
    write_tsv(str(bad_columns / "train.tsv"),
              [["sentence", "label"], ["a good film", "1"], ["too", "many", "columns"]])
    bad_label = folder / "bad_label"
    write_tsv(str(bad_label / "train.tsv"),
              [["sentence", "label"], ["a good film", "1"], ["a dull film", "2"]])
    cases = {
        "columns": ([f"--data_dir={bad_columns}", "--do_train"],
                    f"{bad_columns / 'train.tsv'}:3:"),
        "label": ([f"--data_dir={bad_label}", "--do_train"],
                  f"{bad_label / 'train.tsv'}:3:"),
        "task": (["--task_name=GLUE", "--do_train"],
                 "unknown --task_name=GLUE; known tasks: cola, mnli, mrpc"),
    }
    return {name: (_arguments(files, folder / f"out_{name}", *arguments), message)
            for name, (arguments, message) in cases.items()}


@pytest.fixture(scope="module")
def script_runs(files, tmp_path_factory):
    """The script's runs: both batchings trained, evaluated and predicted, then
    the bad inputs; each in this process, one after the other, as `python
    run_classifier.py ARGS` runs (`tests.tool_runs.run_main`), with
    TensorFlow's graph optimizer off (the module's `grappler_off_for_module`:
    no check here is about it). (the runs' folder, their ToolResults by name,
    the bad inputs' expected messages by name)"""
    root = tmp_path_factory.mktemp("runs")
    bad = _bad_inputs(files, root)
    command_lines = {
        **{batching: _arguments(files, root / batching, "--do_train", "--do_eval",
                                "--do_predict", f"--batching={batching}", *arguments)
           for batching, arguments in RUNS.items()},
        **{name: arguments for name, (arguments, _) in bad.items()}}
    results = {name: run_main("run_classifier.py", *arguments, tmp_path=root)
               for name, arguments in command_lines.items()}
    return root, results, {
        name: message for name, (_, message) in bad.items()}


@pytest.fixture(scope="module")
def trained(script_runs):
    """Both batchings trained, evaluated and predicted by the script."""
    root, all_results, _ = script_runs
    results = {batching: all_results[batching] for batching in RUNS}
    for batching, result in results.items():
        assert result.returncode == 0, (batching, result.stderr[-3000:])
    return root, results


@pytest.mark.parametrize("batching", list(RUNS))
def test_the_toy_task_is_learnt(trained, batching):
    root, results = trained
    evaluation = json.loads((root / batching / "eval_results.json").read_text())
    assert evaluation["accuracy"] >= 0.9, evaluation
    assert evaluation["examples"] == 96 and evaluation["global_step"] > 70
    assert (evaluation["packing_factor"] > 2.5) == (batching == "packed")
    assert f"sst-2 dev: accuracy {evaluation['accuracy']:.4f}" in results[batching].stdout
    lines = (root / batching / "test_results.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 49
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    probabilities = np.loadtxt(root / batching / "test_probabilities.tsv")
    assert probabilities.shape == (48, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(probabilities.argmax(axis=1),
                                  [int(line.split("\t")[1]) for line in lines[1:]])
    summary = json.loads((root / batching / "classifier_summary.json").read_text())
    assert summary["train"]["final_step"] == summary["train"]["num_train_steps"]
    assert summary["train"]["train_steps_function_traces"] == 1
    assert summary["train"]["mfu"] > 0 and summary["train"]["peak_flops_source"] == "measured"


def test_packed_and_unpacked_prediction_write_the_same_files(files, trained, tmp_path):
    root, _ = trained
    checkpoint = sorted((root / "packed").glob("model.ckpt-*.index"))[-1]
    summaries = {}
    for batching in ("packed", "padded"):
        summaries[batching] = run_classifier(ClassifierOptions(
            **files, output_dir=str(tmp_path / batching), do_eval=True, do_predict=True,
            init_checkpoint=str(checkpoint)[:-len(".index")], batching=batching,
            max_seq_length=32, eval_batch_size=4, predict_batch_size=4, seed=0,
            jit_compile=False))
    assert summaries["packed"]["predict"]["rows"] < 20
    assert summaries["padded"]["predict"]["rows"] == 48
    assert (tmp_path / "packed" / "test_results.tsv").read_text() == \
        (tmp_path / "padded" / "test_results.tsv").read_text()
    np.testing.assert_allclose(np.loadtxt(tmp_path / "packed" / "test_probabilities.tsv"),
                               np.loadtxt(tmp_path / "padded" / "test_probabilities.tsv"),
                               atol=1e-5)
    packed, padded = (summaries[b]["eval"] for b in ("packed", "padded"))
    assert packed["accuracy"] == padded["accuracy"]
    assert abs(packed["loss"] - padded["loss"]) < 1e-5


def test_export_dir_serves_the_fine_tuned_model(files, trained, tmp_path):
    from packed_bert_tf.models import BertClassifierModel, BertConfig, load_google_checkpoint

    # --export_dir alone exports the trained run's last checkpoint.
    root, _ = trained
    checkpoint = sorted((root / "packed").glob("model.ckpt-*.index"))[-1]
    summary = run_classifier(ClassifierOptions(
        **files, output_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "serving"),
        init_checkpoint=str(checkpoint)[:-len(".index")], max_seq_length=32,
        jit_compile=False))
    assert summary["export_dir"] == str(tmp_path / "serving")
    assert "train" not in summary and "eval" not in summary
    config = BertConfig.from_json_file(files["bert_config_file"])
    model = BertClassifierModel.from_bert_config(config, 2)
    model.build()
    load_google_checkpoint(model, str(checkpoint)[:-len(".index")])
    _, inputs, served = _serve_packed_rows(summary["export_dir"], config.vocab_size)
    np.testing.assert_allclose(served, model(inputs)["logits"].numpy(), rtol=0, atol=1e-6)


def _serve_packed_rows(export_dir, vocab_size):
    """Packed rows of 20 random features (S = 32, up to 16 a row) through the
    SavedModel in `export_dir`: (the packs, the inputs, the served logits)."""
    import tensorflow as tf

    from packed_bert_tf.classification.packing import pack_features
    from tests.classification.classifier_data import random_features

    lengths = np.random.default_rng(0).integers(3, 12, 20)
    packs = pack_features(random_features(lengths, 32, vocab_size=vocab_size),
                          max_sequences_per_pack=16)
    inputs = {name: tf.constant(packs.arrays[name]) for name in
              ("input_ids", "input_mask", "segment_ids", "positions", "cls_positions")}
    served = tf.saved_model.load(export_dir).signatures["serving_default"](**inputs)
    return packs, inputs, served["logits"].numpy()


def test_export_dir_of_an_unpacked_run_serves_packed_rows(files, tmp_path):
    from packed_bert_tf.models import BertClassifierModel, BertConfig, save_google_checkpoint

    # --batching=padded makes an unpacked model (no positions, one attention
    # block per row); the SavedModel must still serve packed rows, each
    # sequence apart, as the flag says.
    config = BertConfig.from_json_file(files["bert_config_file"])
    model = BertClassifierModel.from_bert_config(config, 2)
    model.build()
    checkpoint = save_google_checkpoint(model, str(tmp_path / "init" / "model.ckpt"))
    summary = run_classifier(ClassifierOptions(
        **files, output_dir=str(tmp_path / "run"), export_dir=str(tmp_path / "serving"),
        init_checkpoint=checkpoint, batching="padded", max_seq_length=32,
        max_sequences_per_pack=16, jit_compile=False))
    packs, inputs, served = _serve_packed_rows(summary["export_dir"], config.vocab_size)
    real = packs.arrays["sequence_weights"].astype(bool)
    np.testing.assert_allclose(served[real], model(inputs)["logits"].numpy()[real],
                               rtol=0, atol=1e-6)


def test_bucketed_training(files, tmp_path):
    summary = run_classifier(ClassifierOptions(
        **files, output_dir=str(tmp_path), do_train=True, batching="bucketed",
        bucket_boundaries=(8, 16, 32), train_batch_size=8, num_train_epochs=1,
        max_seq_length=32, seed=0, jit_compile=False, progress_bar=False))
    assert summary["train"]["final_step"] == summary["train"]["num_train_steps"] == 32
    assert summary["train_examples"]["rows"] == 256
    # Batches at their bucket's length: far less padding than 32 tokens a row
    # (0.31 of the tokens are real at 32).
    assert summary["train"]["occupancy"] > 0.5


def test_a_pair_task_on_a_config_of_one_token_type_is_refused(tmp_path):
    # Sentence pairs have segment ids 0 and 1; a single-sentence task runs on
    # one token type (SST-2, below), a pair task never.
    (tmp_path / "one_type").mkdir()
    files = write_files(tmp_path / "one_type", type_vocab_size=1, **ONE_LAYER)
    folder = write_glue_files(str(tmp_path / "glue"), tasks=["sts-b"])["sts-b"]
    with pytest.raises(ValueError, match=rf"^--data_dir={folder} example train-\d+: "
                                         rf"segment id 1 is out of range for "
                                         rf"type_vocab_size 1 of --bert_config_file$"):
        run_classifier(ClassifierOptions(
            **{**files, "task_name": "STS-B", "data_dir": folder},
            output_dir=str(tmp_path / "out"), do_train=True, max_seq_length=32))
    assert not (tmp_path / "out" / "classifier_summary.json").exists()
    single = run_classifier(ClassifierOptions(
        **files, output_dir=str(tmp_path / "single"), do_train=True, max_seq_length=32,
        train_batch_size=64, num_train_epochs=1.0, jit_compile=False,
        progress_bar=False))
    assert single["train"]["final_step"] == single["train"]["num_train_steps"]


def test_regression_writes_scores(files, tmp_path):
    folder = write_glue_files(str(tmp_path / "glue"), tasks=["sts-b"])["sts-b"]
    summary = run_classifier(ClassifierOptions(
        **{**files, "task_name": "STS-B", "data_dir": folder},
        output_dir=str(tmp_path / "out"), do_train=True, do_eval=True, do_predict=True,
        train_batch_size=1, max_seq_length=32, num_train_epochs=1.0, seed=0,
        jit_compile=False, progress_bar=False))
    assert set(summary["eval"]) >= {"pearson", "spearman", "loss"}
    lines = (tmp_path / "out" / "test_results.tsv").read_text().splitlines()
    assert len(lines) == 3 and all(len(line.split("\t")[1].split(".")[1]) == 3
                                   for line in lines[1:])
    assert not (tmp_path / "out" / "test_probabilities.tsv").exists()


@pytest.mark.parametrize("overrides, message", [
    (dict(do_train=False), "nothing to do: give --do_train, --do_eval, --do_predict and/or "
                           "--export_dir"),
    (dict(task_name="sst3"), "unknown --task_name=sst3; known tasks: cola, "),
    (dict(task_name=None), "--task_name is required"),
    (dict(vocab_file="/nonexistent/vocab.txt"), "--vocab_file=/nonexistent/vocab.txt: no "
                                                "such file"),
    (dict(data_dir="/nonexistent"), "--data_dir=/nonexistent: no such folder"),
    (dict(do_eval=True, data_dir="NO_DEV"), "NO_DEV/dev.tsv"),
    (dict(max_seq_length=128), "--max_seq_length=128 exceeds max_position_embeddings 64"),
    (dict(algorithm="best"), "--algorithm='best' is not one of"),
    (dict(batching="sorted"), "--batching='sorted' is not one of"),
    (dict(max_sequences_per_pack=0), "--max_sequences_per_pack must be >= 1, got 0"),
    (dict(do_train=False, do_eval=True), "--do_eval without --do_train needs trained "
                                         "weights"),
    (dict(do_train=False, export_dir="SERVING"), "--export_dir without --do_train needs "
                                                 "trained weights"),
    (dict(export_dir=__file__), f"--export_dir={__file__} is a file, not a folder"),
    (dict(batching="bucketed", steps_per_update=2), "use --steps_per_update=1"),
    (dict(batching="padded", repack_each_epoch=True), "^--repack_each_epoch packs the "
     "sequences anew every pass: it needs --batching=packed, not padded$"),
    (dict(train_batch_size=100), "256 training examples make 7[0-9] rows, too few for "
                                 "one batch of --train_batch_size=100"),
])
def test_bad_options_are_rejected_before_anything_runs(files, tmp_path, overrides,
                                                       message):
    if overrides.get("data_dir") == "NO_DEV":  # a folder with train.tsv only
        no_dev = tmp_path / "no_dev"
        write_tsv(str(no_dev / "train.tsv"), [["sentence", "label"], ["a film", "1"]])
        overrides = {**overrides, "data_dir": str(no_dev)}
        message = message.replace("NO_DEV", str(no_dev))
    if overrides.get("export_dir") == "SERVING":
        overrides = {**overrides, "export_dir": str(tmp_path / "serving")}
    with pytest.raises(ValueError, match=message):
        run_classifier(ClassifierOptions(**{**files, "output_dir": str(tmp_path),
                                            "do_train": True, "max_seq_length": 32,
                                            **overrides}))
    assert not (tmp_path / "classifier_summary.json").exists()


def test_the_script_ends_each_bad_input_with_one_line(script_runs):
    _, results, messages = script_runs
    for name, message in messages.items():
        assert not one_line_error_problems(results[name], "run_classifier", message), \
            (name, results[name].stderr[-2000:])


def test_option_defaults_are_the_references():
    # google-research/bert run_classifier.py's defaults (the flags' are the
    # options': tests/test_front_end_defaults.py).
    defaults = ClassifierOptions()
    assert (defaults.max_seq_length, defaults.train_batch_size, defaults.eval_batch_size,
            defaults.predict_batch_size, defaults.learning_rate, defaults.num_train_epochs,
            defaults.warmup_proportion, defaults.save_checkpoints_steps,
            defaults.do_lower_case) == (128, 32, 8, 8, 5e-5, 3.0, 0.1, 1000, True)


def test_a_hugging_face_folder_fine_tunes_and_evaluates_with_no_config_file(files,
                                                                            tmp_path):
    from packed_bert_tf.models import BertConfig
    from tests.hugging_face_folders import write_transformers_folder

    config = BertConfig.from_json_file(files["bert_config_file"])
    folder = write_transformers_folder(tmp_path / "hf", config, files["vocab_file"],
                                       architecture="BertForSequenceClassification")
    given = {name: value for name, value in files.items()
             if name not in ("bert_config_file", "vocab_file")}
    untrained = run_classifier(ClassifierOptions(
        **given, output_dir=str(tmp_path / "untrained"), init_checkpoint=folder,
        do_eval=True, max_seq_length=32, seed=0, jit_compile=False))
    summary = run_classifier(ClassifierOptions(
        **given, output_dir=str(tmp_path / "trained"), init_checkpoint=folder,
        do_train=True, do_eval=True, train_batch_size=8, num_train_epochs=8,
        learning_rate=5e-3, max_seq_length=32, seed=0, jit_compile=False))
    assert summary["options"]["vocab_file"] == f"{folder}/vocab.txt"
    assert summary["eval"]["accuracy"] >= 0.9 > untrained["eval"]["accuracy"]
