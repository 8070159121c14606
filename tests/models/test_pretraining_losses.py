"""The pre-training losses and accuracies of `BertPretrainingModel`, per sequence."""

import math

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import WeightedSum, weighted_mean
from packed_bert_tf.models import bert_pretraining

LN2 = math.log(2.0)
# One packed row, M = 4: two masked tokens of sequence 1, one of sequence 2, an
# empty slot. Target probabilities 1/2, 1/4, 1/8: losses ln 2, 2 ln 2, 3 ln 2.
MLM_LOGITS = np.log(np.array([[[0.5, 0.25, 0.25],
                               [0.5, 0.25, 0.25],
                               [0.125, 0.75, 0.125],
                               [0.01, 0.01, 0.98]]], np.float32))
MASKED_LM_IDS = np.array([[0, 1, 0, 2]], np.int32)
MASKED_LM_WEIGHTS = np.array([[1.0, 1.0, 2.0, 0.0]], np.float32)
# D = 3: two real sequences (losses ln 2 and ln 4/3), one empty slot.
NSP_LOGITS = np.log(np.array([[[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]], np.float32))
NSP_LABELS = np.array([[0, 1, 1]], np.int32)
NSP_WEIGHTS = np.array([[1, 1, 0]], np.int32)


def _mean(weighted_sum):
    return float(weighted_mean(weighted_sum))


def test_masked_lm_loss_default_is_mean_over_real_masked_tokens():
    parts = bert_pretraining.masked_lm_loss(MLM_LOGITS, MASKED_LM_IDS, MASKED_LM_WEIGHTS)
    assert isinstance(parts, WeightedSum)
    np.testing.assert_allclose([float(parts.total), float(parts.count)], [6 * LN2, 3.0],
                               rtol=1e-6)
    np.testing.assert_allclose(_mean(parts), 2 * LN2, rtol=1e-6)


def test_masked_lm_loss_per_sequence_averages_each_sequence_first():
    parts = bert_pretraining.masked_lm_loss(MLM_LOGITS, MASKED_LM_IDS, MASKED_LM_WEIGHTS,
                           per_sequence=True, max_sequences_per_pack=3)
    # ((ln 2 + 2 ln 2) / 2 + 3 ln 2) / 2 sequences with masked tokens.
    np.testing.assert_allclose([float(parts.total), float(parts.count)],
                               [4.5 * LN2, 2.0], rtol=1e-6)
    np.testing.assert_allclose(_mean(parts), 2.25 * LN2, rtol=1e-6)
    with pytest.raises(ValueError, match="per_sequence=True needs max_sequences_per_pack"):
        bert_pretraining.masked_lm_loss(MLM_LOGITS, MASKED_LM_IDS, MASKED_LM_WEIGHTS, per_sequence=True)


def test_accuracies_ignore_empty_slots():
    # Token 0 right, 1 and 2 wrong; the empty slot is "right" but must not count.
    np.testing.assert_allclose(
        _mean(bert_pretraining.masked_lm_accuracy(MLM_LOGITS, MASKED_LM_IDS, MASKED_LM_WEIGHTS)), 1 / 3)
    # Sequence 1: argmax 0 (tie -> first) = label 0; sequence 2: 1 = 1; empty slot
    # wrong but weight 0.
    np.testing.assert_allclose(
        _mean(bert_pretraining.next_sentence_accuracy(NSP_LOGITS, NSP_LABELS, NSP_WEIGHTS)), 1.0)


def test_next_sentence_loss_is_mean_over_real_sequences():
    parts = bert_pretraining.next_sentence_loss(NSP_LOGITS, NSP_LABELS, NSP_WEIGHTS)
    np.testing.assert_allclose(float(parts.count), 2.0)
    np.testing.assert_allclose(_mean(parts), (LN2 + math.log(4 / 3)) / 2, rtol=1e-6)


def test_pretraining_losses_dict_and_dtypes():
    features = dict(masked_lm_ids=MASKED_LM_IDS, masked_lm_weights=MASKED_LM_WEIGHTS,
                    next_sentence_labels=NSP_LABELS, next_sentence_weights=NSP_WEIGHTS)
    outputs = dict(mlm_logits=tf.constant(MLM_LOGITS, tf.bfloat16),
                   nsp_logits=tf.constant(NSP_LOGITS))
    losses = bert_pretraining.pretraining_losses(features, outputs)
    assert sorted(losses) == ["loss", "masked_lm_accuracy", "masked_lm_loss",
                              "next_sentence_accuracy", "next_sentence_loss"]
    assert all(value.dtype == tf.float32 for value in losses.values())
    np.testing.assert_allclose(losses["loss"],
                               losses["masked_lm_loss"] + losses["next_sentence_loss"])
    per_sequence = bert_pretraining.pretraining_losses(features, outputs, per_sequence=True)
    assert float(per_sequence["masked_lm_loss"]) > float(losses["masked_lm_loss"])


@pytest.mark.parametrize("per_sequence", [False, True])
def test_precomputed_normalisers_give_the_same_losses(per_sequence):
    features = dict(masked_lm_ids=MASKED_LM_IDS, masked_lm_weights=MASKED_LM_WEIGHTS,
                    next_sentence_labels=NSP_LABELS, next_sentence_weights=NSP_WEIGHTS)
    outputs = dict(mlm_logits=MLM_LOGITS, nsp_logits=NSP_LOGITS)
    normalisers = bert_pretraining.loss_normalisers(features)
    assert {name: float(value) for name, value in normalisers.items()} == {
        "masked_lm_tokens": 3.0, "masked_lm_sequences": 2.0, "sequences": 2.0}
    counted = bert_pretraining.pretraining_losses(features, outputs, per_sequence=per_sequence)
    given = bert_pretraining.pretraining_losses(features, outputs, per_sequence=per_sequence,
                               normalisers=normalisers)
    for name in counted:
        np.testing.assert_allclose(given[name], counted[name], rtol=1e-7, err_msg=name)
