"""`pack_histogram`: one entry point for every packing algorithm."""

from __future__ import annotations

import math
import time

import numpy as np

from packed_bert_tf.garbage_collection import cyclic_gc_paused
from packed_bert_tf.packing import exact_fill, exchange_fill, heuristics, nnlshp, optimal
from packed_bert_tf.packing.plan import PackingPlan

ALGORITHMS = ("none", "greedy", "bfd", "spfhp", "lpfhp", "nnlshp", "optimal")

# `optimal` returns a shortcut's plan (exchange fill, exact-fill rows),
# without column generation over the whole histogram, when
# `optimal.simple_bound` proves it within this fraction of the optimum
# (0.05 %, the target for long-context plans).
DEFAULT_CERTIFIED_GAP = 5e-4

# Exchange fill is tried where full rows would hold more sequences than this
# on average (Wikipedia at S = 512 has 2.0, and column generation packs it
# optimally in a second; the mixes of BENCHMARKS.md that it certifies have
# 2.8 to 11.5).
EXCHANGE_FILL_SEQUENCES_PER_ROW = 2.5

# Share of the time left that exact-fill rows may take before column
# generation (matching them is O(N log N) a round, O(S^2) for the longest
# sequences' complements).
EXACT_FILL_SHARE = 0.4

# Seconds per sequence the time limit leaves for finishing a stopped plan.
FINISH_SECONDS_PER_SEQUENCE = 2.5e-7

# Seconds `optimal` searches by default before it returns the best plan
# found so far (with the bound proven so far). Its plans take well under
# this: about 2 s on a million sequences at S = 8192, and one to two minutes
# where rows fill to the last token and exchange fill stalls (BENCHMARKS.md,
# the 'mixes' section).
DEFAULT_TIME_LIMIT = 300.0

# Residuals of the best exact-fill candidates packed to choose between them.
_EXACT_FILL_CANDIDATES = 2


def histogram_from_lengths(lengths, max_sequence_length: int) -> np.ndarray:
    """[S] int64 histogram of a lengths array: ``histogram[i]`` = count of length i+1.

    Raises ValueError naming the first offending position when a length is
    below 1 or above `max_sequence_length`.
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
    if lengths.size:
        bad = np.flatnonzero((lengths < 1) | (lengths > max_sequence_length))
        if bad.size:
            raise ValueError(
                f"sequence {bad[0]} has length {lengths[bad[0]]}, outside "
                f"1..max_sequence_length={max_sequence_length} "
                f"({bad.size} such sequences)")
    return np.bincount(lengths.astype(np.int64) - 1 if lengths.size else
                       np.zeros(0, np.int64),
                       minlength=max_sequence_length).astype(np.int64)


def _validated_histogram(histogram, max_sequence_length: int) -> np.ndarray:
    histogram = np.asarray(histogram)
    if histogram.ndim != 1:
        raise ValueError(f"histogram must be 1-D, got shape {histogram.shape}")
    if histogram.size and not np.issubdtype(histogram.dtype, np.integer):
        as_int = np.rint(histogram)
        if not np.array_equal(as_int, histogram):
            raise ValueError("histogram counts must be whole numbers")
        histogram = as_int
    histogram = histogram.astype(np.int64)
    if (histogram < 0).any():
        i = int(np.flatnonzero(histogram < 0)[0])
        raise ValueError(f"histogram has a negative count {histogram[i]} "
                         f"for length {i + 1}")
    if histogram.size > max_sequence_length:
        too_long = histogram[max_sequence_length:]
        if too_long.any():
            longest = max_sequence_length + int(np.flatnonzero(too_long)[-1]) + 1
            raise ValueError(
                f"histogram has {int(too_long.sum())} sequences longer than "
                f"max_sequence_length={max_sequence_length} (up to length "
                f"{longest})")
        histogram = histogram[:max_sequence_length]
    # A shorter histogram just has no sequences of the longer lengths.
    return np.pad(histogram, (0, max_sequence_length - histogram.size))


def pack_histogram(histogram, max_sequence_length: int,
                   max_sequences_per_pack: int | None = 3,
                   algorithm: str = "optimal", **options) -> PackingPlan:
    """Packs a length histogram into rows of `max_sequence_length` tokens.

    Args:
      histogram: array_like of int, ``histogram[i]`` = number of sequences of
        length ``i + 1``. It may be shorter than `max_sequence_length` (missing
        bins are 0); longer only if the extra bins are 0.
      max_sequence_length: int, tokens per pack, S.
      max_sequences_per_pack: int or None, cap on sequences per pack, D (None:
        no cap beyond S).
      algorithm: str, one of `ALGORITHMS`:

        - ``none``: one sequence per pack (the unpacked baseline).
        - ``greedy``: next-fit in dataset order (the paper's GREEDY / T5
          baseline). Options: ``lengths`` (the dataset's lengths in order;
          their histogram must equal `histogram`), else ``seed`` (default 0)
          draws a random order of the histogram's sequences.
        - ``bfd``: best-fit decreasing (ties: the pack holding fewest).
        - ``spfhp``: shortest-pack-first histogram packing (worst fit).
        - ``lpfhp``: longest-pack-first histogram packing (best fit, ties as
          Graphcore's reference implementation).
        - ``nnlshp``: non-negative least squares over exact-fill strategies.
          Options: ``short_sequence_weight`` (0.09), ``short_sequence_cutoff``
          (8).
        - ``optimal`` (default): cutting-stock LP by column generation, then
          rounding and repair; also reports a proven lower bound
          (``lp_lower_bound``), so the plan's gap to the optimum is known
          (`PackingPlan.certified_gap`, `PackingPlan.proven_optimal`).
          Seeded by best-fit decreasing (never worse than it). Options:
          ``time_limit`` (seconds, `DEFAULT_TIME_LIMIT`; None: none): the
          search stops in time for the plan to come back by then (it leaves
          `FINISH_SECONDS_PER_SEQUENCE` of the limit per sequence for
          finishing: best-fit decreasing on the sequences not yet placed,
          and checking the plan; exchange fill starts no exchange that
          would end past the limit, by the time the last one took, and a
          step under way elsewhere may run a little past it), with the
          bound proven so far and ``time_limit_reached`` set.
          ``progress`` (a callable ``progress(phase, packs, bound)``, called
          as the search goes: the phase, the plan's packs so far or the LP's
          estimate of them, and the best bound; None: silent).
          ``max_iterations`` (1000 column-generation rounds per LP),
          ``integer_node_limit`` (50 branch-and-bound nodes per integer
          master), ``certified_gap`` (`DEFAULT_CERTIFIED_GAP`, 0.05 %):
          with 4 or more sequences per pack and at least 1,024 lengths
          present, a plan whose packs are at most ``(1 + certified_gap)``
          times `optimal.simple_bound` (the token, count and long-sequence
          bounds, O(S log S)) is returned as soon as one is found, with
          that bound as its bound (0: only when that proves it optimal;
          None: never): the best-fit decreasing seed; else, where a bound
          from an LP of length classes (`optimal.class_bound`) leaves it in
          reach, `exchange_fill.exchange_fill` (rows holding more than
          `EXCHANGE_FILL_SEQUENCES_PER_ROW` on average), then rows
          filled exactly by `exact_fill.match_exact_fills` (the rest
          packed by column generation).
      **options: the algorithm's options, as listed under ``algorithm``.

    Returns:
      `PackingPlan`: exact by construction: every sequence packed once, no
      pack over S tokens or D sequences.

    Raises:
      ValueError: For negative counts, sequences longer than S, a cap below 1,
        an unknown algorithm or an unknown option.

    Note:
      Costs on the Wikipedia-512 histogram (16.3 M sequences) are recorded in
      BENCHMARKS.md (``benchmarks/packing_benchmark.py``).

    Example:
      >>> plan = pack_histogram([0, 2, 1, 1], max_sequence_length=4,
      ...                       max_sequences_per_pack=2, algorithm="spfhp")
      >>> plan.strategies, plan.counts, plan.num_packs
      (((2,), (3,), (4,)), (2, 1, 1), 4)
    """
    if not isinstance(max_sequence_length, (int, np.integer)) or max_sequence_length < 1:
        raise ValueError(f"max_sequence_length must be a positive integer, got "
                         f"{max_sequence_length!r}")
    max_sequence_length = int(max_sequence_length)
    if max_sequences_per_pack is None:
        max_sequences_per_pack = max_sequence_length
    if (not isinstance(max_sequences_per_pack, (int, np.integer))
            or max_sequences_per_pack < 1):
        raise ValueError(f"max_sequences_per_pack must be an integer >= 1, got "
                         f"{max_sequences_per_pack!r}")
    # A cap above S can never bind.
    max_sequences_per_pack = int(min(max_sequences_per_pack, max_sequence_length))
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown packing algorithm {algorithm!r}; expected one "
                         f"of {', '.join(ALGORITHMS)}")
    allowed_options = {
        "greedy": {"lengths", "seed"},
        "nnlshp": {"short_sequence_weight", "short_sequence_cutoff"},
        "optimal": {"max_iterations", "integer_node_limit", "certified_gap",
                    "time_limit", "progress"},
    }.get(algorithm, set())
    unknown = set(options) - allowed_options
    if unknown:
        raise ValueError(
            f"algorithm {algorithm!r} takes no option(s) {', '.join(sorted(unknown))}"
            + (f"; it takes {', '.join(sorted(allowed_options))}"
               if allowed_options else ""))
    histogram = _validated_histogram(histogram, max_sequence_length)

    # Plans of a hundred thousand distinct strategies are as many tuples:
    # no cycles, and the cyclic collector's passes cost a fifth of the time.
    with cyclic_gc_paused():
        start = time.perf_counter()
        lp_lower_bound, time_limit_reached = None, False
        args = (max_sequence_length, max_sequences_per_pack)
        if algorithm == "none":
            pairs = heuristics.pack_none(histogram)
        elif algorithm == "greedy":
            lengths = options.get("lengths")
            if lengths is None:
                rng = np.random.default_rng(options.get("seed", 0))
                lengths = rng.permutation(np.repeat(
                    np.arange(1, max_sequence_length + 1), histogram))
            elif not np.array_equal(histogram_from_lengths(lengths, max_sequence_length),
                                    histogram):
                raise ValueError("greedy: the histogram of `lengths` differs from "
                                 "`histogram`")
            pairs = heuristics.pack_greedy(lengths, *args)
        elif algorithm == "bfd":
            pairs = heuristics.pack_fit_decreasing(histogram, *args, fit="best",
                                                   tie_break="fewest")
        elif algorithm == "spfhp":
            pairs = heuristics.pack_fit_decreasing(histogram, *args, fit="worst")
        elif algorithm == "lpfhp":
            pairs = heuristics.pack_fit_decreasing(histogram, *args, fit="best")
        elif algorithm == "nnlshp":
            pairs = nnlshp.pack_nnlshp(histogram, *args, **options)
        else:  # optimal
            pairs, lp_lower_bound, time_limit_reached = _plan_optimal(histogram, args, options)
        return PackingPlan.from_strategy_counts(
            pairs, algorithm=algorithm, histogram=histogram,
            max_sequence_length=max_sequence_length,
            max_sequences_per_pack=max_sequences_per_pack,
            lp_lower_bound=lp_lower_bound,
            solve_time_seconds=time.perf_counter() - start,
            time_limit_reached=time_limit_reached)


def _plan_optimal(histogram, args, options):
    """The ``optimal`` algorithm: (pairs, bound, whether the time limit
    stopped it)."""
    certified_gap = options.pop("certified_gap", DEFAULT_CERTIFIED_GAP)
    if certified_gap is not None and not (
            isinstance(certified_gap, (int, float, np.number)) and certified_gap >= 0):
        raise ValueError(f"certified_gap must be a number >= 0 or None, got "
                         f"{certified_gap!r}")
    time_limit = options.pop("time_limit", DEFAULT_TIME_LIMIT)
    if time_limit is not None and not (
            isinstance(time_limit, (int, float, np.number)) and time_limit >= 0):
        raise ValueError(f"time_limit must be a number of seconds >= 0 or None, got "
                         f"{time_limit!r}")
    progress = options.pop("progress", None)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}")
    start = optimal.clock()
    # The seed: the plan returned if the search finds none better in time.
    seed = heuristics.pack_fit_decreasing(histogram, *args, fit="best")
    seed_packs = sum(count for _, count in seed)
    tokens = float(histogram @ np.arange(1, args[0] + 1)) / args[0]
    # The token, count and long-sequence bounds: what certifies the shortcuts.
    quick_bound = optimal.simple_bound(histogram, *args)
    if progress is not None:
        progress("best-fit decreasing", seed_packs, quick_bound)
    deadline = optimal.NO_DEADLINE
    if time_limit is not None:
        # Finishing a plan stopped by the deadline (what is left packed by
        # best-fit decreasing, classes refined to lengths, the plan checked)
        # is O(sequences): the search leaves it this much of the limit.
        finishing = min(0.5 * time_limit, FINISH_SECONDS_PER_SEQUENCE * histogram.sum())
        deadline = optimal.Deadline(start + time_limit - finishing)
    search = dict(options, deadline=deadline, report=progress)
    # Shortcuts certified by the quick bound, with 4 or more sequences per
    # pack and many lengths present (with few, column generation is fast:
    # its pricing is O(D S m)): a plan within certified_gap of that bound
    # is returned as it is.
    def within_gap(bound):
        # A bound rounds up; a plan at it is optimal whatever the gap.
        return max(math.ceil(bound - 1e-9), bound * (1 + (certified_gap or 0)))

    most_packs = within_gap(quick_bound)
    certify = (certified_gap is not None and args[1] >= 4
               and np.count_nonzero(histogram) >= exact_fill.MIN_LENGTHS)
    if certify and seed_packs <= most_packs:
        return seed, quick_bound, False
    incumbent, lower = seed, quick_bound
    if certify:
        lower = max(lower, optimal.class_bound(histogram, *args, deadline))
    # The shortcuts fill rows to the last token (or as far as the longest
    # sequences allow): they are for where the class bound leaves the
    # token and long-sequence bound in reach, not the count bound.
    fill_bound, _ = optimal.long_sequence_bound(histogram, args[0])
    if certify and lower <= within_gap(fill_bound):
        # Rows filled to the last token are within reach: exchange fill
        # where rows hold many sequences (column generation needs many
        # rounds there; with about two a row it converges in a few, and
        # exchange fill's rounds cost O(sequences)), until it meets the gap,
        # stalls or runs out of time (column generation could not finish
        # in the rest), then exact-fill rows with a share of the time left.
        if histogram.sum() > EXCHANGE_FILL_SEQUENCES_PER_ROW * tokens:
            fill = exchange_fill.exchange_fill(
                histogram, *args, target_packs=math.floor(most_packs), first_plan=seed,
                deadline=deadline,
                report=None if progress is None
                else lambda packs: progress("exchange fill", packs, quick_bound))
            if fill.num_packs <= most_packs:
                return fill.strategy_counts(), quick_bound, fill.stopped
            if fill.num_packs < seed_packs:
                incumbent = fill.strategy_counts()
            if fill.stopped:
                # Too late to start anything else: the plan so far.
                return incumbent, lower, True
        if exact_fill.eligible(histogram, *args):
            certified = _certified_exact_fill(
                histogram, args, dict(search, deadline=_share_of(deadline, EXACT_FILL_SHARE)),
                quick_bound, most_packs)
            if certified is not None:
                return (*certified, deadline.passed())
    pairs, bound, stopped = _pack_optimal(histogram, args, search, seed)
    if sum(c for _, c in incumbent) < sum(c for _, c in pairs):
        pairs = incumbent
    return pairs, max(bound, lower), stopped


def _share_of(deadline, share: float):
    """A deadline `share` of the way from now to `deadline` (none if none)."""
    if deadline.at is None:
        return deadline
    return optimal.Deadline(optimal.clock() + share * deadline.left())


def _pack_optimal(histogram, args, search, seed=None):
    """Column generation, seeded by best-fit decreasing (``seed``, its pairs,
    when the caller has them) and never worse than it: (pairs, lower bound,
    whether the deadline stopped it). `search`: `optimal.pack_optimal`'s
    options (``deadline`` and ``report`` included)."""
    if seed is None:
        seed = heuristics.pack_fit_decreasing(histogram, *args, fit="best")
        if search.get("report") is not None:
            search["report"]("best-fit decreasing", sum(c for _, c in seed), None)
    solution = optimal.pack_optimal(
        histogram, *args, initial_strategies=[s for s, _ in seed], **search)
    pairs = solution.pairs
    if pairs is None or sum(c for _, c in seed) < sum(c for _, c in pairs):
        pairs = seed
    return pairs, solution.lp_lower_bound, solution.stopped


def _certified_exact_fill(histogram, args, search, bound, most_packs):
    """Exact rows plus the residual's column-generation plan, with `bound`,
    from the first of `exact_fill.MATCHINGS` that comes within `most_packs`
    packs; else None (also once the deadline has passed)."""
    max_len = args[0]
    deadline = search["deadline"]
    for candidates in exact_fill.match_exact_fills(histogram, max_len, deadline=deadline):
        best = None
        for candidate in candidates[:_EXACT_FILL_CANDIDATES]:
            if deadline.passed():
                return None
            report, rows = search.get("report"), len(candidate.rows)
            residual_search = dict(search, report=None if report is None else (
                lambda phase, packs, bound, rows=rows: report(
                    f"exact-fill rows, the rest: {phase}",
                    None if packs is None else rows + packs, bound)))
            residual_pairs = (_pack_optimal(candidate.residual, args, residual_search)[0]
                              if candidate.residual.any() else [])
            packs = len(candidate.rows) + sum(c for _, c in residual_pairs)
            if best is None or packs < best[0]:
                best = packs, candidate, residual_pairs
        if best is not None and best[0] <= most_packs:
            return best[1].strategy_counts() + best[2], bound
        if deadline.passed():
            return None
    return None


def pack_lengths(lengths, max_sequence_length: int,
                 max_sequences_per_pack: int | None = 3,
                 algorithm: str = "optimal", **options) -> PackingPlan:
    """`pack_histogram` on a dataset's lengths (kept in order for ``greedy``)."""
    histogram = histogram_from_lengths(lengths, max_sequence_length)
    if algorithm == "greedy":
        options.setdefault("lengths", np.asarray(lengths))
    return pack_histogram(histogram, max_sequence_length, max_sequences_per_pack,
                          algorithm, **options)
