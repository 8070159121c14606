"""Near-optimal histogram packing: the cutting-stock LP by column generation.

Packing a length histogram into rows of S tokens with at most D sequences per
row is the cutting-stock problem (Gilmore and Gomory, 1961): each *pattern*
is a multiset of lengths that fits a row, and we want the fewest rows whose
patterns together hold every sequence:

    minimise   sum_p x_p
    subject to sum_p a_lp x_p >= h_l   for every length l with h_l > 0
               x_p >= 0 integer

where a_lp counts length l in pattern p and h is the histogram. There are far
too many patterns to list, so the LP relaxation is solved by column
generation over a restricted master LP, kept as one HiGHS model that is
re-solved warm after each change.

**What makes it fast on any length mix.** Started from a heuristic's
patterns, the master's duals are degenerate where the cap on sequences
binds (long-tailed lengths, 4 per pack): most lengths share one dual
(1/D), pricing cannot tell good patterns from bad, and plain column
generation creeps down by a few hundred packs a round (about 200 rounds
and 20 s for the first LP at S = 4096 on a million log-normal lengths,
median S / 6, sigma 1). Four things address the cause:

- **Length classes as levels** (`_solve_lp_levels`): the LP is solved first
  on lengths grouped into about `FIRST_CLASSES` classes (each class at the
  longest length it holds, so that its patterns are real ones), then on
  classes `CLASS_FACTOR` times narrower, each level started from the
  patterns the last one used, down to the real lengths. A level of 64
  classes converges in a dozen cheap rounds and each finer one in a handful
  (6 at the real lengths, not 195). Each level's duals also give a bound
  for the real lengths, with no pricing (`_duals_below`: a length takes the
  dual of the longest class no longer than itself, so any real pattern is
  a class pattern no longer than it); with over `CLASS_PLAN_ITEMS` lengths,
  a level whose LP is within `CLASS_PLAN_TOLERANCE` of that bound is
  rounded into the plan (`_refine` gives each class slot a sequence of its
  class): at S = 32,768, 4,090 classes instead of 32,390 lengths.
- **Pricing over distinct dual values** (`_Pricer`, `_DualLayers`): with
  non-decreasing duals only the shortest length of each run of equal duals
  matters to the best pattern's value, so the dynamic program over
  (sequences, room) runs over those m lengths, O(D S m), not O(D S n) (m is
  a few hundred where the cap binds), for every cap. It gives, for every
  length, the best pattern holding it; each is made *maximal* (`_maximal`:
  the others lengthened to the longest of their run of equal duals that
  fits, then sequences added while the cap and the room allow), so a round
  adds hundreds of distinct patterns that pack real sequences. With at
  most 3 per pack and at most `TABLE_ITEMS` lengths, the table of maximal
  patterns (`maximal_patterns`) prices instead.
- **Substitution columns** (dual-optimal inequalities, Ben Amor, Desrosiers
  and Valerio de Carvalho 2006): for each pair of neighbouring lengths, a
  free column lets a slot of the longer one hold a sequence of the shorter.
  This changes no optimum but makes the duals non-decreasing, which pricing
  needs.
- **A bound from any duals, and stopping on it**: for y >= 0, h.y / max_p
  a_p.y is a lower bound on the packs (y scaled to be dual feasible); the
  token bound (y = l / S) and the count bound (y = 1 / D) are two such,
  free, and so is each level's (above); so is the long-sequence bound
  (`_quick_duals`), which certifies `pack_histogram`'s shortcuts. Column
  generation keeps the best and stops once the master's objective is
  within `LP_TOLERANCE` of it, or both round up to the same number of packs
  (`_close_enough`), or at the deadline: the tail of rounds that would
  only prove the last ten-thousandth is not run, and the bound stays valid
  whenever it stops.

Where it stays slow: where rows are filled to the last token with many
sequences each (the LP equals the token bound, D of 8 or more on a long
tail of short sequences, or lengths uniform over a range), the master is
primal degenerate and needs many rounds at every level. There
`pack_histogram` tries `exchange_fill` first (best-fit decreasing repaired
by exchanges, certified by `simple_bound`); where that stalls, the time
limit decides (BENCHMARKS.md, the 'mixes' section, gives the figures).

The fractional solution is then made integral. Whole packs are taken (the
floor, less one pack of each pattern the first time, so that the residual is
not too constrained); sequences are placed into the taken packs' slots (a
slot holds a sequence no longer than itself, longest sequences first, which
places as many as possible); the sequences left form a residual histogram,
whose LP is solved again in a model of its own (over its lengths only,
started from the patterns the last round used) and rounded down again. Once
nothing is used a whole time, diving takes one pack of each pattern used at
least 0.7, or of a few percent of the residual's patterns in order of use,
and one pack at a time once few sequences remain, always preferring patterns
whose slots the residual fills (degenerate LPs use patterns half a time that
it cannot). If diving ends above the bound, the first small residual (at most
200 sequences of at most 40 lengths) goes to the integer master over every
maximal pattern (HiGHS branch-and-bound), which with the substitution columns
is the exact problem: so small histograms are packed optimally. Slots left
without a sequence become padding. Cutting-stock LPs are famously tight (the
integer optimum is almost always ceil(LP) or ceil(LP) + 1).

**Anytime.** Every stage checks a `Deadline`: column generation stops and
keeps its bound (the LP of the whole histogram may take `LP_SHARE` of the
time left, rounding the rest); rounding stops and the sequences still
unplaced are packed by best-fit decreasing (`heuristics.pack_fit_decreasing`),
so a plan always comes back, with the best bound proven so far.
`report(phase, packs, bound)` is called after every round (for progress
displays).

Cost: a round of pricing is O(D S m) for m distinct dual values (D <= 3 with
the table: one pass over its O(n^2 / 12) rows); the dynamic program works
in blocks of rows so that its memory stays O(D S + 2^21).

Where the optimum fills rows to the last token with at most 4 sequences
each, `pack_histogram` tries `exact_fill` first (rows built directly,
certified by `simple_bound`) and comes here for its residual.

Sources: Gilmore and Gomory, "A linear programming approach to the
cutting-stock problem", Operations Research 9 (1961); Ben Amor, Desrosiers
and Valerio de Carvalho, "Dual-optimal inequalities for stabilized column
generation", Operations Research 54 (2006); the integer master over
generated columns ("price and branch") as in Vanderbeck, "Computational
study of a column generation algorithm for bin packing and cutting stock
problems", Math. Programming 86 (1999).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, NamedTuple

import numpy as np
import scipy.optimize
import scipy.sparse

from packed_bert_tf.packing import heuristics
from packed_bert_tf.packing.plan import strategy_counts_of_rows

# A reduced cost counts as improving below -_PRICING_TOLERANCE (HiGHS' duals
# are accurate to about 1e-9 with the tolerances set below).
_PRICING_TOLERANCE = 1e-9
# Only a guard against pathological cases: the node limit ends the search.
_INTEGER_SAFETY_SECONDS = 60.0
# Packs of each pattern left to the residual after the first LP: a larger
# residual gives the integer master room to do better.
RESIDUAL_MARGIN = 1
# Residuals of at most this many sequences are dived into one pack at a
# time, and may go to the integer master.
SMALL_PROBLEM_SEQUENCES = 200
# HiGHS' branch-and-cut spends about a millisecond per pattern at its root:
# the integer master takes residuals of at most this many lengths and
# (after reduced-cost fixing) patterns; larger ones are finished by diving,
# which reaches ceil(LP) on the paper's histograms too.
INTEGER_MASTER_ITEMS = 40
INTEGER_MASTER_PATTERNS = 150
# More than 3 sequences per pack: the integer master also gets every pattern
# when there are at most this many.
ALL_PATTERNS_LIMIT = 5_000
# Diving rounds up every pattern the residual LP uses at least this much:
# 0.7 matches one-pack-at-a-time diving in quality (0 to 1 pack above the LP
# bound on the paper's histograms) at a fraction of the rounds.
DIVE_THRESHOLD = 0.7
# Diving on a large residual takes this fraction of its LP value in packs a
# round (patterns in order of use, each one the residual fills).
DIVE_FRACTION = 0.05
# Most patterns added to the master per round of pricing (the most
# improving ones; the dynamic program offers one per length): fewer make
# more rounds, more make each solve slower.
COLUMNS_PER_ROUND = 150
COLUMNS_PER_ROUND_PER_ITEM = 0.5
# Past this many patterns per item the master drops the unused ones with the
# highest reduced cost (a solve's cost grows with the columns it prices).
MASTER_COLUMNS_PER_ITEM = 4
# Column generation on the whole histogram stops when the master's
# objective is within this fraction of the best bound (the plan's target
# is 0.05 % above the bound; rounding takes most of that).
LP_TOLERANCE = 1e-4
# Levels of length classes: the first has about this many classes, each
# next one classes this many times narrower, down to single lengths; a
# level stops at this fraction above its bound (its patterns only start
# the next level).
FIRST_CLASSES = 64
CLASS_FACTOR = 4
LEVEL_TOLERANCE = 1e-4
# A level is solved only when its classes are at most this share of the
# lengths present (else the next level, or the real lengths, follow).
LEVEL_SHARE = 0.6
# With more lengths present than this, a level of classes whose LP is
# within this fraction of the bound its duals prove for the real lengths
# is rounded into the plan (the real lengths' LP would cost more than it
# could save): the plan's target is 0.05 % above the bound, and rounding
# classes adds a few thousandths of a percent. At 2e-4, log-normal lengths
# of median S / 32 at S = 8192 went on to the real lengths' LP (three
# times the time) for a plan 2 to 6 packs smaller in 130,000 to 260,000.
CLASS_PLAN_ITEMS = 2048
CLASS_PLAN_TOLERANCE = 4e-4
# Residual LPs (rounding) stop at this fraction above their bound: their
# patterns are rounded anyway, and their bounds are not reported.
RESIDUAL_LP_TOLERANCE = 1e-3
# Levels of classes and residual LPs also stop within this many packs of
# their bound (small histograms: a fraction of a pack is all rounding needs).
LEVEL_SLACK = 0.5
# Share of the time limit the LP of the whole histogram may take; rounding
# has the rest.
LP_SHARE = 0.7
# With at most 3 sequences per pack and at most this many lengths, the table
# of maximal patterns (at most n^2 / 12 rows) prices; above, the dynamic
# program over distinct dual values.
TABLE_ITEMS = 4096
# Elements per vectorised block when listing the table or running the
# dynamic program (bounds their temporary memory to a few tens of MB).
_BLOCK_ELEMENTS = 1 << 21

#: The clock deadlines are measured on (tests may replace it).
clock = time.monotonic

#: report(phase, packs or None, bound or None): progress of a long plan.
Report = Callable[[str, "float | None", "float | None"], None]


@dataclasses.dataclass(frozen=True)
class Deadline:
    """When the search must stop: `at` on `clock` (None: never)."""

    at: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> "Deadline":
        return cls(None if seconds is None else clock() + seconds)

    def passed(self) -> bool:
        return self.at is not None and clock() >= self.at

    def left(self) -> float:
        return math.inf if self.at is None else max(0.0, self.at - clock())


NO_DEADLINE = Deadline()


def _no_report(phase, packs, bound):
    del phase, packs, bound


def _highs_model():
    """An empty, silent HiGHS model that can be changed and re-solved warm.

    scipy's `linprog` solves from scratch every time; the HiGHS object it is
    built on (scipy >= 1.15 ships HiGHS' own Python bindings) keeps the basis
    between solves, which is what column generation needs.
    """
    try:
        from scipy.optimize._highspy._core import _Highs
    except ImportError as error:  # pragma: no cover - depends on scipy's build
        raise ImportError(
            "the optimal packer needs scipy >= 1.15, whose HiGHS bindings "
            f"(scipy.optimize._highspy) it re-solves warm: {error}") from error
    model = _Highs()
    model.setOptionValue("output_flag", False)
    model.setOptionValue("primal_feasibility_tolerance", 1e-9)
    model.setOptionValue("dual_feasibility_tolerance", 1e-10)
    return model


def maximal_patterns(item_lengths: np.ndarray, capacity: int,
                     max_items: int) -> np.ndarray:
    """Every maximal pattern of 1 to min(`max_items`, 3) items.

    A pattern is maximal when no item can be replaced by the next longer
    item and none added without exceeding `capacity`; with values that do
    not decrease with length, the most valuable pattern is among them. When
    every length is present these are the patterns that fill a row exactly.

    Args:
      item_lengths: [n] int, strictly increasing, each in [1, capacity].
      capacity: int.
      max_items: int.

    Returns:
      [m, k] int32 item indices, k = min(max_items, 3), each row sorted,
      padded with n (no item). Cost O(n^2) time in blocks, O(m) memory.
    """
    lengths = np.asarray(item_lengths, dtype=np.int64)
    num_items = lengths.size
    width = min(max_items, 3)
    # Index of the longest item no longer than r, for r in [0, capacity]
    # (-1 where none fits).
    longest_within = np.searchsorted(lengths, np.arange(capacity + 1), side="right") - 1
    # Length of the next longer item (capacity + 1 past the longest): an
    # item can be lengthened when the next one still fits.
    next_length = np.append(lengths[1:], capacity + 1)
    shortest = lengths[0]
    found = []
    if width == 1:
        found.append(np.array([[num_items - 1]]))
    if width >= 2:
        # Pairs (a, b), a <= b, b the longest partner of a; maximal when a
        # cannot be lengthened and (for width 3) no third item fits.
        a = np.arange(num_items)
        rest = capacity - lengths
        b = longest_within[rest]
        keep = b >= a
        keep &= lengths + next_length[b.clip(0)] > capacity  # b already longest
        keep &= next_length + lengths[b.clip(0)] > capacity
        if width == 3:
            keep &= lengths + lengths[b.clip(0)] + shortest > capacity
        found.append(np.stack([a[keep], b[keep]], axis=1))
        # A single item is maximal only when nothing pairs with it and no
        # longer item exists.
        if lengths[-1] + shortest > capacity:
            found.append(np.array([[num_items - 1]]))
    if width == 3:
        block = max(1, _BLOCK_ELEMENTS // max(num_items, 1))
        for start in range(0, num_items, block):
            a = np.arange(start, min(start + block, num_items))[:, None]
            b = np.arange(num_items)[None, :]
            rest = capacity - lengths[a] - lengths[b]
            c = longest_within[rest.clip(0)]
            keep = (b >= a) & (rest >= 0) & (c >= b)
            c = c.clip(0)
            # c is already the longest that fits; a and b must not lengthen.
            keep &= next_length[a] + lengths[b] + lengths[c] > capacity
            keep &= lengths[a] + next_length[b] + lengths[c] > capacity
            rows, cols = np.nonzero(keep)
            found.append(np.stack([a[rows, 0], cols, c[rows, cols]], axis=1))
    # Each pattern is found once: singles once, pairs by their first item,
    # triples by their first two.
    return np.concatenate([np.pad(f, ((0, 0), (0, width - f.shape[1])),
                                  constant_values=num_items).astype(np.int32)
                           for f in found], axis=0)


def pattern_values(patterns: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum of item values per pattern ([m, k] indices padded with n)."""
    padded = np.append(np.asarray(values, dtype=np.float64), 0.0)
    return padded[patterns].sum(axis=1)


class _Master:
    """The restricted master LP as one HiGHS model, re-solved warm.

    Rows are the items (demand as lower bounds); the first n - 1 columns are
    the substitution columns (cost 0: +1 on item i, -1 on item i + 1), the
    rest are patterns, kept in ``self.patterns`` ([m, width] item indices
    padded with n).
    """

    def __init__(self, demand: np.ndarray, width: int):
        self.num_items = demand.size
        self.width = width
        self.model = _highs_model()
        n = self.num_items
        empty_i, empty_f = np.zeros(0, dtype=np.int32), np.zeros(0)
        self.model.addRows(n, demand.astype(np.float64), np.full(n, np.inf), 0,
                           empty_i, empty_i,
                           empty_f)
        if n > 1:
            starts = np.arange(0, 2 * (n - 1), 2, dtype=np.int32)
            indices = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)
            self.model.addCols(n - 1, np.zeros(n - 1), np.zeros(n - 1),
                               np.full(n - 1, np.inf), 2 * (n - 1), starts,
                               indices.ravel().astype(np.int32),
                               np.tile([1.0, -1.0], n - 1))
        self.num_substitutions = max(n - 1, 0)
        self.patterns = np.zeros((0, width), dtype=np.int32)
        self._keys: set[bytes] = set()

    def add(self, patterns: np.ndarray):
        """Adds the patterns ([m, <= width] item indices padded with n) not
        already in the master."""
        patterns = np.pad(patterns, ((0, 0), (0, self.width - patterns.shape[1])),
                          constant_values=self.num_items).astype(np.int32)
        fresh = []
        for row in range(len(patterns)):
            key = patterns[row].tobytes()
            if key not in self._keys:
                self._keys.add(key)
                fresh.append(row)
        patterns = patterns[fresh]
        m = patterns.shape[0]
        if m == 0:
            return
        rows = patterns.ravel()
        cols = np.repeat(np.arange(m), self.width)
        real = rows < self.num_items
        matrix = scipy.sparse.coo_array(
            (np.ones(real.sum()), (rows[real], cols[real])),
            shape=(self.num_items, m)).tocsc()
        matrix.sum_duplicates()
        # Primal simplex: the last basis stays feasible when columns are added.
        self.model.setOptionValue("simplex_strategy", 4)
        self.model.addCols(m, np.ones(m), np.zeros(m), np.full(m, np.inf),
                           matrix.nnz, matrix.indptr[:-1].astype(np.int32),
                           matrix.indices.astype(np.int32),
                           matrix.data.astype(np.float64))
        self.patterns = np.concatenate([self.patterns, patterns], axis=0)

    def drop_unused(self, x: np.ndarray, duals: np.ndarray, keep: int):
        """Deletes patterns unused by `x` with the highest reduced cost,
        keeping `keep` patterns, so that each solve stays fast; a dropped
        pattern comes back if pricing finds it again. Returns the mask of the
        patterns kept (the dropped ones are unused: x restricted to it is
        the same solution)."""
        reduced_cost = 1 - pattern_values(self.patterns[:len(x)], duals)
        reduced_cost[x > 0] = -np.inf
        drop = np.argsort(-reduced_cost, kind="stable")[:len(x) - keep]
        drop = np.sort(drop[reduced_cost[drop] > _PRICING_TOLERANCE])
        self.model.deleteCols(len(drop), (drop + self.num_substitutions).astype(np.int32))
        kept = np.ones(len(self.patterns), dtype=bool)
        kept[drop] = False
        for row in drop:
            self._keys.discard(self.patterns[row].tobytes())
        self.patterns = self.patterns[kept]
        return kept

    def solve(self, deadline: Deadline = NO_DEADLINE):
        """Returns (x over patterns, duals y >= 0, objective value), or None
        when the deadline came first."""
        left = deadline.left()
        if left <= 0:
            return None
        # HiGHS' time limit counts the model's run time over all its solves.
        self.model.setOptionValue("time_limit",
                                  float(min(self.model.getRunTime() + left, 1e30)))
        self.model.run()
        status = self.model.modelStatusToString(self.model.getModelStatus())
        if status == "Time limit reached":
            return None
        if status != "Optimal":
            raise RuntimeError("HiGHS failed on the master LP: " + status)
        solution = self.model.getSolution()
        x = np.asarray(solution.col_value)[self.num_substitutions:]
        duals = np.maximum(np.asarray(solution.row_dual), 0.0)
        return x, duals, self.model.getInfo().objective_function_value


class _Pricer:
    """The most valuable patterns for non-decreasing item values (duals).

    `price` returns the best value of any pattern (exact: a dual bound needs
    it) and improving patterns: from the table of maximal patterns (at most
    3 items per pack and `TABLE_ITEMS` lengths), or from the dynamic program
    over distinct values (`_DualLayers`), one maximal pattern per item.
    """

    def __init__(self, item_lengths: np.ndarray, capacity: int, max_items: int):
        self.item_lengths = np.asarray(item_lengths, dtype=np.int64)
        self.capacity = int(capacity)
        self.width = int(max_items)
        # Index of the longest item no longer than r (-1: none).
        self.longest_within = np.searchsorted(
            self.item_lengths, np.arange(capacity + 1), side="right") - 1
        self.table = (maximal_patterns(self.item_lengths, capacity, max_items)
                      if max_items <= 3 and self.item_lengths.size <= TABLE_ITEMS
                      else None)

    def best_value(self, values: np.ndarray) -> float:
        """The largest value of any pattern (`values` non-decreasing, >= 0)."""
        return self.price(values, 0)[0]

    def price(self, values: np.ndarray, limit: int):
        """(best value, [k, width] patterns of value above 1, most valuable
        first, k <= `limit`)."""
        values = np.asarray(values, dtype=np.float64)
        num_items = self.item_lengths.size
        if self.table is not None:
            table_values = pattern_values(self.table, values)
            best = float(table_values.max())
            chosen = np.flatnonzero(table_values > 1 + _PRICING_TOLERANCE)
            if chosen.size > limit:
                chosen = chosen[np.argpartition(-table_values[chosen], limit - 1)[:limit]] \
                    if limit > 0 else chosen[:0]
            chosen = chosen[np.argsort(-table_values[chosen], kind="stable")]
            patterns = np.pad(self.table[chosen],
                              ((0, 0), (0, self.width - self.table.shape[1])),
                              constant_values=num_items)
            return best, patterns.astype(np.int32)
        layers = _DualLayers(values, self.item_lengths, self.capacity, self.width)
        room = self.capacity - self.item_lengths
        per_item = values + layers.best[layers.top][room]
        best = float(per_item.max())
        order = np.argsort(-per_item, kind="stable")
        chosen = order[per_item[order] > 1 + _PRICING_TOLERANCE][:limit]
        if not chosen.size:
            return best, np.zeros((0, self.width), dtype=np.int32)
        patterns = layers.patterns_holding(chosen, room[chosen])
        patterns = _maximal(patterns, values, self.item_lengths, self.capacity,
                            self.longest_within)
        _, first = np.unique(patterns, axis=0, return_index=True)
        return best, patterns[np.sort(first)].astype(np.int32)


class _DualLayers:
    """``best[k][r]``: the largest value of at most k items of total length
    at most r, for non-decreasing values; ``choice[k][r]`` the item added at
    layer k (-1: none).

    Only the first (shortest) item of each run of equal values can be in a
    best pattern's place (a longer one of the run takes more room for the
    same value), and items of value 0 add nothing: the layers run over m
    such items, O(capacity x m) each, in blocks of rows.
    """

    def __init__(self, values, item_lengths, capacity, max_items):
        starts = np.flatnonzero(np.diff(values, prepend=-np.inf) > 0)
        starts = starts[values[starts] > 0]
        best = [np.zeros(capacity + 1)]
        choice = [np.full(capacity + 1, -1, dtype=np.int64)]
        if starts.size:
            lengths = item_lengths[starts]
            gains = values[starts]
            layers = int(min(max_items, capacity // lengths[0]))
            block = max(1, _BLOCK_ELEMENTS // starts.size)
            room = np.arange(capacity + 1)
            for _ in range(layers - 1):  # the item itself takes the last layer
                previous = best[-1]
                # best[k - 1][r - length], -inf where r < length: a padded gather.
                padded = np.concatenate([np.full(capacity, -np.inf), previous])
                value = np.empty(capacity + 1)
                item = np.empty(capacity + 1, dtype=np.int64)
                for start in range(0, capacity + 1, block):
                    rows = room[start:start + block, None]
                    candidates = padded[rows + (capacity - lengths)[None, :]] + gains
                    chosen = candidates.argmax(axis=1)
                    item[start:start + block] = chosen
                    value[start:start + block] = candidates[np.arange(len(chosen)), chosen]
                take = value > previous + 1e-12
                if not take.any():
                    break  # no further layer can improve either
                best.append(np.where(take, value, previous))
                choice.append(np.where(take, starts[item], -1))
        self.best, self.choice = best, choice
        self.top = len(best) - 1
        self.item_lengths = item_lengths
        self.width = max_items

    def patterns_holding(self, items: np.ndarray, room: np.ndarray) -> np.ndarray:
        """[k, width] patterns: each of `items` and the best pattern within
        its `room` (first column: the item; padded with n)."""
        num_items = self.item_lengths.size
        patterns = np.full((items.size, self.width), num_items, dtype=np.int64)
        patterns[:, 0] = items
        count = np.ones(items.size, dtype=np.int64)
        left = room.copy()
        for layer in range(self.top, 0, -1):
            item = self.choice[layer][left]
            rows = np.flatnonzero(item >= 0)
            patterns[rows, count[rows]] = item[rows]
            count[rows] += 1
            left[rows] -= self.item_lengths[item[rows]]
        return patterns


def _maximal(patterns, values, item_lengths, capacity, longest_within):
    """Patterns made maximal without losing value: the items after the first
    (longest first), then the first, lengthened to the longest item of their
    run of equal values that fits, then the longest item that fits added
    while there is room and a slot. Sorted rows, padded with n."""
    num_items = item_lengths.size
    width = patterns.shape[1]
    padded_lengths = np.append(item_lengths, 0)
    rises = np.flatnonzero(np.diff(values) > 0)
    run_ends = np.append(rises, num_items - 1)
    run_end = np.append(run_ends[np.searchsorted(run_ends, np.arange(num_items))],
                        num_items)
    own = patterns[:, :1].copy()
    others = -np.sort(-np.where(patterns[:, 1:] < num_items, patterns[:, 1:], -1), axis=1)
    others[others < 0] = num_items  # longest first, padding last
    columns = np.concatenate([others, own], axis=1)
    total = padded_lengths[columns].sum(axis=1)
    for position in range(width):
        column = columns[:, position]
        rows = np.flatnonzero(column < num_items)
        item = column[rows]
        longer = np.minimum(run_end[item],
                            longest_within[capacity - total[rows] + item_lengths[item]])
        total[rows] += item_lengths[longer] - item_lengths[item]
        columns[rows, position] = longer
    count = (columns < num_items).sum(axis=1)
    columns = np.sort(columns, axis=1)  # padding last
    for _ in range(width):
        rows = np.flatnonzero((count < width) & (capacity - total >= item_lengths[0]))
        if not rows.size:
            break
        added = longest_within[capacity - total[rows]]
        columns[rows, width - 1] = added  # a padding slot (count < width)
        columns[rows] = np.sort(columns[rows], axis=1)
        total[rows] += item_lengths[added]
        count[rows] += 1
    return columns


@dataclasses.dataclass(frozen=True)
class _Problem:
    """Items to pack: lengths [n] (increasing), demand [n], rows of
    `capacity` tokens holding at most `width` items."""

    lengths: np.ndarray
    demand: np.ndarray
    capacity: int
    width: int

    def restricted(self, items: np.ndarray, demand: np.ndarray) -> "_Problem":
        return _Problem(self.lengths[items], demand, self.capacity, self.width)


@dataclasses.dataclass(frozen=True)
class _Search:
    """How far a search may go: column-generation rounds per LP, the
    deadline, and where to report its progress."""

    max_iterations: int = 1000
    deadline: Deadline = NO_DEADLINE
    report: Report = _no_report


@dataclasses.dataclass
class _LP:
    """An LP solved by column generation, as far as it went.

    Attributes:
      patterns: [m, width] the master's patterns (item indices padded with n).
      x: [m] the master's solution over them (empty if none was solved).
      objective: its value (sum of x).
      bound: a lower bound on the LP optimum: h.y for `duals`.
      duals: [n] non-decreasing, dual feasible (every pattern's value <= 1).
      stopped: whether the deadline stopped it.
    """

    patterns: np.ndarray
    x: np.ndarray
    objective: float
    bound: float
    duals: np.ndarray
    stopped: bool = False


def _trivial_duals(problem: _Problem):
    """The better of the token duals (y = l / S) and the count duals
    (y = 1 / D): dual feasible without pricing (no pattern exceeds S tokens
    or D items). Returns (duals, bound)."""
    tokens = np.asarray(problem.lengths, dtype=np.float64) / problem.capacity
    count = np.full(problem.lengths.size, 1.0 / problem.width)
    token_bound, count_bound = float(problem.demand @ tokens), float(problem.demand @ count)
    return (tokens, token_bound) if token_bound >= count_bound else (count, count_bound)


def long_sequence_bound(histogram: np.ndarray, max_sequence_length: int) -> tuple[float, int]:
    """The long-sequence bound and its threshold k: for k <= S / 2, a row
    holding a sequence longer than S - k has room only for sequences
    shorter than k, so the packs are at least (the sequences longer than
    S - k) + (the tokens of those from k to S - k) / S. It counts the rows
    that sequences of almost S tokens waste where shorter sequences are too
    few to fill them, which the token bound misses. This is the bound of
    Martello and Toth ("Lower bounds and reduction procedures for the bin
    packing problem", Discrete Applied Mathematics 28, 1990), Fekete and
    Schepers' dual-feasible function f_0^k. Every k is tried, O(S) by
    prefix sums; k = 1 is the token bound.

    Args:
      histogram: [S] int, ``histogram[i]`` sequences of length ``i + 1``.
      max_sequence_length: int, S.

    Returns:
      (bound, k) for the best k, the smallest where several tie.
    """
    histogram = np.asarray(histogram, dtype=np.float64)[:max_sequence_length]
    capacity = int(max_sequence_length)
    k = np.arange(1, max(1, capacity // 2) + 1)
    # [j]: sequences (tokens) of length below j + 1, for j = 0 .. S.
    count_below = np.concatenate([[0.0], np.cumsum(histogram)])
    tokens_below = np.concatenate([[0.0], np.cumsum(histogram * np.arange(
        1, histogram.size + 1))])
    above = np.minimum(capacity - k, histogram.size)
    below = np.minimum(k - 1, histogram.size)
    bounds = (count_below[-1] - count_below[above]
              + (tokens_below[above] - tokens_below[below]) / capacity)
    best = int(np.argmax(bounds))
    return float(bounds[best]), int(k[best])


def _quick_duals(problem: _Problem):
    """The better of `_trivial_duals` and the duals of
    `long_sequence_bound` (y = 1 above S - k, l / S from k to S - k, 0
    below k). Returns (duals, bound), the duals non-decreasing.

    Column generation starts from `_trivial_duals`, not these: started
    from these on Wikipedia's histogram (S = 512, 4 per pack), it stopped
    on them (`_close_enough`) with a master that rounded to 280 packs above
    the optimum."""
    duals, bound = _trivial_duals(problem)
    histogram = np.zeros(problem.capacity, dtype=np.float64)
    histogram[np.asarray(problem.lengths) - 1] = problem.demand
    long_bound, threshold = long_sequence_bound(histogram, problem.capacity)
    if long_bound <= bound:
        return duals, bound
    lengths = np.asarray(problem.lengths, dtype=np.float64)
    duals = np.where(lengths > problem.capacity - threshold, 1.0,
                     np.where(lengths >= threshold, lengths / problem.capacity, 0.0))
    return duals, long_bound


def _close_enough(objective: float, bound: float, tolerance: float,
                  slack: float = 0.0) -> bool:
    """Whether column generation may stop: the objective is within
    `tolerance` of the bound, or within `slack` packs, or both round up to
    the same number of packs (no plan beats the bound rounded up, and more
    rounds could not raise it past the objective)."""
    return (objective <= bound * (1 + tolerance) + max(slack, 1e-9)
            or math.ceil(bound - 1e-6) >= math.ceil(objective - 1e-6))


def _column_generation(problem: _Problem, seeds, search: _Search, *, tolerance,
                       phase, center=None, slack=0.0) -> _LP:
    """The LP of one histogram by stabilised column generation.

    Starts from a pattern per item and `seeds`; `center` (non-decreasing
    dual-feasible duals, e.g. a coarser level's `_duals_below`) is a first
    bound, kept when better than the token and count bounds. Stops when the
    master's objective is within `tolerance` of the best bound
    (`_close_enough`; None: never, the LP is solved to the end), when no
    improving pattern is left, after ``search.max_iterations`` rounds or at
    the deadline.
    """
    num_items, width, demand = problem.lengths.size, problem.width, problem.demand
    pricer = _Pricer(problem.lengths, problem.capacity, width)
    master = _Master(demand, width)
    master.add(np.concatenate([np.arange(num_items, dtype=np.int32)[:, None],
                               np.full((num_items, width - 1), num_items,
                                       dtype=np.int32)], axis=1))
    if len(seeds):
        master.add(seeds)
    best_duals, best_bound = _trivial_duals(problem)
    if center is not None and demand @ center > best_bound:
        best_duals, best_bound = center, float(demand @ center)
    limit = max(COLUMNS_PER_ROUND, int(COLUMNS_PER_ROUND_PER_ITEM * num_items))
    most_columns = max(MASTER_COLUMNS_PER_ITEM * num_items, 4000)
    x, objective, stopped = None, math.inf, False
    for _ in range(search.max_iterations):
        solved = master.solve(search.deadline)
        if solved is None:
            stopped = True
            break
        x, duals, objective = solved
        duals = np.maximum.accumulate(duals)
        value, new = pricer.price(duals, limit)
        if value > 0 and demand @ duals / value > best_bound:
            best_duals, best_bound = duals / value, float(demand @ duals / value)
        search.report(phase, objective, best_bound)
        if not len(new) or (tolerance is not None
                            and _close_enough(objective, best_bound, tolerance, slack)):
            break
        if search.deadline.passed():
            stopped = True
            break
        if len(master.patterns) + len(new) > most_columns:
            kept = master.drop_unused(x, duals, most_columns // 2)
            x = x[kept]
        master.add(new)
    if x is None:  # the deadline came before the first solve
        return _LP(master.patterns[:0], np.zeros(0), math.inf, best_bound,
                   best_duals, stopped=True)
    return _LP(master.patterns[:len(x)], x, objective, best_bound, best_duals,
               stopped=stopped)


def _classes(problem: _Problem, class_width: int, at_shortest: bool = False):
    """The items grouped into classes of `class_width` tokens, ``ceil(l /
    class_width)``, each at the longest length it holds (so that its
    patterns are real ones), or with `at_shortest` at the shortest (so that
    every real pattern is one of its patterns: its LP is a lower bound):
    (the classes' `_Problem`, class of each item)."""
    labels = -(-problem.lengths // class_width)
    _, class_of = np.unique(labels, return_inverse=True)
    if at_shortest:
        class_lengths = np.full(class_of.max() + 1, problem.capacity, dtype=np.int64)
        np.minimum.at(class_lengths, class_of, problem.lengths)
    else:
        class_lengths = np.zeros(class_of.max() + 1, dtype=np.int64)
        np.maximum.at(class_lengths, class_of, problem.lengths)
    class_demand = np.bincount(class_of, weights=problem.demand).astype(np.int64)
    return _Problem(class_lengths, class_demand, problem.capacity, problem.width), class_of


def _class_widths(item_lengths, capacity):
    """Class widths of the levels before the real lengths: powers of two from
    about capacity / `FIRST_CLASSES`, each `CLASS_FACTOR` times narrower,
    kept while the classes are fewer than `LEVEL_SHARE` of the lengths."""
    widths = []
    width = 1 << max(0, int(math.ceil(math.log2(max(capacity / FIRST_CLASSES, 1)))))
    while width > 1:
        if np.unique(-(-item_lengths // width)).size <= LEVEL_SHARE * item_lengths.size:
            widths.append(width)
        width //= CLASS_FACTOR
    return widths


def _lift_patterns(patterns, from_lengths, to_lengths):
    """Patterns over items `from_lengths` (padded with their count) as
    patterns over `to_lengths`: each item becomes the longest of these no
    longer than it (so every pattern still fits)."""
    index = np.searchsorted(to_lengths, from_lengths, side="right") - 1
    index = np.append(index, to_lengths.size)
    lifted = np.sort(index[patterns], axis=1)
    lifted[lifted < 0] = to_lengths.size
    lifted = np.sort(lifted, axis=1)
    lifted = lifted[lifted[:, 0] < to_lengths.size]
    return np.unique(lifted, axis=0).astype(np.int32) if len(lifted) else lifted.astype(np.int32)


@dataclasses.dataclass
class _Level:
    """The LP the plan is rounded from: of the real lengths, or of length
    classes (`class_of` the class of each real item) when those were
    certified; `bound` is a lower bound for the real histogram."""

    problem: _Problem
    lp: _LP
    bound: float
    class_of: np.ndarray | None = None


def _duals_below(level: _Problem, lp: _LP, lengths: np.ndarray) -> np.ndarray:
    """Dual-feasible duals for `lengths` from a level of classes: each length
    takes the dual of the longest class (at its longest length) no longer
    than itself, 0 below the first. Any pattern of these lengths becomes a
    pattern of those classes no longer than it, worth at most 1: so ``h.y``
    is a lower bound for `lengths`, with no pricing (the rounded-down
    relaxation's bound, from the rounded-up LP's duals)."""
    below = np.searchsorted(level.lengths, lengths, side="right") - 1
    return np.where(below >= 0, lp.duals[below.clip(0)], 0.0)


def _solve_lp_levels(problem: _Problem, seeds, search: _Search, *,
                     tolerance) -> _Level:
    """The LP of the whole histogram: column generation on levels of length
    classes (`_class_widths`), then on the real lengths, each level started
    from the patterns the last one used and its duals (`_duals_below`).

    Each level's duals give a bound for the real lengths (`_duals_below`).
    Where the real lengths are many (over `CLASS_PLAN_ITEMS`), a level of
    classes is planned instead of going further when its LP is within
    `CLASS_PLAN_TOLERANCE` of that bound: a plan of classes is a plan of
    real sequences (a class is at its longest length).
    """
    real_duals, real_bound = _trivial_duals(problem)
    proven = [real_bound]  # what a level reports: the bound for the real lengths
    level_search = dataclasses.replace(
        search, report=lambda phase, packs, _: search.report(phase, packs, proven[0]))
    previous = None  # (the level's problem, its LP, class of each item)
    out_of_time = False
    for class_width in _class_widths(problem.lengths, problem.capacity):
        if search.deadline.passed():
            break
        level, class_of = _classes(problem, class_width)
        level_seeds, center = np.zeros((0, problem.width), dtype=np.int32), None
        if previous is not None:
            used = previous[1].patterns[previous[1].x > 0]
            level_seeds = _lift_patterns(used, previous[0].lengths, level.lengths)
            center = _duals_below(previous[0], previous[1], level.lengths)
        lp = _column_generation(
            level, level_seeds, level_search, tolerance=LEVEL_TOLERANCE, center=center,
            slack=LEVEL_SLACK, phase=f"LP of {level.lengths.size:,} length classes")
        if not len(lp.x):
            # HiGHS's own clock can stop the first solve before ours says
            # the deadline passed: out of time either way.
            out_of_time = True
            break
        previous = level, lp, class_of
        duals = _duals_below(level, lp, problem.lengths)
        if problem.demand @ duals > real_bound:
            real_duals, real_bound = duals, float(problem.demand @ duals)
            proven[0] = real_bound
        search.report(f"LP of {level.lengths.size:,} length classes", lp.objective,
                      real_bound)
        if lp.stopped or (problem.lengths.size > CLASS_PLAN_ITEMS and
                          lp.objective <= real_bound * (1 + CLASS_PLAN_TOLERANCE)):
            return _Level(level, lp, real_bound, class_of)
    if previous is not None and (out_of_time or search.deadline.passed()):
        return _Level(previous[0], dataclasses.replace(previous[1], stopped=True),
                      real_bound, previous[2])
    level_seeds = seeds
    if previous is not None:
        used = previous[1].patterns[previous[1].x > 0]
        lifted = _lift_patterns(used, previous[0].lengths, problem.lengths)
        level_seeds = np.concatenate([lifted, seeds]) if len(seeds) else lifted
    lp = _column_generation(problem, level_seeds, search, tolerance=tolerance,
                            center=real_duals, phase="LP")
    if not len(lp.x) and previous is not None:  # stopped before its first solve
        return _Level(previous[0], dataclasses.replace(previous[1], stopped=True),
                      max(real_bound, lp.bound), previous[2])
    return _Level(problem, lp, max(real_bound, lp.bound))


def simple_bound(histogram: np.ndarray, max_sequence_length: int,
                 max_sequences_per_pack: int) -> float:
    """A lower bound on the packs in O(S log S), with no LP: the best of the
    token, count and long-sequence bounds (`_quick_duals`). It is the
    bound that certifies the shortcuts of `pack_histogram`."""
    histogram = np.asarray(histogram, dtype=np.int64)
    item_lengths = np.flatnonzero(histogram) + 1
    if item_lengths.size == 0:
        return 0.0
    return _quick_duals(_Problem(item_lengths, histogram[item_lengths - 1],
                                 int(max_sequence_length),
                                 int(max_sequences_per_pack)))[1]


def class_bound(histogram: np.ndarray, max_sequence_length: int,
                max_sequences_per_pack: int, deadline: Deadline = NO_DEADLINE) -> float:
    """A lower bound on the packs in a fraction of a second: the LP of the
    first level of length classes (about `FIRST_CLASSES`; the lengths
    themselves when they are few), its duals given to the real lengths
    (`_duals_below`); at least `simple_bound`. `pack_histogram` tries its
    shortcuts only when this leaves `simple_bound` in reach."""
    histogram = np.asarray(histogram, dtype=np.int64)
    item_lengths = np.flatnonzero(histogram) + 1
    if item_lengths.size == 0:
        return 0.0
    demand = histogram[item_lengths - 1]
    width = int(min(max_sequences_per_pack, max_sequence_length // item_lengths[0]))
    if width == 1:
        return float(demand.sum())
    problem = _Problem(item_lengths, demand, max_sequence_length, width)
    _, bound = _quick_duals(problem)
    widths = _class_widths(item_lengths, max_sequence_length)
    if not widths:
        lp = _column_generation(problem, np.zeros((0, width), dtype=np.int32),
                                _Search(deadline=deadline), tolerance=LEVEL_TOLERANCE,
                                slack=LEVEL_SLACK, phase="bound")
        return max(bound, lp.bound)
    bounds = [bound]
    for at_shortest in (False, True):
        level, _ = _classes(problem, widths[0], at_shortest)
        lp = _column_generation(level, np.zeros((0, width), dtype=np.int32),
                                _Search(deadline=deadline), tolerance=LEVEL_TOLERANCE,
                                slack=LEVEL_SLACK, phase="bound")
        # Classes at their longest: duals for the real lengths (a length
        # shorter than its class's longest gets none); at their shortest:
        # the LP's own bound, which keeps the short sequences' count (where
        # most sequences are that short, the first falls to the token bound).
        bounds.append(lp.bound if at_shortest
                      else float(demand @ _duals_below(level, lp, item_lengths)))
    return max(bounds)


def _refine(class_pairs, class_of: np.ndarray, item_lengths: np.ndarray,
            demand: np.ndarray, class_lengths: np.ndarray):
    """Real (strategy, count) pairs from a plan of classes (strategies of
    class lengths, each a class's longest length): each slot of class c, in
    plan order, takes the next sequence of class c, shortest first; it is
    no longer than the slot. The plan must hold each class's sequences."""
    if not class_pairs:
        return []
    depth = max(len(strategy) for strategy, _ in class_pairs)
    strategies = np.zeros((len(class_pairs), depth), dtype=np.int64)
    for row, (strategy, _) in enumerate(class_pairs):
        strategies[row, :len(strategy)] = strategy
    packs = np.repeat(strategies, [count for _, count in class_pairs], axis=0)
    slots = packs.ravel()
    filled = np.flatnonzero(slots)
    slot_class = np.searchsorted(class_lengths, slots[filled])
    if class_lengths.size < 1 << 15:
        slot_class = slot_class.astype(np.int16)  # a stable sort is a radix sort
    if not np.array_equal(np.bincount(slot_class, minlength=class_lengths.size),
                          np.bincount(class_of, weights=demand,
                                      minlength=class_lengths.size)):
        raise AssertionError("the plan of classes does not hold the histogram's sequences")
    # Slots sorted by class, sequences sorted by length (so by class): the
    # i-th of each meet.
    order = filled[np.argsort(slot_class, kind="stable")]
    rows = np.zeros(slots.size, dtype=np.int64)
    rows[order] = np.repeat(item_lengths, demand)
    return strategy_counts_of_rows(rows.reshape(packs.shape))


def _unplaced(demand: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """Sequences left when `demand[i]` sequences of item i go into `slots`
    (counts per item length, items sorted by length), each slot taking one
    sequence no longer than itself.

    Longest sequences first, each into any free slot at least as long, places
    as many as possible (all free slots fit every shorter sequence too). The
    slots still free after item i are a Lindley recursion,
    free_i = max(0, free_{i+1} + slots_i - demand_i), solved in closed form
    with a running minimum.
    """
    surplus = np.cumsum((slots - demand)[::-1])[::-1]  # sum over items >= i
    surplus = np.append(surplus, 0)
    free = surplus - np.minimum.accumulate(surplus[::-1])[::-1]
    placed = free[1:] + slots - free[:-1]
    return demand - placed


def enumerate_patterns(weights: np.ndarray, capacity: int, max_items: int,
                       limit: int) -> np.ndarray | None:
    """Every pattern (multiset of items within capacity and count), or None.

    Returns an [m, max_items] int32 matrix of item indices padded with n, or
    None as soon as there would be more than `limit` patterns.
    """
    weights = [int(w) for w in weights]
    patterns: list[list[int]] = []

    def extend(first: int, room: int, items_left: int, pattern: list[int]):
        for item in range(first, len(weights)):
            if weights[item] > room:
                break  # weights are increasing
            pattern.append(item)
            patterns.append(list(pattern))
            if len(patterns) > limit:
                raise OverflowError
            if items_left > 1:
                extend(item, room - weights[item], items_left - 1, pattern)
            pattern.pop()

    try:
        extend(0, capacity, max_items, [])
    except OverflowError:
        return None
    table = np.full((len(patterns), max_items), len(weights), dtype=np.int32)
    for j, pattern in enumerate(patterns):
        table[j, :len(pattern)] = pattern
    return table


def _solve_integer_master(patterns: np.ndarray, demand: np.ndarray, *,
                          node_limit: int, target: float | None = None,
                          time_limit: float = _INTEGER_SAFETY_SECONDS):
    """Integer master: fewest packs of `patterns` (plus the substitution
    columns) that hold `demand`.

    HiGHS branch-and-cut; returns the integer number of packs per pattern,
    or None when HiGHS found no solution within `node_limit`
    branch-and-bound nodes. A node limit, unlike a time limit, gives the
    same plan on a busy machine as on an idle one; `time_limit` is a guard
    (and the caller's deadline).
    """
    num_items = demand.size
    num_patterns = len(patterns)
    rows = patterns.ravel()
    cols = np.repeat(np.arange(num_patterns), patterns.shape[1])
    real = rows < num_items
    steps = np.arange(num_items - 1)
    columns = scipy.sparse.coo_array(
        (np.concatenate([np.ones(real.sum()), np.ones(steps.size), -np.ones(steps.size)]),
         (np.concatenate([rows[real], steps, steps + 1]),
          np.concatenate([cols[real], num_patterns + steps, num_patterns + steps]))),
        shape=(num_items, num_patterns + steps.size)).tocsc()
    cost = np.concatenate([np.ones(num_patterns), np.zeros(steps.size)])
    result = scipy.optimize.milp(
        cost,
        constraints=scipy.optimize.LinearConstraint(columns, lb=demand, ub=np.inf),
        integrality=np.ones(cost.size),
        bounds=scipy.optimize.Bounds(0, np.inf),
        options={"node_limit": node_limit, "time_limit": time_limit,
                 **({} if target is None else {"mip_rel_gap": 0.5 / (target + 1)})})
    if result.x is None:
        return None
    whole = np.rint(result.x).astype(np.int64)
    if (columns @ whole < demand).any():
        return None
    return whole[:num_patterns]


def _fill_packs(patterns: np.ndarray, counts: np.ndarray, item_lengths: np.ndarray,
                demand: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
    """The plan's strategies: sequences placed into the packs' slots.

    `patterns` [g, width] (item indices padded with n) taken `counts` times
    each. Sequences go longest first into a free slot at least as long:
    first a slot of their own length, then the shortest longer one left free.
    Where the packs of one pattern receive different sequences in a slot,
    the pattern splits into several strategies. Slots left free are padding.
    """
    num_items = item_lengths.size
    group, slot = np.nonzero(patterns < num_items)
    slot_item = patterns[group, slot]
    order = np.lexsort((slot, group, -slot_item))  # longest slot first
    group, slot, slot_item = group[order], slot[order], slot_item[order]
    left = counts[group].astype(np.int64).tolist()
    slot_item = slot_item.tolist()
    # What each slot entry receives, in order: (entry, item, number of packs).
    pieces: list[tuple[int, int, int]] = []
    free_stack: list[int] = []  # slot entries with room left, longest at bottom
    entry = 0
    for item in range(num_items - 1, -1, -1):
        # This length's own slots become available (they fit it and shorter).
        start = entry
        while entry < len(slot_item) and slot_item[entry] == item:
            entry += 1
        wanted = int(demand[item])
        for e in range(start, entry):  # own length first
            if wanted == 0:
                break
            take = min(wanted, left[e])
            pieces.append((e, item, take))
            left[e] -= take
            wanted -= take
        while wanted > 0:  # then the shortest longer slot still free
            if not free_stack:
                raise AssertionError(f"no slot left for {wanted} sequences of "
                                     f"length {item_lengths[item]}")
            e = free_stack[-1]
            take = min(wanted, left[e])
            pieces.append((e, item, take))
            left[e] -= take
            wanted -= take
            if left[e] == 0:
                free_stack.pop()
        free_stack.extend(e for e in range(entry - 1, start - 1, -1) if left[e] > 0)
    if not pieces:
        return []
    # Each piece fills packs [begin, end) of its pattern's copies in one
    # slot, its entry's earlier pieces before it.
    entries, items, numbers = np.asarray(pieces, dtype=np.int64).T
    order = np.argsort(entries, kind="stable")
    entries, numbers, lengths = entries[order], numbers[order], item_lengths[items[order]]
    end = np.cumsum(numbers)
    first_of_entry = np.r_[True, entries[1:] != entries[:-1]]
    end -= np.maximum.accumulate(np.where(first_of_entry, end - numbers, 0))
    begin = end - numbers
    # The pattern's copies split where any of its slots' pieces change: one
    # strategy per run of copies between consecutive cuts.
    key_base = int(counts.max()) + 1
    piece_group = group[entries].astype(np.int64)
    cuts = np.unique(np.concatenate([piece_group * key_base + begin,
                                     piece_group * key_base + end]))
    within = cuts[1:] // key_base == cuts[:-1] // key_base
    runs, run_copies = cuts[:-1][within], np.diff(cuts)[within]
    # Each piece lies over the runs whose first copy is within it.
    first = np.searchsorted(runs, piece_group * key_base + begin)
    covered = np.searchsorted(runs, piece_group * key_base + end) - first
    run_of = np.repeat(first - np.cumsum(covered) + covered, covered) + np.arange(covered.sum())
    rows = np.zeros((runs.size, patterns.shape[1]), dtype=np.int64)
    rows[run_of, np.repeat(slot[entries], covered)] = np.repeat(lengths, covered)
    return strategy_counts_of_rows(rows, run_copies)


class Solution(NamedTuple):
    """What `pack_optimal` found.

    Attributes:
      pairs: list of (strategy, count), the plan; None when the deadline
        came before any of it (the caller keeps its own).
      lp_lower_bound: float, a lower bound on the number of packs: the LP
        optimum's when column generation converged, else the best bound its
        duals proved (within `LP_TOLERANCE` of the LP's objective, or less
        close when the deadline stopped it).
      stopped: whether the deadline stopped the search (the plan is then the
        rounding so far, its rest packed by best-fit decreasing).
    """

    pairs: list | None
    lp_lower_bound: float
    stopped: bool = False


def pack_optimal(histogram: np.ndarray, max_sequence_length: int,
                 max_sequences_per_pack: int, *, initial_strategies=(),
                 max_iterations: int = 1000, integer_node_limit: int = 50,
                 deadline: Deadline = NO_DEADLINE,
                 report: Report | None = None) -> Solution:
    """Near-optimal packing by column generation plus rounding and repair.

    Args:
      histogram: [S] int.
      max_sequence_length: int.
      max_sequences_per_pack: int.
      initial_strategies: iterable of tuples of lengths, patterns to start the
        master LP from (a heuristic's strategies make a good warm start); a
        pattern per length is always added.
      max_iterations: int, cap on column-generation rounds per LP solve.
      integer_node_limit: int, branch-and-bound nodes HiGHS may explore in
        each integer master.
      deadline: `Deadline`: when it passes, the search stops and the rest of
        the sequences are packed by best-fit decreasing.
      report: optional ``report(phase, packs, bound)``, called after each
        round of column generation and of rounding.

    Returns:
      `Solution`.

    Note:
      See the module docstring for the method. Time on the Wikipedia-512
      histogram (16.3 M sequences, 508 lengths) with D = 3: a few tenths of a
      second.
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    max_len = max_sequence_length
    item_lengths = np.flatnonzero(histogram) + 1  # [n], increasing
    if item_lengths.size == 0:
        return Solution([], 0.0)
    demand = histogram[item_lengths - 1]
    num_items = item_lengths.size
    # More items than the shortest length allows cannot fit in any pack.
    width = int(min(max_sequences_per_pack, max_len // item_lengths[0]))
    if width == 1:
        return Solution([((int(length),), int(count)) for length, count
                         in zip(item_lengths, demand)], float(demand.sum()))
    search = _Search(max_iterations, deadline, report or _no_report)
    problem = _Problem(item_lengths, demand, max_len, width)

    # Item index of each length; max_len + 1 pads a strategy (no item).
    row_of_length = np.full(max_len + 2, num_items)
    row_of_length[item_lengths] = np.arange(num_items)
    strategies = [strategy for strategy in initial_strategies if len(strategy) <= width]
    seeds = np.full((len(strategies), width), max_len + 1)
    for row, strategy in enumerate(strategies):
        seeds[row, :len(strategy)] = strategy
    seeds = np.sort(row_of_length[seeds], axis=1).astype(np.int32)

    # The LP may take LP_SHARE of the time left: rounding needs the rest
    # (the residual's LPs are small; best-fit decreasing packs a residual
    # much worse where the cap binds).
    lp_deadline = deadline if deadline.at is None else Deadline(
        clock() + LP_SHARE * deadline.left())
    level = _solve_lp_levels(problem, seeds,
                             dataclasses.replace(search, deadline=lp_deadline),
                             tolerance=LP_TOLERANCE)
    if not len(level.lp.x):
        return Solution(None, level.bound, True)  # the caller's plan stands
    pairs, stopped = _round(level.problem, level.lp, search, level.bound,
                            integer_node_limit)
    if level.class_of is not None:
        pairs = _refine(pairs, level.class_of, item_lengths, demand,
                        level.problem.lengths)
    return Solution(pairs, level.bound, stopped or level.lp.stopped)


def _round(problem: _Problem, lp: _LP, search: _Search, bound: float,
           integer_node_limit: int):
    """Whole packs from the LP of `problem`: (pairs of strategies of its
    lengths, whether the deadline stopped it). See the module docstring."""
    item_lengths, demand, num_items = problem.lengths, problem.demand, problem.lengths.size
    max_len = problem.capacity
    remaining = demand.copy()
    chosen_patterns, chosen_counts = [], []
    small = None  # the first residual small enough for the integer master
    stopped = False
    active = np.arange(num_items)
    while remaining.any() and len(lp.x):
        # Each round solves the LP of the sequences still unplaced, over the
        # lengths they have: a small model, started from the patterns the
        # last round used (a warm re-solve of the whole model would pivot
        # through hundreds of rows whose demand is now zero).
        patterns, x = lp.patterns, lp.x
        if small is None and not stopped and remaining.sum() <= SMALL_PROBLEM_SEQUENCES \
                and active.size <= INTEGER_MASTER_ITEMS:
            small = _SmallResidual(len(chosen_counts), active, remaining[active],
                                   patterns, lp.bound, lp.duals)
        whole = np.floor(x + 1e-9).astype(np.int64)
        if len(chosen_counts) == 0:
            whole = np.maximum(whole - RESIDUAL_MARGIN, 0)
        if not whole.any() and not stopped:
            # Dive: one pack of each pattern used at least DIVE_THRESHOLD
            # (at least of the most used one), then solve again; one at a
            # time once few sequences are left.
            if remaining.sum() > SMALL_PROBLEM_SEQUENCES:
                whole[x >= DIVE_THRESHOLD] = 1
            # Degenerate LPs (many patterns a third or half used) would give
            # one pack a round: take a few percent of the residual at once.
            batch = 1 if remaining.sum() <= SMALL_PROBLEM_SEQUENCES else \
                max(1, int(DIVE_FRACTION * x.sum()))
            whole[_dive_patterns(patterns, x, remaining[active], batch)] = 1
        used = np.flatnonzero(whole)
        taken = _to_items(patterns[used], active, num_items)
        chosen_patterns.append(taken)
        chosen_counts.append(whole[used])
        seeds = _to_items(patterns[x > 0], active, num_items)
        slots = np.zeros(num_items + 1, dtype=np.int64)
        np.add.at(slots, taken, whole[used, None])
        remaining = _unplaced(remaining, slots[:num_items])
        packs = sum(int(counts.sum()) for counts in chosen_counts)
        if not remaining.any():
            break
        if stopped or search.deadline.passed():
            stopped = True
            break
        search.report("rounding", packs + float(x.sum() - whole.sum()), bound)
        active = np.flatnonzero(remaining)
        residual_search = dataclasses.replace(
            search, report=lambda phase, objective, _, packs=packs: search.report(
                phase, packs + objective, bound))
        # A small residual's LP is solved to the end: its patterns and bound
        # decide the last packs (diving, the integer master), and it is cheap.
        converge = remaining.sum() <= SMALL_PROBLEM_SEQUENCES
        lp = _column_generation(problem.restricted(active, remaining[active]),
                                _restrict(seeds, active, num_items), residual_search,
                                tolerance=None if converge else RESIDUAL_LP_TOLERANCE,
                                slack=LEVEL_SLACK, phase="rounding")
        stopped = stopped or lp.stopped

    if small is not None and not stopped:
        # Diving ended above the bound: the integer master over the small
        # residual may do better (for a small histogram, that residual is the
        # whole problem, and the result optimal).
        kept = small.rounds_before
        kept_packs = sum(int(counts.sum()) for counts in chosen_counts[:kept])
        dived = sum(int(counts.sum()) for counts in chosen_counts) - kept_packs
        if dived > np.ceil(small.bound - 1e-6):
            search.report("integer master", kept_packs + dived, bound)
            whole, patterns = _integer_residual(item_lengths, small, max_len,
                                                problem.width, dived - 1,
                                                integer_node_limit, search.deadline)
            if whole is not None:
                used = np.flatnonzero(whole)
                chosen_patterns[kept:] = [_to_items(patterns[used], small.items,
                                                    num_items)]
                chosen_counts[kept:] = [whole[used]]
    pairs = []
    if chosen_patterns:
        pairs = _fill_packs(np.concatenate(chosen_patterns), np.concatenate(chosen_counts),
                            item_lengths, demand - remaining)
    if remaining.any():
        # The deadline stopped rounding: the rest by best-fit decreasing.
        rest = np.zeros(max_len, dtype=np.int64)
        rest[item_lengths - 1] = remaining
        pairs += heuristics.pack_fit_decreasing(rest, max_len, problem.width, fit="best")
    return pairs, stopped


@dataclasses.dataclass(frozen=True, eq=False)
class _SmallResidual:
    """The first residual small enough for the integer master, and its LP.

    Attributes:
      rounds_before: rounds of packs chosen before it (they stay).
      items: [k] the item indices it has sequences of.
      demand: [k] its sequences of each.
      patterns: [m, width] the LP's patterns (indices into `items`).
      bound: the LP's lower bound on its packs (h.duals).
      duals: [k] the LP's dual-feasible duals (no pattern worth more than 1).
    """

    rounds_before: int
    items: np.ndarray
    demand: np.ndarray
    patterns: np.ndarray
    bound: float
    duals: np.ndarray


def _integer_residual(item_lengths, residual: _SmallResidual, capacity, width,
                      most_packs, node_limit, deadline: Deadline = NO_DEADLINE):
    """At most `most_packs` packs for a small residual by the integer master,
    or (None, None); the patterns are indices into ``residual.items``.

    Its patterns are every maximal pattern of up to 3 items, the LP's, and
    (more than 3 per pack) every pattern when they can be listed; with the
    substitution columns, maximal patterns are enough for an exact optimum
    (any pack is a maximal pattern whose slots hold sequences no longer than
    themselves). Reduced-cost fixing then drops every pattern whose reduced
    cost exceeds `most_packs` - LP, since a solution using it would have more
    packs.
    """
    candidates = _integer_candidates(item_lengths[residual.items], capacity, width,
                                     residual.patterns)
    cheap = (1 - pattern_values(candidates, residual.duals)
             <= most_packs - residual.bound + 1e-6)
    if cheap.sum() > INTEGER_MASTER_PATTERNS:
        return None, None
    time_limit = min(_INTEGER_SAFETY_SECONDS, deadline.left())
    if time_limit <= 0:
        return None, None
    whole = _solve_integer_master(candidates[cheap], residual.demand, node_limit=node_limit,
                                  target=np.ceil(residual.bound - 1e-6),
                                  time_limit=time_limit)
    if whole is None or whole.sum() > most_packs:
        return None, None
    return whole, candidates[cheap]


def _integer_candidates(item_lengths, capacity, width, patterns):
    """Patterns for the integer master of a small residual: every maximal
    pattern of up to 3 items, the LP's, and (more than 3 per pack) every
    pattern when they can be listed. With the substitution columns, maximal
    patterns are enough for an exact optimum: any pack is a maximal pattern
    whose slots hold sequences no longer than themselves."""
    candidates = [maximal_patterns(item_lengths, capacity, width), patterns]
    if width > 3:
        every_pattern = enumerate_patterns(item_lengths, capacity, width,
                                           ALL_PATTERNS_LIMIT)
        if every_pattern is not None:
            candidates.append(every_pattern)
    num_items = item_lengths.size
    return np.unique(np.concatenate([
        np.pad(c, ((0, 0), (0, width - c.shape[1])), constant_values=num_items)
        for c in candidates]), axis=0)


def _dive_patterns(patterns: np.ndarray, x: np.ndarray, demand: np.ndarray,
                   count: int) -> np.ndarray:
    """Up to `count` patterns to take one pack of each when diving: the most
    used ones whose slots would all receive a sequence (with those picked
    before), else the most used one.

    Degenerate LP solutions often use a pattern half a time whose slots the
    residual cannot fill (two slots of a length with one sequence left);
    a pack of it would be mostly padding.
    """
    num_items = demand.size
    picked = []
    for j in np.argsort(-x, kind="stable"):
        if x[j] <= 0 or len(picked) == count:
            break
        slots = np.bincount(patterns[j], minlength=num_items + 1)[:num_items]
        left = _unplaced(demand, slots)
        if demand.sum() - left.sum() == slots.sum():
            picked.append(j)
            demand = left
    return np.array(picked or [int(np.argmax(x))], dtype=np.int64)


def _to_items(patterns: np.ndarray, items: np.ndarray, num_items: int) -> np.ndarray:
    """Patterns over a subset of items (indices into `items`, padded with
    its size) as patterns over all `num_items` items."""
    lookup = np.append(items, num_items)
    return lookup[patterns].astype(np.int32)


def _restrict(patterns: np.ndarray, items: np.ndarray, num_items: int) -> np.ndarray:
    """Patterns over all items restricted to `items` (others dropped), as
    indices into `items`, one of each, none empty."""
    position = np.full(num_items + 1, items.size)
    position[items] = np.arange(items.size)
    restricted = np.sort(position[patterns], axis=1)
    restricted = restricted[restricted[:, 0] < items.size]
    return np.unique(restricted, axis=0) if len(restricted) else restricted
