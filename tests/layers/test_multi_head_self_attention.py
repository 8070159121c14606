import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import (
    MultiHeadSelfAttention,
    block_diagonal_attention_mask,
    masked_softmax,
)
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks


def test_masked_softmax_literal():
    scores = np.log(np.array([[[[1.0, 3.0, 5.0], [2.0, 2.0, 7.0], [1.0, 1.0, 1.0]]]],
                             np.float32))
    mask = np.array([[[True, True, False], [True, True, False], [False, False, False]]])
    probabilities = masked_softmax(scores, mask).numpy()[0, 0]
    np.testing.assert_allclose(probabilities, [[0.25, 0.75, 0.0], [0.5, 0.5, 0.0],
                                               [0.0, 0.0, 0.0]], rtol=1e-6)
    assert probabilities[0, 2] == 0.0  # masked keys are exactly zero


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_masked_softmax_is_float32_and_finite_for_padding_rows(dtype):
    scores = tf.cast(tf.random.stateless_normal([2, 3, 4, 4], seed=[1, 2]) * 30, dtype)
    mask = block_diagonal_attention_mask(tf.constant([[1, 1, 0, 0], [0, 0, 0, 0]]))
    probabilities = masked_softmax(scores, mask)
    assert probabilities.dtype == tf.float32
    assert np.isfinite(probabilities.numpy()).all()
    np.testing.assert_allclose(probabilities.numpy()[0, :, :2].sum(-1), 1.0, rtol=1e-6)
    assert not probabilities.numpy()[0, :, 2:].any() and not probabilities.numpy()[1].any()


def test_unpacked_mask_broadcasts_over_queries():
    scores = tf.random.stateless_normal([1, 2, 3, 3], seed=[3, 4])
    probabilities = masked_softmax(scores, tf.constant([[[True, True, False]]])).numpy()
    assert probabilities.shape == (1, 2, 3, 3)
    assert not probabilities[..., 2].any()
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-6)


def test_layer_checks():
    hidden = np.random.default_rng(0).standard_normal((2, 6, 16)).astype(np.float32)
    mask = block_diagonal_attention_mask(np.array([[1, 1, 1, 2, 2, 0],
                                                   [1, 1, 1, 1, 1, 1]])).numpy()
    layer, _ = run_layer_checks(
        MultiHeadSelfAttention,
        dict(num_heads=4, attention_dropout_rate=0.1, initializer_range=0.1),
        dict(hidden_states=hidden, attention_mask=mask), (2, 6, 16),
        expected_num_trainable_weights=8)
    assert tuple(layer.query.kernel.shape) == (16, 16)  # plain [H, H] kernels


def test_matches_a_numpy_reference_and_ignores_other_sequences():
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((1, 5, 8)).astype(np.float32)
    mask = block_diagonal_attention_mask(np.array([[1, 1, 2, 2, 2]])).numpy()
    layer = MultiHeadSelfAttention(num_heads=2, initializer_range=0.3)
    out = layer(hidden, mask).numpy()
    np.testing.assert_allclose(out, numpy_reference.attention(layer, hidden, mask, 2),
                               atol=1e-5)
    changed = hidden.copy()
    changed[0, 3] += 1.0  # a token of the second sequence
    out_changed = layer(changed, mask).numpy()
    np.testing.assert_array_equal(out_changed[0, :2], out[0, :2])
    assert not np.allclose(out_changed[0, 2:], out[0, 2:])


def test_hidden_size_must_divide_into_heads():
    with pytest.raises(ValueError, match="hidden size 10 is not divisible by num_heads 4"):
        MultiHeadSelfAttention(num_heads=4).build((None, None, 10))
