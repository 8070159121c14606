"""Multi-head self-attention with an explicit boolean attention mask.

Letters: B batch, S sequence length, N heads, E head size (H / N), H hidden.

The query, key, value and output projections are plain [H, H] Dense kernels,
so the original BERT checkpoint variables map onto them by a copy.
"""

import math

import keras
from keras import ops

# Added to the scores of masked keys (in float32): exp() of it underflows to
# exactly 0, so masked keys contribute nothing, bit for bit.
MASKED_SCORE = -1e9


def masked_softmax(scores, attention_mask):
    """Softmax over keys in float32, with masked keys removed.

    A query row with no allowed key (padding in a packed batch) would softmax
    over nothing; its probabilities are set to 0 so its output is finite and
    depends on no real token.

    Args:
      scores: [B, N, S, S] attention scores, any float dtype.
      attention_mask: bool, [B, S, S] (block-diagonal) or [B, 1, S]
        (unpacked padding mask, broadcast over the queries); True = may attend.

    Returns:
      [B, N, S, S] float32 probabilities.
    """
    mask = ops.expand_dims(attention_mask, 1)  # [B, 1, S|1, S]
    scores = ops.where(mask, ops.cast(scores, "float32"), MASKED_SCORE)  # [B, N, S, S]
    probabilities = ops.softmax(scores, axis=-1)  # [B, N, S, S]
    query_sees_a_key = ops.any(mask, axis=-1, keepdims=True)  # [B, 1, S|1, 1]
    return ops.where(query_sees_a_key, probabilities, 0.0)  # [B, N, S, S]


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class MultiHeadSelfAttention(keras.layers.Layer):
    """BERT self-attention: Q/K/V projections, masked softmax, output projection.

    Args:
      num_heads: N; the hidden size (from the input) must be divisible by it.
      attention_dropout_rate: dropout on the attention probabilities
        (``attention_probs_dropout_prob``).
      initializer_range: stddev of the truncated-normal kernel initializers.

    Call arguments:
      hidden_states: [B, S, H].
      attention_mask: bool [B, S, S] or [B, 1, S], see `masked_softmax`.

    Returns:
      [B, S, H], the output projection of the attended values (before
      BERT's residual dropout and layer norm).
    """

    def __init__(self, num_heads: int, attention_dropout_rate: float = 0.0,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.attention_dropout_rate = attention_dropout_rate
        self.initializer_range = initializer_range

    def build(self, hidden_states_shape):
        hidden_size = hidden_states_shape[-1]
        if hidden_size % self.num_heads:
            raise ValueError(f"hidden size {hidden_size} is not divisible by "
                             f"num_heads {self.num_heads}")

        def dense(name):
            layer = keras.layers.Dense(
                hidden_size, name=name, dtype=self.dtype_policy,
                kernel_initializer=keras.initializers.TruncatedNormal(
                    stddev=self.initializer_range))
            layer.build(hidden_states_shape)
            return layer

        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output")
        self.dropout = keras.layers.Dropout(self.attention_dropout_rate,
                                            dtype=self.dtype_policy)
        self.built = True

    def call(self, hidden_states, attention_mask, training=None):
        shape = ops.shape(hidden_states)  # (B, S, H)
        head_size = shape[2] // self.num_heads
        split_heads = (shape[0], shape[1], self.num_heads, head_size)

        # Scaling the queries is cheaper than scaling [B, N, S, S] scores.
        query = self.query(hidden_states) * ops.cast(1.0 / math.sqrt(head_size),
                                                     self.compute_dtype)
        query = ops.reshape(query, split_heads)  # [B, S, N, E]
        key = ops.reshape(self.key(hidden_states), split_heads)  # [B, S, N, E]
        value = ops.reshape(self.value(hidden_states), split_heads)  # [B, S, N, E]

        scores = ops.einsum("bqne,bkne->bnqk", query, key)  # [B, N, S, S]
        probabilities = masked_softmax(scores, attention_mask)  # [B, N, S, S] f32
        probabilities = self.dropout(ops.cast(probabilities, self.compute_dtype),
                                     training=training)
        # The values first: Keras on TensorFlow runs this order as one einsum;
        # the other becomes transposes around a batched matmul, whose XLA
        # gradient is slower on CPUs.
        context = ops.einsum("bkne,bnqk->bqne", value, probabilities)  # [B, S, N, E]
        context = ops.reshape(context, shape)  # [B, S, H]
        return self.output_dense(context)  # [B, S, H]

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads,
                      attention_dropout_rate=self.attention_dropout_rate,
                      initializer_range=self.initializer_range)
        return config
