import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import NextSentenceHead, SequenceClassificationHead
from tests.layers import numpy_reference
from tests.layers.layer_checks import run_layer_checks

# The pooled [CLS] of each sequence: row 0 packs three sequences, row 1 one.
POOLED_OUTPUT = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)


def test_layer_checks():
    run_layer_checks(SequenceClassificationHead,
                     dict(num_labels=3, initializer_range=0.3, dropout_rate=0.2),
                     dict(pooled_output=POOLED_OUTPUT), (2, 3, 3),
                     expected_num_trainable_weights=2)


def test_classifier_at_every_cls():
    head = SequenceClassificationHead(3, initializer_range=0.3)
    logits = head(POOLED_OUTPUT)
    np.testing.assert_allclose(logits, numpy_reference.dense(POOLED_OUTPUT, head.classifier),
                               atol=1e-5)
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert logits.dtype == tf.float32
    # Dropout acts on the pooled output in training only.
    trained = head(POOLED_OUTPUT, training=True)
    assert not np.allclose(trained, logits)


def test_a_two_label_head_is_the_next_sentence_heads_classifier():
    classifier = SequenceClassificationHead(2, initializer_range=0.3)
    next_sentence = NextSentenceHead(initializer_range=0.3)
    classifier(POOLED_OUTPUT)
    next_sentence(POOLED_OUTPUT)
    classifier.classifier.set_weights(next_sentence.classifier.get_weights())
    np.testing.assert_allclose(classifier(POOLED_OUTPUT), next_sentence(POOLED_OUTPUT),
                               atol=1e-6)


def test_keras_file_round_trip(tmp_path):
    pooled_output = keras.Input((3, 8), name="pooled_output")
    logits = SequenceClassificationHead(3, initializer_range=0.3, name="head")(
        pooled_output)
    model = keras.Model(pooled_output, logits)
    path = str(tmp_path / "head.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored.get_layer("head"), SequenceClassificationHead)
    np.testing.assert_array_equal(restored(POOLED_OUTPUT), model(POOLED_OUTPUT))


def test_logits_float32_under_mixed_precision():
    logits = SequenceClassificationHead(2, dtype="mixed_bfloat16")(POOLED_OUTPUT)
    assert logits.dtype == tf.float32


def test_num_labels_must_be_positive():
    with pytest.raises(ValueError, match="num_labels must be >= 1, got 0"):
        SequenceClassificationHead(0)
