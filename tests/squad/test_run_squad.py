"""run_squad end to end on a small learnable SQuAD-format set (tiny model)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.squad.run import SquadOptions, run_squad
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from tests.squad import squad_data
from tests.tool_runs import one_line_error_problems, run_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    # One layer learns the task, and compiles and traces in half the time of two.
    return squad_data.write_learnable_files(tmp_path_factory.mktemp("squad"),
                                            num_hidden_layers=1)


def options(files, output_dir, **overrides):
    values = dict(files, output_dir=str(output_dir), max_seq_length=32, doc_stride=16,
                  max_query_length=4, learning_rate=5e-3, warmup_proportion=0.1,
                  predict_batch_size=8, iterations_per_loop=10, log_every_n_steps=10,
                  save_checkpoints_steps=0, seed=0, progress_bar=False)
    values.update(overrides)
    return SquadOptions(**values)


# The packed run trains and predicts compiled (the default), the others without
# XLA: compiling each bucket's steps costs more than training. 48 steps of 8 rows
# of 3 sequences packed (cheap once compiled), 36 of 16 sequences unpacked.
@pytest.mark.parametrize("batching, batch_size, epochs, jit_compile", [
    ("packed", 8, 12, True), ("padded", 16, 6, False), ("bucketed", 16, 6, False)])
def test_fine_tuning_reaches_a_high_exact_match(files, tmp_path, batching, batch_size,
                                                epochs, jit_compile):
    summary = run_squad(options(files, tmp_path, do_train=True, do_predict=True,
                                batching=batching, train_batch_size=batch_size,
                                num_train_epochs=epochs, bucket_boundaries=(8, 16, 32),
                                jit_compile=jit_compile))
    packing = batching == "packed"
    features = summary["train_features"]
    assert features["features"] == 96
    if batching == "bucketed":
        # Batches at their bucket's length: far less padding than 32 tokens a row.
        assert summary["train"]["occupancy"] > 0.6
    if packing:
        assert features["packing_factor"] > 2.5 and features["rows"] < 40
    else:
        assert features["rows"] == 96 and features["packing_factor"] == 1
    assert summary["train"]["final_step"] == summary["train"]["num_train_steps"]
    assert summary["train"]["train_steps_function_traces"] == 1
    assert summary["train"]["mfu"] > 0 and summary["train"]["peak_flops_source"] == "measured"
    assert summary["predict"]["exact_match"] >= 90.0, summary["predict"]
    written = json.loads((tmp_path / "predictions.json").read_text())
    assert len(written) == 24
    assert json.loads((tmp_path / "eval_results.json").read_text())["exact_match"] == \
        summary["predict"]["exact_match"]
    # Features were cached next to the output, and are read back on a second run
    # (without XLA: the cache is what is checked, not a second compilation).
    again = run_squad(options(files, tmp_path, do_predict=True, batching=batching,
                              jit_compile=False))
    assert again["predict"]["from_cache"]
    assert again["predict"]["exact_match"] == summary["predict"]["exact_match"]


@pytest.mark.parametrize("overrides, message", [
    (dict(do_train=False), "nothing to do: give --do_train, --do_predict and/or "
                           "--export_dir"),
    (dict(vocab_file="/nonexistent/vocab.txt"), "--vocab_file=/nonexistent/vocab.txt: no "
                                                "such file"),
    (dict(train_file="/nonexistent/train.json"), "--train_file=/nonexistent/train.json"),
    (dict(max_seq_length=128), "--max_seq_length=128 exceeds max_position_embeddings 64"),
    (dict(algorithm="best"), "--algorithm='best' is not one of"),
    (dict(doc_stride=0), "doc_stride"),
    (dict(batching="sorted"), "--batching='sorted' is not one of"),
    (dict(do_train=False, do_predict=True), "--do_predict without --do_train needs "
                                            "trained weights, but --output_dir=.* holds "
                                            "no checkpoint and no --init_checkpoint"),
    (dict(batching="bucketed", steps_per_update=2), "use --steps_per_update=1"),
    (dict(batching="padded", repack_each_epoch=True), "^--repack_each_epoch packs the "
     "sequences anew every pass: it needs --batching=packed, not padded$"),
])
def test_bad_options_are_rejected_before_anything_runs(files, tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        run_squad(options(files, tmp_path, **{"do_train": True, **overrides}))
    assert not list(tmp_path.glob("*.tfrecord"))


def test_a_config_of_one_token_type_is_refused_naming_the_question(files, tmp_path):
    # Question and context are two segments (ids 0 and 1).
    config = json.loads(open(files["bert_config_file"]).read())
    one_type = tmp_path / "one_type.json"
    one_type.write_text(json.dumps({**config, "type_vocab_size": 1}))
    with pytest.raises(ValueError, match=rf"^{files['train_file']} feature 0 \(question "
                                         rf"'[^']+'\): segment id 1 is out of range for "
                                         rf"type_vocab_size 1 of --bert_config_file$"):
        run_squad(options(files, tmp_path / "out", do_train=True,
                          bert_config_file=str(one_type)))
    assert not (tmp_path / "out" / "squad_summary.json").exists()


def test_a_pre_training_output_dir_is_refused_naming_its_weights(files, tmp_path):
    # What run_pretraining.py leaves: checkpoints of a model with a masked-LM
    # head, and its final weights as model.ckpt-N.
    class Pretrained(keras.Model):
        def __init__(self):
            super().__init__()
            self.masked_lm_head = keras.layers.Dense(2)

        def call(self, inputs):
            return self.masked_lm_head(inputs)

    model = Pretrained()
    model(np.zeros((1, 2), np.float32))
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    step = tf.Variable(3, dtype=tf.int64)
    TrainingCheckpoints(str(tmp_path), model=model, optimizer=optimizer, step=step).save()
    for suffix in ("index", "data-00000-of-00001"):
        (tmp_path / f"model.ckpt-3.{suffix}").write_bytes(b"")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=rf"^--output_dir={tmp_path} holds a pre-training "
                                         rf"run \(run_pretraining.py\): start from its "
                                         rf"weights with --init_checkpoint={tmp_path} and "
                                         rf"give this run an --output_dir of its own$"):
        run_squad(options(files, tmp_path, do_train=False, do_predict=True))
    assert sorted(tmp_path.rglob("*")) == before  # no feature cache written there


#: One epoch of training, without XLA, shared by the resume and export tests.
ONE_EPOCH = dict(do_train=True, num_train_epochs=1.0, train_batch_size=8, jit_compile=False)


@pytest.fixture(scope="module")
def one_epoch(files, tmp_path_factory):
    """A run of ONE_EPOCH that also exports: (its output folder, its summary)."""
    root = tmp_path_factory.mktemp("one_epoch")
    summary = run_squad(options(files, root / "run", **ONE_EPOCH,
                                export_dir=str(root / "serving")))
    return root / "run", summary


def test_a_resume_with_another_batch_size_is_refused(files, one_epoch):
    output_dir, _ = one_epoch
    assert (output_dir / "trajectory.json").exists()
    with pytest.raises(ValueError, match=rf"^--output_dir={output_dir} was trained to step "
                                         rf"\d+ with other values: --train_batch_size 8 "
                                         rf"\(now 16\)\. Resume with the same flags, or "
                                         rf"start from its weights \(--init_checkpoint\) in "
                                         rf"another --output_dir$"):
        run_squad(options(files, output_dir, **{**ONE_EPOCH, "train_batch_size": 16,
                                                "num_train_epochs": 2.0}))
    # A run packed once has no record of --repack_each_epoch: it resumes with
    # the flag off, and is refused with it on.
    assert "--repack_each_epoch" not in (output_dir / "trajectory.json").read_text()
    with pytest.raises(ValueError, match=r"with other values: --repack_each_epoch none "
                                         r"\(now True\)\. Resume"):
        run_squad(options(files, output_dir, **{**ONE_EPOCH, "repack_each_epoch": True,
                                                "num_train_epochs": 2.0}))


def test_training_packed_anew_each_epoch(files, one_epoch, tmp_path):
    _, once = one_epoch
    summary = run_squad(options(files, tmp_path, **{**ONE_EPOCH, "num_train_epochs": 3.0},
                                repack_each_epoch=True))
    train = summary["train"]
    assert train["final_step"] == train["num_train_steps"] == 3 * once["train"]["final_step"]
    assert summary["train_features"] == once["train_features"]
    assert summary["options"]["repack_each_epoch"]
    assert train["sequences"] == 3 * once["train_features"]["features"]
    assert np.isfinite(train["final_metrics"]["loss"])
    with pytest.raises(ValueError, match=r"with other values: --repack_each_epoch True "
                                         r"\(now none\)\. Resume"):
        run_squad(options(files, tmp_path, **{**ONE_EPOCH, "num_train_epochs": 4.0}))


def _bad_inputs(files, folder):
    """run_squad.py command lines on bad inputs, with what their one error line
    must say (a regular expression)."""
    broken = folder / "broken.json"
    broken.write_text('{"version": "1.1", "data": [')
    no_questions = folder / "no_questions.json"
    no_questions.write_text(json.dumps({"version": "1.1", "data": []}))
    a_file = folder / "a_file"
    a_file.write_text("not a folder")
    common = [f"--bert_config_file={files['bert_config_file']}",
              f"--vocab_file={files['vocab_file']}", "--max_seq_length=32",
              "--doc_stride=16", "--max_query_length=4"]
    return {
        "malformed_json": ([*common, f"--train_file={broken}", "--do_train",
                            f"--output_dir={folder / 'out_1'}"],
                           f"{broken}: not valid JSON"),
        "no_questions": ([*common, f"--train_file={no_questions}", "--do_train",
                          f"--output_dir={folder / 'out_2'}"],
                         f"{no_questions}: no questions"),
        "random_weights": ([*common, f"--predict_file={files['predict_file']}",
                            "--do_predict", f"--output_dir={folder / 'out_3'}"],
                           "--do_predict without --do_train needs trained weights"),
        "no_vocab": ([*common[:1], "--vocab_file=/nonexistent/vocab.txt", *common[2:],
                      f"--train_file={files['train_file']}", "--do_train",
                      f"--output_dir={folder / 'out_4'}"],
                     "--vocab_file=/nonexistent/vocab.txt: no such file"),
        "unknown_batching": ([*common, "--batching=sorted", "--do_train",
                              f"--train_file={files['train_file']}",
                              f"--output_dir={folder / 'out_5'}"],
                             "--batching=sorted"),
        "output_dir_is_a_file": ([*common, f"--train_file={files['train_file']}",
                                  "--do_train", f"--output_dir={a_file}"],
                                 f"--output_dir={a_file}"),
    }


def test_the_script_ends_each_bad_input_with_one_line(files, tmp_path):
    cases = _bad_inputs(files, tmp_path)
    # Each in this process, as `python run_squad.py ARGS` runs (`run_main`).
    results = [run_main("run_squad.py", *arguments, tmp_path=tmp_path)
               for arguments, _ in cases.values()]
    for (name, (_, message)), result in zip(cases.items(), results):
        assert not one_line_error_problems(result, "run_squad", message), \
            (name, result.stderr[-2000:])
    assert not (tmp_path / "out_3").exists() or not any(
        (tmp_path / "out_3").glob("*.json"))


@pytest.mark.parametrize("data, message", [
    ([], "no questions"),
    ([{"paragraphs": [{"context": "a b c", "qas": []}]}], "no questions"),
    ([{"paragraphs": [{"context": "a b c", "qas": [
        {"id": "q1", "question": "b?", "answers": [{"text": "z", "answer_start": 2}]}]}]}],
     "none of its 1 training questions has its answer text at answer_start"),
])
def test_a_file_without_usable_questions_is_refused(files, tmp_path, data, message):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": "1.1", "data": data}))
    with pytest.raises(ValueError, match=f"{empty}: {message}"):
        run_squad(options(files, tmp_path / "out", do_train=True, train_file=str(empty)))


def _served_and_model_logits(files, export_dir, google_checkpoint):
    """(SavedModel logits, logits of a model loaded with the final weights) on
    packed rows of random features."""
    import numpy as np
    import tensorflow as tf

    from packed_bert_tf.models import BertConfig, BertSquadModel, load_google_checkpoint
    from packed_bert_tf.squad.packing import pack_features

    config = BertConfig.from_json_file(files["bert_config_file"])
    model = BertSquadModel.from_bert_config(config)
    model.build()
    load_google_checkpoint(model, google_checkpoint)
    lengths = np.random.default_rng(0).integers(4, 16, 9)
    packs = pack_features(squad_data.make_features(lengths, 32, vocab_size=config.vocab_size),
                          max_sequences_per_pack=3)
    inputs = {name: tf.constant(packs.arrays[name])
              for name in ("input_ids", "input_mask", "segment_ids", "positions")}
    served = tf.saved_model.load(export_dir).signatures["serving_default"](**inputs)
    return ({name: served[name].numpy() for name in ("start_logits", "end_logits")},
            {name: value.numpy() for name, value in model(inputs).items()})


def test_export_dir_serves_the_fine_tuned_model(files, one_epoch, tmp_path):
    import numpy as np

    output_dir, summary = one_epoch
    assert summary["export_dir"] == str(output_dir.parent / "serving")
    served, want = _served_and_model_logits(files, summary["export_dir"],
                                            summary["train"]["google_checkpoint"])
    for name, value in served.items():
        np.testing.assert_allclose(value, want[name], rtol=0, atol=1e-6, err_msg=name)
    # --export_dir alone exports the run's last checkpoint: the same model.
    again = run_squad(options(files, output_dir, jit_compile=False,
                              export_dir=str(tmp_path / "again")))
    assert "train" not in again and "predict" not in again
    served_again, _ = _served_and_model_logits(files, again["export_dir"],
                                               summary["train"]["google_checkpoint"])
    for name, value in served.items():
        np.testing.assert_array_equal(served_again[name], value, err_msg=name)


@pytest.mark.parametrize("overrides, message", [
    (dict(do_train=False), "--export_dir without --do_train needs trained weights, but "
                           "--output_dir=.* holds no checkpoint and no --init_checkpoint"),
    (dict(export_dir=__file__), f"--export_dir={__file__} is a file, not a folder"),
])
def test_bad_export_options_are_rejected_before_anything_runs(files, tmp_path, overrides,
                                                              message):
    values = {"do_train": True, "export_dir": str(tmp_path / "serving"), **overrides}
    with pytest.raises(ValueError, match=message):
        run_squad(options(files, tmp_path, **values))
    assert not (tmp_path / "serving").exists()


def test_a_hugging_face_folder_fine_tunes_and_predicts_with_no_config_file(files,
                                                                           tmp_path):
    from packed_bert_tf.models import BertConfig, BertSquadModel
    from tests.hugging_face_folders import as_google_checkpoint, write_transformers_folder

    config = BertConfig.from_json_file(files["bert_config_file"])
    folder = write_transformers_folder(tmp_path / "hf", config, files["vocab_file"],
                                       hidden_act="gelu",
                                       architecture="BertForQuestionAnswering")
    model = BertSquadModel.from_bert_config(
        BertConfig(**{**config.to_dict(), "hidden_act": "gelu_exact"}))
    model.build()
    checkpoint = as_google_checkpoint(folder, model, tmp_path / "google" / "bert_model.ckpt")
    config_file = tmp_path / "bert_config.json"
    model.bert_config.to_json_file(str(config_file))
    from_folder = options(files, tmp_path / "from_folder", do_predict=True,
                          init_checkpoint=folder, jit_compile=False)
    from_folder.bert_config_file = from_folder.vocab_file = None
    predicted = run_squad(from_folder)["predict"]
    assert from_folder.vocab_file == f"{folder}/vocab.txt"  # the folder's, used
    from_checkpoint = run_squad(options(files, tmp_path / "from_checkpoint", do_predict=True,
                                        bert_config_file=str(config_file),
                                        init_checkpoint=checkpoint, jit_compile=False))
    assert predicted["exact_match"] == from_checkpoint["predict"]["exact_match"]
    assert (tmp_path / "from_folder" / "nbest_predictions.json").read_text() == \
        (tmp_path / "from_checkpoint" / "nbest_predictions.json").read_text()
    # And it fine-tunes from there.
    trained = options(files, tmp_path / "trained", do_train=True, do_predict=True,
                      num_train_epochs=6, train_batch_size=8, init_checkpoint=folder)
    trained.bert_config_file = trained.vocab_file = None
    summary = run_squad(trained)
    assert summary["train"]["final_step"] == summary["train"]["num_train_steps"]
    assert summary["predict"]["exact_match"] > predicted["exact_match"]
