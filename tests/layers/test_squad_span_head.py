import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import SquadSpanHead
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

SEQUENCE_OUTPUT = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)


def test_layer_checks():
    run_layer_checks(SquadSpanHead, dict(initializer_range=0.3),
                     dict(sequence_output=SEQUENCE_OUTPUT), [(2, 6), (2, 6)],
                     expected_num_trainable_weights=2)


def test_start_and_end_are_the_two_columns_of_one_dense():
    head = SquadSpanHead(initializer_range=0.3)
    start, end = head(SEQUENCE_OUTPUT)
    logits = numpy_reference.dense(SEQUENCE_OUTPUT, head.dense)  # [B, S, 2]
    np.testing.assert_allclose(start, logits[..., 0], atol=1e-6)
    np.testing.assert_allclose(end, logits[..., 1], atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_logits_are_float32_under_mixed_precision(policy):
    head = SquadSpanHead(dtype=policy)
    start, end = head(tf.cast(SEQUENCE_OUTPUT, policy.split("_")[1]))
    assert start.dtype == end.dtype == tf.float32
    assert head.dense.kernel.dtype == "float32"


def test_usable_in_a_functional_model():
    inputs = keras.Input((6, 8))
    start, end = SquadSpanHead(initializer_range=0.3)(inputs)
    model = keras.Model(inputs, [start, end])
    assert model.output_shape == [(None, 6), (None, 6)]
