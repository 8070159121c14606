"""BertSquadModel: packed per-feature logits, losses and gradients equal the
unpacked model's; weights from Google checkpoints and pre-training models."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import (
    BertPretrainingModel,
    BertSquadModel,
    google_variable_shapes,
    load_google_checkpoint,
    save_google_checkpoint,
)
from packed_bert_tf.models.bert_squad import squad_span_loss
from packed_bert_tf.squad.packing import pack_features, unpack_logits
from tests.models.packed_batches import TINY_CONFIG, gradient_errors, twin_models
from tests.squad.squad_data import make_features

pytestmark = pytest.mark.slow  # many models built, run and checkpointed

S = 48


@pytest.fixture(scope="module")
def models():
    """(packed model, standard unpacked BERT with the same weights)."""
    return twin_models(BertSquadModel, TINY_CONFIG)


def _features(num, seed):
    """Random token ids (vocab 100) and labels for features of random lengths."""
    rng = np.random.default_rng(seed)
    return make_features(rng.integers(4, S // 2, num), S, seed=seed,
                         vocab_size=TINY_CONFIG.vocab_size)


def _run(model, packs):
    outputs = model({name: tf.constant(v) for name, v in packs.arrays.items()})
    return outputs, unpack_logits(packs, np.arange(packs.num_packs),
                                  outputs["start_logits"], outputs["end_logits"])


@pytest.mark.parametrize("max_sequences_per_pack", [1, 2, 3])
def test_packed_per_feature_logits_equal_unpacked_bert(models, max_sequences_per_pack):
    packed_model, reference = models
    features = _features(12, max_sequences_per_pack)
    packed = pack_features(features, max_sequences_per_pack=max_sequences_per_pack)
    unpacked = pack_features(features, packed=False)
    if max_sequences_per_pack > 1:
        assert packed.num_packs < unpacked.num_packs
    _, got = _run(packed_model, packed)
    _, want = _run(reference, unpacked)
    _, also = _run(packed_model, unpacked)  # the packed model on D = 1 rows
    for f in range(len(features)):
        for g, w, a in zip(got[f], want[f], also[f]):
            assert g.shape == (features.length[f],)
            np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)
            np.testing.assert_allclose(a, w, atol=1e-5, rtol=1e-5)


def test_packed_loss_and_gradients_equal_unpacked(models):
    packed_model, reference = models
    features = _features(10, 7)
    results = []
    for model, packs in ((packed_model, pack_features(features, max_sequences_per_pack=3)),
                         (reference, pack_features(features, packed=False))):
        batch = {name: tf.constant(v) for name, v in packs.arrays.items()}
        with tf.GradientTape() as tape:
            losses = squad_span_loss(batch, model(batch, training=True))
        results.append((losses, tape.gradient(losses["loss"], model.trainable_variables)))
    (packed_losses, packed_gradients), (losses, gradients) = results
    for name, value in losses.items():
        np.testing.assert_allclose(packed_losses[name], value, rtol=1e-5, err_msg=name)
    assert max(gradient_errors(packed_gradients, gradients)) < 1e-5


def test_dropout_draws_the_same_losses_packed_and_unpacked():
    # Dropout draws its masks over a row's tokens whatever shares the row:
    # with the same weights, the training-mode loss of the same features has
    # the same distribution packed as unpacked. Large weights make the loss
    # sensitive to the masks.
    config = dataclasses.replace(TINY_CONFIG, hidden_dropout_prob=0.2,
                                 attention_probs_dropout_prob=0.2, initializer_range=0.3)
    packed_model, reference = twin_models(BertSquadModel, config, seed=1)
    features = _features(24, 8)
    draws = {}
    for name, model, packs in (
            ("packed", packed_model, pack_features(features, max_sequences_per_pack=3)),
            ("unpacked", reference, pack_features(features, packed=False))):
        assert (packs.num_packs < 24) == (name == "packed")
        batch = {key: tf.constant(v) for key, v in packs.arrays.items()}
        loss = tf.function(lambda training, model=model, batch=batch: squad_span_loss(
            batch, model(batch, training=training))["loss"])
        draws[name] = np.array([float(loss(True)) for _ in range(200)])
        draws[name + " without dropout"] = float(loss(False))
    packed, unpacked = draws["packed"], draws["unpacked"]
    np.testing.assert_allclose(draws["packed without dropout"],
                               draws["unpacked without dropout"], rtol=1e-5)
    standard_error = np.sqrt((packed.var() + unpacked.var()) / 200)
    assert abs(packed.mean() - unpacked.mean()) < 4 * standard_error
    assert 0.8 < packed.std() / unpacked.std() < 1.25
    # Dropout spreads the loss by far more than the tolerance above.
    assert unpacked.std() > 5 * standard_error


def test_outputs_and_dtypes_under_mixed_precision():
    model = BertSquadModel.from_bert_config(TINY_CONFIG, dtype="mixed_bfloat16")
    packs = pack_features(_features(4, 0), max_sequences_per_pack=2)
    outputs, _ = _run(model, packs)
    assert outputs["start_logits"].dtype == outputs["end_logits"].dtype == tf.float32
    assert outputs["start_logits"].shape == (packs.num_packs, S)
    assert outputs["sequence_output"].dtype == tf.bfloat16


def test_config_round_trip():
    model = BertSquadModel.from_bert_config(TINY_CONFIG, packed=False)
    config = model.get_config()
    restored = BertSquadModel.from_config(config)
    assert restored.get_config() == config and not restored.packed
    assert keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(model)).bert_config == TINY_CONFIG


def test_encoder_loads_from_a_google_pretraining_checkpoint(tmp_path):
    tf.random.set_seed(1)
    pretrained = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    pretrained.build()
    path = save_google_checkpoint(pretrained, tmp_path / "bert_model.ckpt")
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    report = load_google_checkpoint(model, path)
    assert report.missing == ("cls/squad/output_weights", "cls/squad/output_bias")
    assert "bert/pooler/dense/kernel" in report.unused
    assert "cls/predictions/output_bias" in report.unused
    mine_backbone, their_backbone = model.backbone, pretrained.backbone
    for mine, theirs in zip(mine_backbone.embeddings.weights + mine_backbone.encoder.weights,
                            their_backbone.embeddings.weights
                            + their_backbone.encoder.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_google_checkpoint_round_trip_of_the_fine_tuned_model(tmp_path, models):
    packed_model, _ = models
    shapes = google_variable_shapes(packed_model)
    assert shapes["cls/squad/output_weights"] == (2, TINY_CONFIG.hidden_size)
    assert shapes["cls/squad/output_bias"] == (2,)
    assert not any(name.startswith(("cls/predictions", "bert/pooler")) for name in shapes)
    path = save_google_checkpoint(packed_model, tmp_path / "squad" / "model.ckpt")
    np.testing.assert_array_equal(
        tf.train.load_checkpoint(path).get_tensor("cls/squad/output_weights"),
        packed_model.span_head.dense.kernel.numpy().T)
    tf.random.set_seed(5)
    fresh = BertSquadModel.from_bert_config(TINY_CONFIG)
    report = load_google_checkpoint(fresh, path)
    assert report.missing == () and report.unused == ()
    packs = pack_features(_features(5, 3), max_sequences_per_pack=2)
    for name in ("start_logits", "end_logits"):
        np.testing.assert_array_equal(_run(fresh, packs)[0][name],
                                      _run(packed_model, packs)[0][name])


def test_copy_encoder_weights_from_a_pretraining_model():
    tf.random.set_seed(2)
    pretrained = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    pretrained.build()
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    model.build()
    head = [w.numpy() for w in model.span_head.weights]
    model.copy_encoder_weights(pretrained)
    for mine, theirs in zip(model.backbone.encoder.weights,
                            pretrained.backbone.encoder.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    for before, after in zip(head, model.span_head.weights):
        np.testing.assert_array_equal(before, after.numpy())
    bigger = BertPretrainingModel.from_bert_config(TINY_CONFIG.__class__(
        **dict(TINY_CONFIG.to_dict(), num_hidden_layers=3)))
    with pytest.raises(ValueError, match=r"encoder: \d+ weights, encoder has \d+"):
        model.copy_encoder_weights(bigger)
