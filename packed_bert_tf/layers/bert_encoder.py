"""The BERT encoder: a stack of `BertTransformerBlock`.

Letters: B batch, S sequence length, H hidden.
"""

import keras

from packed_bert_tf.layers.ops import get_activation
from packed_bert_tf.layers.transformer_block import BertTransformerBlock


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertEncoder(keras.layers.Layer):
    """``num_layers`` BERT transformer blocks sharing one attention mask.

    Args:
      num_layers: number of blocks (``num_hidden_layers``).
      num_heads: N.
      intermediate_size: I.
      activation: ``hidden_act`` name (see `BertTransformerBlock`).
      hidden_dropout_rate, attention_dropout_rate, initializer_range,
      layer_norm_epsilon: as `BertTransformerBlock`.

    Call arguments:
      hidden_states: [B, S, H] embeddings.
      attention_mask: bool [B, S, S] (packed, block-diagonal) or [B, 1, S].

    Returns:
      [B, S, H], the sequence output of the last block.
    """

    def __init__(self, num_layers: int, num_heads: int, intermediate_size: int,
                 activation: str = "gelu", hidden_dropout_rate: float = 0.0,
                 attention_dropout_rate: float = 0.0, initializer_range: float = 0.02,
                 layer_norm_epsilon: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        get_activation(activation)  # an unknown name raises here, not in build
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.activation = activation
        self.hidden_dropout_rate = hidden_dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, hidden_states_shape):
        self.blocks = []
        for index in range(self.num_layers):
            block = BertTransformerBlock(
                self.num_heads, self.intermediate_size, self.activation,
                self.hidden_dropout_rate, self.attention_dropout_rate,
                self.initializer_range, self.layer_norm_epsilon,
                dtype=self.dtype_policy, name=f"layer_{index}")
            block.build(hidden_states_shape)
            self.blocks.append(block)
        self.built = True

    def call(self, hidden_states, attention_mask, training=None):
        for block in self.blocks:
            hidden_states = block(hidden_states, attention_mask,
                                  training=training)  # [B, S, H]
        return hidden_states

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers, num_heads=self.num_heads,
            intermediate_size=self.intermediate_size, activation=self.activation,
            hidden_dropout_rate=self.hidden_dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon)
        return config
