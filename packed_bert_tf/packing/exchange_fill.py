"""Exchange fill: rows filled to the last token by best-fit decreasing and
exchanges of equal sums, certified by `optimal.simple_bound`.

Where a histogram's LP bound is at or near its token bound (total tokens /
S: rows can be filled to the last token) and rows hold many sequences, the
LP is highly degenerate and column generation needs many rounds (one to two
minutes on a million sequences). Best-fit decreasing already fills almost
every row exactly; its waste is at the end. The shortest sequences come last,
fill the last gaps, and what is left of them forms rows that the cap on
sequences closes far short of S: with at most 8 per pack on log-normal
lengths (median S / 6, sigma 1), 47,000 rows of 8 short sequences, 7 % above
the bound. Exchange fill keeps the full rows and repairs the rest:

0. **Rows of the longest sequences closed first** (`_close_longest`), where
   `optimal.long_sequence_bound` is above the token bound at a threshold k:
   sequences longer than S - k outnumber the short ones that could fill
   their rows (log-normal lengths of median S / 3: 2 % of them are within
   S / 10 of S). The plans that meet that bound give every sequence shorter
   than k to those rows and fill all the others exactly; best-fit
   decreasing instead spends the short ones on other rows' last gaps.
1. **Best-fit decreasing on the pool** (at first every other sequence): its
   full rows are kept, the sequences of its other rows are the new pool.
2. **Exchanges.** Groups of ``k`` pool sequences are swapped with ``j``
   sequences of a kept row that have the same sum, where the row stays
   within the cap: kept rows stay full, and the pool changes. When most of
   the pool's sequences are in rows closed by the cap, the pool gives short
   sequences for fewer longer ones (``k`` from 2 to D / 2 + 1 for one
   sequence of a row, 3 to D / 2 + 2 for two); otherwise the exchanges
   reshape it (1 for 2, 2 for 2, 2 for 3, 3 for 3), and one more 1 for 2
   takes from each row a sequence whose length is the room of a pool row
   holding one sequence (its exact complement). Groups are drawn at random
   from the pool and matched by sum with sequences drawn at random from a
   sample of the kept rows (at most `SAMPLE` per pool sequence).
3. Repeat until the plan is within the target, or the rounds stall (for
   `PATIENCE` rounds none takes a tenth off the packs above the target), or
   the deadline passes. The best round's plan is returned; the caller
   certifies it by `optimal.simple_bound`.

On a million sequences (the 'mixes' section of BENCHMARKS.md): at S = 2048,
log-normal lengths of median S / 6 with 8 per pack reach 0.0075 % above the
token bound in 3 rounds and 0.3 s; lengths uniform on S / 8 .. S / 2 with 4
per pack 0.047 % in 10 rounds and 0.9 s; 70 % short and 30 % long with 8 per
pack 0.044 % in 13 rounds and 0.8 s; at S = 8192, uniform with 8 per pack
0.043 % in 8 rounds and 1.5 s. Log-normal lengths of median S / 3 with 4
per pack come to 0.03 % above the long-sequence bound in 8 rounds (0.45 %
without step 0 and the exchanges for exact complements). A few packs stay
above the bound on histograms of a few thousand sequences (the last
rounds' pools are too small to find equal sums).

Cost: a round is one best-fit decreasing on the pool
(`heuristics.pack_fit_decreasing`, O((S + K) log G) for K placements of a
group and G groups open at once) and, per exchange, a shuffle of the
pool and a counting match of sums, O(P + M D log D) for a pool of P
sequences and M sampled rows.

There is no guarantee: where the LP bound is above `optimal.simple_bound`,
or the exchanges stall, the plan is not certified and the caller goes on
with column generation (keeping the plan found here if column generation's
is worse). Exchanges between packed bins and unplaced items that keep the
bins' loads are the moves of local searches for bin packing (Alvim, Ribeiro,
Glover and Aloise, "A hybrid improvement heuristic for the one-dimensional
bin packing problem", Journal of Heuristics 10, 2004).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from packed_bert_tf.packing import heuristics, optimal
from packed_bert_tf.packing.plan import rows_of_strategy_counts, strategy_counts_of_rows

# Rows sampled per pool sequence as exchange partners: more find more
# matches, at the cost of sorting their slots.
SAMPLE = 4
# A round makes progress when it leaves at most this share of the packs the
# last round had above the target; exchange fill gives up after PATIENCE
# rounds in a row without progress (where it stalls, the time left goes to
# column generation), and after MAX_ROUNDS in all.
PROGRESS = 0.9
PATIENCE = 2
MAX_ROUNDS = 60
# The pool is 'closed by the cap' when more than this share of its
# sequences are in rows that hold the cap's number.
AT_CAP_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class ExchangeFill:
    """The best plan of exchange fill.

    Attributes:
      rows: [P, D] int32, the sequence lengths of each pack (0 = none); every
        sequence of the histogram is in exactly one.
      rounds: int, rounds made (each a best-fit decreasing on the pool, the
        first one possibly the caller's).
      stopped: bool, whether the deadline stopped it (passed, or too close
        for the next exchange).
    """

    rows: np.ndarray
    rounds: int
    stopped: bool = False

    @property
    def num_packs(self) -> int:
        return len(self.rows)

    def strategy_counts(self) -> list[tuple[tuple[int, ...], int]]:
        """The packs as (strategy, count) pairs, each strategy longest first."""
        return strategy_counts_of_rows(self.rows)


def exchange_fill(histogram: np.ndarray, max_sequence_length: int,
                  max_sequences_per_pack: int, *, target_packs: int, seed: int = 0,
                  first_plan=None, deadline=None, report=None) -> ExchangeFill:
    """Packs by best-fit decreasing repaired by exchanges (module docstring).

    Args:
      histogram: [S] int, ``histogram[i]`` sequences of length ``i + 1``.
      max_sequence_length: int, tokens per pack, S.
      max_sequences_per_pack: int, sequences per pack at most, D.
      target_packs: int, stop as soon as a plan has at most this many packs.
      seed: int, seed of the random groups (the plan is deterministic given it).
      first_plan: optional (strategy, count) pairs of best-fit decreasing on
        `histogram` (``heuristics.pack_fit_decreasing(..., fit="best")``),
        when the caller has them: the first round's, not made again.
      deadline: optional, with ``passed()`` and ``left()``
        (`optimal.Deadline`): no round starts once it has passed, and no
        exchange that would end after it (by the time the last one took).
      report: optional ``report(packs)``, called after each round with the
        packs of the best plan so far.

    Returns:
      `ExchangeFill`, the plan of the round with the fewest packs.
    """
    max_len, cap = int(max_sequence_length), int(max_sequences_per_pack)
    rng = np.random.default_rng(seed)
    histogram = np.asarray(histogram, dtype=np.int64)[:max_len]
    pool = np.repeat(np.arange(1, max_len + 1, dtype=np.int32), histogram)
    closed, pool = _close_longest(pool, histogram, max_len, cap)
    if len(closed):
        first_plan = None
    target_packs -= len(closed)
    kept = np.zeros((0, cap), dtype=np.int32)
    held = np.zeros(0, dtype=np.int64)  # sequences in each kept row
    best, stalled, rounds = None, 0, 0
    last = 0.0  # seconds the last exchange took
    while rounds < MAX_ROUNDS:
        rounds += 1
        if rounds == 1 and first_plan is not None:
            rows = rows_of_strategy_counts(first_plan, cap)
        else:
            rows = _best_fit_rows(pool, max_len, cap)
        full = rows.sum(axis=1) == max_len
        kept = np.concatenate([kept, rows[full]])
        held = np.concatenate([held, np.count_nonzero(rows[full], axis=1)])
        rest = rows[~full]
        pool = rest[rest > 0]
        last_excess = math.inf if best is None else len(best) - target_packs
        if best is None or len(kept) + len(rest) < len(best):
            best = np.concatenate([kept, rest])
        stalled = 0 if len(best) - target_packs <= PROGRESS * last_excess else stalled + 1
        if report is not None:
            report(len(closed) + len(best))
        if len(best) <= target_packs or not len(rest) or stalled >= PATIENCE:
            break
        if deadline is not None and deadline.passed():
            return ExchangeFill(np.concatenate([closed, best]), rounds, stopped=True)
        rest_held = np.count_nonzero(rest, axis=1)
        at_cap = rest_held[rest_held == cap].sum() > AT_CAP_SHARE * rest_held.sum()
        # Rows of one sequence wait for a complement of exactly their room:
        # a last exchange brings sequences of those lengths into the pool.
        wanted = np.zeros(max_len + 1, dtype=bool)
        wanted[max_len - rest[rest_held == 1].sum(axis=1)] = True
        exchanges = [(give, take, None) for give, take in _exchanges(cap, at_cap)]
        if not at_cap and wanted.any():
            exchanges.append((1, 2, wanted))
        for give, take, lengths in exchanges:
            # An exchange takes up to a few hundredths of a second: none
            # starts that would end past the deadline if it took as long as
            # the last one, and a round cut short leaves the best plan as it was.
            if deadline is not None and (deadline.passed() or deadline.left() < last):
                return ExchangeFill(np.concatenate([closed, best]), rounds, stopped=True)
            started = optimal.clock()
            pool = _exchange(kept, held, pool, give, take, rng, lengths)
            last = optimal.clock() - started
    return ExchangeFill(np.concatenate([closed, best]), rounds)


def _close_longest(pool: np.ndarray, histogram: np.ndarray, max_len: int,
                   cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows for the sequences longer than S - k, closed before the
    exchanges, and the pool left, where `optimal.long_sequence_bound` is
    above the token bound at threshold k. Such a row has room only for
    sequences shorter than k, too few to fill every one (that is what the
    bound counts), so the plans that meet the bound give them all the
    sequences shorter than k and fill every other row exactly: best-fit
    decreasing places the short ones into the long ones' rows (the rows it
    leaves holding short sequences alone go back to the pool), and the
    exchanges fill the rest."""
    _, threshold = optimal.long_sequence_bound(histogram, max_len)
    if threshold == 1:
        return np.zeros((0, cap), dtype=np.int32), pool
    ends = (pool > max_len - threshold) | (pool < threshold)
    rows = _best_fit_rows(pool[ends], max_len, cap)
    closed = rows.max(axis=1) > max_len - threshold
    short_alone = rows[~closed]
    return rows[closed], np.concatenate([pool[~ends], short_alone[short_alone > 0]])


def _exchanges(cap: int, at_cap: bool) -> tuple[tuple[int, int], ...]:
    """(pool sequences given, row sequences taken) for each exchange of a round."""
    if at_cap:
        most = cap // 2
        return (tuple((give, 1) for give in range(2, most + 2))
                + tuple((give, 2) for give in range(3, most + 3)))
    return (1, 2), (2, 2), (2, 3), (3, 3)


def _best_fit_rows(pool: np.ndarray, max_len: int, cap: int) -> np.ndarray:
    """[P, cap] rows of best-fit decreasing on the sequence lengths `pool`."""
    histogram = np.bincount(pool, minlength=max_len + 1)[1:]
    return rows_of_strategy_counts(
        heuristics.pack_fit_decreasing(histogram, max_len, cap, fit="best"), cap)


def _exchange(kept: np.ndarray, held: np.ndarray, pool: np.ndarray, give: int, take: int,
              rng: np.random.Generator, wanted: np.ndarray | None = None) -> np.ndarray:
    """Swaps random groups of `give` pool sequences with `take` sequences of
    the same sum in kept rows that stay within the cap. `kept` (each row
    still summing to S, longest first) and `held` (sequences per row) change
    in place; returns the new pool. With `wanted` ([S + 1] bool by length),
    the first sequence taken from a row is one of a wanted length (rows
    without one take no part)."""
    cap = kept.shape[1]
    if pool.size < give or not len(kept):
        return pool
    if SAMPLE * pool.size >= len(kept):
        rows = rng.permutation(len(kept))
    else:
        drawn = np.zeros(len(kept), dtype=bool)
        drawn[rng.integers(0, len(kept), SAMPLE * pool.size)] = True
        rows = rng.permutation(np.flatnonzero(drawn))
    rows_held = held[rows]
    fits = (rows_held >= take) & (rows_held - take + give <= cap)
    rows, rows_held = rows[fits], rows_held[fits]
    # `take` distinct occupied slots of each row at random (rows hold their
    # sequences first): the i-th is drawn from the slots the others left.
    first = 0
    if wanted is not None:
        is_wanted = wanted[kept[rows]] & (np.arange(cap) < rows_held[:, None])
        some = is_wanted.any(axis=1)
        rows, rows_held, is_wanted = rows[some], rows_held[some], is_wanted[some]
        first = 1
    slots = np.zeros((rows.size, take), dtype=np.int64)
    taken_sums = np.zeros(rows.size, dtype=np.int64)
    if first:
        slots[:, 0] = np.argmax(is_wanted * rng.random(is_wanted.shape), axis=1)
        taken_sums += kept[rows, slots[:, 0]]
    for i in range(first, take):
        slot = (rng.random(rows.size) * (rows_held - i)).astype(np.int64)
        for earlier in np.sort(slots[:, :i], axis=1).T:
            slot += slot >= earlier
        slots[:, i] = slot
        taken_sums += kept[rows, slot]
    pool = rng.permutation(pool)
    groups = pool[:pool.size // give * give].reshape(-1, give)
    group_index, row_index = _match_equal(groups.sum(axis=1), taken_sums)
    if not group_index.size:
        return pool
    rows, slots = rows[row_index], slots[row_index]
    changed = kept[rows]
    freed = np.take_along_axis(changed, slots, axis=1)
    np.put_along_axis(changed, slots, 0, axis=1)
    changed = np.concatenate([changed, groups[group_index]], axis=1)
    kept[rows] = -np.sort(-changed, axis=1)[:, :cap]
    held[rows] += give - take
    unmatched = np.ones(len(groups), dtype=bool)
    unmatched[group_index] = False
    return np.concatenate([groups[unmatched].ravel(), pool[groups.size:], freed.ravel()])


def _match_equal(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i, j) with ``left[i] == right[j]`` (non-negative integers), as
    many as the two histograms allow, each index at most once; within a value
    the k-th of `left` (in index order) meets the k-th of `right`."""
    size = int(max(left.max(initial=0), right.max(initial=0))) + 1
    left_count = np.bincount(left, minlength=size)
    right_count = np.bincount(right, minlength=size)
    matched = np.minimum(left_count, right_count)

    def first_of_each_value(values, counts):
        # Small keys radix-sort.
        order = np.argsort(values.astype(np.min_scalar_type(size)), kind="stable")
        ordered = values[order]
        rank = np.arange(values.size) - (np.cumsum(counts) - counts)[ordered]
        return order[rank < matched[ordered]]

    # Both come out in (value, rank) order, so they line up.
    return (first_of_each_value(left, left_count),
            first_of_each_value(right, right_count))
