import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import (
    BlockDiagonalAttentionMask,
    block_diagonal_attention_mask,
    padding_attention_mask,
)
from tests.layers.layer_checks import run_layer_checks


def test_worked_example_literal():
    # input_ids a1 a2 a3 b1 b2 0 / input_mask 1 1 1 2 2 0
    mask = block_diagonal_attention_mask(tf.constant([[1, 1, 1, 2, 2, 0]]))
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(mask.numpy().astype(int), [[
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0],
    ]])


def test_three_sequences_and_padding_in_the_middle_of_a_batch():
    sequence_index = np.array([[1, 2, 2, 3, 0], [1, 1, 1, 1, 1]])
    mask = block_diagonal_attention_mask(sequence_index).numpy()
    expected = (sequence_index[:, :, None] == sequence_index[:, None, :]) & \
        (sequence_index[:, :, None] > 0)
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(mask[0, 3].astype(int), [0, 0, 0, 1, 0])
    assert mask[1].all()
    np.testing.assert_array_equal(mask, np.swapaxes(mask, 1, 2))  # symmetric


def test_padding_attends_to_nothing_and_nothing_attends_to_padding():
    sequence_index = np.array([[1, 1, 2, 0, 0]])
    mask = block_diagonal_attention_mask(sequence_index).numpy()[0]
    assert not mask[3:].any() and not mask[:, 3:].any()


def test_unpacked_d_equals_1_gives_the_padding_mask_on_real_rows():
    input_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])
    block = block_diagonal_attention_mask(input_mask).numpy()
    padding = np.broadcast_to(padding_attention_mask(input_mask).numpy(), block.shape)
    real = input_mask.astype(bool)
    np.testing.assert_array_equal(block[real], padding[real])
    assert padding_attention_mask(input_mask).shape == (2, 1, 4)


def test_layer_checks():
    _, mask = run_layer_checks(BlockDiagonalAttentionMask, {},
                               dict(input_mask=np.array([[1, 1, 2, 0]], np.int32)),
                               (1, 4, 4))
    assert mask.dtype == tf.bool
