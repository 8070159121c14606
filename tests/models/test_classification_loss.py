"""The fine-tuning loss of `BertClassifierModel`: per sequence, over the real ones."""

import numpy as np

from packed_bert_tf.layers import sequence_loss_normalisers
from packed_bert_tf.models.bert_classifier import sequence_classification_loss

# Row 0 packs three sequences, row 1 one.
SEQUENCE_WEIGHTS = np.array([[1, 1, 1], [1, 0, 0]], np.int32)
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
    normalisers = sequence_loss_normalisers(features)
    assert float(normalisers["sequences"]) == 4.0
    for name, value in sequence_classification_loss(
            features, {"logits": LOGITS}, is_regression=False,
            normalisers=normalisers).items():
        np.testing.assert_allclose(value, sequence_classification_loss(
            features, {"logits": LOGITS}, is_regression=False)[name], rtol=1e-6)
