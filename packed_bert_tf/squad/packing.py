"""SQuAD features packed into rows, and per-feature logits unpacked from them.

Letters: F features, P packs (rows), S sequence length, D max sequences per
pack, T tokens of all features together.

A pack of two features (S = 12, D = 2; a = feature 7, b = feature 3)::

    input_ids        a0 a1 a2 a3 a4 b0 b1 b2 b3  0  0  0
    segment_ids       0  0  1  1  1  0  0  1  1  0  0  0
    input_mask        1  1  1  1  1  2  2  2  2  0  0  0
    positions         0  1  2  3  4  0  1  2  3  0  0  0
    start_positions   3  7          (pack-relative: a's token 3, b's token 2)
    end_positions     4  7
    sequence_weights  1  1

    sequence_pack[7] = sequence_pack[3] = this pack
    sequence_slot[7] = 0, sequence_offset[7] = 0
    sequence_slot[3] = 1, sequence_offset[3] = 5

The layout is the project's one (`packed_bert_tf.data.packed.packed_rows`) under
`SQUAD_SPEC`. The unpacked layout is the same with D = 1, one feature per
row, in feature order. numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.data.packed.packed_rows import (
    PackedRows,
    PackSpec,
    RowShape,
    compact_padded,
    pack_rows,
    plan_rows,
    unpack_token_outputs,
)
from packed_bert_tf.packing import PackAssignment

#: What a SQuAD feature carries into a row.
SQUAD_SPEC = PackSpec.squad()


def pack_features(features, *, packed: bool = True, max_sequences_per_pack: int = 3,
                  algorithm: str = "optimal", seed: int = 0) -> PackedRows:
    """Packs features by length (`packed_bert_tf.packing`), or lays them out unpacked.

    Args:
      features: `packed_bert_tf.squad.features.SquadFeatures`.
      packed: False: one feature per row in feature order, D = 1 (the
        standard BERT batches).
      max_sequences_per_pack: D.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name.
      seed: which features of a length share a pack, and the packs' order.

    Returns:
      `packed_bert_tf.data.packed.packed_rows.PackedRows`, all arrays int32: the
      module docstring's features, ``sequence_weights`` (1 real, 0 empty).
    """
    return plan_rows(SQUAD_SPEC, _compact(features),
                     RowShape(features.max_seq_length, max_sequences_per_pack, packed),
                     algorithm=algorithm, seed=seed)


def layout_packs(features, assignment: PackAssignment, max_sequences_per_pack: int,
                 *, packed: bool = True) -> PackedRows:
    """Writes the features into the rows of an assignment
    (`packed_bert_tf.data.packed.packed_rows.pack_rows` under `SQUAD_SPEC`).

    Args:
      features: `packed_bert_tf.squad.features.SquadFeatures`.
      assignment: pack k holds the features ``assignment[k]``, in that order.
      max_sequences_per_pack: D, columns of the per-sequence arrays.
      packed: recorded in the result.

    Raises:
      ValueError: when a pack holds more than D features or more than S
        tokens, or the assignment does not hold every feature exactly once.
    """
    shape = RowShape(features.input_ids.shape[1], max_sequences_per_pack, packed)
    return pack_rows(SQUAD_SPEC, _compact(features), assignment, shape, dtypes={})


def _compact(features) -> dict:
    """The features as `SQUAD_SPEC`'s compact arrays."""
    return compact_padded(SQUAD_SPEC, {
        "input_ids": features.input_ids, "segment_ids": features.segment_ids,
        "start_positions": features.start_position,
        "end_positions": features.end_position}, features.length)


@dataclasses.dataclass(frozen=True, eq=False)
class FeatureLogits:
    """Start and end logits of every feature's own tokens, ragged.

    Feature f's logits are ``start_logits[row_splits[f]:row_splits[f + 1]]``
    (one per token of the feature, [CLS] first; ``len(FeatureLogits)`` = F).

    Attributes:
      start_logits, end_logits: [T] float32.
      row_splits: [F + 1] int64.
    """
    start_logits: np.ndarray
    end_logits: np.ndarray
    row_splits: np.ndarray

    def __len__(self) -> int:
        return self.row_splits.size - 1

    def __getitem__(self, feature: int) -> tuple[np.ndarray, np.ndarray]:
        span = slice(self.row_splits[feature], self.row_splits[feature + 1])
        return self.start_logits[span], self.end_logits[span]


def unpack_logits(packs: PackedRows, pack_index, start_logits, end_logits
                  ) -> FeatureLogits:
    """Per-feature logits from the model's outputs on the packed rows.

    Args:
      packs: the rows the outputs came from (`pack_features`).
      pack_index: [N] int, the row of each output (from the dataset's
        ``pack_index``; -1 for padding rows, ignored), in any order.
      start_logits: [N, S] the model's answer-start output.
      end_logits: [N, S] the model's answer-end output.

    Returns:
      `FeatureLogits`.

    Raises:
      ValueError: when a pack is missing from the outputs or appears twice.
    """
    row_splits, start, end = unpack_token_outputs(
        packs, pack_index, np.asarray(start_logits, np.float32),
        np.asarray(end_logits, np.float32))
    return FeatureLogits(start, end, row_splits)
