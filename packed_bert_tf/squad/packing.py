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

    feature_pack[7] = feature_pack[3] = this pack
    feature_slot[7] = 0, feature_offset[7] = 0
    feature_slot[3] = 1, feature_offset[3] = 5

The unpacked layout is the same with D = 1, one feature per row, in
feature order. numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing import PackAssignment, pack_assignment, ragged, rows_of_packs

#: Per-token arrays of a pack ([P, S]) and per-sequence arrays ([P, D]).
TOKEN_ARRAYS = ("input_ids", "segment_ids", "input_mask", "positions")
SEQUENCE_ARRAYS = ("start_positions", "end_positions", "sequence_weights")


@dataclasses.dataclass(frozen=True, eq=False)
class SquadPacks:
    """Features laid out in rows of S tokens holding up to D features each.

    Attributes:
      arrays: int32 arrays, the model's inputs and the loss's labels:
        ``input_ids``, ``segment_ids``, ``input_mask`` (sequence index 1..D,
        0 = padding), ``positions`` (restarting at 0 in every feature) [P, S];
        ``start_positions``, ``end_positions`` (offsets in the row; 0 in an
        empty slot), ``sequence_weights`` (1 real, 0 empty) [P, D].
      feature_pack, feature_slot, feature_offset, feature_length: [F] int64,
        where each feature sits: row, slot d (0-based; its tokens carry
        ``input_mask`` d + 1), first token's offset, number of tokens.
      packed: False for the unpacked layout (D = 1, row = feature).
    """
    arrays: dict
    feature_pack: np.ndarray
    feature_slot: np.ndarray
    feature_offset: np.ndarray
    feature_length: np.ndarray
    packed: bool

    @property
    def num_packs(self) -> int:
        return int(self.arrays["input_ids"].shape[0])

    @property
    def num_features(self) -> int:
        return int(self.feature_pack.size)

    @property
    def max_sequence_length(self) -> int:
        return int(self.arrays["input_ids"].shape[1])

    @property
    def max_sequences_per_pack(self) -> int:
        return int(self.arrays["start_positions"].shape[1])

    @property
    def packing_factor(self) -> float:
        """Features per row (1.0 unpacked)."""
        return self.num_features / self.num_packs if self.num_packs else 1.0

    @property
    def padding_fraction(self) -> float:
        """Share of the rows' tokens that are padding."""
        total = self.num_packs * self.max_sequence_length
        return 1.0 - float(self.feature_length.sum()) / total if total else 0.0


def layout_packs(features, assignment: PackAssignment, max_sequences_per_pack: int,
                 *, packed: bool = True) -> SquadPacks:
    """Writes the features into the rows of an assignment (vectorised).

    Args:
      features: `packed_bert_tf.squad.features.SquadFeatures`.
      assignment: pack k holds the features ``assignment[k]``, in that order.
      max_sequences_per_pack: D, columns of the per-sequence arrays.
      packed: recorded in the result.

    Raises:
      ValueError: when a pack holds more than D features or more than S
        tokens, or the assignment does not hold every feature exactly once.
    """
    num_features, sequence_length = features.input_ids.shape
    lengths = np.asarray(features.length, np.int64)
    order = np.asarray(assignment.sequence_indices, np.int64)
    if order.size != num_features or not np.array_equal(np.sort(order),
                                                        np.arange(num_features)):
        raise ValueError(f"the assignment holds {order.size} feature indices, not each "
                         f"of the {num_features} features exactly once")
    depth = assignment.sequences_per_pack
    if depth.size and depth.max() > max_sequences_per_pack:
        raise ValueError(f"a pack holds {depth.max()} features, more than "
                         f"max_sequences_per_pack={max_sequences_per_pack}")
    num_packs = len(assignment)
    # [F] in assignment order.
    slot, pack = assignment.slot_of_entries, assignment.pack_of_entries
    ordered_lengths = lengths[order]
    offset = assignment.offset_in_pack(ordered_lengths)
    if order.size and (offset + ordered_lengths).max() > sequence_length:
        raise ValueError(f"a pack holds more than max_sequence_length={sequence_length} "
                         f"tokens")

    feature_pack = np.empty(num_features, np.int64)
    feature_slot = np.empty(num_features, np.int64)
    feature_offset = np.empty(num_features, np.int64)
    feature_pack[order], feature_slot[order], feature_offset[order] = pack, slot, offset

    # Every token: its feature, its place in the feature, its place in the rows.
    token_feature = ragged.row_of_elements(lengths)  # [T]
    token_position = ragged.position_in_row(lengths)
    token_row = feature_pack[token_feature]
    token_column = feature_offset[token_feature] + token_position
    arrays = {name: np.zeros((num_packs, sequence_length), np.int32)
              for name in TOKEN_ARRAYS}
    arrays["input_ids"][token_row, token_column] = features.input_ids[token_feature,
                                                                      token_position]
    arrays["segment_ids"][token_row, token_column] = features.segment_ids[token_feature,
                                                                          token_position]
    arrays["input_mask"][token_row, token_column] = feature_slot[token_feature] + 1
    arrays["positions"][token_row, token_column] = token_position
    for name in SEQUENCE_ARRAYS:
        arrays[name] = np.zeros((num_packs, max_sequences_per_pack), np.int32)
    arrays["start_positions"][feature_pack, feature_slot] = \
        feature_offset + features.start_position
    arrays["end_positions"][feature_pack, feature_slot] = \
        feature_offset + features.end_position
    arrays["sequence_weights"][feature_pack, feature_slot] = 1
    return SquadPacks(arrays, feature_pack, feature_slot, feature_offset, lengths, packed)


def pack_features(features, *, packed: bool = True, max_sequences_per_pack: int = 3,
                  algorithm: str = "optimal", seed: int = 0) -> SquadPacks:
    """Packs features by length (`packed_bert_tf.packing`), or lays them out unpacked.

    Args:
      features: `packed_bert_tf.squad.features.SquadFeatures`.
      packed: False: one feature per row in feature order, D = 1 (the
        standard BERT batches).
      max_sequences_per_pack: D.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name.
      seed: which features of a length share a pack, and the packs' order.

    Returns:
      `SquadPacks`.
    """
    assignment = pack_assignment(features.length, features.max_seq_length,
                                 max_sequences_per_pack, packed=packed,
                                 algorithm=algorithm, seed=seed)
    return layout_packs(features, assignment, max_sequences_per_pack if packed else 1,
                        packed=packed)


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


def unpack_logits(packs: SquadPacks, pack_index, start_logits, end_logits
                  ) -> FeatureLogits:
    """Per-feature logits from the model's outputs on the packed rows.

    Args:
      packs: the `SquadPacks` the rows came from.
      pack_index: [N] int, the row of each output (from the dataset's
        ``pack_index``; -1 for padding rows, ignored), in any order.
      start_logits, end_logits: [N, S] the model's outputs.

    Returns:
      `FeatureLogits`.

    Raises:
      ValueError: when a pack is missing from the outputs or appears twice.
    """
    start_logits = np.asarray(start_logits, np.float32)
    end_logits = np.asarray(end_logits, np.float32)
    row_of_pack = rows_of_packs(pack_index, packs.num_packs)
    lengths = packs.feature_length
    row_splits = ragged.row_splits_from_lengths(lengths)
    token_feature = ragged.row_of_elements(lengths)
    token_position = ragged.position_in_row(lengths)
    rows = row_of_pack[packs.feature_pack[token_feature]]
    columns = packs.feature_offset[token_feature] + token_position
    return FeatureLogits(start_logits[rows, columns], end_logits[rows, columns],
                         row_splits)
