import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import (
    NextSentenceHead,
    SequenceClassificationHead,
    classification_loss_normalisers,
    sequence_classification_loss,
)
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

# The pooled [CLS] of each sequence: row 0 packs three sequences, row 1 one.
POOLED_OUTPUT = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
SEQUENCE_WEIGHTS = np.array([[1, 1, 1], [1, 0, 0]], np.int32)


def test_layer_checks():
    run_layer_checks(SequenceClassificationHead,
                     dict(num_labels=3, initializer_range=0.3, dropout_rate=0.2),
                     dict(pooled_output=POOLED_OUTPUT), (2, 3, 3),
                     expected_num_trainable_weights=2)


def test_classifier_at_every_cls():
    head = SequenceClassificationHead(3, initializer_range=0.3)
    logits = head(POOLED_OUTPUT)
    np.testing.assert_allclose(logits, numpy_reference.dense(POOLED_OUTPUT, head.classifier),
                               atol=1e-5)
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert logits.dtype == tf.float32
    # Dropout acts on the pooled output in training only.
    trained = head(POOLED_OUTPUT, training=True)
    assert not np.allclose(trained, logits)


def test_a_two_label_head_is_the_next_sentence_heads_classifier():
    classifier = SequenceClassificationHead(2, initializer_range=0.3)
    next_sentence = NextSentenceHead(initializer_range=0.3)
    classifier(POOLED_OUTPUT)
    next_sentence(POOLED_OUTPUT)
    classifier.classifier.set_weights(next_sentence.classifier.get_weights())
    np.testing.assert_allclose(classifier(POOLED_OUTPUT), next_sentence(POOLED_OUTPUT),
                               atol=1e-6)


def test_keras_file_round_trip(tmp_path):
    pooled_output = keras.Input((3, 8), name="pooled_output")
    logits = SequenceClassificationHead(3, initializer_range=0.3, name="head")(
        pooled_output)
    model = keras.Model(pooled_output, logits)
    path = str(tmp_path / "head.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored.get_layer("head"), SequenceClassificationHead)
    np.testing.assert_array_equal(restored(POOLED_OUTPUT), model(POOLED_OUTPUT))


def test_logits_float32_under_mixed_precision():
    logits = SequenceClassificationHead(2, dtype="mixed_bfloat16")(POOLED_OUTPUT)
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
