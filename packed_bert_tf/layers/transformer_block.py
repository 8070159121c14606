"""The BERT transformer block: post-layer-norm, GELU feed-forward.

Letters: B batch, S sequence length, H hidden, I intermediate size.
"""

import keras
from keras import ops

from packed_bert_tf.layers.multi_head_self_attention import MultiHeadSelfAttention
from packed_bert_tf.layers.ops import get_activation


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertTransformerBlock(keras.layers.Layer):
    """One BERT encoder layer, as in google-research/bert ``transformer_model``::

        x = LayerNorm(x + Dropout(SelfAttention(x, mask)))
        x = LayerNorm(x + Dropout(Dense_H(act(Dense_I(x)))))

    Residual sums and layer norms run in float32; the output is cast back to
    the compute dtype.

    Args:
      num_heads: N.
      intermediate_size: I.
      activation: ``hidden_act`` name, one of "gelu" (tanh approximation, as
        original BERT), "relu", "tanh", "linear".
      hidden_dropout_rate: dropout on both residual branches.
      attention_dropout_rate: dropout on the attention probabilities.
      initializer_range: stddev of the truncated-normal kernel initializers.
      layer_norm_epsilon: epsilon of both layer norms (BERT: 1e-12).

    Call arguments:
      hidden_states: [B, S, H].
      attention_mask: bool [B, S, S] (packed, block-diagonal) or [B, 1, S].

    Returns:
      [B, S, H] in the compute dtype.
    """

    def __init__(self, num_heads: int, intermediate_size: int, activation: str = "gelu",
                 hidden_dropout_rate: float = 0.0, attention_dropout_rate: float = 0.0,
                 initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-12,
                 **kwargs):
        super().__init__(**kwargs)
        get_activation(activation)  # an unknown name raises here, not in build
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.hidden_dropout_rate = hidden_dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, hidden_states_shape):
        hidden_size = hidden_states_shape[-1]
        intermediate_shape = tuple(hidden_states_shape[:-1]) + (self.intermediate_size,)
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)

        self.attention = MultiHeadSelfAttention(
            self.num_heads, self.attention_dropout_rate, self.initializer_range,
            dtype=self.dtype_policy, name="attention")
        self.attention.build(hidden_states_shape)
        self.attention_dropout = keras.layers.Dropout(self.hidden_dropout_rate,
                                                      dtype=self.dtype_policy)
        self.attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype="float32",
            name="attention_layer_norm")
        self.attention_layer_norm.build(hidden_states_shape)
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_size, activation=get_activation(self.activation),
            kernel_initializer=initializer, dtype=self.dtype_policy,
            name="intermediate")
        self.intermediate_dense.build(hidden_states_shape)
        self.output_dense = keras.layers.Dense(
            hidden_size, kernel_initializer=initializer, dtype=self.dtype_policy,
            name="output")
        self.output_dense.build(intermediate_shape)
        self.output_dropout = keras.layers.Dropout(self.hidden_dropout_rate,
                                                   dtype=self.dtype_policy)
        self.output_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype="float32", name="output_layer_norm")
        self.output_layer_norm.build(hidden_states_shape)
        self.built = True

    def call(self, hidden_states, attention_mask, training=None):
        attention_output = self.attention(hidden_states, attention_mask,
                                          training=training)  # [B, S, H]
        attention_output = self.attention_dropout(attention_output, training=training)
        hidden_states = self.attention_layer_norm(
            ops.cast(hidden_states, "float32")
            + ops.cast(attention_output, "float32"))  # [B, S, H] float32
        hidden_states = ops.cast(hidden_states, self.compute_dtype)

        intermediate = self.intermediate_dense(hidden_states)  # [B, S, I]
        feed_forward = self.output_dropout(self.output_dense(intermediate),
                                           training=training)  # [B, S, H]
        hidden_states = self.output_layer_norm(
            ops.cast(hidden_states, "float32")
            + ops.cast(feed_forward, "float32"))  # [B, S, H] float32
        return ops.cast(hidden_states, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads, intermediate_size=self.intermediate_size,
            activation=self.activation, hidden_dropout_rate=self.hidden_dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon)
        return config
