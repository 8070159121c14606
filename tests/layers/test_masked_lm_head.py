import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import MaskedLMHead
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

RNG = np.random.default_rng(0)
SEQUENCE_OUTPUT = RNG.standard_normal((2, 6, 8)).astype(np.float32)
POSITIONS = np.array([[1, 4, 0], [5, 5, 2]], np.int32)
WORD_EMBEDDINGS = RNG.standard_normal((30, 8)).astype(np.float32)
KWARGS = dict(vocab_size=30, activation="gelu", initializer_range=0.3,
              layer_norm_epsilon=1e-12)


def test_layer_checks():
    run_layer_checks(MaskedLMHead, KWARGS,
                     dict(sequence_output=SEQUENCE_OUTPUT, masked_lm_positions=POSITIONS,
                          word_embeddings=WORD_EMBEDDINGS),
                     (2, 3, 30), expected_num_trainable_weights=5)


def test_gather_transform_norm_tied_projection_bias():
    head = MaskedLMHead(**KWARGS)
    head(SEQUENCE_OUTPUT, POSITIONS, WORD_EMBEDDINGS)  # builds
    head.output_bias.assign(RNG.standard_normal(30).astype(np.float32))
    logits = head(SEQUENCE_OUTPUT, POSITIONS, WORD_EMBEDDINGS).numpy()
    gathered = np.take_along_axis(SEQUENCE_OUTPUT, POSITIONS[:, :, None], axis=1)
    transformed = numpy_reference.layer_norm(
        numpy_reference.gelu(numpy_reference.dense(gathered, head.transform_dense)),
        head.layer_norm)
    expected = transformed @ WORD_EMBEDDINGS.T + head.output_bias.numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-5)


def test_gradient_reaches_the_tied_embeddings():
    head = MaskedLMHead(**KWARGS)
    table = tf.Variable(WORD_EMBEDDINGS)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(head(SEQUENCE_OUTPUT, POSITIONS, table))
    assert np.abs(tape.gradient(loss, table).numpy()).sum() > 0


def test_logits_are_float32_under_mixed_precision():
    head = MaskedLMHead(**KWARGS, dtype="mixed_bfloat16")
    logits = head(SEQUENCE_OUTPUT, POSITIONS, WORD_EMBEDDINGS)
    assert logits.dtype == tf.float32
    assert head.transform_dense.compute_dtype == "bfloat16"
    assert head.layer_norm.compute_dtype == "float32"
