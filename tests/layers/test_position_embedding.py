import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import PositionEmbedding
from tests.layers.layer_checks import run_layer_checks

# The worked example: two sequences, positions restart at each [CLS].
POSITIONS = np.array([[0, 1, 2, 0, 1, 0]], np.int32)


def test_layer_checks_packed_and_unpacked():
    embeddings = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    run_layer_checks(PositionEmbedding, dict(max_positions=16, initializer_range=0.5),
                     dict(inputs=embeddings, positions=POSITIONS), (1, 6, 8),
                     expected_num_trainable_weights=1)
    run_layer_checks(PositionEmbedding, dict(max_positions=16),
                     dict(inputs=embeddings), (1, 6, 8))


def test_gathers_rows_of_the_table_by_position_id():
    layer = PositionEmbedding(max_positions=16, initializer_range=0.5)
    out = layer(tf.zeros([1, 6, 8]), positions=tf.constant(POSITIONS)).numpy()
    table = layer.embeddings.numpy()
    np.testing.assert_array_equal(out[0], table[POSITIONS[0]])
    # Positions restart: b1 gets a1's embedding, b2 gets a2's.
    np.testing.assert_array_equal(out[0, 3], out[0, 0])
    np.testing.assert_array_equal(out[0, 4], out[0, 1])


def test_without_positions_slices_the_table_like_unpacked_bert():
    layer = PositionEmbedding(max_positions=16)
    out = layer(tf.zeros([3, 5, 4])).numpy()
    for row in out:
        np.testing.assert_array_equal(row, layer.embeddings.numpy()[:5])
    contiguous = np.tile(np.arange(5, dtype=np.int32), (3, 1))
    np.testing.assert_array_equal(layer(tf.zeros([3, 5, 4]), positions=contiguous), out)
