"""BERT's pooler (``bert/pooler/dense``), at each packed sequence's [CLS].

Letters: B batch, S sequence length, D max sequences per pack, H hidden.

Functions, not a layer: `packed_bert_tf.models.BertBackbone` owns the
pooler Dense, named ``pooler``, and pools at the [CLS] offsets its caller
gives (each task names them its own way).
"""

import keras

from packed_bert_tf.layers.ops import gather_positions


def make_pooler_dense(hidden_size: int, kernel_initializer, dtype_policy
                      ) -> keras.layers.Dense:
    """``bert/pooler/dense``: Dense(H, tanh) named ``pooler`` (unbuilt).

    ``kernel_initializer``: a truncated normal of the config's
    ``initializer_range``.
    """
    return keras.layers.Dense(hidden_size, activation="tanh",
                              kernel_initializer=kernel_initializer, dtype=dtype_policy,
                              name="pooler")


def pool(pooler_dense, sequence_output, cls_positions):
    """The pooled output of every sequence of a pack.

    Args:
      pooler_dense: from `make_pooler_dense`.
      sequence_output: [B, S, H] encoder output.
      cls_positions: [B, D] int offset of each sequence's [CLS] in its row.

    Returns:
      [B, D, H] ``tanh(W h_cls + b)`` in the compute dtype.
    """
    first_tokens = gather_positions(sequence_output, cls_positions)  # [B, D, H]
    return pooler_dense(first_tokens)  # [B, D, H]
