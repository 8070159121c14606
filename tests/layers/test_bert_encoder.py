import numpy as np

from packed_bert_tf.layers import BertEncoder, block_diagonal_attention_mask
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks


def _inputs():
    hidden = np.random.default_rng(0).standard_normal((2, 6, 16)).astype(np.float32)
    mask = block_diagonal_attention_mask(np.array([[1, 1, 2, 2, 3, 0],
                                                   [1, 1, 1, 1, 1, 1]])).numpy()
    return hidden, mask


def test_layer_checks():
    hidden, mask = _inputs()
    kwargs = dict(num_layers=2, num_heads=4, intermediate_size=32, activation="gelu",
                  hidden_dropout_rate=0.1, attention_dropout_rate=0.0,
                  initializer_range=0.02, layer_norm_epsilon=1e-12)
    layer, _ = run_layer_checks(BertEncoder, kwargs,
                                dict(hidden_states=hidden, attention_mask=mask),
                                (2, 6, 16), expected_num_trainable_weights=32)
    assert [block.name for block in layer.blocks] == ["layer_0", "layer_1"]


def test_stack_applies_the_blocks_in_order():
    hidden, mask = _inputs()
    encoder = BertEncoder(num_layers=3, num_heads=4, intermediate_size=32,
                          initializer_range=0.2)
    out = encoder(hidden, mask).numpy()
    expected = hidden.astype(np.float64)
    for block in encoder.blocks:
        expected = numpy_reference.transformer_block(block, expected, mask, 4)
    np.testing.assert_allclose(out, expected, atol=5e-5)
