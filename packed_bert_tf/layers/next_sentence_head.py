"""BERT's pooler and next-sentence classifier, once per packed sequence.

Letters: B batch, S sequence length, D max sequences per pack, H hidden.
"""

import keras
import tensorflow as tf

from packed_bert_tf.layers.pooler import make_pooler_dense, pool


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class NextSentenceHead(keras.layers.Layer):
    """``bert/pooler`` (Dense + tanh) and ``cls/seq_relationship`` (2-way).

    Every sequence of a pack has its own [CLS] token; the pooler runs at each
    of them (``next_sentence_positions``), so a pack of D sequences gets D
    predictions (S = 6, D = 2)::

        input_ids   a1 a2 a3 b1 b2 0
        input_mask   1  1  1  2  2 0
        next_sentence_positions 0 3

    Args:
      initializer_range: stddev of the truncated-normal kernels.

    Call arguments:
      sequence_output: [B, S, H] encoder output.
      next_sentence_positions: [B, D] int offset of each sequence's [CLS]
        (unused slots may point anywhere valid; their weight is 0).

    Returns:
      (logits [B, D, 2] float32, pooled_output [B, D, H] compute dtype).
    """

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range

    def build(self, sequence_output_shape):
        hidden_size = sequence_output_shape[-1]
        gathered_shape = (sequence_output_shape[0], None, hidden_size)
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        self.pooler_dense = make_pooler_dense(hidden_size, initializer, self.dtype_policy)
        self.pooler_dense.build(gathered_shape)
        self.classifier = keras.layers.Dense(
            2, kernel_initializer=initializer, dtype=self.dtype_policy,
            name="seq_relationship")
        self.classifier.build(gathered_shape)
        self.built = True

    def call(self, sequence_output, next_sentence_positions):
        pooled_output = pool(self.pooler_dense, sequence_output,
                             next_sentence_positions)  # [B, D, H]
        logits = tf.cast(self.classifier(pooled_output), tf.float32)  # [B, D, 2]
        return logits, pooled_output

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range)
        return config
