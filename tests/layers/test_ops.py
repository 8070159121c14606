import math

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import gather_positions, gelu, get_activation
from packed_bert_tf.layers.ops import gelu_exact


def test_gelu_is_the_tanh_approximation_of_original_bert():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(gelu(x), expected, rtol=1e-6, atol=1e-7)
    # 0.8411920 is the tanh form; the erf form gives 0.8413447.
    assert abs(float(gelu(tf.constant(1.0))) - 0.8411920) < 1e-6
    assert gelu(tf.constant([1.0], tf.bfloat16)).dtype == tf.bfloat16


def test_gelu_exact_is_the_erf_form():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    expected = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    np.testing.assert_allclose(gelu_exact(x), expected, rtol=1e-6, atol=1e-7)
    assert abs(float(gelu_exact(tf.constant(1.0))) - 0.8413447) < 1e-6
    assert gelu_exact(tf.constant([1.0], tf.bfloat16)).dtype == tf.bfloat16


def test_get_activation_names_and_error():
    assert get_activation("gelu") is gelu
    assert get_activation("gelu_exact") is gelu_exact
    np.testing.assert_array_equal(get_activation("relu")(tf.constant([-1.0, 2.0])),
                                  [0.0, 2.0])
    with pytest.raises(ValueError, match="unknown activation 'swish'; expected one of "
                                         "gelu, gelu_exact, linear, relu, tanh"):
        get_activation("swish")


def test_gather_positions_per_row():
    sequence = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    gathered = gather_positions(sequence, tf.constant([[3, 0], [1, 1]]))
    np.testing.assert_array_equal(gathered, [[sequence[0, 3], sequence[0, 0]],
                                             [sequence[1, 1], sequence[1, 1]]])
