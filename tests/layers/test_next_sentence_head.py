import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import NextSentenceHead
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

SEQUENCE_OUTPUT = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
# Row 0 packs three sequences with [CLS] at 0, 2 and 4; row 1 holds one.
NEXT_SENTENCE_POSITIONS = np.array([[0, 2, 4], [0, 0, 0]], np.int32)


def test_layer_checks():
    run_layer_checks(NextSentenceHead, dict(initializer_range=0.3),
                     dict(sequence_output=SEQUENCE_OUTPUT,
                          next_sentence_positions=NEXT_SENTENCE_POSITIONS),
                     [(2, 3, 2), (2, 3, 8)], expected_num_trainable_weights=4)


def test_pooler_and_classifier_at_every_cls():
    head = NextSentenceHead(initializer_range=0.3)
    logits, pooled = head(SEQUENCE_OUTPUT, NEXT_SENTENCE_POSITIONS)
    first_tokens = np.take_along_axis(SEQUENCE_OUTPUT,
                                      NEXT_SENTENCE_POSITIONS[:, :, None], axis=1)
    expected_pooled = np.tanh(numpy_reference.dense(first_tokens, head.pooler_dense))
    np.testing.assert_allclose(pooled, expected_pooled, atol=1e-5)
    np.testing.assert_allclose(
        logits, numpy_reference.dense(expected_pooled, head.classifier), atol=1e-5)
    # Each sequence of the pack gets its own prediction from its own [CLS].
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert logits.dtype == tf.float32


def test_logits_float32_pooled_in_compute_dtype_under_mixed_precision():
    logits, pooled = NextSentenceHead(dtype="mixed_float16")(SEQUENCE_OUTPUT,
                                                            NEXT_SENTENCE_POSITIONS)
    assert logits.dtype == tf.float32 and pooled.dtype == tf.float16
