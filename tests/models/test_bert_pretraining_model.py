import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import BertPretrainingModel
from packed_bert_tf.models.bert_pretraining import pretraining_losses
from tests.models.packed_batches import TINY_CONFIG, layout, random_packs

# Slow: XLA compilations.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]

S, D, M = 32, 3, 8
SHAPES = dict(sequence_length=S, max_sequences_per_pack=D, max_masked=M)
#: The model of the tests that compile or train (XLA, mixed precision, fit): one
#: layer, as the claims hold for any depth and compilation costs CPU per layer.
ONE_LAYER = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)


def _features(seed=0, num_packs=2):
    packs = random_packs(np.random.default_rng(seed), 2, num_packs=num_packs,
                         sequence_length=S)
    return layout(packs, **SHAPES)[0]


@pytest.fixture(scope="module")
def model():
    tf.random.set_seed(0)
    model = BertPretrainingModel.from_bert_config(ONE_LAYER)
    model.build()
    return model


def test_outputs_shapes_and_dtypes(model):
    outputs = model(_features())
    assert {name: (tuple(value.shape), value.dtype) for name, value in outputs.items()} == {
        "mlm_logits": ((2, M, 100), tf.float32), "nsp_logits": ((2, D, 2), tf.float32),
        "sequence_output": ((2, S, 32), tf.float32),
        "pooled_output": ((2, D, 32), tf.float32)}


def test_build_creates_every_weight_without_data():
    model = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    model.build()
    # 3 tables + 2 norm; 16 per block; pooler 2 + classifier 2; transform 2 + norm 2 + bias.
    assert len(model.weights) == 5 + 16 * 2 + 4 + 5
    assert tuple(model.backbone.embeddings.position_embedding.embeddings.shape) == (64, 32)


def test_get_config_round_trip(model):
    config = model.get_config()
    backbone = config["backbone"]
    assert backbone["class_name"] == "BertBackbone" and backbone["config"]["name"] == "backbone"
    assert backbone["config"]["bert_config"] == ONE_LAYER.to_dict()
    assert backbone["config"]["packed"] is True and backbone["config"]["pooler"] is True
    assert config["per_sequence_masked_lm_loss"] is False
    restored = BertPretrainingModel.from_config(config)
    assert restored.get_config() == config
    restored.build()
    restored.set_weights(model.get_weights())
    features = _features()
    np.testing.assert_array_equal(restored(features)["mlm_logits"],
                                  model(features)["mlm_logits"])
    unpacked = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(
        BertPretrainingModel.from_bert_config(TINY_CONFIG, packed=False,
                                              per_sequence_masked_lm_loss=True)))
    assert unpacked.packed is False and unpacked.per_sequence_masked_lm_loss is True


@pytest.mark.parametrize("packed", [True, False])
def test_xla_forward_and_gradients_match_eager(model, packed):
    if not packed:
        reference = BertPretrainingModel.from_bert_config(ONE_LAYER, packed=False)
        reference.build()
        reference.set_weights(model.get_weights())
    else:
        reference = model
    features = _features(1)

    def step(features):
        with tf.GradientTape() as tape:
            outputs = reference(features, training=True)
            loss = pretraining_losses(features, outputs)["loss"]
        return outputs, loss, tape.gradient(loss, reference.trainable_variables)

    eager = step(features)
    compiled = tf.function(step, jit_compile=True)(features)
    for got, want in zip(tf.nest.flatten(compiled), tf.nest.flatten(eager)):
        got, want = tf.convert_to_tensor(got), tf.convert_to_tensor(want)
        np.testing.assert_allclose(got, want, atol=2e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("policy, half", [("mixed_bfloat16", tf.bfloat16),
                                          ("mixed_float16", tf.float16)])
def test_mixed_precision_dtypes(model, policy, half):
    mixed = BertPretrainingModel.from_bert_config(ONE_LAYER, dtype=policy)
    mixed.build()
    mixed.set_weights(model.get_weights())
    features = _features(2)

    def forward(features):
        outputs = mixed(features, training=False)
        return outputs, pretraining_losses(features, outputs)

    for run in (forward, tf.function(forward, jit_compile=True)):
        outputs, losses = run(features)
        assert outputs["sequence_output"].dtype == half
        assert outputs["pooled_output"].dtype == half
        assert outputs["mlm_logits"].dtype == tf.float32
        assert outputs["nsp_logits"].dtype == tf.float32
        assert all(value.dtype == tf.float32 for value in losses.values())
        assert all(np.isfinite(value.numpy()).all() for value in outputs.values())
    assert all(weight.dtype == "float32" for weight in mixed.weights)
    block = mixed.backbone.encoder.blocks[0]
    assert block.attention.query.compute_dtype == half.name
    assert block.attention_layer_norm.compute_dtype == "float32"
    assert mixed.masked_lm_head.layer_norm.compute_dtype == "float32"
    # Close to float32 within half precision.
    want = model(features)["mlm_logits"].numpy()
    np.testing.assert_allclose(outputs["mlm_logits"], want, atol=0.1)


def test_global_policy_is_followed():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        mixed = BertPretrainingModel.from_bert_config(TINY_CONFIG)
        outputs = mixed(_features())
    finally:
        keras.config.set_dtype_policy(previous)
    assert outputs["sequence_output"].dtype == tf.bfloat16
    assert outputs["mlm_logits"].dtype == tf.float32


def test_fit_trains_on_packed_batches():
    tf.random.set_seed(1)
    model = BertPretrainingModel.from_bert_config(ONE_LAYER)
    # Eager (tracing Adam's update costs seconds): fit's graph takes the
    # Trainer's step in test_keras_fit.py.
    model.compile(optimizer=keras.optimizers.Adam(1e-3), run_eagerly=True)
    features = _features(3, num_packs=4)
    history = model.fit(features, batch_size=4, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    expected = pretraining_losses(features, model(features))["loss"]
    assert abs(float(model.compute_loss(features, None, model(features))) -
               float(expected)) < 1e-6
