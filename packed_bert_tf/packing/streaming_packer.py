"""Packing a stream near the LP bound with a bounded buffer: `StreamingPacker`.

Greedy stream packers (first fit or best fit over a window of bins, as
Grain's ``FirstFitPackIterDataset`` and ``BestFitPackIterDataset`` do) decide
for each sequence as it comes, which leaves the short sequences of a skewed
distribution in poorly filled packs: on Wikipedia-512 with at most 3
sequences per pack they reach about 96 % efficiency where the offline LP
bound is 99.88 %.

The streaming packer decides in *rounds* instead. Sequences wait in a buffer;
when it holds `buffer_size` of them, one round:

1. solves the LP "as many exactly full packs as the buffer's length histogram
   allows" over a pool of exact-fill patterns (at most D lengths summing to
   exactly S) by column generation: HiGHS solves the restricted LP; the
   reduced cost ``1 - sum of the duals of a pattern's lengths`` is computed
   for *every* exact-fill pattern at once (one vectorised gather, as D is
   small) and the best `columns_per_round` join the pool (ties, which are
   many, go to the patterns whose scarcest length is most available). The
   first round prices until the LP is optimal; the pool persists between
   rounds (patterns unused for `pool_rounds` rounds leave it), so later
   rounds solve one LP each and offer what its pricing finds to the next;
2. emits the integer part of the LP solution as packs, each taking the
   oldest waiting sequences of its lengths;
3. emits the sequences that waited `max_wait` later sequences or more by
   best-fit decreasing among themselves, and the oldest ones as well while
   the buffer is still more than three quarters full (so every round frees
   room);
4. shuffles the round's packs with a generator seeded by (seed, round), so
   batches do not group packs by their lengths.

Sequences the buffer cannot fill exactly wait for later arrivals to complete
them; that is what brings a stream close to the offline optimum (figures in
BENCHMARKS.md: ``benchmarks/streaming_packing_benchmark.py``).

Everything the packer knows is in `StreamingPacker.state` (arrays), so a
stream can be stopped and resumed with exactly the packs the uninterrupted
run would have made (`StreamingPacker.from_state`). numpy/scipy only.

Complexity per round: the restricted LP over at most a few thousand columns,
and O(number of exact-fill patterns) for pricing: S^2 / 12 for D = 3
(22,102 at S = 512); D = 4 at S = 512 has 0.9 M patterns. Pattern tables
above `MAX_PATTERNS` are refused.
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import scipy.optimize
import scipy.sparse

from packed_bert_tf.packing import ragged
from packed_bert_tf.packing.api import pack_lengths
from packed_bert_tf.packing.assign import PackAssignment, assign_sequences
from packed_bert_tf.packing.nnlshp import count_exact_fill_strategies, exact_fill_strategies
from packed_bert_tf.packing.stream_packing import StreamPacking

#: Largest exact-fill pattern table (patterns x D int32) the packer builds.
MAX_PATTERNS = 4_000_000
#: Column-generation iterations of the first round (later rounds: one).
FIRST_ROUND_ITERATIONS = 30
#: State arrays, in the order `StreamingPacker.state` returns them.
STATE_KEYS = ("counters", "buffer_indices", "buffer_lengths", "pool", "pool_last_used")


@functools.lru_cache(maxsize=8)
def exact_fill_patterns(max_sequence_length: int, max_sequences_per_pack: int) -> np.ndarray:
    """Every multiset of at most D lengths summing to exactly S
    (`nnlshp.exact_fill_strategies`) as a table.

    Returns:
      [K, D] int32, each row sorted longest first and padded with 0; rows in
      descending lexicographic order.
    """
    total, parts = max_sequence_length, max_sequences_per_pack
    count = count_exact_fill_strategies(total, parts)
    if count > MAX_PATTERNS:
        raise ValueError(f"{count:,} exact-fill patterns at max_sequence_length="
                         f"{total}, max_sequences_per_pack={parts}: more than "
                         f"{MAX_PATTERNS:,} (use fewer sequences per pack)")
    table = np.zeros((count, parts), dtype=np.int32)
    start = 0
    by_size: dict = {}
    for strategy in exact_fill_strategies(total, parts):
        by_size.setdefault(len(strategy), []).append(strategy)
    for size, strategies in by_size.items():
        # Shortest first there; longest first here.
        table[start:start + len(strategies), :size] = np.array(strategies)[:, ::-1]
        start += len(strategies)
    table = table[np.lexsort(-table.T[::-1])]
    table.setflags(write=False)
    return table


@functools.lru_cache(maxsize=8)
def _pattern_matrix(max_sequence_length: int, max_sequences_per_pack: int):
    """[S, K] sparse counts of each length (row l - 1) in each exact-fill
    pattern (shared by the packers of one shape: they only read it)."""
    patterns = exact_fill_patterns(max_sequence_length, max_sequences_per_pack)
    rows = patterns.ravel().astype(np.int64) - 1
    columns = np.repeat(np.arange(patterns.shape[0]), patterns.shape[1])
    real = rows >= 0
    return scipy.sparse.csc_array(
        (np.ones(int(real.sum())), (rows[real], columns[real])),
        shape=(max_sequence_length, patterns.shape[0]))


class StreamingPacker:
    """Packs a stream of sequence lengths round by round (module docstring).

    Args:
      max_sequence_length: int, tokens per pack, S.
      max_sequences_per_pack: int, cap on sequences per pack, D.
      buffer_size: int, sequences held before a round; the packer never holds
        more.
      max_wait: int or None, a sequence that has waited this many later
        sequences leaves in the next round; rounds come at least every
        `buffer_size` sequences, so none waits more than
        ``max_wait + buffer_size`` (tested). Default: twice `buffer_size`.
      seed: int, seeds the order of each round's packs.
      columns_per_round: int, column generation: patterns added per pricing
        step.
      pool_rounds: int, column generation: rounds an unused pattern stays in
        the pool.
    """

    def __init__(self, max_sequence_length: int, max_sequences_per_pack: int = 3, *,
                 buffer_size: int = 10_000, max_wait: int | None = None, seed: int = 0,
                 columns_per_round: int = 100, pool_rounds: int = 20):
        if max_sequence_length < 1 or max_sequences_per_pack < 1:
            raise ValueError("max_sequence_length and max_sequences_per_pack must be >= 1")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.max_sequence_length = int(max_sequence_length)
        self.max_sequences_per_pack = int(max_sequences_per_pack)
        self.buffer_size = int(buffer_size)
        self.max_wait = 2 * self.buffer_size if max_wait is None else int(max_wait)
        if self.max_wait < 0:
            raise ValueError(f"max_wait must be >= 0, got {max_wait}")
        self.seed = int(seed)
        self.columns_per_round = int(columns_per_round)
        self.pool_rounds = int(pool_rounds)
        self.patterns = exact_fill_patterns(self.max_sequence_length,
                                            self.max_sequences_per_pack)
        self._matrix = _pattern_matrix(self.max_sequence_length, self.max_sequences_per_pack)
        self.set_state(self.initial_state())

    # -- state ---------------------------------------------------------------

    def initial_state(self) -> dict:
        """The state of a packer that has read nothing: the pool holds the
        patterns of one or two sequences."""
        pool = np.flatnonzero((self.patterns > 0).sum(axis=1) <= 2).astype(np.int64)
        return {"counters": np.zeros(2, dtype=np.int64),
                "buffer_indices": np.zeros(0, dtype=np.int64),
                "buffer_lengths": np.zeros(0, dtype=np.int64),
                "pool": pool, "pool_last_used": np.zeros(pool.size, dtype=np.int64)}

    @property
    def state(self) -> dict:
        """Everything the packer knows, as int64 arrays (`STATE_KEYS`):
        ``counters`` = [sequences read, rounds done], the waiting sequences'
        stream indices (ascending) and lengths, the pattern pool and the
        round each pool pattern was last used in."""
        return {"counters": np.array([self.read, self.rounds], dtype=np.int64),
                "buffer_indices": self.buffer_indices.copy(),
                "buffer_lengths": self.buffer_lengths.copy(),
                "pool": self.pool.copy(), "pool_last_used": self.pool_last_used.copy()}

    def set_state(self, state: dict) -> None:
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise ValueError(f"streaming packer state lacks {', '.join(missing)}")
        self.read, self.rounds = (int(value) for value in np.asarray(state["counters"]))
        self.buffer_indices = np.asarray(state["buffer_indices"], dtype=np.int64)
        self.buffer_lengths = np.asarray(state["buffer_lengths"], dtype=np.int64)
        self.pool = np.asarray(state["pool"], dtype=np.int64)
        self.pool_last_used = np.asarray(state["pool_last_used"], dtype=np.int64)
        if self.buffer_indices.shape != self.buffer_lengths.shape \
                or self.pool.shape != self.pool_last_used.shape \
                or (self.pool.size and self.pool.max() >= self.patterns.shape[0]) \
                or (self.buffer_lengths.size
                    and self.buffer_lengths.max() > self.max_sequence_length):
            raise ValueError("streaming packer state does not match its packer "
                             "(max_sequence_length, max_sequences_per_pack)")
        if self.buffer_indices.size >= self.buffer_size \
                or (self.buffer_indices.size and self.buffer_indices[-1] >= self.read) \
                or (np.diff(self.buffer_indices) <= 0).any():
            raise ValueError(f"streaming packer state holds {self.buffer_indices.size} "
                             f"waiting sequences: not a state of a packer with "
                             f"buffer_size={self.buffer_size} (a checkpoint of another "
                             f"buffer size?)")

    @classmethod
    def from_state(cls, state: dict, *args, **kwargs) -> "StreamingPacker":
        packer = cls(*args, **kwargs)
        packer.set_state(state)
        return packer

    # -- reading -------------------------------------------------------------

    def push(self, lengths) -> tuple[PackAssignment, np.ndarray]:
        """Reads the next sequences' lengths; returns the packs emitted meanwhile.

        Returns:
          A tuple (assignment, read_at_emission):
            assignment: `PackAssignment`, packs of stream indices (each pack
              longest first), in emission order.
            read_at_emission: [packs] int64, sequences read when each pack was
              emitted.

        Raises:
          ValueError: A length outside ``1..max_sequence_length``, naming its
            stream index.
        """
        lengths = np.asarray(lengths, dtype=np.int64).ravel()
        bad = np.flatnonzero((lengths < 1) | (lengths > self.max_sequence_length))
        if bad.size:
            raise ValueError(f"sequence {self.read + int(bad[0])} of the stream has length "
                             f"{int(lengths[bad[0]])}: lengths must be 1.."
                             f"{self.max_sequence_length} (max_sequence_length)")
        emitted = []
        start = 0
        while start < lengths.size:
            take = min(self.buffer_size - self.buffer_indices.size, lengths.size - start)
            self.buffer_indices = np.concatenate(
                [self.buffer_indices, self.read + np.arange(take, dtype=np.int64)])
            self.buffer_lengths = np.concatenate([self.buffer_lengths,
                                                  lengths[start:start + take]])
            self.read += take
            start += take
            if self.buffer_indices.size >= self.buffer_size:
                emitted.append(self._round(final=False))
        return _joined(emitted)

    def flush(self) -> tuple[PackAssignment, np.ndarray]:
        """Packs every waiting sequence (the end of a finite stream)."""
        if not self.buffer_indices.size:
            return _joined([])
        return _joined([self._round(final=True)])

    # -- one round -------------------------------------------------------------

    def _round(self, final: bool) -> tuple[PackAssignment, np.ndarray]:
        histogram = np.bincount(self.buffer_lengths - 1, minlength=self.max_sequence_length)
        full_packs, counts = self._solve(histogram)
        taken, packs = self._take_oldest(full_packs, counts)
        parts = [packs]
        keep = np.ones(self.buffer_indices.size, dtype=bool)
        keep[taken] = False
        # Sequences that waited long enough, or every one at the end; then the
        # oldest while the buffer stays more than three quarters full.
        forced = keep & ((self.buffer_indices < self.read - self.max_wait) | final)
        excess = int((keep & ~forced).sum()) - (3 * self.buffer_size) // 4
        if excess > 0:
            forced[np.flatnonzero(keep & ~forced)[:excess]] = True
        if forced.any():
            parts.append(self._best_fit(np.flatnonzero(forced)))
            keep &= ~forced
        packs = PackAssignment.concatenate(parts)
        rng = np.random.default_rng([self.seed, self.rounds])
        assignment = packs.take(rng.permutation(len(packs)))
        self.buffer_indices = self.buffer_indices[keep]
        self.buffer_lengths = self.buffer_lengths[keep]
        self.rounds += 1
        return assignment, np.full(len(assignment), self.read, dtype=np.int64)

    def _solve(self, histogram: np.ndarray):
        """Column generation for the most exactly full packs (module docstring).

        Returns the pattern indices used and their integer counts.
        """
        present = np.concatenate([[True], histogram > 0])  # index 0: an empty slot
        usable = present[self.patterns].all(axis=1)
        pool = self.pool[usable[self.pool]]
        # The first round prices until the LP is optimal; later rounds solve
        # once and offer what pricing finds to the next round (the buffer
        # changes little between rounds, and one LP per round is the cost).
        iterations = FIRST_ROUND_ITERATIONS if self.rounds == 0 else 0
        for iteration in range(iterations + 1):
            if pool.size:
                result = scipy.optimize.linprog(
                    -np.ones(pool.size), A_ub=self._matrix[:, pool], b_ub=histogram,
                    bounds=(0, None), method="highs-ipm")
                if result.status != 0:
                    # No exact packs this round (the rest go by best fit as
                    # they wait too long); never seen, but not worth a crash.
                    logging.getLogger(__name__).warning(
                        "streaming packer: HiGHS failed on round %d (%s); no LP packs "
                        "this round", self.rounds, result.message)
                    return pool[:0], np.zeros(0, np.int64)
                solution, duals = result.x, np.maximum(-result.ineqlin.marginals, 0.0)
            else:
                solution, duals = np.zeros(0), np.zeros(self.max_sequence_length)
            offered = self._priced(duals, usable, pool, histogram)
            if iteration == iterations or not offered.size:
                break
            pool = np.concatenate([pool, offered])
        self._update_pool(pool[solution > 1e-9], offered)
        counts = np.floor(solution + 1e-9).astype(np.int64)
        return pool[counts > 0], counts[counts > 0]

    def _priced(self, duals, usable, pool, histogram) -> np.ndarray:
        """The `columns_per_round` patterns of best positive reduced cost."""
        reduced = 1.0 - np.concatenate([[0.0], duals])[self.patterns].sum(axis=1)
        reduced[~usable] = -1.0
        reduced[pool] = -1.0
        candidates = np.flatnonzero(reduced > 1e-9)
        # Reduced costs tie a lot (duals are often 0 or 1): among equals, the
        # patterns whose scarcest length is most available come first.
        supply = np.concatenate([[np.inf], histogram])[self.patterns[candidates]]
        return candidates[np.lexsort((-supply.min(axis=1), -reduced[candidates]))
                          [:self.columns_per_round]]

    def _update_pool(self, used: np.ndarray, offered: np.ndarray) -> None:
        """Used patterns stay `pool_rounds` rounds; offered ones one round
        unless used (unused columns would slow the LP); one- and
        two-sequence patterns always stay."""
        last_used = dict(zip(self.pool.tolist(), self.pool_last_used.tolist()))
        for pattern in offered.tolist():
            last_used.setdefault(pattern, self.rounds + 1 - self.pool_rounds)
        for pattern in used.tolist():
            last_used[pattern] = self.rounds
        base = (self.patterns[list(last_used)] > 0).sum(axis=1) <= 2 if last_used else []
        pool = np.array(sorted(pattern for (pattern, round_), is_base in
                               zip(last_used.items(), base)
                               if is_base or round_ >= self.rounds - self.pool_rounds),
                        dtype=np.int64)
        self.pool = pool
        self.pool_last_used = np.array([last_used[p] for p in pool.tolist()], dtype=np.int64)

    def _take_oldest(self, patterns: np.ndarray, counts: np.ndarray):
        """Buffer positions taken by `counts` packs of each pattern (oldest first
        per length) and those packs as arrays of stream indices."""
        if not counts.size:
            return np.zeros(0, np.int64), PackAssignment.concatenate([])
        slots = np.repeat(self.patterns[patterns], counts, axis=0)  # [P, D]
        pack_of_slot = np.repeat(np.arange(slots.shape[0]), slots.shape[1])
        slot_lengths = slots.ravel().astype(np.int64)
        real = slot_lengths > 0
        sequences_per_pack = real.reshape(slots.shape).sum(axis=1)
        pack_of_slot, slot_lengths = pack_of_slot[real], slot_lengths[real]
        slot_in_pack = ragged.position_in_row(sequences_per_pack)
        # The k-th slot of length l takes the k-th oldest waiting sequence of l.
        by_length = np.lexsort((self.buffer_indices, self.buffer_lengths))
        slot_order = np.lexsort((pack_of_slot, slot_lengths))
        taken = np.empty(slot_lengths.size, dtype=np.int64)
        starts = np.searchsorted(self.buffer_lengths[by_length], slot_lengths[slot_order])
        rank = np.arange(slot_order.size) - np.searchsorted(
            slot_lengths[slot_order], slot_lengths[slot_order])
        taken[slot_order] = by_length[starts + rank]
        order = np.lexsort((slot_in_pack, pack_of_slot))
        return taken, PackAssignment.from_sequences_per_pack(
            sequences_per_pack, self.buffer_indices[taken[order]])

    def _best_fit(self, positions: np.ndarray) -> PackAssignment:
        """Packs of the sequences at buffer `positions` by best-fit decreasing."""
        lengths = self.buffer_lengths[positions]
        plan = pack_lengths(lengths, self.max_sequence_length, self.max_sequences_per_pack,
                            "bfd")
        # A fixed seed: `seed` orders the round's packs, not their contents.
        packs = assign_sequences(lengths, plan, seed=0)
        return PackAssignment(packs.row_splits,
                              self.buffer_indices[positions][packs.sequence_indices])


def _joined(emitted) -> tuple[PackAssignment, np.ndarray]:
    """(packs, read_at_emission) pairs, one after the other."""
    return (PackAssignment.concatenate(packs for packs, _ in emitted),
            np.concatenate([np.zeros(0, np.int64)] + [read for _, read in emitted]))


def pack_stream(lengths, max_sequence_length: int, max_sequences_per_pack: int = 3, *,
                chunk_size: int = 1000, **options) -> StreamPacking:
    """Runs a `StreamingPacker` over a whole stream of lengths, `chunk_size`
    at a time, then flushes it. `options` go to `StreamingPacker`."""
    lengths = np.asarray(lengths, dtype=np.int64).ravel()
    packer = StreamingPacker(max_sequence_length, max_sequences_per_pack, **options)
    parts = [packer.push(lengths[start:start + chunk_size])
             for start in range(0, lengths.size, chunk_size)]
    parts.append(packer.flush())
    assignment, read = _joined(parts)
    read_at_emission = np.empty(lengths.size, dtype=np.int64)
    read_at_emission[assignment.sequence_indices] = np.repeat(
        read, np.diff(assignment.row_splits))
    return StreamPacking(assignment, read_at_emission)
