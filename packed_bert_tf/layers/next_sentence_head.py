"""BERT's next-sentence classifier, once per packed sequence.

Letters: B batch, D max sequences per pack, H hidden.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class NextSentenceHead(keras.layers.Layer):
    """``cls/seq_relationship`` (2-way) on each packed sequence's pooled [CLS].

    Every sequence of a pack has its own [CLS] token, pooled by the backbone
    (`packed_bert_tf.models.BertBackbone` at ``next_sentence_positions``), so
    a pack of D sequences gets D predictions (S = 6, D = 2)::

        input_ids   a1 a2 a3 b1 b2 0
        input_mask   1  1  1  2  2 0
        next_sentence_positions 0 3

    Args:
      initializer_range: stddev of the truncated-normal kernel.

    Call arguments:
      pooled_output: [B, D, H] the pooler's output at each sequence's [CLS]
        (empty slots hold anything; their weight is 0).

    Returns:
      logits [B, D, 2] float32.
    """

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range

    def build(self, pooled_output_shape):
        self.classifier = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype=self.dtype_policy, name="seq_relationship")
        self.classifier.build(pooled_output_shape)
        self.built = True

    def call(self, pooled_output):
        return ops.cast(self.classifier(pooled_output), "float32")  # [B, D, 2]

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range)
        return config
