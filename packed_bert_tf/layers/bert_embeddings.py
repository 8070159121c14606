"""BERT's embedding layer: word + position + token type, layer norm, dropout.

Letters: B batch, S sequence length, V vocab, P max positions, T token types,
H hidden.
"""

import keras
from keras import ops

from packed_bert_tf.layers.position_embedding import PositionEmbedding


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertEmbeddings(keras.layers.Layer):
    """Sum of word [V, H], position [P, H] and token-type [T, H] embeddings.

    The layer norm runs in float32 whatever the policy; the output is cast
    back to the compute dtype.

    Args:
      vocab_size: V.
      hidden_size: H.
      max_positions: P (``max_position_embeddings``).
      type_vocab_size: T.
      dropout_rate: dropout after the layer norm (``hidden_dropout_prob``).
      initializer_range: stddev of the truncated-normal initializers.
      layer_norm_epsilon: epsilon of the layer norm (BERT: 1e-12).

    Call arguments:
      input_ids: [B, S] int token ids.
      segment_ids: [B, S] int token types.
      positions: [B, S] int position ids restarting in every packed sequence,
        or None for the unpacked layout (0..S-1 in every row).

    Returns:
      [B, S, H] embeddings in the compute dtype.
    """

    def __init__(self, vocab_size: int, hidden_size: int, max_positions: int,
                 type_vocab_size: int = 2, dropout_rate: float = 0.0,
                 initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-12,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_positions = max_positions
        self.type_vocab_size = type_vocab_size
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, input_ids_shape):
        initializer = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        embeddings_shape = tuple(input_ids_shape) + (self.hidden_size,)
        self.word_embeddings = keras.layers.Embedding(
            self.vocab_size, self.hidden_size, embeddings_initializer=initializer,
            dtype=self.dtype_policy, name="word_embeddings")
        self.word_embeddings.build(input_ids_shape)
        self.position_embedding = PositionEmbedding(
            self.max_positions, self.initializer_range, dtype=self.dtype_policy,
            name="position_embeddings")
        self.position_embedding.build(embeddings_shape)
        self.token_type_embeddings = keras.layers.Embedding(
            self.type_vocab_size, self.hidden_size, embeddings_initializer=initializer,
            dtype=self.dtype_policy, name="token_type_embeddings")
        self.token_type_embeddings.build(input_ids_shape)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype="float32", name="layer_norm")
        self.layer_norm.build(embeddings_shape)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.built = True

    def call(self, input_ids, segment_ids, positions=None, training=None):
        word = self.word_embeddings(input_ids)  # [B, S, H]
        position = self.position_embedding(word, positions=positions)  # [B, S, H]
        token_type = self.token_type_embeddings(segment_ids)  # [B, S, H]
        summed = (ops.cast(word, "float32") + ops.cast(position, "float32")
                  + ops.cast(token_type, "float32"))  # [B, S, H] float32
        normalized = ops.cast(self.layer_norm(summed), self.compute_dtype)
        return self.dropout(normalized, training=training)  # [B, S, H]

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            max_positions=self.max_positions, type_vocab_size=self.type_vocab_size,
            dropout_rate=self.dropout_rate, initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon)
        return config
