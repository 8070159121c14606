"""SQuAD's span head: start and end logits per token.

Letters: B batch, S sequence length, H hidden.

The loss, each sequence's softmax over its own tokens, is the model's
(`packed_bert_tf.models.bert_squad`).
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class SquadSpanHead(keras.layers.Layer):
    """``cls/squad``: one Dense to 2 logits per token, start and end.

    The projection runs in float32 whatever the policy (the n-best search
    ranks sums of logits, which half precision would tie). Packing needs
    nothing here: the logits are per token; the loss and the post-processing
    take each sequence's own tokens
    (`packed_bert_tf.models.bert_squad.per_sequence_logits`).

    Args:
      initializer_range: stddev of the truncated-normal kernel.

    Call arguments:
      sequence_output: [B, S, H] encoder output.

    Returns:
      (start_logits [B, S] float32, end_logits [B, S] float32).
    """

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range

    def build(self, sequence_output_shape):
        self.dense = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype="float32", name="output")
        self.dense.build(tuple(sequence_output_shape))
        self.built = True

    def call(self, sequence_output):
        logits = self.dense(ops.cast(sequence_output, "float32"))  # [B, S, 2]
        return logits[..., 0], logits[..., 1]  # [B, S] each

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range)
        return config
