"""Attention masks from the per-token sequence index (``input_mask``).

Letters: B batch, S sequence length, D max sequences per pack.

In a packed row ``input_mask`` holds each token's sequence index 1..D and 0
for padding. A token may attend to a key only when both carry the same
non-zero index, which makes the mask block-diagonal (S = 6, D = 2)::

    input_ids   a1 a2 a3 b1 b2 0
    input_mask   1  1  1  2  2 0

    mask         a1 a2 a3 b1 b2 0
      a1          1  1  1  0  0 0
      a2          1  1  1  0  0 0
      a3          1  1  1  0  0 0
      b1          0  0  0  1  1 0
      b2          0  0  0  1  1 0
      0           0  0  0  0  0 0

Padding attends to nothing and nothing attends to padding. An unpacked row
(D = 1, ``input_mask`` 0/1) gives the usual padding mask on its real rows.

This dense mask is the form the package's `MultiHeadSelfAttention`, Keras'
``MultiHeadAttention`` and ``dot_product_attention`` (Keras', JAX's) take.
Fused kernels that skip the work between sequences take the other two forms:
per-token segment ids, which ``input_mask`` is (TPU splash attention's
``SegmentIds``), or per-sequence offsets [B, D + 1] (flash-attention's
varlen ``cu_seqlens``, cuDNN's packed layout), from
`packed_bert_tf.sequence_offsets.sequence_offsets`; see that module.
"""

import keras
from keras import ops

from packed_bert_tf.sequence_offsets import sequence_index_from_offsets


def block_diagonal_attention_mask(sequence_index):
    """Block-diagonal attention mask of a packed batch.

    Args:
      sequence_index: [B, S] int, the sequence index of each token (1..D),
        0 for padding (the ``input_mask`` feature).

    Returns:
      [B, S, S] bool: ``mask[b, i, j]`` is True when query ``i`` may attend to
      key ``j``, that is ``sequence_index[b, i] == sequence_index[b, j] > 0``.
    """
    sequence_index = ops.convert_to_tensor(sequence_index)
    same_sequence = ops.equal(ops.expand_dims(sequence_index, 2),
                              ops.expand_dims(sequence_index, 1))  # [B, S, S]
    is_real = ops.greater(sequence_index, 0)  # [B, S]
    return ops.logical_and(same_sequence, ops.expand_dims(is_real, 2))  # [B, S, S]


def attention_mask_from_offsets(offsets, sequence_length: int):
    """The block-diagonal attention mask of sequence offsets (``cu_seqlens``
    per pack, `packed_bert_tf.sequence_offsets`).

    Args:
      offsets: [B, D + 1] int.
      sequence_length: S.

    Returns:
      [B, S, S] bool, equal to `block_diagonal_attention_mask` of the
      ``input_mask`` the offsets came from. O(B S (S + D)) time and memory.
    """
    return block_diagonal_attention_mask(
        sequence_index_from_offsets(offsets, sequence_length))  # [B, S, S]


def padding_attention_mask(input_mask):
    """Standard (unpacked) BERT attention mask: every query sees all real keys.

    Args:
      input_mask: [B, S] int, non-zero for real tokens, 0 for padding.

    Returns:
      [B, 1, S] bool, broadcast over the queries.
    """
    return ops.expand_dims(ops.greater(input_mask, 0), 1)  # [B, 1, S]


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BlockDiagonalAttentionMask(keras.layers.Layer):
    """Layer around `block_diagonal_attention_mask`: [B, S] int -> [B, S, S] bool."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def call(self, input_mask):
        return block_diagonal_attention_mask(input_mask)
