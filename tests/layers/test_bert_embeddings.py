import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import BertEmbeddings
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

# The worked example, with token ids and token types.
INPUT_IDS = np.array([[5, 6, 7, 8, 9, 0]], np.int32)
SEGMENT_IDS = np.array([[0, 0, 1, 0, 1, 0]], np.int32)
POSITIONS = np.array([[0, 1, 2, 0, 1, 0]], np.int32)
KWARGS = dict(vocab_size=20, hidden_size=8, max_positions=12, type_vocab_size=2,
              dropout_rate=0.1, initializer_range=0.3, layer_norm_epsilon=1e-12)


def test_layer_checks():
    run_layer_checks(BertEmbeddings, KWARGS,
                     dict(input_ids=INPUT_IDS, segment_ids=SEGMENT_IDS,
                          positions=POSITIONS), (1, 6, 8),
                     expected_num_trainable_weights=5)


def test_sum_of_three_tables_then_layer_norm():
    layer = BertEmbeddings(**KWARGS)
    out = layer(INPUT_IDS, SEGMENT_IDS, positions=POSITIONS).numpy()
    summed = (layer.word_embeddings.embeddings.numpy()[INPUT_IDS]
              + layer.position_embedding.embeddings.numpy()[POSITIONS]
              + layer.token_type_embeddings.embeddings.numpy()[SEGMENT_IDS])
    np.testing.assert_allclose(out, numpy_reference.layer_norm(summed, layer.layer_norm),
                               atol=1e-5)


def test_unpacked_layout_uses_positions_0_to_s_minus_1():
    layer = BertEmbeddings(**KWARGS)
    contiguous = np.arange(6, dtype=np.int32)[None]
    np.testing.assert_array_equal(layer(INPUT_IDS, SEGMENT_IDS),
                                  layer(INPUT_IDS, SEGMENT_IDS, positions=contiguous))
    assert not np.allclose(layer(INPUT_IDS, SEGMENT_IDS),
                           layer(INPUT_IDS, SEGMENT_IDS, positions=POSITIONS))


def test_layer_norm_is_float32_under_mixed_bfloat16():
    layer = BertEmbeddings(**KWARGS, dtype="mixed_bfloat16")
    out = layer(INPUT_IDS, SEGMENT_IDS, positions=POSITIONS)
    assert out.dtype == tf.bfloat16
    assert layer.layer_norm.compute_dtype == "float32"
    assert layer.word_embeddings.embeddings.dtype == "float32"
