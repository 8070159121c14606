"""`pack_histogram`: one entry point for every packing algorithm."""

from __future__ import annotations

import math
import time

import numpy as np

from packed_bert_tf.packing import coarse, exact_fill, heuristics, nnlshp, optimal
from packed_bert_tf.packing.plan import PackingPlan

ALGORITHMS = ("none", "greedy", "bfd", "spfhp", "lpfhp", "nnlshp", "optimal")

# `optimal` returns a shortcut's plan (exact-fill rows, or length classes),
# without column generation over the whole histogram, when a lower bound
# proves it within this fraction of the optimum (0.05 %, the target for
# long-context plans).
DEFAULT_CERTIFIED_GAP = 5e-4

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
          rounding and repair; also reports the LP lower bound. Options:
          ``max_iterations`` (1000 column-generation rounds per LP),
          ``integer_node_limit`` (50 branch-and-bound nodes per integer
          master), ``certified_gap`` (`DEFAULT_CERTIFIED_GAP`, 0.05 %):
          with 4 or more sequences per pack and over 1,024 lengths
          present, rows filled exactly by `exact_fill.match_exact_fills`
          (the rest packed by column generation) are returned when their
          packs are at most ``(1 + certified_gap)`` times the token bound,
          which then is the reported bound (0: only when that proves them
          optimal; None: never tried). Long-context histograms whose
          optimum fills rows completely are planned this way in seconds
          rather than a minute. At S >= 8192 (more lengths present than
          1,024), lengths grouped into 1,024 classes are planned instead
          (`packing.coarse`), returned when within ``certified_gap`` of
          the LP bound of the rounded-down relaxation, which is then the
          reported bound.
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
        "optimal": {"max_iterations", "integer_node_limit", "certified_gap"},
    }.get(algorithm, set())
    unknown = set(options) - allowed_options
    if unknown:
        raise ValueError(
            f"algorithm {algorithm!r} takes no option(s) {', '.join(sorted(unknown))}"
            + (f"; it takes {', '.join(sorted(allowed_options))}"
               if allowed_options else ""))
    histogram = _validated_histogram(histogram, max_sequence_length)

    start = time.perf_counter()
    lp_lower_bound = None
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
        certified_gap = options.pop("certified_gap", DEFAULT_CERTIFIED_GAP)
        if certified_gap is not None and not (
                isinstance(certified_gap, (int, float, np.number)) and certified_gap >= 0):
            raise ValueError(f"certified_gap must be a number >= 0 or None, got "
                             f"{certified_gap!r}")
        certified = None
        if certified_gap is not None and exact_fill.eligible(histogram, *args):
            certified = _certified_exact_fill(histogram, args, options, certified_gap)
        if (certified is None and certified_gap is not None
                and coarse.eligible(histogram, max_sequence_length)):
            certified = _certified_coarse(histogram, args, options, certified_gap)
        pairs, lp_lower_bound = certified or _pack_optimal(histogram, args, options)
    return PackingPlan.from_strategy_counts(
        pairs, algorithm=algorithm, histogram=histogram,
        max_sequence_length=max_sequence_length,
        max_sequences_per_pack=max_sequences_per_pack,
        lp_lower_bound=lp_lower_bound,
        solve_time_seconds=time.perf_counter() - start)


def _pack_optimal(histogram, args, options):
    """Column generation, warm-started from best-fit decreasing and never
    worse than it: (pairs, LP lower bound)."""
    warm_start = heuristics.pack_fit_decreasing(histogram, *args, fit="best")
    pairs, lp_lower_bound = optimal.pack_optimal(
        histogram, *args, initial_strategies=[s for s, _ in warm_start], **options)
    if sum(c for _, c in warm_start) < sum(c for _, c in pairs):
        pairs = warm_start
    return pairs, lp_lower_bound


def _certified_exact_fill(histogram, args, options, certified_gap):
    """Exact rows plus the residual's column-generation plan, with the token
    bound, from the first of `exact_fill.MATCHINGS` that comes within
    `certified_gap` of that bound; else None."""
    max_len = args[0]
    token_bound = float(histogram @ np.arange(1, max_len + 1)) / max_len
    # The token bound rounds up; a plan at it is optimal whatever the gap.
    most_packs = max(math.ceil(token_bound - 1e-9), token_bound * (1 + certified_gap))
    for candidates in exact_fill.match_exact_fills(histogram, max_len):
        best = None
        for candidate in candidates[:_EXACT_FILL_CANDIDATES]:
            residual_pairs = (_pack_optimal(candidate.residual, args, options)[0]
                              if candidate.residual.any() else [])
            packs = len(candidate.rows) + sum(c for _, c in residual_pairs)
            if best is None or packs < best[0]:
                best = packs, candidate, residual_pairs
        if best is not None and best[0] <= most_packs:
            return best[1].strategy_counts() + best[2], token_bound
    return None


def _certified_coarse(histogram, args, options, certified_gap):
    """The plan of length classes, refined, with the LP bound of the
    rounded-down relaxation, when within `certified_gap` of it; else the same
    with classes half as wide (`coarse.class_widths`); else None."""
    max_len, cap = args
    for width in coarse.class_widths(max_len):
        class_pairs, _ = _pack_optimal(coarse.round_up(histogram, width),
                                       (max_len // width, cap), options)
        packs = sum(count for _, count in class_pairs)
        relaxed, capacity = coarse.relaxation(histogram, width, cap)
        _, bound = _pack_optimal(relaxed, (capacity, cap), options)
        if packs <= max(math.ceil(bound - 1e-6), bound * (1 + certified_gap)):
            return coarse.refine(class_pairs, histogram, width), bound
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
