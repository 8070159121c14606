"""Near-optimal histogram packing: the cutting-stock LP by column generation.

Packing a length histogram into rows of S tokens with at most D sequences per
row is the cutting-stock problem (Gilmore and Gomory, 1961): each *pattern*
(strategy) is a multiset of lengths that fits a row, and we want the fewest
rows whose patterns together hold every sequence:

    minimise   sum_p x_p
    subject to sum_p a_lp x_p >= h_l   for every length l with h_l > 0
               x_p >= 0 integer

where a_lp counts length l in pattern p and h is the histogram. There are far
too many patterns to list (about S^3 / 36 for D = 3), so the LP relaxation is
solved by column generation: a restricted master LP over a few patterns
(scipy's HiGHS), whose duals y price every possible pattern through a bounded
knapsack, max sum_l y_l a_l with sum_l l a_l <= S and sum_l a_l <= D (dynamic
programming over rows filled and sequences used). Patterns with reduced cost
below zero (value above 1) join the master; when none is left the LP is
optimal and its value a lower bound on any plan. The master starts from every
way of filling a row exactly with up to three of the lengths present, which
is where the LP optimum mostly lies: on the Wikipedia histogram the first
master is already optimal.

The fractional LP solution is then made integral. Whole packs are taken
(floor, less one pack of each pattern so that the residual is not too
constrained); the residual LP is solved again (with the patterns found so
far) and rounded down again; once nothing is used a whole time, every pattern
used at least 0.7 is rounded up to one pack and the residual solved again
(diving). When a few hundred sequences remain and every possible pattern of
them can be listed, the integer master over all of them (HiGHS
branch-and-bound) finishes the job exactly, which is why small histograms are
packed optimally. Rounded-up packs may hold more sequences of a length than
remain: those slots become padding. Cutting-stock LPs are famously tight (the
integer optimum is almost always ceil(LP) or ceil(LP) + 1); on the paper's
histograms the result is at most one pack above the LP bound.

Source: Gilmore and Gomory, "A linear programming approach to the
cutting-stock problem", Operations Research 9 (1961); the integer master over
generated columns ("price and branch") as in Vanderbeck, "Computational study
of a column generation algorithm for bin packing and cutting stock
problems", Math. Programming 86 (1999).
"""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.sparse

from packed_bert_tf.packing.nnlshp import strip_excess_sequences

# Reduced-cost threshold: HiGHS' duals are accurate to about 1e-7 relative.
_PRICING_TOLERANCE = 1e-7
# Only a guard against pathological cases: the node limit ends the search.
_INTEGER_SAFETY_SECONDS = 60.0
# Packs of each pattern left to the residual after the first LP: a larger
# residual gives the integer master room to do better.
RESIDUAL_MARGIN = 1
# Residuals this small go to the integer master when all their patterns can
# be listed (at most ALL_PATTERNS_LIMIT of them).
SMALL_PROBLEM_SEQUENCES = 200
ALL_PATTERNS_LIMIT = 20_000
# Diving rounds up every pattern the residual LP uses at least this much:
# 0.7 matches one-pack-at-a-time diving in quality (0 to 1 pack above the LP
# bound on the paper's histograms) at a fraction of the rounds.
DIVE_THRESHOLD = 0.7


def knapsack_best_patterns(values: np.ndarray, weights: np.ndarray,
                           capacity: int, max_items: int):
    """For each item, the most valuable pattern that contains it.

    Solves the pricing problem of column generation: patterns are multisets of
    items (with repetition) of total weight at most `capacity` and at most
    `max_items` items; a pattern's value is the sum of its items' values.

    Parameters
    ----------
    values : [n] float, non-negative
    weights : [n] int, each between 1 and `capacity`
    capacity, max_items : int

    Returns
    -------
    best_values : [n] float
        ``best_values[j]`` is the largest value of a pattern holding item j.
    pattern_of : callable
        ``pattern_of(j)`` gives that pattern as an [n] array of item counts.

    Notes
    -----
    Dynamic programming over layers k = number of items, ``best[k, c]`` =
    largest value of at most k items of weight at most c. Each layer is one
    vectorised max-plus step over [capacity + 1, n]; cost O(K x capacity x n)
    with K = min(max_items, capacity // min weight), stopping early once a
    layer adds nothing.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.int64)
    num_items = values.size
    layers = int(min(max_items, capacity // weights.min()))
    room = np.arange(capacity + 1)
    source = room[:, None] - weights[None, :]  # [C+1, n]
    fits = source >= 0
    source = np.where(fits, source, 0)
    best = [np.zeros(capacity + 1)]
    choice = [np.full(capacity + 1, -1)]
    for _ in range(layers - 1):  # the item itself takes the last layer
        previous = best[-1]
        candidates = np.where(fits, previous[source] + values, -np.inf)
        item = candidates.argmax(axis=1)
        value = candidates[room, item]
        take = value > previous + 1e-12
        if not take.any():
            break  # no further layer can improve either
        best.append(np.where(take, value, previous))
        choice.append(np.where(take, item, -1))
    top = len(best) - 1
    best_values = values + best[top][capacity - weights]

    def pattern_of(j: int) -> np.ndarray:
        counts = np.zeros(num_items, dtype=np.int64)
        counts[j] += 1
        layer, left = top, capacity - int(weights[j])
        while layer > 0:
            item = choice[layer][left]
            if item >= 0:
                counts[item] += 1
                left -= int(weights[item])
            layer -= 1
        return counts

    return best_values, pattern_of


def _solve_master(columns: np.ndarray, demand: np.ndarray):
    """Restricted master LP: min sum x, columns @ x >= demand, x >= 0."""
    result = scipy.optimize.linprog(
        np.ones(columns.shape[1]),
        A_ub=-scipy.sparse.csc_array(columns.astype(np.float64)),
        b_ub=-demand.astype(np.float64),
        bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"HiGHS failed on the master LP: {result.message}")
    duals = np.maximum(-result.ineqlin.marginals, 0.0)
    return result.x, duals, result.fun


def exact_fill_patterns(item_lengths: np.ndarray, capacity: int,
                        max_items: int) -> np.ndarray:
    """Patterns of 1 to `max_items` (at most 3) items that sum to `capacity`.

    Returns [n, m] int64 item counts. Vectorised over pairs of items; about
    n^2 / 6 patterns for 3 items.
    """
    item_lengths = np.asarray(item_lengths, dtype=np.int64)
    num_items = item_lengths.size
    row_of = np.full(capacity + 1, -1)
    row_of[item_lengths] = np.arange(num_items)
    patterns = []  # arrays of item rows, [m, k]
    if max_items >= 1 and row_of[capacity] >= 0:
        patterns.append(np.array([[row_of[capacity]]]))
    if max_items >= 2:
        first = np.arange(num_items)
        rest = capacity - item_lengths
        ok = (rest >= item_lengths) & (rest <= capacity)
        second = np.where(ok, row_of[np.clip(rest, 0, capacity)], -1)
        keep = second >= 0
        patterns.append(np.stack([first[keep], second[keep]], axis=1))
    columns = [np.zeros((num_items, 0), dtype=np.int64)]
    for rows in patterns:
        column = np.zeros((num_items, rows.shape[0]), dtype=np.int64)
        np.add.at(column, (rows, np.arange(rows.shape[0])[:, None]), 1)
        columns.append(column)
    if max_items >= 3:
        a, b = np.meshgrid(np.arange(num_items), np.arange(num_items), indexing="ij")
        rest = capacity - item_lengths[a] - item_lengths[b]
        ok = (a <= b) & (rest >= item_lengths[b])
        c = np.where(ok, row_of[np.clip(rest, 0, capacity)], -1)
        keep = c >= 0
        triples = np.stack([a[keep], b[keep], c[keep]], axis=1)
        column = np.zeros((num_items, triples.shape[0]), dtype=np.int64)
        np.add.at(column, (triples, np.arange(triples.shape[0])[:, None]), 1)
        columns.append(column)
    return np.concatenate(columns, axis=1)


def enumerate_patterns(weights: np.ndarray, capacity: int, max_items: int,
                       limit: int) -> np.ndarray | None:
    """Every pattern (multiset of items within capacity and count), or None.

    Returns an [n, m] int64 matrix of item counts, or None as soon as there
    would be more than `limit` patterns.
    """
    weights = [int(w) for w in weights]
    patterns: list[list[int]] = []

    def extend(first: int, room: int, items_left: int, pattern: list[int]):
        for item in range(first, len(weights)):
            if weights[item] <= room:
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
    matrix = np.zeros((len(weights), len(patterns)), dtype=np.int64)
    for j, pattern in enumerate(patterns):
        np.add.at(matrix[:, j], pattern, 1)
    return matrix


def _solve_integer_master(columns: np.ndarray, demand: np.ndarray, *,
                          node_limit: int):
    """Integer master: min sum z, columns @ z >= demand, z >= 0 integer.

    HiGHS branch-and-cut over a fixed set of patterns (which must include a
    pattern per item, so that it is feasible). Returns the integer counts, or
    None when HiGHS found no solution within `node_limit` branch-and-bound
    nodes. A node limit, unlike a time limit, gives the same plan on a busy
    machine as on an idle one.
    """
    result = scipy.optimize.milp(
        np.ones(columns.shape[1]),
        constraints=scipy.optimize.LinearConstraint(
            scipy.sparse.csc_array(columns.astype(np.float64)),
            lb=demand.astype(np.float64), ub=np.inf),
        integrality=np.ones(columns.shape[1]),
        bounds=scipy.optimize.Bounds(0, np.inf),
        options={"node_limit": node_limit, "time_limit": _INTEGER_SAFETY_SECONDS})
    if result.x is None:
        return None
    whole = np.rint(result.x).astype(np.int64)
    if (columns @ whole < demand).any():
        return None
    return whole


def solve_cutting_stock_lp(demand: np.ndarray, weights: np.ndarray, capacity: int,
                           max_items: int, columns: np.ndarray, *,
                           max_iterations: int = 1000,
                           max_columns: int | None = None):
    """Column generation for the cutting-stock LP relaxation.

    Parameters
    ----------
    demand : [n] int, positive
    weights : [n] int, the item lengths
    capacity, max_items : int
    columns : [n, m] int
        Starting patterns; must make the LP feasible (e.g. one per item).

    Returns
    -------
    columns : [n, m'] int
        The starting patterns plus those generated.
    x : [m'] float
        Optimal LP solution over them.
    lower_bound : float
        A lower bound on the LP optimum over *all* patterns: the optimum
        itself when column generation converged, else Farley's bound
        (master value / largest pattern value).

    Notes
    -----
    The master is kept small: past `max_columns` (default 4 n) patterns,
    those unused by the current solution with the highest reduced cost are
    dropped, which keeps each HiGHS solve fast; a dropped pattern comes back
    if pricing finds it again.
    """
    if max_columns is None:
        max_columns = 4 * demand.size + 64
    for _ in range(max_iterations):
        x, duals, value = _solve_master(columns, demand)
        if columns.shape[1] > max_columns:
            reduced_cost = 1.0 - duals @ columns
            # Used patterns first, then the most attractive unused ones.
            keep = np.lexsort((reduced_cost, x <= 0))[:max_columns // 2]
            columns, x = columns[:, keep], x[keep]
        known = {column.tobytes() for column in columns.T}
        best_values, pattern_of = knapsack_best_patterns(
            duals, weights, capacity, max_items)
        improving = np.flatnonzero(best_values > 1 + _PRICING_TOLERANCE)
        new_columns = []
        for j in improving[np.argsort(-best_values[improving])]:
            pattern = pattern_of(int(j))
            if pattern.tobytes() not in known:
                known.add(pattern.tobytes())
                new_columns.append(pattern)
        if not new_columns:
            # Converged (to the duals' accuracy): the master value is the LP
            # optimum, up to the pricing tolerance.
            return columns, x, value / max(1.0, best_values.max())
        columns = np.concatenate([columns, np.stack(new_columns, axis=1)], axis=1)
    return columns, x, value / max(1.0, best_values.max())


def pack_optimal(histogram: np.ndarray, max_sequence_length: int,
                 max_sequences_per_pack: int, *, initial_strategies=(),
                 max_iterations: int = 1000, integer_node_limit: int = 50):
    """Near-optimal packing by column generation plus rounding and repair.

    Parameters
    ----------
    histogram : [S] int
    max_sequence_length, max_sequences_per_pack : int
    initial_strategies : iterable of tuples of lengths
        Patterns to start the master LP from (a heuristic's strategies make a
        good warm start); a pattern per length is always added.
    max_iterations : int
        Cap on column-generation rounds per LP solve.
    integer_node_limit : int
        Branch-and-bound nodes HiGHS may explore in each integer master.

    Returns
    -------
    pairs : list of (strategy, count)
    lp_lower_bound : float
        The LP optimum on the whole histogram (or a valid lower bound on it).

    Notes
    -----
    See the module docstring for the method. Time on the Wikipedia-512
    histogram (16.3 M sequences) with D = 3: a few seconds, dominated by the
    first LP; later LPs are small.
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    max_len = max_sequence_length
    item_lengths = np.flatnonzero(histogram) + 1  # [n]
    if item_lengths.size == 0:
        return [], 0.0
    row_of_length = np.full(max_len + 1, -1)
    row_of_length[item_lengths] = np.arange(item_lengths.size)

    # Starting patterns over all items: one per length, every way of filling
    # a row exactly with up to 3 of them (the LP optimum is mostly made of
    # those, so column generation then needs few rounds), the heuristic's.
    starting = [np.eye(item_lengths.size, dtype=np.int64),
                exact_fill_patterns(item_lengths, max_len,
                                    min(max_sequences_per_pack, 3))]
    for strategy in initial_strategies:
        column = np.zeros(item_lengths.size, dtype=np.int64)
        for length in strategy:
            column[row_of_length[length]] += 1
        starting.append(column[:, None])
    pool = np.concatenate(starting, axis=1)

    remaining = histogram[item_lengths - 1].copy()
    packs: list[tuple[np.ndarray, int]] = []  # (item counts, number of packs)
    lp_lower_bound = None
    while remaining.any():
        active = remaining > 0
        # The last solve's patterns, restricted to the items still wanted.
        columns = pool[active]
        columns = columns[:, columns.any(axis=0)]
        columns, x, bound = solve_cutting_stock_lp(
            remaining[active], item_lengths[active], max_len,
            max_sequences_per_pack, columns, max_iterations=max_iterations)
        whole = None
        first_solve = lp_lower_bound is None
        if first_solve:
            lp_lower_bound = bound
        if remaining.sum() <= SMALL_PROBLEM_SEQUENCES:
            # Few sequences left: if every possible pattern can be listed,
            # the integer master over all of them is the exact problem.
            every_pattern = enumerate_patterns(item_lengths[active], max_len,
                                               max_sequences_per_pack,
                                               ALL_PATTERNS_LIMIT)
            if every_pattern is not None:
                candidates = np.concatenate([columns, every_pattern], axis=1)
                whole = _solve_integer_master(candidates, remaining[active],
                                              node_limit=integer_node_limit)
                if whole is not None:
                    columns = candidates
        if whole is None:
            whole = np.floor(x + 1e-9).astype(np.int64)
            if first_solve:
                whole = np.maximum(whole - RESIDUAL_MARGIN, 0)
            if not whole.any():
                # Dive: one pack of each pattern used at least DIVE_THRESHOLD
                # (at least of the most used one), then solve again.
                whole[x >= DIVE_THRESHOLD] = 1
                whole[np.argmax(x)] = 1
        pool = np.zeros((item_lengths.size, columns.shape[1]), dtype=np.int64)
        pool[active] = columns
        used = np.flatnonzero(whole)
        packs.extend((pool[:, j], int(whole[j])) for j in used)
        remaining = np.maximum(remaining - pool[:, used] @ whole[used], 0)

    pairs = [(tuple(np.repeat(item_lengths, column).tolist()), count)
             for column, count in packs]
    return strip_excess_sequences(pairs, histogram), lp_lower_bound
