"""Where each sequence of a pack starts and ends: offsets from the sequence index.

Letters: B batch, S sequence length, D max sequences per pack.

In a packed row ``input_mask`` is each token's sequence index, 1..D in order,
0 for the padding at the end. The sequence offsets say the same thing per
sequence, in the ``cu_seqlens`` form: ``offsets[b, 0] = 0`` and
``offsets[b, k]`` is where sequence k ends (exclusive), the number of tokens
with index 1..k. A pack with fewer than D sequences ends with sequences of
length 0 (the last offset repeats), so ``offsets[b, D]`` is the number of
real tokens and the row is padding from there to S (S = 8, D = 3)::

    input_ids    a1 a2 a3 a4 b1 b2 b3  0
    input_mask    1  1  1  1  2  2  2  0
    offsets       0  4  7  7

Sequence k holds tokens ``offsets[b, k - 1]`` to ``offsets[b, k] - 1``; its
length is ``offsets[b, k] - offsets[b, k - 1]``.

Attention kernels take one of three forms of the same information:

* the dense [B, S, S] mask (`packed_bert_tf.layers.block_diagonal_attention_mask`:
  `block_diagonal_attention_mask` of the index, `attention_mask_from_offsets`
  of the offsets): the package's
  `MultiHeadSelfAttention`, Keras' ``MultiHeadAttention`` (``attention_mask``
  [B, T, S]), ``keras.ops.dot_product_attention`` and
  ``jax.nn.dot_product_attention`` (``mask`` broadcast to [B, N, T, S]; its
  ``query_seq_lengths`` [B] describe one sequence per row, not a pack);
* per-token segment ids, which ``input_mask`` already is: TPU splash
  attention's ``SegmentIds(q, kv)`` (tokens attend where the ids are equal,
  so the padding, id 0, forms one more segment whose outputs are to be
  ignored);
* offsets: flash-attention's ``flash_attn_varlen_func`` takes ``cu_seqlens``
  [number of sequences + 1] int32 over the tokens of all rows laid end to
  end, padding removed (the lengths ``offsets[:, 1:] - offsets[:, :-1]``
  without the zeros, cumulated from 0); the cuDNN packed layout behind
  ``jax._src.cudnn.fused_attention_stablehlo.dot_product_attention`` takes
  ``q_offsets`` [B, D + 1], each row's sequence starts (``offsets[:, :-1]``)
  then -1, and ``q_seqlen`` [B, D], their lengths, with -1 in the slots of
  absent sequences.

The computations take the array namespace ``xp``: ``keras.ops`` by default
(any Keras backend, symbolic tensors too), ``tf.experimental.numpy`` inside
``tf.data`` graphs whatever the Keras backend
(`packed_bert_tf.data.inputs.pretraining_dataset.with_sequence_offsets`), or ``numpy``. They
use only names those three share, so every caller runs the same code.
`check_packed_batch` (numpy) checks a batch off the hot path.

No TensorFlow import here, and none of ``packed_bert_tf.layers``:
``packed_bert_tf.data`` imports this module, and ``packed_bert_tf.layers``
does.
"""

from __future__ import annotations

import numpy as np
from keras import ops


def sequence_offsets(sequence_index, max_sequences_per_pack: int, *, xp=ops):
    """Sequence offsets (``cu_seqlens`` per pack) of a packed batch.

    Args:
      sequence_index: [..., S] int, each token's sequence index 1..D, 0 for
        padding (``input_mask``); any leading axes ([B, S], one row [S],
        micro-batches [K, B, S]).
      max_sequences_per_pack: int, D. Indices above D are not counted.
      xp: the array namespace: ``keras.ops`` (default),
        ``tf.experimental.numpy`` or ``numpy``.

    Returns:
      [..., D + 1] int32: ``offsets[..., k]`` = the number of tokens with
      index 1..k: 0 first, then each sequence's end (exclusive); absent
      sequences repeat the last offset, which is the number of real tokens.

    Note:
      One comparison of every token with every k, then a sum over the tokens:
      O(B S D) time and O(B S D) booleans of memory, no loop (D is a few
      sequences for pre-training, up to 16 for classification).

    Example:
      >>> import numpy as np
      >>> sequence_offsets(np.array([[1, 1, 1, 1, 2, 2, 2, 0]]), 3, xp=np)
      array([[0, 4, 7, 7]], dtype=int32)
    """
    index = xp.expand_dims(sequence_index, -1)  # [..., S, 1]
    ends = xp.arange(max_sequences_per_pack + 1, dtype="int32")  # [D + 1]
    counted = xp.logical_and(xp.greater(index, 0),
                             xp.less_equal(index, ends))  # [..., S, D + 1]
    return xp.array(xp.sum(counted, axis=-2), dtype="int32")  # [..., D + 1]


def sequence_index_from_offsets(offsets, sequence_length: int, *, xp=ops):
    """The per-token sequence index (``input_mask``) of sequence offsets.

    The inverse of `sequence_offsets` on well-formed offsets: 0 first, not
    decreasing, the last at most S.

    Args:
      offsets: [..., D + 1] int, the sequence offsets (``cu_seqlens`` per
        pack, as `sequence_offsets` gives them).
      sequence_length: int, S.
      xp: the array namespace, as for `sequence_offsets`.

    Returns:
      [..., S] int32: token s gets 1 + the number of sequences ended at or
      before s when ``s < offsets[..., D]``, else 0 (padding).

    Note:
      O(B S D) time and memory, no loop.

    Example:
      >>> import numpy as np
      >>> sequence_index_from_offsets(np.array([[0, 4, 7, 7]]), 8, xp=np)
      array([[1, 1, 1, 1, 2, 2, 2, 0]], dtype=int32)
    """
    positions = xp.arange(sequence_length, dtype="int32")  # [S]
    ends = xp.expand_dims(offsets[..., 1:], -2)  # [..., 1, D]
    ended = xp.sum(xp.less_equal(ends, xp.expand_dims(positions, -1)),
                   axis=-1)  # [..., S]: sequences ended at or before each token
    real = xp.less(positions, offsets[..., -1:])  # [..., S]
    return xp.array(xp.where(real, ended + 1, 0), dtype="int32")  # [..., S]


# ------------------------------------------------------------------ checks
def check_packed_batch(sequence_index, offsets=None, attention_mask=None) -> None:
    """Refuses a packed batch whose sequence index, offsets or mask are malformed.

    A check for tests and data tools, in numpy, off the training path. The
    sequence index of each pack must be 1 at the first token, then go up by
    0 or 1 from token to token, then 0 to the end of the row (real tokens
    only before the padding; an all-padding row is allowed). The offsets, if
    given, must start at 0, not decrease, and equal `sequence_offsets` of
    the index; the mask, if given, must equal its block-diagonal mask.

    Args:
      sequence_index: [B, S] int (``input_mask``).
      offsets: [B, D + 1] int, optional.
      attention_mask: [B, S, S] bool, optional.

    Raises:
      ValueError: on the first fault (in the order above, then by pack and
        position), naming the pack (row) and the token position or offset.
    """
    index = np.asarray(sequence_index)
    if index.ndim != 2:
        raise ValueError(f"sequence_index has shape {index.shape}, expected [B, S]")
    _check_sequence_index(index)
    if offsets is not None:
        _check_offsets(index, np.asarray(offsets))
    if attention_mask is not None:
        _check_attention_mask(index, np.asarray(attention_mask))


def _first(faults: np.ndarray):
    """The first True of a [B, ...] array in row-major order, or None."""
    found = np.argwhere(faults)
    return None if found.size == 0 else tuple(int(value) for value in found[0])


def _check_sequence_index(index: np.ndarray) -> None:
    previous = np.concatenate([np.zeros_like(index[:, :1]), index[:, :-1]], axis=1)
    real = index > 0
    first_column = np.arange(index.shape[1])[None, :] == 0
    faults = [
        (index < 0, "sequence index {v} is negative"),
        (real & first_column & (index != 1),
         "sequence index {v} at the first token: a pack starts with sequence 1"),
        (real & ~first_column & (previous == 0),
         "sequence index {v} after padding (0): real tokens must come before the "
         "padding"),
        (real & (previous > 0) & (index < previous),
         "sequence index goes down from {p} to {v}"),
        (real & (previous > 0) & (index > previous + 1),
         "sequence index skips from {p} to {v}"),
    ]
    found = [(where, message) for where, message in
             ((_first(mask), message) for mask, message in faults) if where is not None]
    if found:
        (row, position), message = min(found)
        raise ValueError(f"pack {row}, token {position}: " + message.format(
            v=index[row, position], p=previous[row, position]))


def _check_offsets(index: np.ndarray, offsets: np.ndarray) -> None:
    batch, length = index.shape
    if offsets.ndim != 2 or offsets.shape[0] != batch or offsets.shape[1] < 2:
        raise ValueError(f"sequence offsets have shape {offsets.shape}, expected "
                         f"[{batch}, D + 1] for a sequence index of shape {index.shape}")
    rows = _first(offsets[:, :1] != 0)
    if rows is not None:
        row = rows[0]
        raise ValueError(f"pack {row}, offset 0: the offsets start at {offsets[row, 0]}, "
                         f"not 0")
    where = _first(np.diff(offsets, axis=1) < 0)
    if where is not None:
        row, k = where[0], where[1] + 1
        raise ValueError(f"pack {row}, offset {k}: {offsets[row, k]} is less than offset "
                         f"{k - 1} ({offsets[row, k - 1]}); offsets must not decrease")
    where = _first(offsets[:, -1:] > length)
    if where is not None:
        row = where[0]
        raise ValueError(f"pack {row}, offset {offsets.shape[1] - 1}: "
                         f"{offsets[row, -1]} is past the row's {length} tokens")
    max_sequences = offsets.shape[1] - 1
    where = _first(index > max_sequences)
    if where is not None:
        row, position = where
        raise ValueError(f"pack {row}, token {position}: sequence index "
                         f"{index[row, position]} has no slot in offsets of "
                         f"D = {max_sequences} sequences")
    # Each sequence's length counted, then cumulated: what the offsets must be.
    lengths = np.sum(index[:, :, None] == np.arange(1, max_sequences + 1), axis=1)
    expected = np.concatenate([np.zeros((batch, 1), lengths.dtype),
                               np.cumsum(lengths, axis=1)], axis=1)  # [B, D + 1]
    where = _first(offsets != expected)
    if where is not None:
        row, k = where
        raise ValueError(f"pack {row}, offset {k}: sequence {k} ends at token "
                         f"{offsets[row, k]} by the offsets but at token "
                         f"{expected[row, k]} by the sequence index")


def _check_attention_mask(index: np.ndarray, mask: np.ndarray) -> None:
    batch, length = index.shape
    if mask.shape != (batch, length, length):
        raise ValueError(f"the attention mask has shape {mask.shape}, expected "
                         f"{(batch, length, length)}")
    expected = (index[:, :, None] == index[:, None, :]) & (index[:, :, None] > 0)
    where = _first(mask.astype(bool) != expected)
    if where is not None:
        row, query, key = where
        raise ValueError(
            f"pack {row}, query token {query}, key token {key}: the attention mask "
            f"says {bool(mask[row, query, key])} but sequence indices "
            f"{index[row, query]} and {index[row, key]} give {bool(expected[row, query, key])}")
