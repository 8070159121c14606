"""From a plan to concrete packs: which example goes into which pack."""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing import ragged
from packed_bert_tf.packing.api import histogram_from_lengths, pack_lengths
from packed_bert_tf.packing.plan import PackingPlan


@dataclasses.dataclass(frozen=True, eq=False)
class PackAssignment:
    """Packs of a concrete dataset as ragged rows of example indices.

    Pack ``k`` holds the examples
    ``sequence_indices[row_splits[k]:row_splits[k + 1]]`` (the layout of
    ``tf.RaggedTensor.from_row_splits``), longest first. Each example index
    appears exactly once.

    Attributes:
      row_splits: [P + 1] int64.
      sequence_indices: [N] int64.
    """

    row_splits: np.ndarray
    sequence_indices: np.ndarray

    @classmethod
    def from_sequences_per_pack(cls, sequences_per_pack,
                                sequence_indices) -> "PackAssignment":
        """Packs of ``sequences_per_pack[k]`` consecutive ``sequence_indices``."""
        return cls(ragged.row_splits_from_lengths(sequences_per_pack),
                   np.asarray(sequence_indices, dtype=np.int64))

    @classmethod
    def concatenate(cls, assignments) -> "PackAssignment":
        """The packs of each assignment, one assignment after the other."""
        assignments = list(assignments)
        if not assignments:
            return cls(np.zeros(1, np.int64), np.zeros(0, np.int64))
        return cls.from_sequences_per_pack(
            np.concatenate([a.sequences_per_pack for a in assignments]),
            np.concatenate([a.sequence_indices for a in assignments]))

    def __len__(self) -> int:
        return self.row_splits.size - 1

    def __getitem__(self, pack: int) -> np.ndarray:
        if not -len(self) <= pack < len(self):
            raise IndexError(f"pack {pack} out of range for {len(self)} packs")
        pack %= len(self)
        return self.sequence_indices[self.row_splits[pack]:self.row_splits[pack + 1]]

    def __iter__(self):
        for pack in range(len(self)):
            yield self[pack]

    @property
    def sequences_per_pack(self) -> np.ndarray:
        """[P] int64: how many examples each pack holds."""
        return np.diff(self.row_splits)

    # Per entry of ``sequence_indices`` (a sequence in pack order).

    @property
    def pack_of_entries(self) -> np.ndarray:
        """[N] int64: the pack of each entry."""
        return ragged.row_of_elements(self.sequences_per_pack)

    @property
    def slot_of_entries(self) -> np.ndarray:
        """[N] int64: each entry's place in its pack, 0 for the first."""
        return ragged.position_in_row(self.sequences_per_pack)

    def offset_in_pack(self, lengths_in_pack_order) -> np.ndarray:
        """[N] where each entry starts in its pack: the summed lengths of the
        entries before it in the same pack."""
        return ragged.exclusive_sum_in_row(lengths_in_pack_order, self.sequences_per_pack)

    def sum_per_pack(self, values_in_pack_order) -> np.ndarray:
        """[P] the sum of a per-entry quantity over each pack (tokens, masked
        tokens, ...)."""
        return ragged.sum_over_rows(values_in_pack_order, self.row_splits)

    def take(self, packs) -> "PackAssignment":
        """The packs ``packs`` (indices, in that order) as an assignment of their own."""
        index, depths = ragged.take_rows_index(self.row_splits, self.sequences_per_pack,
                                               np.asarray(packs, dtype=np.int64))
        return PackAssignment.from_sequences_per_pack(depths, self.sequence_indices[index])

    def to_dense(self, max_sequences_per_pack: int | None = None,
                 fill: int = -1) -> np.ndarray:
        """[P, D] int64 of example indices, `fill` where a pack has fewer."""
        depth = self.sequences_per_pack
        width = int(depth.max(initial=0)) if max_sequences_per_pack is None \
            else max_sequences_per_pack
        if depth.size and depth.max() > width:
            raise ValueError(f"a pack holds {depth.max()} sequences, more than "
                             f"the {width} columns asked for")
        dense = np.full((len(self), width), fill, dtype=np.int64)
        dense[self.pack_of_entries, self.slot_of_entries] = self.sequence_indices
        return dense


def assign_sequences(lengths, plan: PackingPlan, seed: int = 0) -> PackAssignment:
    """Assigns every example of a dataset to a pack of the plan.

    Vectorised: the slots of all packs, sorted by length, are matched with the
    examples sorted by length (shuffled within each length). O(N log N).

    Args:
      lengths: [N] int, length of every example; their histogram must equal
        ``plan.histogram``.
      plan: a `PackingPlan`.
      seed: int; which example of a given length fills which slot, and the
        order of the packs, are drawn from this seed: the same (lengths, plan,
        seed) always give the same packs.

    Returns:
      `PackAssignment`: the plan's packs in shuffled order (so that long and
      short packs are mixed in the output), each holding example indices of the
      lengths its strategy lists.

    Example:
      >>> from packed_bert_tf.packing import pack_histogram
      >>> lengths = [3, 1, 2, 2]
      >>> plan = pack_histogram([1, 2, 1], max_sequence_length=4,
      ...                       max_sequences_per_pack=2, algorithm="optimal")
      >>> packs = assign_sequences(lengths, plan, seed=0)
      >>> sorted(sorted(int(i) for i in pack) for pack in packs)
      [[0, 1], [2, 3]]
    """
    lengths = np.asarray(lengths)
    histogram = histogram_from_lengths(lengths, plan.max_sequence_length)
    expected = np.asarray(plan.histogram, dtype=np.int64)
    if not np.array_equal(histogram, expected):
        length = int(np.flatnonzero(histogram != expected)[0]) + 1
        raise ValueError(
            f"the lengths do not match the plan: {histogram[length - 1]} "
            f"sequences of length {length}, the plan packs {expected[length - 1]}")
    rng = np.random.default_rng(seed)
    lengths = lengths.astype(np.int64)

    # Contents of all strategies, flattened: strategy j is
    # flat_lengths[offsets[j]:offsets[j] + depths[j]].
    depths, flat_lengths = plan.flat_strategies()
    offsets = np.cumsum(depths) - depths

    strategy_of_pack = rng.permutation(
        np.repeat(np.arange(len(plan.strategies)), plan.counts))  # [P]
    pack_depths = depths[strategy_of_pack]
    slot = ragged.position_in_row(pack_depths)
    slot_lengths = flat_lengths[np.repeat(offsets[strategy_of_pack], pack_depths) + slot]

    # Examples by length, in random order within a length; slots by length.
    shuffled = rng.permutation(lengths.size)
    examples_by_length = shuffled[np.argsort(lengths[shuffled], kind="stable")]
    slots_by_length = np.argsort(slot_lengths, kind="stable")
    sequence_indices = np.empty(lengths.size, dtype=np.int64)
    sequence_indices[slots_by_length] = examples_by_length
    return PackAssignment.from_sequences_per_pack(pack_depths, sequence_indices)


def pack_assignment(lengths, max_sequence_length: int, max_sequences_per_pack: int, *,
                    packed: bool = True, algorithm: str = "optimal",
                    seed: int = 0) -> PackAssignment:
    """The packs of a dataset's examples, or its unpacked rows.

    ``packed``: `pack_lengths` (the plan) then `assign_sequences` (which
    example goes where); otherwise one example per pack in example order,
    the layout of standard BERT batches. No examples: no packs.

    Example:
      >>> [list(map(int, pack)) for pack in pack_assignment([3, 1], 4, 2, packed=False)]
      [[0], [1]]
      >>> [sorted(map(int, pack)) for pack in pack_assignment([3, 1], 4, 2)]
      [[0, 1]]
    """
    lengths = np.asarray(lengths)
    if not packed:
        identity = np.arange(lengths.size + 1, dtype=np.int64)
        return PackAssignment(identity, identity[:-1])
    if lengths.size == 0:
        return PackAssignment(np.zeros(1, np.int64), np.zeros(0, np.int64))
    plan = pack_lengths(lengths, max_sequence_length, max_sequences_per_pack, algorithm)
    return assign_sequences(lengths, plan, seed=seed)


def replan_overflowing_packs(packs: PackAssignment, lengths, counts, *, limit: int,
                             max_sequence_length: int, max_sequences_per_pack: int,
                             algorithm: str = "optimal", seed: int = 0
                             ) -> tuple[PackAssignment, int]:
    """Packs whose sequences hold more than `limit` of a per-sequence count
    in all (masked-LM predictions against a pack's M slots) are re-planned.

    The sequences of such packs are packed again on their own (`pack_lengths`
    with `algorithm`, then `assign_sequences` with `seed`), which keeps most of
    the packing; whatever still overflows goes one sequence per pack, which
    always fits. Nothing is truncated or dropped. The packs that fit come
    first, in their order, then the re-planned ones; with nothing over the
    limit the packs come back unchanged.

    Args:
      packs: the packs, over sequences ``0..N-1`` of `lengths` and `counts`
        (any subset of them).
      lengths: [N] tokens per sequence.
      counts: [N] the count per sequence.
      limit: the most a pack may hold in all.
      max_sequence_length: S of the re-plan.
      max_sequences_per_pack: D of the re-plan.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name, for the re-plan.
      seed: which re-planned sequence of a length goes where.

    Returns:
      The new assignment and the number of sequences re-planned.

    Raises:
      ValueError: when one sequence alone holds more than `limit`.

    Example:
      >>> packs = PackAssignment.from_sequences_per_pack([2, 2], [0, 1, 2, 3])
      >>> fixed, moved = replan_overflowing_packs(
      ...     packs, [2, 2, 2, 2], [1, 1, 3, 2], limit=4, max_sequence_length=4,
      ...     max_sequences_per_pack=2)
      >>> [sorted(map(int, pack)) for pack in fixed], moved
      ([[0, 1], [2], [3]], 2)
    """
    lengths, counts = np.asarray(lengths), np.asarray(counts)
    if counts.size and counts.max() > limit:
        worst = int(np.argmax(counts))
        raise ValueError(f"sequence {worst} holds {counts[worst]} on its own, more than "
                         f"the {limit} a pack may hold")
    final: list[tuple[np.ndarray, np.ndarray]] = []  # (depths, sequence indices)
    pending, replanned = packs, 0
    for replan in (True, False):
        depths = pending.sequences_per_pack
        fits = pending.sum_per_pack(counts[pending.sequence_indices]) <= limit
        keep = np.repeat(fits, depths)
        final.append((depths[fits], pending.sequence_indices[keep]))
        released = pending.sequence_indices[~keep]
        pending = None
        if not released.size:
            break
        if replan:
            replanned = int(released.size)
            plan = pack_lengths(lengths[released], max_sequence_length,
                                max_sequences_per_pack, algorithm)
            local = assign_sequences(lengths[released], plan, seed=seed)
            pending = PackAssignment(local.row_splits, released[local.sequence_indices])
        else:
            pending = PackAssignment.from_sequences_per_pack(np.ones_like(released),
                                                             released)
    if pending is not None:
        final.append((pending.sequences_per_pack, pending.sequence_indices))
    return PackAssignment.from_sequences_per_pack(
        np.concatenate([d for d, _ in final]),
        np.concatenate([i for _, i in final])), replanned


def rows_of_packs(pack_index, num_packs: int) -> np.ndarray:
    """[P] the output row of each pack, from the outputs' ``pack_index`` [N]
    (-1 for padding rows, ignored; any order): how a task unpacks a model's
    outputs on its rows back to its examples.

    Raises:
      ValueError: When a pack is missing from the outputs or appears twice.

    Example:
      >>> rows_of_packs([1, -1, 0], 2).tolist()
      [2, 0]
    """
    pack_index = np.asarray(pack_index, np.int64).reshape(-1)
    real = pack_index >= 0
    seen = np.bincount(pack_index[real], minlength=num_packs)
    if seen.size > num_packs or (seen != 1).any():
        missing = int((seen[:num_packs] == 0).sum())
        repeated = int((seen > 1).sum())
        raise ValueError(f"outputs for {int(real.sum())} rows of {num_packs} "
                         f"packs: {missing} packs missing, {repeated} repeated"
                         + (", unknown pack indices" if seen.size > num_packs else ""))
    row_of_pack = np.full(num_packs, -1, np.int64)
    row_of_pack[pack_index[real]] = np.flatnonzero(real)
    return row_of_pack
