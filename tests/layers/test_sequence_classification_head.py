import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import (NextSentenceHead, SequenceClassificationHead,
                                   classification_loss_normalisers,
                                   sequence_classification_loss)
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

SEQUENCE_OUTPUT = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
# Row 0 packs three sequences with [CLS] at 0, 2 and 4; row 1 holds one.
CLS_POSITIONS = np.array([[0, 2, 4], [0, 0, 0]], np.int32)
SEQUENCE_WEIGHTS = np.array([[1, 1, 1], [1, 0, 0]], np.int32)


def test_layer_checks():
    run_layer_checks(SequenceClassificationHead,
                     dict(num_labels=3, initializer_range=0.3, dropout_rate=0.2),
                     dict(sequence_output=SEQUENCE_OUTPUT, cls_positions=CLS_POSITIONS),
                     (2, 3, 3), expected_num_trainable_weights=4)


def test_pooler_and_classifier_at_every_cls():
    head = SequenceClassificationHead(3, initializer_range=0.3)
    logits = head(SEQUENCE_OUTPUT, CLS_POSITIONS)
    first_tokens = np.take_along_axis(SEQUENCE_OUTPUT, CLS_POSITIONS[:, :, None], axis=1)
    pooled = np.tanh(numpy_reference.dense(first_tokens, head.pooler_dense))
    np.testing.assert_allclose(logits, numpy_reference.dense(pooled, head.classifier),
                               atol=1e-5)
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert logits.dtype == tf.float32
    # Dropout acts on the pooled output in training only.
    trained = head(SEQUENCE_OUTPUT, CLS_POSITIONS, training=True)
    assert not np.allclose(trained, logits)


def test_pooler_is_the_next_sentence_heads():
    classifier = SequenceClassificationHead(2, initializer_range=0.3)
    next_sentence = NextSentenceHead(initializer_range=0.3)
    classifier(SEQUENCE_OUTPUT, CLS_POSITIONS)
    _, pooled = next_sentence(SEQUENCE_OUTPUT, CLS_POSITIONS)
    classifier.pooler_dense.set_weights(next_sentence.pooler_dense.get_weights())
    classifier.classifier.set_weights(next_sentence.classifier.get_weights())
    logits, _ = next_sentence(SEQUENCE_OUTPUT, CLS_POSITIONS)
    np.testing.assert_allclose(classifier(SEQUENCE_OUTPUT, CLS_POSITIONS), logits,
                               atol=1e-6)
    assert classifier.pooler_dense.name == next_sentence.pooler_dense.name == "pooler"


def test_keras_file_round_trip(tmp_path):
    sequence_output = keras.Input((6, 8), name="sequence_output")
    cls_positions = keras.Input((3,), dtype="int32", name="cls_positions")
    logits = SequenceClassificationHead(3, initializer_range=0.3, name="head")(
        sequence_output, cls_positions)
    model = keras.Model([sequence_output, cls_positions], logits)
    path = str(tmp_path / "head.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored.get_layer("head"), SequenceClassificationHead)
    np.testing.assert_array_equal(restored([SEQUENCE_OUTPUT, CLS_POSITIONS]),
                                  model([SEQUENCE_OUTPUT, CLS_POSITIONS]))


def test_logits_float32_under_mixed_precision():
    logits = SequenceClassificationHead(2, dtype="mixed_bfloat16")(SEQUENCE_OUTPUT,
                                                                    CLS_POSITIONS)
    assert logits.dtype == tf.float32


def test_num_labels_must_be_positive():
    with pytest.raises(ValueError, match="num_labels must be >= 1, got 0"):
        SequenceClassificationHead(0)


LOGITS = np.array([[[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]],
                   [[1.0, 3.0], [9.0, -9.0], [0.0, 0.0]]], np.float32)


def test_cross_entropy_is_the_mean_over_real_sequences():
    labels = np.array([[0, 0, 1], [1, 1, 1]], np.int32)
    losses = sequence_classification_loss(
        {"label_ids": labels, "sequence_weights": SEQUENCE_WEIGHTS}, {"logits": LOGITS},
        is_regression=False)
    real = [(LOGITS[0, 0], 0), (LOGITS[0, 1], 0), (LOGITS[0, 2], 1), (LOGITS[1, 0], 1)]
    expected = np.mean([np.log(np.exp(x).sum()) - x[y] for x, y in real])
    np.testing.assert_allclose(losses["loss"], expected, rtol=1e-6)
    # argmax: 0 (right), 1 (wrong), 0 on a tie (wrong), 1 (right).
    np.testing.assert_allclose(losses["accuracy"], 0.5)


def test_squared_error_for_regression():
    logits = LOGITS[..., :1]
    targets = np.array([[1.5, 0.0, 4.0], [1.0, 100.0, -7.0]], np.float32)
    losses = sequence_classification_loss(
        {"label_ids": targets, "sequence_weights": SEQUENCE_WEIGHTS}, {"logits": logits},
        is_regression=True)
    expected = np.mean([(2 - 1.5) ** 2, 0.0, (5 - 4) ** 2, 0.0])
    np.testing.assert_allclose(losses["loss"], expected, rtol=1e-6)
    assert set(losses) == {"loss"}


def test_precomputed_normalisers_give_the_same_loss():
    features = {"label_ids": np.array([[0, 1, 1], [1, 0, 0]], np.int32),
                "sequence_weights": SEQUENCE_WEIGHTS}
    normalisers = classification_loss_normalisers(features)
    assert float(normalisers["sequences"]) == 4.0
    for name, value in sequence_classification_loss(
            features, {"logits": LOGITS}, is_regression=False,
            normalisers=normalisers).items():
        np.testing.assert_allclose(value, sequence_classification_loss(
            features, {"logits": LOGITS}, is_regression=False)[name], rtol=1e-6)
