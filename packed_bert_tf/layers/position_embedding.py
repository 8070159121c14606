"""Learned position embeddings looked up by explicit position ids.

Letters: B batch, S sequence length, P max positions, H hidden.

The paper's first change to BERT: positions restart at 0 in every sequence
of a pack, so the embedding is a gather by the ``positions`` feature rather
than a slice of the table (S = 6, D = 2)::

    input_ids   a1 a2 a3 b1 b2 0
    input_mask   1  1  1  2  2 0
    positions    0  1  2  0  1 0
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class PositionEmbedding(keras.layers.Layer):
    """Position embedding table [P, H], gathered by position ids.

    Args:
      max_positions: P, rows of the table (``max_position_embeddings``).
      initializer_range: stddev of the truncated-normal initializer.

    Call arguments:
      inputs: [B, S, H] token embeddings; only their shape is used.
      positions: [B, S] int position ids, or None for the unpacked layout
        (row s gets position s, a slice of the table, no gather).

    Returns:
      [B, S, H] position embeddings in the compute dtype.
    """

    def __init__(self, max_positions: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.max_positions = max_positions
        self.initializer_range = initializer_range

    def build(self, inputs_shape):
        hidden_size = inputs_shape[-1]
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_positions, hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
        )
        self.built = True

    def call(self, inputs, positions=None):
        table = ops.cast(self.embeddings, self.compute_dtype)  # [P, H]
        if positions is None:
            shape = ops.shape(inputs)
            return ops.broadcast_to(table[None, :shape[1]], shape)  # [B, S, H]
        return ops.take(table, positions, axis=0)  # [B, S, H]

    def get_config(self):
        config = super().get_config()
        config.update(max_positions=self.max_positions,
                      initializer_range=self.initializer_range)
        return config
