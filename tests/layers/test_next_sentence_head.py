import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import NextSentenceHead
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

# The pooled [CLS] of each sequence: row 0 packs three sequences, row 1 one.
POOLED_OUTPUT = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)


def test_layer_checks():
    run_layer_checks(NextSentenceHead, dict(initializer_range=0.3),
                     dict(pooled_output=POOLED_OUTPUT), (2, 3, 2),
                     expected_num_trainable_weights=2)


def test_classifier_at_every_cls():
    head = NextSentenceHead(initializer_range=0.3)
    logits = head(POOLED_OUTPUT)
    np.testing.assert_allclose(
        logits, numpy_reference.dense(POOLED_OUTPUT, head.classifier), atol=1e-5)
    # Each sequence of the pack gets its own prediction from its own [CLS].
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert logits.dtype == tf.float32
    assert head.classifier.name == "seq_relationship"


def test_logits_float32_under_mixed_precision():
    logits = NextSentenceHead(dtype="mixed_float16")(POOLED_OUTPUT)
    assert logits.dtype == tf.float32
