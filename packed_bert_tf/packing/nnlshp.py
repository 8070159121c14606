"""Non-negative least-squares histogram packing (NNLSHP, Krell et al. 2021)."""

from __future__ import annotations

import numpy as np
import scipy.optimize

# Beyond this many candidate strategies the dense NNLS matrix stops being
# practical (512 lengths x 100k strategies is 400 MB of float64).
MAX_NNLS_STRATEGIES = 100_000


def exact_fill_strategies(max_sequence_length: int,
                          max_sequences_per_pack: int) -> list[tuple[int, ...]]:
    """Every multiset of at most D lengths that sums to exactly S.

    Returned as tuples sorted shortest first, in lexicographic order.
    For D = 3 and S = 512 there are 22,102 of them (about S^2 / 12).
    """
    strategies: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], smallest: int, room: int, depth_left: int):
        if depth_left == 1:
            if room >= smallest:
                strategies.append(prefix + (room,))
            return
        for length in range(smallest, room + 1):
            if length == room:
                strategies.append(prefix + (length,))
            elif room - length >= length:
                extend(prefix + (length,), length, room - length, depth_left - 1)

    extend((), 1, max_sequence_length, max_sequences_per_pack)
    return strategies


def count_exact_fill_strategies(max_sequence_length: int,
                                max_sequences_per_pack: int) -> int:
    """Number of partitions of S into at most D parts (without listing them)."""
    # partitions[d][s] = partitions of s into at most d parts.
    partitions = np.zeros((max_sequences_per_pack + 1, max_sequence_length + 1),
                          dtype=object)
    partitions[:, 0] = 1
    for parts in range(1, max_sequences_per_pack + 1):
        for total in range(1, max_sequence_length + 1):
            partitions[parts, total] = partitions[parts - 1, total] + (
                partitions[parts, total - parts] if total >= parts else 0)
    return int(partitions[max_sequences_per_pack, max_sequence_length])


def pack_nnlshp(histogram: np.ndarray, max_sequence_length: int,
                max_sequences_per_pack: int, *, short_sequence_weight: float = 0.09,
                short_sequence_cutoff: int = 8):
    """NNLSHP: weighted non-negative least squares over exact-fill strategies.

    Solves ``min_x || w * (A x - h) ||`` with ``x >= 0``, where the columns of
    ``A`` are all strategies that fill a row exactly (`exact_fill_strategies`),
    ``h`` the histogram and ``w`` weights that make a residual on short
    sequences (length <= `short_sequence_cutoff`) cheap: the paper's 0.09
    for lengths up to 8. The solution is rounded to integers; sequences it
    leaves out get a pack of their own, one per sequence, as in the
    reference implementation.

    The reference then leaves "padding sequences" in the plan: lengths a
    strategy holds more often than the data has them. They are stripped here
    (the slot becomes padding), so the plan packs each real sequence exactly
    once; the number of packs does not change.

    Note:
      Source: Krell, Kosec, Perez, Fitzgibbon, "Efficient Sequence Packing
      without Cross-contamination", arXiv 2107.02027, section 2.2 and
      appendix. Cost: one NNLS solve on an S x K dense matrix, K about
      S^2 / 12 for D = 3 (about 20 s at S = 512 on 2 cores).
    """
    max_len = max_sequence_length
    num_strategies = count_exact_fill_strategies(max_len, max_sequences_per_pack)
    if num_strategies > MAX_NNLS_STRATEGIES:
        raise ValueError(
            f"nnlshp enumerates every exact-fill strategy: {num_strategies} of them "
            f"for max_sequence_length={max_len} and max_sequences_per_pack="
            f"{max_sequences_per_pack}, more than {MAX_NNLS_STRATEGIES}; use a "
            "smaller cap (the paper uses 3) or algorithm='optimal'")
    strategies = exact_fill_strategies(max_len, max_sequences_per_pack)
    matrix = np.zeros((max_len, len(strategies)), dtype=np.float64)
    for j, strategy in enumerate(strategies):
        for length in strategy:
            matrix[length - 1, j] += 1

    weights = np.ones(max_len)
    weights[:short_sequence_cutoff] = short_sequence_weight
    solution, _ = scipy.optimize.nnls(weights[:, None] * matrix,
                                      weights * histogram)
    counts = np.rint(solution).astype(np.int64)

    pairs = [(strategy, int(c)) for strategy, c in zip(strategies, counts) if c > 0]
    residual = histogram - matrix.astype(np.int64) @ counts
    for length in np.flatnonzero(residual > 0) + 1:
        # The reference uses (l, S - l) and S - l is a padding sequence;
        # the pack count is the same.
        pairs.append(((int(length),), int(residual[length - 1])))
    return strip_excess_sequences(pairs, histogram)


def strip_excess_sequences(pairs, histogram: np.ndarray):
    """Removes sequences a plan holds beyond the histogram's counts.

    ``pairs`` are (strategy, count) with at least ``histogram[l - 1]``
    sequences of each length l in all. Where a length appears more often,
    the excess copies are taken out of packs (largest groups first), those
    slots becoming padding. Packs left empty are dropped.
    """
    max_len = len(histogram)
    planned = np.zeros(max_len, dtype=np.int64)
    for strategy, count in pairs:
        for length in strategy:
            planned[length - 1] += count
    excess = planned - np.asarray(histogram, dtype=np.int64)
    if (excess < 0).any():
        missing = np.flatnonzero(excess < 0)[0] + 1
        raise ValueError(f"plan leaves out {-excess[missing - 1]} sequences of "
                         f"length {missing}")
    if not excess.any():
        return list(pairs)

    groups = sorted(([list(strategy), count] for strategy, count in pairs),
                    key=lambda group: -group[1])
    result = []
    # Groups made by stripping are appended and visited in turn, so a pack
    # holding several excess lengths is stripped of each.
    for strategy, count in groups:
        # Strip from this group as many copies of each excess length as it
        # holds, splitting the group when only part of it is stripped.
        while count > 0:
            removable = [l for l in sorted(set(strategy)) if excess[l - 1] > 0]
            if not removable:
                result.append((tuple(strategy), count))
                break
            length = removable[0]
            copies = strategy.count(length)
            # Packs of this group whose every copy of `length` can go.
            whole_packs = min(count, excess[length - 1] // copies)
            if whole_packs == 0:
                # Fewer excess copies than this pack holds: strip one pack.
                whole_packs, copies = 1, int(excess[length - 1])
            stripped = list(strategy)
            for _ in range(copies):
                stripped.remove(length)
            excess[length - 1] -= whole_packs * copies
            if stripped:
                groups.append([stripped, whole_packs])
            count -= whole_packs
    return result
