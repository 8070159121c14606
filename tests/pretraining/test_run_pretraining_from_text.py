"""run_pretraining straight from text files: no offline step, masks drawn afresh
each epoch, packed on the fly, resumed exactly (tiny model, S = 64)."""

import json

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.tokenization import SPECIAL_TOKENS
from packed_bert_tf.pretraining.run import run_pretraining
from packed_bert_tf.training.trainer import Trainer
from tests.pretraining.test_run_pretraining import (
    NOT_COMPILED,
    google_weights,
    kill_in_second_chunk,
)
from tests.pretraining.tiny_runs import options

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]

WORDS = [f"w{i}" for i in range(200)]


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """Two text files of random documents (about 60 sequences of S = 64 an
    epoch with nsp) and their vocabulary."""
    folder = tmp_path_factory.mktemp("text")
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n")
    rng = np.random.default_rng(0)
    files = []
    for index in range(2):
        documents = ["\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 15)))
                               for _ in range(rng.integers(2, 8)))
                     for _ in range(12)]
        path = folder / f"corpus-{index}.txt"
        path.write_text("\n\n".join(documents) + "\n")
        files.append(str(path))
    return {"input_text_file": ",".join(files), "vocab_file": str(vocab)}


def test_a_killed_run_from_text_resumes_where_an_uninterrupted_one_ends(
        config_file, text, tmp_path, monkeypatch):
    train = dict(do_train=True, shuffle_buffer_size=20, **text)
    straight = run_pretraining(options(config_file, tmp_path / "straight", **train))
    assert straight["train"]["final_step"] == 6
    assert 1.2 < straight["packing_factor"] < 4
    assert straight["train"]["sequences"] > 6 * 4  # several sequences a pack
    trajectory = json.loads((tmp_path / "straight" / "trajectory.json").read_text())
    assert trajectory["segments"][0]["values"]["--pretraining_objective"] == "nsp"

    original = kill_in_second_chunk(monkeypatch)
    killed = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(options(config_file, killed, **train))
    assert tf.train.latest_checkpoint(str(killed / "checkpoints")).endswith("ckpt-3")
    monkeypatch.setattr(Trainer, "train_steps", original)
    resumed = run_pretraining(options(config_file, killed, **train))
    assert (resumed["train"]["start_step"], resumed["train"]["final_step"]) == (3, 6)
    want = google_weights(str(tmp_path / "straight" / "model.ckpt-6"))
    got = google_weights(str(killed / "model.ckpt-6"))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert resumed["train"]["sequences"] == straight["train"]["sequences"]
    # Killed mid-epoch: the three steps before it read less than an epoch.
    epoch = _epoch_length(text)
    assert straight["train"]["sequences"] / 2 < epoch


def _epoch_length(text):
    from packed_bert_tf.data.inputs.text_sequences import TextSequenceOptions, text_sequences
    from packed_bert_tf.data.tokenization import WordPieceTokenizer

    files = text["input_text_file"].split(",")
    tokenizer = WordPieceTokenizer(text["vocab_file"])
    return sum(1 for _ in text_sequences(files, tokenizer, TextSequenceOptions("nsp", 64),
                                         seed=3, epoch=0))


def test_masked_lm_alone_on_full_sentences(config_file, text, tmp_path):
    summary = run_pretraining(options(
        config_file, tmp_path, do_train=True, pretraining_objective="mlm",
        do_whole_word_mask=True, num_train_steps=3, save_checkpoints_steps=0,
        **text, **NOT_COMPILED))
    point = summary["train"]["history"][-1]
    assert point["loss"] == pytest.approx(point["masked_lm_loss"], rel=1e-6)
    assert point["next_sentence_loss"] > 0  # reported, not trained on


@pytest.mark.parametrize("overrides, message", [
    (dict(input_text_file="/nonexistent/*.txt"),
     r"--input_text_file: '/nonexistent/\*.txt' matches no files"),
    (dict(vocab_file=None), r"--input_text_file needs --vocab_file"),
    (dict(input_file="x.tfrecord"), r"--input_file and --input_text_file are both given"),
    (dict(batching="bucketed"), r"--batching=bucketed takes records"),
    (dict(pretraining_objective="sop"), r"--pretraining_objective='sop' is not one of"),
])
def test_bad_text_input_is_one_line_before_anything_is_written(config_file, text,
                                                               tmp_path, overrides,
                                                               message):
    values = dict(do_train=True, **text)
    values.update(overrides)
    with pytest.raises(ValueError, match=message):
        run_pretraining(options(config_file, tmp_path / "out", **values))
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_text_that_is_not_utf8_is_named_with_its_line(config_file, text, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a fine line\n\nanother \xc3( line\n")
    with pytest.raises(ValueError, match=rf"^{bad}:3: not UTF-8 text"):
        run_pretraining(options(config_file, tmp_path / "out", do_train=True,
                                input_text_file=f"{text['input_text_file']},{bad}",
                                vocab_file=text["vocab_file"]))
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_a_run_from_text_starts_fine_tuning_from_its_folder(config_file, text, tmp_path):
    from packed_bert_tf.classification.run import ClassifierOptions, run_classifier
    from tests.classification.classifier_data import write_files

    pretrained = tmp_path / "pretrained"
    run_pretraining(options(config_file, pretrained, do_train=True, num_train_steps=3,
                            save_checkpoints_steps=3, **text, **NOT_COMPILED))
    (tmp_path / "glue").mkdir()
    glue = write_files(tmp_path / "glue")

    def evaluation(init_checkpoint, output_dir):
        return run_classifier(ClassifierOptions(
            task_name=glue["task_name"], data_dir=glue["data_dir"],
            vocab_file=glue["vocab_file"], bert_config_file=config_file,
            init_checkpoint=str(init_checkpoint), output_dir=str(tmp_path / output_dir),
            do_eval=True, max_seq_length=32, seed=0, jit_compile=False))["eval"]

    # The run's folder (its newest checkpoint) gives the classifier the encoder
    # its exported weights give (the head: the same seeded initialisation).
    from_folder = evaluation(pretrained, "from_folder")
    from_export = evaluation(pretrained / "model.ckpt-3", "from_export")
    assert from_folder["loss"] == pytest.approx(from_export["loss"], rel=1e-6)
    assert from_folder["accuracy"] == from_export["accuracy"]
