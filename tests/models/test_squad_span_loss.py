"""The SQuAD span loss of `BertSquadModel`: each sequence's softmax over its own tokens."""

import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import sequence_loss_normalisers
from packed_bert_tf.models.bert_squad import per_sequence_logits, squad_span_loss

NEG = -np.inf


def test_loss_is_float32_whatever_the_logits():
    start = tf.constant(np.random.default_rng(0).standard_normal((2, 6)), tf.float16)
    features = {"input_mask": tf.constant([[1, 1, 2, 2, 0, 0]] * 2),
                "start_positions": tf.constant([[0, 2]] * 2),
                "end_positions": tf.constant([[1, 3]] * 2),
                "sequence_weights": tf.constant([[1, 1]] * 2)}
    losses = squad_span_loss(features, {"start_logits": start,
                                        "end_logits": tf.cast(start, tf.float32)})
    assert all(value.dtype == tf.float32 for value in losses.values())


def test_per_sequence_logits_mask_other_sequences_and_padding():
    logits = tf.constant([[0., 1., 2., 3., 4., 5.]])
    input_mask = tf.constant([[1, 1, 1, 2, 2, 0]])
    got = per_sequence_logits(logits, input_mask, 3).numpy()
    np.testing.assert_array_equal(got, [[
        [0., 1., 2., NEG, NEG, NEG],
        [NEG, NEG, NEG, 3., 4., NEG],
        [0., 1., 2., 3., 4., 5.],  # empty slot: left finite (its weight is 0)
    ]])


def _numpy_sequence_loss(logits, members, label):
    row = logits[members]
    log_probabilities = row - row.max() - np.log(np.exp(row - row.max()).sum())
    return -log_probabilities[list(np.flatnonzero(members)).index(label)]


def test_loss_is_the_per_sequence_softmax_cross_entropy_averaged_over_sequences():
    rng = np.random.default_rng(1)
    start_logits = rng.standard_normal((2, 8)).astype(np.float32)
    end_logits = rng.standard_normal((2, 8)).astype(np.float32)
    input_mask = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
    features = {"input_mask": input_mask,
                "start_positions": np.array([[1, 4], [3, 0]]),
                "end_positions": np.array([[2, 6], [4, 0]]),
                "sequence_weights": np.array([[1, 1], [1, 0]])}
    got = squad_span_loss(features, {"start_logits": start_logits,
                                     "end_logits": end_logits})
    sequences = [(0, 1, 0), (0, 2, 1), (1, 1, 0)]  # (row, index, slot)
    want = {}
    for name, logits in (("start", start_logits), ("end", end_logits)):
        want[name] = np.mean([_numpy_sequence_loss(
            logits[row], input_mask[row] == index,
            features[f"{name}_positions"][row, slot]) for row, index, slot in sequences])
        np.testing.assert_allclose(got[f"{name}_loss"], want[name], rtol=1e-6)
    np.testing.assert_allclose(got["loss"], (want["start"] + want["end"]) / 2, rtol=1e-6)
    # The precomputed normaliser gives the same; accuracies are fractions of sequences.
    again = squad_span_loss(features, {"start_logits": start_logits,
                                       "end_logits": end_logits},
                            normalisers=sequence_loss_normalisers(features))
    np.testing.assert_allclose(again["loss"], got["loss"], rtol=1e-7)
    for name, logits in (("start", start_logits), ("end", end_logits)):
        correct = [np.argmax(np.where(input_mask[row] == index, logits[row], -np.inf))
                   == features[f"{name}_positions"][row, slot]
                   for row, index, slot in sequences]
        np.testing.assert_allclose(got[f"{name}_accuracy"], np.mean(correct), rtol=1e-6)


def test_accuracy_counts_argmax_within_each_sequence():
    # Sequence 2's best token overall is in sequence 1: only its own tokens count.
    start = tf.constant([[0., 9., 0., 1., 2., 0.]])
    features = {"input_mask": tf.constant([[1, 1, 1, 2, 2, 0]]),
                "start_positions": tf.constant([[1, 4]]),
                "end_positions": tf.constant([[1, 3]]),
                "sequence_weights": tf.constant([[1, 1]])}
    got = squad_span_loss(features, {"start_logits": start, "end_logits": start})
    assert got["start_accuracy"] == 1.0 and got["end_accuracy"] == 0.5


def test_gradients_stay_on_each_sequence_and_are_finite_with_empty_slots():
    logits = tf.Variable(np.random.default_rng(2).standard_normal((1, 6)), dtype=tf.float32)
    features = {"input_mask": tf.constant([[1, 1, 1, 0, 0, 0]]),
                "start_positions": tf.constant([[2, 0, 0]]),
                "end_positions": tf.constant([[2, 0, 0]]),
                "sequence_weights": tf.constant([[1, 0, 0]])}
    with tf.GradientTape() as tape:
        loss = squad_span_loss(features, {"start_logits": logits,
                                          "end_logits": logits})["loss"]
    gradient = tape.gradient(loss, logits).numpy()
    assert np.isfinite(loss.numpy()) and np.isfinite(gradient).all()
    np.testing.assert_array_equal(gradient[0, 3:], 0)  # padding gets nothing
    np.testing.assert_allclose(gradient[0, :3].sum(), 0, atol=1e-6)  # softmax - one-hot
