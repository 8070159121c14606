"""Pre-trained weights in every form: what a path holds, and every backbone
weight loaded or a one-line refusal."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import (
    BertClassifierModel,
    BertPretrainingModel,
    BertSquadModel,
    google_named_weights,
    save_google_checkpoint,
)
from packed_bert_tf.models.pretrained_weights import (
    find_pretrained_weights,
    from_preset,
    load_pretrained_weights,
)
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from tests.models.packed_batches import TINY_CONFIG

pytestmark = pytest.mark.slow  # checkpoints written and read, models built

POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
SQUAD_HEAD = ("cls/squad/output_weights", "cls/squad/output_bias")


def _model(model_class, seed, *args, config=TINY_CONFIG):
    keras.utils.set_random_seed(seed)
    model = model_class.from_bert_config(config, *args)
    model.build()
    return model


def _save_run_checkpoint(model, output_dir, step):
    """A training checkpoint as a run writes it: model, optimizer, step."""
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    TrainingCheckpoints(str(output_dir), model=model, optimizer=optimizer,
                        step=tf.Variable(step, dtype=tf.int64)).save()


def _backbone_weights(model):
    return {name: value for name, value in google_named_weights(model).items()
            if name.startswith("bert/")}


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory):
    """A pre-training run's folder: ckpt-3 of one model, an older export (step 2)
    of another."""
    output_dir = tmp_path_factory.mktemp("run")
    trained = _model(BertPretrainingModel, 1)
    _save_run_checkpoint(trained, output_dir, 3)
    save_google_checkpoint(_model(BertPretrainingModel, 2), str(output_dir / "model.ckpt-2"))
    return output_dir, google_named_weights(trained)


@pytest.mark.parametrize("where", ["", "checkpoints", "checkpoints/ckpt-3"])
def test_each_folder_of_a_run_loads_its_newest_weights_whole(pretraining_run, where):
    output_dir, want = pretraining_run
    path = os.path.join(output_dir, where) if where else str(output_dir)
    found = find_pretrained_weights(path)
    assert (found.form, found.checkpoint) == ("run", str(output_dir / "checkpoints/ckpt-3"))
    assert found.holds == ("run checkpoint ckpt-3 with backbone, masked_lm_head, "
                           "next_sentence_head")
    assert found.config is None
    model = _model(BertPretrainingModel, 9)
    report = load_pretrained_weights(model, path)
    assert report.missing == () and report.unused == ()
    got = google_named_weights(model)
    assert got.keys() == want.keys()
    for name, value in want.items():  # the encoder too, saved only through the optimizer
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_a_newer_export_is_taken_over_older_training_checkpoints(tmp_path):
    _save_run_checkpoint(_model(BertPretrainingModel, 1), tmp_path, 3)
    exported = _model(BertPretrainingModel, 2)
    save_google_checkpoint(exported, str(tmp_path / "model.ckpt-5"))
    found = find_pretrained_weights(tmp_path)
    assert (found.form, found.checkpoint) == ("google", str(tmp_path / "model.ckpt-5"))
    model = _model(BertPretrainingModel, 9)
    load_pretrained_weights(model, found)
    np.testing.assert_array_equal(model.backbone.encoder.blocks[1].output_dense.kernel.numpy(),
                                  exported.backbone.encoder.blocks[1].output_dense.kernel.numpy())


def test_a_pretraining_run_starts_squad_and_the_classifier(pretraining_run, caplog):
    output_dir, want = pretraining_run
    squad = _model(BertSquadModel, 9)
    report = load_pretrained_weights(squad, output_dir)
    assert report.missing == SQUAD_HEAD
    assert "2 model variables not in the source (left as initialised): " \
           "cls/squad/output_weights, cls/squad/output_bias" in caplog.text
    classifier = _model(BertClassifierModel, 9, 3)
    assert load_pretrained_weights(classifier, output_dir).missing == (
        "output_weights", "output_bias")
    for model in (squad, classifier):
        got = _backbone_weights(model)
        for name, value in got.items():
            np.testing.assert_array_equal(value, want[name], err_msg=name)
    assert POOLER[0] in _backbone_weights(classifier)


def test_a_run_without_every_backbone_weight_is_refused_unless_partial(tmp_path):
    # A SQuAD run has no pooler; the classifier's backbone has one.
    squad = _model(BertSquadModel, 1)
    _save_run_checkpoint(squad, tmp_path, 4)
    classifier = _model(BertClassifierModel, 9, 2)
    before = classifier.backbone.pooler_dense.kernel.numpy()
    with pytest.raises(ValueError, match=(
            rf"^{tmp_path} \(run checkpoint ckpt-4 with backbone, span_head\): 2 of the "
            rf"model's backbone weights are not there \(first bert/pooler/dense/kernel\); "
            rf"refusing to start them from random \(--allow_partial_init_checkpoint "
            rf"allows it\)$")):
        load_pretrained_weights(classifier, tmp_path)
    report = load_pretrained_weights(classifier, tmp_path, allow_partial=True)
    assert report.missing == POOLER + ("output_weights", "output_bias")
    np.testing.assert_array_equal(classifier.backbone.pooler_dense.kernel.numpy(), before)
    np.testing.assert_array_equal(
        classifier.backbone.embeddings.word_embeddings.embeddings.numpy(),
        squad.backbone.embeddings.word_embeddings.embeddings.numpy())
    # The same run back into SQuAD's model: its head too.
    again = _model(BertSquadModel, 9)
    assert load_pretrained_weights(again, tmp_path).missing == ()
    np.testing.assert_array_equal(google_named_weights(again)["cls/squad/output_weights"],
                                  google_named_weights(squad)["cls/squad/output_weights"])


def test_a_shape_that_differs_is_one_line_naming_the_weight(tmp_path):
    bigger = TINY_CONFIG.__class__(**{**TINY_CONFIG.to_dict(), "intermediate_size": 96})
    _save_run_checkpoint(_model(BertPretrainingModel, 1, config=bigger), tmp_path, 2)
    model = _model(BertPretrainingModel, 9)
    before = google_named_weights(model)
    with pytest.raises(ValueError) as error:
        load_pretrained_weights(model, tmp_path / "checkpoints")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path}/checkpoints (run checkpoint ckpt-2 with ")
    assert "bert/encoder/layer_0/intermediate/dense/kernel: source (32, 96), model " \
           "expects (32, 64)" in message
    for name, value in google_named_weights(model).items():  # nothing assigned
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    prefix = tf.train.Checkpoint(kernel=tf.Variable(np.ones((3, 3), np.float32))).write(
        str(tmp_path / "other"))
    with pytest.raises(ValueError, match=(
            rf"^{tmp_path}/other \(TF1 checkpoint other with 2 variables, 0 of them under "
            rf"bert/\): \d+ of the model's backbone weights are not there \(first "
            rf"bert/embeddings/word_embeddings\)")):
        load_pretrained_weights(_model(BertPretrainingModel, 9), prefix)


def test_a_path_without_weights_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=rf"^{tmp_path}/nothing: no such folder or "
                                         rf"checkpoint \(no {tmp_path}/nothing.index\)$"):
        find_pretrained_weights(tmp_path / "nothing")
    with pytest.raises(ValueError, match=rf"^{tmp_path}: no BERT weights in a known form "
                                         rf"\(it is empty\); expected a Hugging Face"):
        find_pretrained_weights(tmp_path)
    for name in ("notes.txt", "vocab.txt", "config.json"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(ValueError, match=rf"^{tmp_path}: no BERT weights in a known form "
                                         rf"\(it holds 3 entries: config.json, notes.txt, "
                                         rf"vocab.txt\)"):
        find_pretrained_weights(tmp_path)


def test_a_keras_hub_preset_folder_gives_config_vocabulary_and_weights(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    from packed_bert_tf.models import to_keras_hub_backbone

    source = _model(BertPretrainingModel, 1)
    backbone = to_keras_hub_backbone(source)
    backbone.save_to_preset(str(tmp_path))
    found = find_pretrained_weights(tmp_path)
    assert found.form == "keras_hub" and found.config == TINY_CONFIG.__class__(
        **{**TINY_CONFIG.to_dict(), "hidden_dropout_prob": found.config.hidden_dropout_prob,
           "attention_probs_dropout_prob": found.config.attention_probs_dropout_prob})
    assert isinstance(keras_hub.models.Backbone.from_preset(str(tmp_path)),
                      keras_hub.models.BertBackbone)
    model = _model(BertSquadModel, 9)
    assert load_pretrained_weights(model, tmp_path).missing == SQUAD_HEAD
    want = _backbone_weights(source)
    for name, value in _backbone_weights(model).items():
        np.testing.assert_allclose(value, want[name], rtol=0, atol=0, err_msg=name)


def test_from_preset_makes_the_model_and_loads_it(pretraining_run):
    output_dir, want = pretraining_run
    with pytest.raises(ValueError, match=r"\(run checkpoint ckpt-3 with backbone, "
                                         r"masked_lm_head, next_sentence_head\) states no "
                                         r"config: pass bert_config"):
        from_preset(BertClassifierModel, output_dir, 3)
    model = from_preset(BertClassifierModel, output_dir, 3, bert_config=TINY_CONFIG,
                        packed=False)
    assert model.num_labels == 3 and not model.packed
    for name, value in _backbone_weights(model).items():
        np.testing.assert_array_equal(value, want[name], err_msg=name)
