"""The result of packing a length histogram: `PackingPlan`.

A plan says how many packs of each *strategy* to build. A strategy is a tuple
of sequence lengths (sorted longest first) that together fit in one row of
`max_sequence_length` tokens. For example, at max length 8::

    strategy   count   row (a = first sequence, b = second, 0 = padding)
    (5, 3)         2   a a a a a b b b
    (6,)           1   a a a a a a 0 0

Every plan is checked on construction: each sequence of the histogram is
packed exactly once, no pack exceeds the max length, none holds more than
`max_sequences_per_pack` sequences. A plan that breaks any of these cannot
be built, whatever the algorithm (or JSON file) it came from.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import operator
from typing import Any

import numpy as np

from packed_bert_tf.garbage_collection import cyclic_gc_paused

_JSON_FORMAT = "packed_bert_tf.PackingPlan"
_JSON_VERSION = 1


def strategy_counts_of_rows(rows: np.ndarray,
                            counts=None) -> list[tuple[tuple[int, ...], int]]:
    """(strategy, count) pairs of packs given as rows of positive lengths
    (0 = none), each strategy longest first, equal ones merged (their
    `counts`, default 1 a row, summed), in tuple order.

    O(rows x width) in numpy, plus one tuple per distinct strategy: a plan
    stopped by its time limit is converted here, so this is part of the time
    the limit leaves for finishing.
    """
    rows = np.asarray(rows)
    if not len(rows):
        return []
    if rows.dtype.kind not in "iu":
        rows = rows.astype(np.int64)
    rows = np.sort(rows, axis=1)[:, ::-1]  # longest first, 0 padding last
    depths = np.count_nonzero(rows, axis=1)
    # Columns of padding alone (a cap of 16 where rows hold a few) cost the
    # sort below as much as real ones.
    rows = rows[:, :max(1, int(depths.max()))]
    # Lexicographic order of 0-padded rows is tuple order (a prefix first).
    if rows.max() < 1 << 16:
        first, inverse = _unique_short_rows(rows)
    else:
        _, first, inverse = np.unique(rows, axis=0, return_index=True,
                                      return_inverse=True)
        inverse = inverse.ravel()
    if counts is None:
        totals = np.bincount(inverse, minlength=len(first))
    else:
        totals = np.zeros(len(first), dtype=np.int64)
        np.add.at(totals, inverse, counts)
    # Rows are longest first and lengths positive, so each strategy is its
    # row's first `depth` lengths; rows of one depth become tuples at once.
    unique, depths = rows[first], depths[first]
    strategies = [None] * len(first)
    with cyclic_gc_paused():
        for depth in np.unique(depths).tolist():
            at = np.flatnonzero(depths == depth)
            for j, strategy in zip(at.tolist(), map(tuple, unique[at, :depth].tolist())):
                strategies[j] = strategy
        return list(zip(strategies, totals.tolist()))


def _unique_short_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct row, in lexicographic order; [rows] index
    of each row's distinct row) for rows of lengths below 2^16.

    Four lengths as big-endian 16-bit numbers read as one 64-bit number: the
    numbers' order is the lengths' lexicographic order, and a row is a few
    such keys (np.unique over rows sorts byte strings, several times
    slower)."""
    width = rows.shape[1]
    big_endian = np.zeros((len(rows), width + -width % 4), dtype=">u2")
    big_endian[:, :width] = rows
    keys = big_endian.view(">u8").astype(np.uint64)
    if keys.shape[1] == 1:
        _, first, inverse = np.unique(keys[:, 0], return_index=True,
                                      return_inverse=True)
        return first, inverse
    order = np.lexsort(keys.T[::-1])
    ordered = keys[order]
    starts = np.ones(len(rows), dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(rows), dtype=np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


def rows_of_strategy_counts(strategy_counts, width: int | None = None) -> np.ndarray:
    """[packs, width] int32 rows of sequence lengths (0 = none), one row per
    pack of each (strategy, count) pair, in order; `width` defaults to the
    longest strategy. The inverse of `strategy_counts_of_rows` up to order.

    Raises:
      ValueError: When a strategy is empty or holds a length below 1.
    """
    table = _strategy_table(strategy_counts, width)
    if table is None:
        raise ValueError("a strategy is empty or holds a length below 1")
    rows, counts = table
    return np.repeat(rows.astype(np.int32), counts, axis=0)


def _strategy_table(strategy_counts, width: int | None = None):
    """([pairs, width] int64 rows of the strategies, 0-padded; [pairs]
    counts), or None when a strategy is empty or holds a length below 1 (0
    could not pad it). Vectorised: a plan of exact-fill rows has hundreds of
    thousands of strategies."""
    depths, flat = _flattened([strategy for strategy, _ in strategy_counts])
    if not depths.all() or (flat < 1).any():
        return None
    width = int(depths.max(initial=0)) if width is None else width
    rows = np.zeros((depths.size, width), dtype=np.int64)
    rows[np.repeat(np.arange(depths.size), depths),
         np.arange(flat.size) - np.repeat(np.cumsum(depths) - depths, depths)] = flat
    counts = np.fromiter((count for _, count in strategy_counts), dtype=np.int64,
                         count=len(strategy_counts))
    return rows, counts


def _flattened(strategies) -> tuple[np.ndarray, np.ndarray]:
    """Strategies as arrays: [strategies] depths and [sum of depths] lengths
    concatenated (int64)."""
    depths = np.fromiter(map(len, strategies), dtype=np.int64, count=len(strategies))
    flat = np.fromiter(itertools.chain.from_iterable(strategies), dtype=np.int64,
                       count=int(depths.sum()))
    return depths, flat


def _merged_strategy_counts(strategy_counts):
    """(strategy, count) pairs with each strategy sorted longest first, equal
    ones merged, in tuple order."""
    if _in_canonical_order(strategy_counts):
        # As `strategy_counts_of_rows` makes them: merging a few hundred
        # thousand strategies again would cost as much as making them.
        return strategy_counts
    table = _strategy_table(strategy_counts) if strategy_counts else None
    if table is None:
        # Empty strategies and non-positive lengths (rejected later with the
        # strategy named) cannot use 0 as padding.
        merged: dict[tuple[int, ...], int] = {}
        for strategy, count in strategy_counts:
            key = tuple(sorted((int(length) for length in strategy), reverse=True))
            merged[key] = merged.get(key, 0) + count
        return sorted(merged.items())
    return strategy_counts_of_rows(*table)


def _in_canonical_order(strategy_counts) -> bool:
    """Whether every strategy is a tuple of ints, longest first, and each is
    before the next in tuple order (so no two are equal): O(lengths), the
    loops in C."""
    strategies = [strategy for strategy, _ in strategy_counts]
    if (set(map(type, strategies)) != {tuple}
            or set(map(type, itertools.chain.from_iterable(strategies))) != {int}
            or not all(map(operator.lt, strategies,
                           itertools.islice(strategies, 1, None)))):
        return False
    depths, flat = _flattened(strategies)
    rises = np.flatnonzero(np.diff(flat) > 0) + 1  # where a length is above the last
    # A rise is allowed only where a strategy starts.
    return np.isin(rises, np.cumsum(depths)).all()


@dataclasses.dataclass(frozen=True)
class PackingPlan:
    """How to pack a length histogram into rows of fixed length.

    Attributes:
      algorithm: str, name of the algorithm that made the plan.
      max_sequence_length: int, tokens per pack (row), S.
      max_sequences_per_pack: int, cap on sequences per pack, D.
      histogram: tuple of int, ``histogram[i]`` = number of sequences of length
        ``i + 1``; length S.
      strategies: tuple of tuple of int, distinct pack contents, each sorted
        longest first.
      counts: tuple of int, ``counts[j]`` = number of packs built with
        ``strategies[j]``.
      lp_lower_bound: float or None, a proven lower bound on the packs of
        any plan, where the algorithm computed one (``optimal``): the
        optimum of the linear-programming relaxation (fractional packs) when
        column generation converged, else the bound its duals proved (at
        most the LP optimum, within 0.01 % of it unless the time limit came
        first); for a shortcut's plan (exchange fill, exact-fill rows),
        `optimal.simple_bound`; else None. No plan can use fewer than
        ``ceil(lp_lower_bound)`` packs.
      solve_time_seconds: float, wall time the algorithm took.
      time_limit_reached: bool, whether ``optimal``'s time limit stopped the
        search (the plan is then the best found so far; `certified_gap` says
        how good it is).
    """

    algorithm: str
    max_sequence_length: int
    max_sequences_per_pack: int
    histogram: tuple[int, ...]
    strategies: tuple[tuple[int, ...], ...]
    counts: tuple[int, ...]
    lp_lower_bound: float | None = None
    solve_time_seconds: float = 0.0
    time_limit_reached: bool = False

    def __post_init__(self):
        max_len = self.max_sequence_length
        if len(self.histogram) != max_len:
            raise ValueError(
                f"histogram has {len(self.histogram)} bins, expected "
                f"max_sequence_length={max_len}")
        if len(self.strategies) != len(self.counts):
            raise ValueError(
                f"{len(self.strategies)} strategies but {len(self.counts)} counts")
        counts = np.asarray(self.counts, dtype=np.int64)
        depths, flat_lengths = self.flat_strategies()
        if (depths == 0).any():
            raise ValueError(f"strategy {int(np.flatnonzero(depths == 0)[0])} is empty")
        starts = np.cumsum(depths) - depths
        tokens = np.add.reduceat(flat_lengths, starts) if starts.size else depths
        shortest = np.minimum.reduceat(flat_lengths, starts) if starts.size else depths
        problems = [
            (counts < 0, lambda j: f"has negative count {self.counts[j]}"),
            (shortest < 1, lambda j: "holds a non-positive length"),
            (tokens > max_len, lambda j: f"holds {tokens[j]} tokens, more than "
                                         f"max_sequence_length={max_len}"),
            (depths > self.max_sequences_per_pack,
             lambda j: f"holds {depths[j]} sequences, more than "
                       f"max_sequences_per_pack={self.max_sequences_per_pack}"),
        ]
        for broken, describe in problems:
            if broken.any():
                j = int(np.flatnonzero(broken)[0])
                raise ValueError(f"strategy {self.strategies[j]} {describe(j)}")
        packed = self._packed_histogram(depths, flat_lengths)
        expected = np.asarray(self.histogram, dtype=np.int64)
        if not np.array_equal(packed, expected):
            wrong = np.flatnonzero(packed != expected)
            examples = ", ".join(
                f"length {i + 1}: packed {packed[i]}, histogram {expected[i]}"
                for i in wrong[:3])
            raise ValueError(
                f"plan does not pack every sequence exactly once "
                f"({len(wrong)} lengths differ; {examples})")

    @classmethod
    def from_strategy_counts(cls, strategy_counts, *, algorithm, histogram,
                             max_sequence_length, max_sequences_per_pack,
                             lp_lower_bound=None, solve_time_seconds=0.0,
                             time_limit_reached=False):
        """Builds a canonical plan from (strategy, count) pairs.

        Strategies are sorted longest first, equal strategies merged, zero
        counts dropped, and the result ordered by strategy for stable output.
        """
        with cyclic_gc_paused():
            strategy_counts = list(strategy_counts)
            counts = [count for _, count in strategy_counts]
            # Pairs of positive ints (`strategy_counts_of_rows`'s) as they are.
            if set(map(type, counts)) != {int} or 0 in counts:
                strategy_counts = [(strategy, int(count)) for strategy, count
                                   in strategy_counts if int(count) != 0]
            ordered = _merged_strategy_counts(strategy_counts)
            return cls(
                algorithm=algorithm,
                max_sequence_length=int(max_sequence_length),
                max_sequences_per_pack=int(max_sequences_per_pack),
                histogram=tuple(int(c) for c in histogram),
                strategies=tuple(strategy for strategy, _ in ordered),
                counts=tuple(count for _, count in ordered),
                lp_lower_bound=None if lp_lower_bound is None else float(lp_lower_bound),
                solve_time_seconds=float(solve_time_seconds),
                time_limit_reached=bool(time_limit_reached),
            )

    # ------------------------------------------------------------------ arrays
    def flat_strategies(self) -> tuple[np.ndarray, np.ndarray]:
        """The strategies as arrays: ``depths`` [num_strategies] and all their
        lengths concatenated, ``flat_lengths`` [sum of depths] (int64)."""
        return _flattened(self.strategies)

    def packed_histogram(self) -> np.ndarray:
        """[S] int64: how many sequences of each length the plan packs."""
        return self._packed_histogram(*self.flat_strategies())

    def _packed_histogram(self, depths, flat_lengths) -> np.ndarray:
        packed = np.zeros(self.max_sequence_length, dtype=np.int64)
        valid = (flat_lengths >= 1) & (flat_lengths <= self.max_sequence_length)
        np.add.at(packed, flat_lengths[valid] - 1,
                  np.repeat(np.asarray(self.counts, dtype=np.int64), depths)[valid])
        return packed

    # ----------------------------------------------------------------- reports
    @functools.cached_property
    def num_packs(self) -> int:
        return int(sum(self.counts))

    @functools.cached_property
    def num_sequences(self) -> int:
        return int(sum(self.histogram))

    @functools.cached_property
    def real_tokens(self) -> int:
        return int(np.dot(np.arange(1, self.max_sequence_length + 1),
                          np.asarray(self.histogram, dtype=np.int64)))

    @property
    def num_strategies(self) -> int:
        return len(self.strategies)

    @property
    def total_tokens(self) -> int:
        """Tokens in all packs, real and padding: packs x max length."""
        return self.num_packs * self.max_sequence_length

    @property
    def padding_tokens(self) -> int:
        return self.total_tokens - self.real_tokens

    @property
    def efficiency(self) -> float:
        """Real tokens / all tokens in the packs (1.0 = no padding)."""
        return self.real_tokens / self.total_tokens if self.total_tokens else 1.0

    @property
    def packing_factor(self) -> float:
        """Sequences per pack: the speed-up over one sequence per row."""
        return self.num_sequences / self.num_packs if self.num_packs else 1.0

    @property
    def theoretical_speedup(self) -> float:
        """The speed-up of a packing with no padding at all (the paper's limit).

        Rows without packing (one per sequence) times max length, over the real
        tokens; a property of the histogram, shared by every plan of it.
        """
        if not self.real_tokens:
            return 1.0
        return self.num_sequences * self.max_sequence_length / self.real_tokens

    @property
    def token_lower_bound(self) -> int:
        """ceil(sum of lengths / max length): no plan has fewer packs."""
        return -(-self.real_tokens // self.max_sequence_length)

    @property
    def lp_lower_bound_packs(self) -> int | None:
        """ceil(lp_lower_bound) where known: a tighter bound than the token one."""
        if self.lp_lower_bound is None:
            return None
        # The LP optimum is computed in floating point; forgive round-off.
        return max(self.token_lower_bound, math.ceil(self.lp_lower_bound - 1e-6))

    @property
    def certified_gap(self) -> float | None:
        """How far above the optimum the plan can be, as a fraction: packs
        over ``lp_lower_bound_packs``, less 1 (0.0: proven optimal); None
        without a bound."""
        bound = self.lp_lower_bound_packs
        if bound is None:
            return None
        return self.num_packs / bound - 1 if bound else 0.0

    @property
    def proven_optimal(self) -> bool | None:
        """Whether the plan is proven optimal: its packs equal the bound
        rounded up (None without a bound; False means not proven, not that
        a better plan exists)."""
        bound = self.lp_lower_bound_packs
        return None if bound is None else self.num_packs <= bound

    @property
    def max_depth_used(self) -> int:
        """The most sequences any pack of the plan holds."""
        return max((len(s) for s in self.strategies), default=0)

    def summary(self) -> dict[str, Any]:
        """The reports as a flat dict (what the JSON file and tables show)."""
        return {
            "algorithm": self.algorithm,
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "num_sequences": self.num_sequences,
            "num_packs": self.num_packs,
            "num_strategies": self.num_strategies,
            "max_depth_used": self.max_depth_used,
            "real_tokens": self.real_tokens,
            "padding_tokens": self.padding_tokens,
            "efficiency": self.efficiency,
            "packing_factor": self.packing_factor,
            "theoretical_speedup": self.theoretical_speedup,
            "token_lower_bound": self.token_lower_bound,
            "lp_lower_bound": self.lp_lower_bound,
            "lp_lower_bound_packs": self.lp_lower_bound_packs,
            "certified_gap": self.certified_gap,
            "proven_optimal": self.proven_optimal,
            "solve_time_seconds": self.solve_time_seconds,
            "time_limit_reached": self.time_limit_reached,
        }

    # -------------------------------------------------------------------- JSON
    def to_json(self, path=None, *, indent: int | None = None) -> str:
        """Serialises the plan (and its reports, for readers) to JSON.

        Writes to ``path`` when given; returns the JSON text either way.
        """
        document = {
            "format": _JSON_FORMAT,
            "version": _JSON_VERSION,
            "algorithm": self.algorithm,
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "lp_lower_bound": self.lp_lower_bound,
            "solve_time_seconds": self.solve_time_seconds,
            "time_limit_reached": self.time_limit_reached,
            "histogram": list(self.histogram),
            "strategies": [list(s) for s in self.strategies],
            "counts": list(self.counts),
            "summary": self.summary(),
        }
        text = json.dumps(document, indent=indent)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str) -> "PackingPlan":
        """Reads a plan written by `to_json` (JSON text or a file path).

        The plan is validated again: a file edited into an inexact plan fails.
        """
        text = text_or_path
        if not text_or_path.lstrip().startswith("{"):
            with open(text_or_path, encoding="utf-8") as f:
                text = f.read()
        document = json.loads(text)
        if document.get("format") != _JSON_FORMAT:
            raise ValueError(
                f"not a packing plan: format is {document.get('format')!r}, "
                f"expected {_JSON_FORMAT!r}")
        if document.get("version") != _JSON_VERSION:
            raise ValueError(f"packing plan version {document.get('version')!r} "
                             f"is not supported (expected {_JSON_VERSION})")
        return cls(
            algorithm=document["algorithm"],
            max_sequence_length=int(document["max_sequence_length"]),
            max_sequences_per_pack=int(document["max_sequences_per_pack"]),
            histogram=tuple(int(c) for c in document["histogram"]),
            strategies=tuple(tuple(int(x) for x in s) for s in document["strategies"]),
            counts=tuple(int(c) for c in document["counts"]),
            lp_lower_bound=document["lp_lower_bound"],
            solve_time_seconds=float(document["solve_time_seconds"]),
            # A plan file without the key was not stopped by a time limit.
            time_limit_reached=bool(document.get("time_limit_reached", False)),
        )
