"""BERT's masked-LM head, gathered at the masked positions.

Letters: B batch, S sequence length, M masked-LM slots, H hidden, V vocab.
"""

import keras
from keras import ops

from packed_bert_tf.layers.ops import gather_positions, get_activation


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class MaskedLMHead(keras.layers.Layer):
    """``cls/predictions``: gather, Dense + act, layer norm, tied projection, bias.

    The output projection is the word-embedding table [V, H] passed at call
    time (weights tied to the embeddings), plus this layer's own bias [V].
    Packing needs nothing special here: ``masked_lm_positions`` are offsets
    in the packed row, wherever the sequence sits.

    Args:
      vocab_size: V, the size of the output bias.
      activation: ``hidden_act`` name of the transform (BERT: "gelu").
      initializer_range: stddev of the transform's truncated-normal kernel.
      layer_norm_epsilon: epsilon of the layer norm (BERT: 1e-12).

    Call arguments:
      sequence_output: [B, S, H] encoder output.
      masked_lm_positions: [B, M] int token offsets of the masked tokens.
      word_embeddings: [V, H] the word-embedding table.

    Returns:
      [B, M, V] float32 logits.
    """

    def __init__(self, vocab_size: int, activation: str = "gelu",
                 initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-12,
                 **kwargs):
        super().__init__(**kwargs)
        get_activation(activation)  # an unknown name raises here, not in build
        self.vocab_size = vocab_size
        self.activation = activation
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, sequence_output_shape):
        hidden_size = sequence_output_shape[-1]
        gathered_shape = (sequence_output_shape[0], None, hidden_size)
        self.transform_dense = keras.layers.Dense(
            hidden_size, activation=get_activation(self.activation),
            kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype=self.dtype_policy, name="transform")
        self.transform_dense.build(gathered_shape)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype="float32", name="layer_norm")
        self.layer_norm.build(gathered_shape)
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, sequence_output, masked_lm_positions, word_embeddings):
        masked = gather_positions(sequence_output, masked_lm_positions)  # [B, M, H]
        transformed = self.transform_dense(masked)  # [B, M, H]
        transformed = ops.cast(self.layer_norm(transformed), self.compute_dtype)
        batch_size, slots, hidden_size = ops.shape(transformed)
        # One [B * M, H] x [H, V] product: a batched one would compute the
        # table's gradient once per row, [B, V, H], before summing.
        logits = ops.einsum("nh,vh->nv", ops.reshape(transformed, (-1, hidden_size)),
                            ops.cast(word_embeddings, self.compute_dtype))  # [B * M, V]
        logits = ops.reshape(logits, (batch_size, slots, -1))  # [B, M, V]
        logits = ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")
        return logits  # [B, M, V] float32

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, activation=self.activation,
                      initializer_range=self.initializer_range,
                      layer_norm_epsilon=self.layer_norm_epsilon)
        return config
