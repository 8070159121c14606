import numpy as np
import pytest

from packed_bert_tf.layers import BertTransformerBlock, block_diagonal_attention_mask
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

INPUT_MASK = np.array([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]])


def _inputs(seed=0):
    hidden = np.random.default_rng(seed).standard_normal((2, 6, 16)).astype(np.float32)
    return hidden, block_diagonal_attention_mask(INPUT_MASK).numpy()


def test_layer_checks():
    hidden, mask = _inputs()
    kwargs = dict(num_heads=4, intermediate_size=32, activation="gelu",
                  hidden_dropout_rate=0.1, attention_dropout_rate=0.1,
                  initializer_range=0.05, layer_norm_epsilon=1e-12)
    run_layer_checks(BertTransformerBlock, kwargs,
                     dict(hidden_states=hidden, attention_mask=mask), (2, 6, 16),
                     expected_num_trainable_weights=16)


def test_post_layer_norm_gelu_block_matches_numpy():
    hidden, mask = _inputs(1)
    block = BertTransformerBlock(num_heads=4, intermediate_size=32, initializer_range=0.2)
    out = block(hidden, mask).numpy()
    expected = numpy_reference.transformer_block(block, hidden.astype(np.float64), mask, 4)
    np.testing.assert_allclose(out, expected, atol=2e-5)
    assert np.isfinite(out).all()  # padding rows included


def test_unknown_activation_fails_at_construction():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        BertTransformerBlock(num_heads=2, intermediate_size=8, activation="swish")
