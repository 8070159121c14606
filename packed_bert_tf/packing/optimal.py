"""Near-optimal histogram packing: the cutting-stock LP by column generation.

Packing a length histogram into rows of S tokens with at most D sequences per
row is the cutting-stock problem (Gilmore and Gomory, 1961): each *pattern*
is a multiset of lengths that fits a row, and we want the fewest rows whose
patterns together hold every sequence:

    minimise   sum_p x_p
    subject to sum_p a_lp x_p >= h_l   for every length l with h_l > 0
               x_p >= 0 integer

where a_lp counts length l in pattern p and h is the histogram. There are far
too many patterns to list (about S^3 / 36 for D = 3), so the LP relaxation is
solved by column generation over a restricted master LP, kept as one HiGHS
model that is re-solved warm after each change.

Three things make it fast:

- **Substitution columns** (dual-optimal inequalities, Ben Amor, Desrosiers
  and Valerio de Carvalho 2006): for each pair of neighbouring lengths, a
  free column lets a slot of the longer one hold a sequence of the shorter.
  This changes no optimum (a longer slot can always hold a shorter sequence)
  but makes the duals y_l non-decreasing in l, which the next point needs.
- **Pricing by table lookup**: with non-decreasing duals, the best pattern of
  at most 3 items is *maximal* (no item can be lengthened to the next length
  present, none added). `maximal_patterns` lists those once (S^2 / 12 for a
  dense histogram at D = 3); each round prices all of them with one gather,
  y[a] + y[b] + y[c], and adds the most improving. For D > 3 a dynamic
  program over (items, room) prices the longer patterns as well
  (`knapsack_pricing`).
- **A bound from any duals**: for y >= 0, h.y / max_p a_p.y is a lower bound
  on the number of packs (y scaled to be dual feasible), and with
  non-decreasing y the maximum is the table's (or the dynamic program's). It
  certifies the LP optimum when column generation converges and stays valid
  when it stops early.

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
integer optimum is almost always ceil(LP) or ceil(LP) + 1); on the paper's
histograms the result is the LP bound rounded up.

Cost: listing the table is O(n^2) for n distinct lengths (n <= S) and takes
O(S^2 / 12) memory for D >= 3 (67 MB at S = 8192); a round of pricing is one
pass over it; the dynamic program (D > 3 only) is O(D S n) per call, done in
blocks of rows so that its memory stays O(S + 64 n).

Where the optimum fills rows to the last token, this LP is highly
degenerate; `pack_histogram` then tries `exact_fill` first (rows built
directly, certified by the token bound) and comes here for its residual.
From S = 8192 it tries `coarse` (lengths in 1,024 classes, certified by a
relaxation), coming here for the classes only.

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

import numpy as np
import scipy.optimize
import scipy.sparse

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
# improving ones): fewer make more rounds, more make each solve slower.
COLUMNS_PER_ROUND = 150
# Past this many patterns per item the master drops the unused ones with the
# highest reduced cost (a solve's cost grows with the columns it prices).
MASTER_COLUMNS_PER_ITEM = 4
# Elements per vectorised block when listing the table or running the
# dynamic program (bounds their temporary memory to a few tens of MB).
_BLOCK_ELEMENTS = 1 << 21


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


def knapsack_pricing(values: np.ndarray, item_lengths: np.ndarray, capacity: int,
                     max_items: int):
    """For each item, the most valuable pattern that contains it.

    Patterns are multisets of at most `max_items` items (repetition allowed)
    of total length at most `capacity`.

    Returns:
      A tuple (best_values, pattern_of):
        best_values: [n] float, largest value of a pattern holding item j.
        pattern_of: callable, ``pattern_of(j)`` gives that pattern as a list
          of item indices.

    Note:
      Dynamic programming over layers k = number of items: ``best[k][r]`` is
      the largest value of at most k items of total length at most r. A layer
      is a max-plus product of the previous one with the items, done in blocks
      of rows: O(capacity x n) time per layer, O(capacity + block x n) memory.
    """
    values = np.asarray(values, dtype=np.float64)
    lengths = np.asarray(item_lengths, dtype=np.int64)
    layers = int(min(max_items, capacity // lengths.min()))
    room = np.arange(capacity + 1)
    best = [np.zeros(capacity + 1)]
    choice = [np.full(capacity + 1, -1, dtype=np.int64)]
    block = max(1, _BLOCK_ELEMENTS // lengths.size)
    for _ in range(layers - 1):  # the item itself takes the last layer
        previous = best[-1]
        # best[k - 1][r - length], -inf where r < length: a padded gather.
        padded = np.concatenate([np.full(capacity, -np.inf), previous])
        value = np.empty(capacity + 1)
        item = np.empty(capacity + 1, dtype=np.int64)
        for start in range(0, capacity + 1, block):
            rows = room[start:start + block, None]
            candidates = padded[rows + (capacity - lengths)[None, :]] + values
            chosen = candidates.argmax(axis=1)
            item[start:start + block] = chosen
            value[start:start + block] = candidates[np.arange(len(chosen)), chosen]
        take = value > previous + 1e-12
        if not take.any():
            break  # no further layer can improve either
        best.append(np.where(take, value, previous))
        choice.append(np.where(take, item, -1))
    top = len(best) - 1
    best_values = values + best[top][capacity - lengths]

    def pattern_of(j: int) -> list[int]:
        pattern = [j]
        layer, left = top, capacity - int(lengths[j])
        while layer > 0:
            item = choice[layer][left]
            if item >= 0:
                pattern.append(int(item))
                left -= int(lengths[item])
            layer -= 1
        return sorted(pattern)

    return best_values, pattern_of


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

    def add(self, patterns: np.ndarray):
        """Adds patterns ([m, <= width] item indices padded with n)."""
        m = patterns.shape[0]
        if m == 0:
            return
        patterns = np.pad(patterns, ((0, 0), (0, self.width - patterns.shape[1])),
                          constant_values=self.num_items).astype(np.int32)
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
        self.patterns = self.patterns[kept]
        return kept

    def solve(self):
        """Returns (x over patterns, duals y >= 0, objective value)."""
        self.model.run()
        status = self.model.getModelStatus()
        if self.model.modelStatusToString(status) != "Optimal":
            raise RuntimeError("HiGHS failed on the master LP: "
                               + self.model.modelStatusToString(status))
        solution = self.model.getSolution()
        x = np.asarray(solution.col_value)[self.num_substitutions:]
        duals = np.maximum(np.asarray(solution.row_dual), 0.0)
        return x, duals, self.model.getInfo().objective_function_value


class _Pricer:
    """Finds improving patterns for the master: the maximal-pattern table,
    then (for more than 3 items per pack) the dynamic program."""

    def __init__(self, item_lengths, capacity, max_items, columns_per_round):
        self.item_lengths = item_lengths
        self.capacity = capacity
        self.max_items = max_items
        self.table = maximal_patterns(item_lengths, capacity, max_items)
        self.in_master = np.zeros(len(self.table), dtype=bool)
        self.known: set[tuple[int, ...]] = set()
        self.columns_per_round = columns_per_round
        self._priced = None  # (duals, best pattern value) of the last pricing

    def forget(self):
        """Patterns may have left the master: offer every one again."""
        self.in_master[:] = False
        self.known.clear()

    def best_value(self, duals: np.ndarray) -> float:
        """The largest value of any pattern (exact for non-decreasing duals);
        from the last `improving` call when it priced these duals."""
        if self._priced is not None and np.array_equal(self._priced[0], duals):
            return self._priced[1]
        best = pattern_values(self.table, duals).max()
        if self.max_items > 3:
            best = max(best, knapsack_pricing(duals, self.item_lengths, self.capacity,
                                              self.max_items)[0].max())
        return float(best)

    def improving(self, duals: np.ndarray) -> np.ndarray:
        """New patterns of value above 1, or an empty array: from the table,
        the `columns_per_round` most valuable; from the dynamic program (only
        when the table has none), the best pattern of each item."""
        values = pattern_values(self.table, duals)
        self._priced = None
        best = values.max()
        values[self.in_master] = -np.inf
        candidates = np.flatnonzero(values > 1 + _PRICING_TOLERANCE)
        if candidates.size:
            if candidates.size > self.columns_per_round:
                candidates = candidates[np.argpartition(
                    -values[candidates], self.columns_per_round)[:self.columns_per_round]]
            self.in_master[candidates] = True
            return self.table[candidates]
        if self.max_items <= 3:
            self._priced = (duals, float(best))
            return self.table[:0]
        best_values, pattern_of = knapsack_pricing(
            duals, self.item_lengths, self.capacity, self.max_items)
        self._priced = (duals, float(max(best, best_values.max())))
        found = []
        for j in np.argsort(-best_values):
            # Up to a pattern per item: each round of the dynamic program is
            # dear, and its best patterns differ from item to item.
            if best_values[j] <= 1 + _PRICING_TOLERANCE:
                break
            pattern = tuple(pattern_of(int(j)))
            if len(pattern) > 3 and pattern not in self.known:
                self.known.add(pattern)
                found.append(pattern + (len(self.item_lengths),) * (self.max_items - len(pattern)))
        return np.array(found, dtype=np.int32).reshape(-1, self.max_items)


def _solve_lp(item_lengths, demand, capacity, width, seeds, max_iterations,
              want_bound=True):
    """The cutting-stock LP of one histogram by column generation.

    Returns the master's patterns ([m, width] item indices padded with n),
    the solution x over them and a lower bound on the LP optimum (the
    optimum itself when column generation converged): h.y / max_p a_p.y for
    the last duals y, made non-decreasing.
    """
    num_items = item_lengths.size
    pricer = _Pricer(item_lengths, capacity, width,
                     columns_per_round=COLUMNS_PER_ROUND)
    master = _Master(demand, width)
    master.add(np.concatenate([np.arange(num_items, dtype=np.int32)[:, None],
                               np.full((num_items, width - 1), num_items,
                                       dtype=np.int32)], axis=1))
    master.add(seeds)
    most_columns = max(MASTER_COLUMNS_PER_ITEM * num_items, 4000)
    for _ in range(max_iterations):
        x, duals, _ = master.solve()
        monotone = np.maximum.accumulate(duals)
        new = pricer.improving(monotone)
        if not len(new):
            break
        if len(master.patterns) + len(new) > most_columns:
            kept = master.drop_unused(x, monotone, most_columns // 2)
            x = x[kept]
            pricer.forget()
        master.add(new)
    # The bound needs the best pattern's value: for more than 3 items per
    # pack, one more round of the dynamic program, so only when asked for.
    bound = (float(demand @ monotone) / max(pricer.best_value(monotone), 1e-300)
             if want_bound else None)
    return master.patterns[:len(x)], x, bound, monotone


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
                          node_limit: int, target: float | None = None):
    """Integer master: fewest packs of `patterns` (plus the substitution
    columns) that hold `demand`.

    HiGHS branch-and-cut; returns the integer number of packs per pattern,
    or None when HiGHS found no solution within `node_limit`
    branch-and-bound nodes. A node limit, unlike a time limit, gives the
    same plan on a busy machine as on an idle one.
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
        options={"node_limit": node_limit, "time_limit": _INTEGER_SAFETY_SECONDS,
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
    left = counts[group].astype(np.int64)
    # contents[(g, s)] = list of (item or -1, number of packs)
    contents: dict[tuple[int, int], list[tuple[int, int]]] = {}
    free_stack: list[int] = []  # slot entries with room left, longest at bottom
    entry = 0
    for item in range(num_items - 1, -1, -1):
        # This length's own slots become available (they fit it and shorter).
        start = entry
        while entry < len(group) and slot_item[entry] == item:
            entry += 1
        wanted = int(demand[item])
        for e in range(start, entry):  # own length first
            if wanted == 0:
                break
            take = min(wanted, int(left[e]))
            contents.setdefault((int(group[e]), int(slot[e])), []).append((item, take))
            left[e] -= take
            wanted -= take
        while wanted > 0:  # then the shortest longer slot still free
            if not free_stack:
                raise AssertionError(f"no slot left for {wanted} sequences of "
                                     f"length {item_lengths[item]}")
            e = free_stack[-1]
            take = min(wanted, int(left[e]))
            contents.setdefault((int(group[e]), int(slot[e])), []).append((item, take))
            left[e] -= take
            wanted -= take
            if left[e] == 0:
                free_stack.pop()
        free_stack.extend(e for e in range(entry - 1, start - 1, -1) if left[e] > 0)
    strategies: list[tuple[tuple[int, ...], int]] = []
    for g in range(len(patterns)):
        slots = [contents.get((g, s), []) for s in range(patterns.shape[1])
                 if patterns[g, s] < num_items]
        # Cut the group's packs where any slot's contents change.
        cuts = {0, int(counts[g])}
        for filled in slots:
            position = 0
            for _, number in filled:
                position += number
                cuts.add(position)
        cuts = sorted(cuts)
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            lengths = []
            for filled in slots:
                position = 0
                for item, number in filled:
                    if position <= lo < position + number:
                        lengths.append(int(item_lengths[item]))
                        break
                    position += number
            if lengths:
                strategies.append((tuple(sorted(lengths)), hi - lo))
    return strategies


def pack_optimal(histogram: np.ndarray, max_sequence_length: int,
                 max_sequences_per_pack: int, *, initial_strategies=(),
                 max_iterations: int = 1000, integer_node_limit: int = 50):
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

    Returns:
      A tuple (pairs, lp_lower_bound):
        pairs: list of (strategy, count).
        lp_lower_bound: float, a lower bound on the number of packs: the LP
          optimum on the whole histogram when column generation converged.

    Note:
      See the module docstring for the method. Time on the Wikipedia-512
      histogram (16.3 M sequences, 508 lengths) with D = 3: a few tenths of a
      second.
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    max_len = max_sequence_length
    item_lengths = np.flatnonzero(histogram) + 1  # [n], increasing
    if item_lengths.size == 0:
        return [], 0.0
    demand = histogram[item_lengths - 1]
    num_items = item_lengths.size
    # More items than the shortest length allows cannot fit in any pack.
    width = int(min(max_sequences_per_pack, max_len // item_lengths[0]))
    if width == 1:
        return ([((int(length),), int(count)) for length, count
                 in zip(item_lengths, demand)], float(demand.sum()))

    # Item index of each length; max_len + 1 pads a strategy (no item).
    row_of_length = np.full(max_len + 2, num_items)
    row_of_length[item_lengths] = np.arange(num_items)
    strategies = [strategy for strategy in initial_strategies if len(strategy) <= width]
    seeds = np.full((len(strategies), width), max_len + 1)
    for row, strategy in enumerate(strategies):
        seeds[row, :len(strategy)] = strategy
    seeds = np.sort(row_of_length[seeds], axis=1).astype(np.int32)

    remaining = demand.copy()
    chosen_patterns, chosen_counts = [], []
    lp_lower_bound = None
    small = None  # the first residual small enough for the integer master
    while remaining.any():
        # Each round solves the LP of the sequences still unplaced, over the
        # lengths they have: a small model, started from the patterns the
        # last round used (a warm re-solve of the whole model would pivot
        # through hundreds of rows whose demand is now zero).
        active = np.flatnonzero(remaining)
        could_be_small = (small is None and remaining.sum() <= SMALL_PROBLEM_SEQUENCES
                          and active.size <= INTEGER_MASTER_ITEMS)
        patterns, x, bound, duals = _solve_lp(
            item_lengths[active], remaining[active], max_len, width,
            _restrict(seeds, active, num_items), max_iterations,
            want_bound=lp_lower_bound is None or could_be_small)
        if lp_lower_bound is None:
            lp_lower_bound = bound
        if could_be_small:
            small = _SmallResidual(len(chosen_counts), active, remaining[active],
                                   patterns, bound, duals)
        whole = np.floor(x + 1e-9).astype(np.int64)
        if len(chosen_counts) == 0:
            whole = np.maximum(whole - RESIDUAL_MARGIN, 0)
        if not whole.any():
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

    if small is not None:
        # Diving ended above the bound: the integer master over the small
        # residual may do better (for a small histogram, that residual is the
        # whole problem, and the result optimal).
        kept = small.rounds_before
        kept_packs = sum(int(counts.sum()) for counts in chosen_counts[:kept])
        dived = sum(int(counts.sum()) for counts in chosen_counts) - kept_packs
        if dived > np.ceil(small.bound - 1e-6):
            whole, patterns = _integer_residual(item_lengths, small, max_len, width,
                                                dived - 1, integer_node_limit)
            if whole is not None:
                used = np.flatnonzero(whole)
                chosen_patterns[kept:] = [_to_items(patterns[used], small.items,
                                                    num_items)]
                chosen_counts[kept:] = [whole[used]]
    pairs = _fill_packs(np.concatenate(chosen_patterns), np.concatenate(chosen_counts),
                        item_lengths, demand)
    return pairs, lp_lower_bound


@dataclasses.dataclass(frozen=True, eq=False)
class _SmallResidual:
    """The first residual small enough for the integer master, and its LP.

    Attributes:
      rounds_before: rounds of packs chosen before it (they stay).
      items: [k] the item indices it has sequences of.
      demand: [k] its sequences of each.
      patterns: [m, width] the LP's patterns (indices into `items`).
      bound: the LP's lower bound on its packs.
      duals: [k] the LP's duals.
    """

    rounds_before: int
    items: np.ndarray
    demand: np.ndarray
    patterns: np.ndarray
    bound: float
    duals: np.ndarray


def _integer_residual(item_lengths, residual: _SmallResidual, capacity, width,
                      most_packs, node_limit):
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
    whole = _solve_integer_master(candidates[cheap], residual.demand, node_limit=node_limit,
                                  target=np.ceil(residual.bound - 1e-6))
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
