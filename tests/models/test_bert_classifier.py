"""BertClassifierModel: packed per-example logits, losses and gradients equal the
unpacked model's; weights from Google checkpoints and pre-training models."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.classification.packing import pack_features, unpack_logits
from packed_bert_tf.models import (
    BertClassifierModel,
    BertConfig,
    BertPretrainingModel,
    google_variable_shapes,
    load_google_checkpoint,
    save_google_checkpoint,
)
from packed_bert_tf.models.bert_classifier import sequence_classification_loss
from tests.classification.classifier_data import random_features
from tests.models.packed_batches import TINY_CONFIG, gradient_errors

pytestmark = pytest.mark.slow  # many models built, run, checkpointed and saved

S = 48


def _models(num_labels):
    """(packed model, standard unpacked BERT with the same weights)."""
    tf.random.set_seed(0)
    packed = BertClassifierModel.from_bert_config(TINY_CONFIG, num_labels, packed=True)
    packed.build()
    reference = BertClassifierModel.from_bert_config(TINY_CONFIG, num_labels, packed=False)
    reference.build()
    reference.set_weights(packed.get_weights())
    return packed, reference


def _features(num, seed, num_labels, pairs=True):
    lengths = np.random.default_rng(seed).integers(4, S // 2, num)
    return random_features(lengths, S, vocab_size=TINY_CONFIG.vocab_size, seed=seed,
                           num_labels=num_labels, pairs=pairs)


def _tensors(packs):
    return {name: tf.constant(value) for name, value in packs.arrays.items()}


@pytest.mark.parametrize("num_labels, pairs", [(3, True), (2, False), (1, True)])
def test_packed_logits_equal_unpacked_per_example(num_labels, pairs):
    packed_model, reference = _models(num_labels)
    features = _features(24, 1, num_labels, pairs)
    packs = pack_features(features, max_sequences_per_pack=4)
    unpacked = pack_features(features, packed=False)
    assert packs.num_packs < 12 and packs.packing_factor > 2
    got = unpack_logits(packs, np.arange(packs.num_packs),
                        packed_model(_tensors(packs))["logits"])
    want = unpack_logits(unpacked, np.arange(unpacked.num_packs),
                         reference(_tensors(unpacked))["logits"])
    assert got.shape == (24, num_labels)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # The unpacked layout in the packed model (D = 1) gives them too.
    np.testing.assert_allclose(
        unpack_logits(unpacked, np.arange(unpacked.num_packs),
                      packed_model(_tensors(unpacked))["logits"]), want, atol=1e-5)


@pytest.mark.parametrize("num_labels", [2, 1])
def test_packed_loss_and_gradients_equal_unpacked(num_labels):
    packed_model, reference = _models(num_labels)
    features = _features(20, 2, num_labels)
    packs = pack_features(features, max_sequences_per_pack=4)
    unpacked = pack_features(features, packed=False)

    def loss_and_gradients(model, layout):
        batch = _tensors(layout)
        with tf.GradientTape() as tape:
            losses = sequence_classification_loss(batch, model(batch, training=True),
                                                  is_regression=num_labels == 1)
        return losses, tape.gradient(losses["loss"], model.trainable_variables)

    got, got_gradients = loss_and_gradients(packed_model, packs)
    want, want_gradients = loss_and_gradients(reference, unpacked)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5)
    assert max(gradient_errors(got_gradients, want_gradients)) < 1e-5
    # fit's compute_loss is the same loss.
    batch = _tensors(packs)
    np.testing.assert_allclose(
        packed_model.compute_loss(batch, y_pred=packed_model(batch)), got["loss"],
        rtol=1e-5)


def test_google_checkpoint_names_and_round_trip(tmp_path):
    model, _ = _models(3)
    shapes = google_variable_shapes(model)
    assert shapes["output_weights"] == (3, 32) and shapes["output_bias"] == (3,)
    assert shapes["bert/pooler/dense/kernel"] == (32, 32)
    assert not any(name.startswith("cls/") for name in shapes)
    path = save_google_checkpoint(model, tmp_path / "model.ckpt")
    np.testing.assert_array_equal(tf.train.load_checkpoint(path).get_tensor(
        "output_weights"), model.classifier_head.classifier.kernel.numpy().T)
    restored = BertClassifierModel.from_bert_config(TINY_CONFIG, 3)
    report = load_google_checkpoint(restored, path)
    assert not report.missing and not report.unused
    batch = _tensors(pack_features(_features(6, 3, 3), max_sequences_per_pack=3))
    np.testing.assert_array_equal(restored(batch)["logits"], model(batch)["logits"])


def test_a_pretraining_checkpoint_loads_the_encoder_and_pooler(tmp_path):
    tf.random.set_seed(1)
    pretrained = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    pretrained.build()
    path = save_google_checkpoint(pretrained, tmp_path / "pretrained.ckpt")
    model = BertClassifierModel.from_bert_config(TINY_CONFIG, 2)
    report = load_google_checkpoint(model, path)
    assert report.missing == ("output_weights", "output_bias")
    assert "bert/pooler/dense/kernel" in report.loaded
    assert "cls/seq_relationship/output_weights" in report.unused
    np.testing.assert_array_equal(model.backbone.pooler_dense.kernel,
                                  pretrained.backbone.pooler_dense.kernel)
    # copy_encoder_weights does the same from the model itself.
    copied = BertClassifierModel.from_bert_config(TINY_CONFIG, 2)
    copied.copy_encoder_weights(pretrained)
    for mine, theirs in zip(copied.weights[:-2], model.weights[:-2]):
        np.testing.assert_array_equal(mine, theirs)


def test_keras_file_round_trip(tmp_path):
    model, _ = _models(3)
    batch = _tensors(pack_features(_features(8, 4, 3), max_sequences_per_pack=3))
    want = model(batch)["logits"]
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, BertClassifierModel)
    assert restored.num_labels == 3 and restored.packed
    np.testing.assert_array_equal(restored(batch)["logits"], want)


def test_bad_shapes_refused_by_copy_encoder_weights():
    model = BertClassifierModel.from_bert_config(TINY_CONFIG, 2)
    other = BertPretrainingModel.from_bert_config(
        BertConfig(**{**TINY_CONFIG.to_dict(), "hidden_size": 16, "intermediate_size": 32}))
    with pytest.raises(ValueError, match=r"shape \(100, 16\), .* is \(100, 32\)"):
        model.copy_encoder_weights(other)
