import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import (
    BertPretrainingModel,
    google_named_weights,
    google_variable_shapes,
    load_google_checkpoint,
    load_google_weights,
    save_google_checkpoint,
)
from tests.models.packed_batches import TINY_CONFIG, layout, random_packs

pytestmark = pytest.mark.slow  # TF1 checkpoints written and read

H = TINY_CONFIG.hidden_size


def _model(seed, config=TINY_CONFIG):
    tf.random.set_seed(seed)
    model = BertPretrainingModel.from_bert_config(config)
    model.build()
    return model


def _features():
    packs = random_packs(np.random.default_rng(0), 3, num_packs=2, sequence_length=32)
    return layout(packs, sequence_length=32, max_sequences_per_pack=3, max_masked=8)[0]


def test_names_are_the_original_bert_names():
    shapes = google_variable_shapes(_model(0))
    assert len(shapes) == 5 + 16 * 2 + 9
    assert shapes["cls/seq_relationship/output_weights"] == (2, H)
    assert shapes["bert/encoder/layer_0/output/dense/kernel"] == (64, H)
    for name in ["bert/embeddings/word_embeddings", "bert/embeddings/LayerNorm/gamma",
                 "bert/encoder/layer_1/attention/self/value/bias",
                 "bert/encoder/layer_0/attention/output/LayerNorm/beta",
                 "bert/encoder/layer_1/intermediate/dense/kernel",
                 "bert/encoder/layer_0/output/dense/kernel", "bert/pooler/dense/kernel",
                 "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/output_bias",
                 "cls/seq_relationship/output_weights"]:
        assert name in shapes


def test_round_trip_reproduces_outputs_exactly(tmp_path):
    model = _model(1)
    path = save_google_checkpoint(model, tmp_path / "model" / "bert_model.ckpt")
    reader = tf.train.load_checkpoint(path)
    shapes = reader.get_variable_to_shape_map()
    assert shapes["bert/encoder/layer_0/attention/self/query/kernel"] == [H, H]
    assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [H, 64]
    assert shapes["cls/seq_relationship/output_weights"] == [2, H]
    np.testing.assert_array_equal(
        reader.get_tensor("cls/seq_relationship/output_weights"),
        model.next_sentence_head.classifier.kernel.numpy().T)
    np.testing.assert_array_equal(
        reader.get_tensor("bert/encoder/layer_1/attention/self/key/kernel"),
        model.backbone.encoder.blocks[1].attention.key.kernel.numpy())

    fresh = _model(2)
    features = _features()
    assert not np.array_equal(fresh(features)["mlm_logits"], model(features)["mlm_logits"])
    report = load_google_checkpoint(fresh, path)
    assert report.missing == () and report.unused == ()
    assert len(report.loaded) == len(google_variable_shapes(model))
    for name, value in model(features).items():
        np.testing.assert_array_equal(fresh(features)[name], value, err_msg=name)


def test_loads_a_tf1_saver_checkpoint_ignoring_optimizer_state(tmp_path):
    """A checkpoint written by TF1's Saver, as google-research/bert wrote them."""
    rng = np.random.default_rng(0)
    shapes = google_variable_shapes(_model(0))
    values = {name: rng.standard_normal(shape).astype(np.float32)
              for name, shape in shapes.items()
              if not name.startswith("cls/predictions")}  # no masked-LM head
    with tf.Graph().as_default():
        variables = []
        for name, value in values.items():
            variables.append(tf.compat.v1.get_variable(
                name, initializer=tf.compat.v1.constant_initializer(value),
                shape=value.shape))
            for slot in ("adam_m", "adam_v"):
                variables.append(tf.compat.v1.get_variable(
                    f"{name}/{slot}", shape=value.shape,
                    initializer=tf.compat.v1.zeros_initializer()))
        variables.append(tf.compat.v1.get_variable(
            "global_step", shape=[], dtype=tf.int64,
            initializer=tf.compat.v1.zeros_initializer()))
        variables.append(tf.compat.v1.get_variable(
            "bert/encoder/layer_2/output/dense/kernel", shape=[64, H]))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            path = saver.save(session, str(tmp_path / "bert_model.ckpt"))

    model = _model(3)
    report = load_google_checkpoint(model, path)
    assert set(report.missing) == {name for name in shapes
                                   if name.startswith("cls/predictions")}
    assert report.unused == ("bert/encoder/layer_2/output/dense/kernel",)
    assert len(report.loaded) == len(values)
    np.testing.assert_array_equal(
        model.backbone.encoder.blocks[1].attention.query.kernel.numpy(),
        values["bert/encoder/layer_1/attention/self/query/kernel"])
    np.testing.assert_array_equal(
        model.next_sentence_head.classifier.kernel.numpy(),
        values["cls/seq_relationship/output_weights"].T)
    np.testing.assert_array_equal(
        model.backbone.embeddings.layer_norm.gamma.numpy(),
        values["bert/embeddings/LayerNorm/gamma"])


def test_shape_mismatch_fails_clearly_and_assigns_nothing(tmp_path):
    path = save_google_checkpoint(_model(0), tmp_path / "bert_model.ckpt")
    bigger = _model(1, dataclasses.replace(TINY_CONFIG, vocab_size=120,
                                           max_position_embeddings=128))
    before = [weight.numpy().copy() for weight in bigger.weights]
    with pytest.raises(ValueError) as error:
        load_google_checkpoint(bigger, path)
    message = str(error.value)
    assert "3 shape mismatch(es)" in message
    assert "bert/embeddings/word_embeddings: checkpoint (100, 32), model expects " \
           "(120, 32)" in message
    assert "bert/embeddings/position_embeddings: checkpoint (64, 32)" in message
    assert "cls/predictions/output_bias: checkpoint (100,), model expects (120,)" in message
    for weight, old in zip(bigger.weights, before):
        np.testing.assert_array_equal(weight.numpy(), old)


def test_named_weights_load_from_a_dict_like_a_checkpoint():
    model, fresh = _model(1), _model(2)
    weights = google_named_weights(model)
    assert list(weights) == list(google_variable_shapes(model))
    assert weights["cls/seq_relationship/output_weights"].shape == (2, H)
    assert all(value.dtype == np.float32 for value in weights.values())
    report = load_google_weights(fresh, weights, source="model one")
    assert report.missing == () and report.unused == ()
    features = _features()
    for name, value in model(features).items():
        np.testing.assert_array_equal(fresh(features)[name], value, err_msg=name)

    del weights["cls/predictions/output_bias"]
    weights["bert/pooler/dense/bias"] = np.zeros(H + 1, np.float32)
    with pytest.raises(ValueError, match=r"^model one: 1 shape mismatch\(es\) between the "
                                         r"source and the model's config:\n  "
                                         r"bert/pooler/dense/bias: source \(33,\), model "
                                         r"expects \(32,\)$"):
        load_google_weights(fresh, weights, source="model one")
    weights["bert/pooler/dense/bias"] = np.zeros(H, np.float32)
    report = load_google_weights(fresh, weights, source="model one")
    assert report.missing == ("cls/predictions/output_bias",) and report.unused == ()
