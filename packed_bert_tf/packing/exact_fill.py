"""Exact-fill matching: rows filled to the last token, without an LP.

Where a histogram's optimum fills rows completely (its LP bound equals the
token bound, total tokens / S, to within a fraction of a pack), column
generation meets a highly degenerate LP: every exact-fill pattern has reduced
cost zero at the token duals. With 4 sequences per pack and S = 2048 on
long-tailed document lengths, its first LP takes 181 rounds and about 50 s.
Such a plan can instead be built directly, and proven near-optimal by the
token bound alone: any plan with ``P`` packs is within ``P / ceil(T / S) - 1``
of the optimum.

Every row built here holds two *halves* of at most two sequences each, whose
lengths sum to ``p`` and ``S - p`` (so at most 4 sequences, exactly S tokens):

1. **Complements for the longest sequences** (`_complements_for_longest`).
   For each length ``a > S / 2`` whose room ``r = S - a`` is at most the
   complement limit, longest first, its sequences each get the most balanced
   triple of sequences summing to exactly ``r`` that the histogram still has
   (else a pair, else one sequence). The short sequences that only the
   longest can use go to them before random matching spends them elsewhere.
2. **Random halves** (`_match_random_halves`). The rest is shuffled; a
   fraction is kept as one-sequence halves and the others are paired; halves
   of sum ``p`` are matched with halves of sum ``S - p`` by counting on the
   histogram of half sums (every match is a full row); unmatched halves go
   back to the pool, which is reshuffled, until a round places under 0.5 %
   of it.
3. **The residual** (0.06 % of the sequences on the long-context histogram
   at S = 2048) is left to column generation by the caller.

Step 1's limit trades the two steps against each other and is searched (3/8
of S / 2, then steps of 1/8, 1/16 and 1/32 towards the best, keeping the
limit whose residual holds the fewest tokens); step 1's rows for a smaller
limit are a prefix of those for a larger one, so it runs once. Step 2 comes
in two `MATCHINGS`, tried in turn by the caller until one is certified.

Cost: O(N log N) per round of step 2 for N sequences (a shuffle and a
16-bit radix sort), a few tens of rounds over geometrically shrinking pools,
for each of up to 7 limits; step 1 lists triples in widening windows of
spread, O(limit^3 / 12) at worst. On the long-context histograms (1 M
documents, every length present; `benchmarks/packing_benchmark.py`), with 4
per pack: S = 2048, 1.15 M sequences, about 2 s in all (step 1 0.3 s, step 2
1 s, the plan's 206,000 distinct rows 0.5 s), 0.0076 % above the token
bound, where column generation alone takes 54 s; S = 1536, the second
matching, 2.4 s and 0.021 %, against 41 s.

There is no guarantee: on a histogram whose optimum does not fill rows (its
LP bound well above the token bound), or one the matching suits badly, the
plan is not certified and the caller runs column generation instead.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import numpy as np

from packed_bert_tf.packing.plan import strategy_counts_of_rows

# With fewer distinct lengths than this, column generation is fast enough
# (3.7 s at S = 1024 with 1,022 lengths present): see `eligible`.
MIN_LENGTHS = 1024


@dataclasses.dataclass(frozen=True)
class Matching:
    """How step 2 makes and keeps one-sequence halves.

    Halves average S / 2 when a share ``s = 2 - S / (2 mean)`` of them holds
    one sequence (the rest two): then rows average 4 - 2 s sequences, what
    the pool's tokens and count allow. `single_fraction` scales the singles
    made each round; with `hold_single_share`, matched rows holding more
    than that share of singles are returned to the pool (a long single
    matches any pair of its complement's sum, so singles are otherwise
    matched first and the count budget is spent early).
    """

    single_fraction: float
    hold_single_share: bool


# Tried in order until one is certified: the first suits histograms whose
# rows hold almost 4 sequences (3.94 at S = 2048), the second those with
# many 3-sequence rows (S = 1536: half of them).
MATCHINGS = (Matching(single_fraction=0.5, hold_single_share=False),
             Matching(single_fraction=1.0, hold_single_share=True))

# Give up when the first complement limit tried leaves more than this
# fraction of the tokens unplaced: such histograms (LP bound well above the
# token bound, e.g. 1.8 % left at S = 2304 against 0.07 % at S = 2048) are
# not certified, and column generation on a large residual is slow.
GIVE_UP_FRACTION = 0.01

# Stop matching when a round places under this fraction of the pool.
STALL_FRACTION = 0.005
MAX_ROUNDS = 200

# Complement limits tried, as fractions of S / 2 (centre, then refined).
LIMIT_CENTRE = 3 / 8
LIMIT_STEP = 1 / 8
LIMIT_REFINEMENTS = 3


@dataclasses.dataclass(frozen=True)
class ExactFill:
    """Rows filled exactly, and what is left.

    Attributes:
      rows: [R, 4] int64, sequence lengths of each full row (0 = no sequence),
        each summing to S.
      residual: [S] int64, histogram of the sequences in no row.
      complement_limit: int, step 1's limit on the room ``S - a`` of the
        longest sequences.
    """

    rows: np.ndarray
    residual: np.ndarray
    complement_limit: int

    def strategy_counts(self) -> list[tuple[tuple[int, ...], int]]:
        """The rows as (strategy, count) pairs, each strategy longest first."""
        return strategy_counts_of_rows(self.rows)


def eligible(histogram: np.ndarray, max_sequence_length: int,
             max_sequences_per_pack: int) -> bool:
    """Whether exact-fill matching is worth trying.

    It needs room for two halves of two (at most 4 per pack), many distinct
    lengths (below `MIN_LENGTHS` column generation is fast: 3.7 s at
    S = 1024 with every length present), and no bound beyond the token
    bound that already rules out exact rows: at most 4 sequences a row
    (ceil(N / 4) packs) and one sequence longer than S / 2 a row.
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    if max_sequences_per_pack < 4 or np.count_nonzero(histogram) < MIN_LENGTHS:
        return False
    lengths = np.arange(1, histogram.size + 1)
    token_bound = int(histogram @ lengths) / max_sequence_length
    return (histogram.sum() / 4 <= token_bound
            and histogram[max_sequence_length // 2:].sum() <= token_bound)


def match_exact_fills(histogram: np.ndarray, max_sequence_length: int, *,
                      matchings: tuple[Matching, ...] = MATCHINGS,
                      seed: int = 0, deadline=None) -> Iterator[list[ExactFill]]:
    """Rows of at most 4 sequences filled to exactly S tokens, and the rest,
    for each matching in turn (step 1, the same for all, is done once).

    Args:
      histogram: [S] int, ``histogram[i]`` = number of sequences of length
        ``i + 1``.
      max_sequence_length: int, tokens per row, S.
      matchings: tuple of `Matching`, how step 2 treats one-sequence halves,
        one after the other (the caller stops at the first whose rows it
        certifies).
      seed: int, seed of the random matching (the result is deterministic
        given it).
      deadline: optional, with ``passed()`` (`optimal.Deadline`): once it
        has passed, matching stops and nothing more is yielded.

    Yields:
      list of `ExactFill`: for each matching, one per complement limit tried,
      best first (fewest residual tokens, then fewest residual sequences): the
      caller packs the residual of the first one or two and keeps the plan
      with fewer packs. Empty when the first limit tried leaves over
      `GIVE_UP_FRACTION` of the tokens.
    """
    max_len = int(max_sequence_length)
    counts = np.zeros(max_len + 1, dtype=np.int64)
    counts[1:] = np.asarray(histogram, dtype=np.int64)[:max_len]
    # Full-length sequences fill a row alone.
    full = np.zeros((int(counts[max_len]), 4), dtype=np.int64)
    full[:, 0] = max_len
    counts[max_len] = 0
    total_tokens = int(counts @ np.arange(max_len + 1)) + max_len * len(full)

    half = max_len // 2

    def late() -> bool:
        return deadline is not None and deadline.passed()

    # The search moves at most a step, half a step, ... from the centre.
    most = int(round(min(1.0, LIMIT_CENTRE + LIMIT_STEP * 2) * half))
    complement_rows, rooms = _complements_for_longest(counts.copy(), max_len, most, late)

    for matching in matchings:
        results = {}

        def attempt(fraction: float) -> tuple[int, int]:
            limit = int(round(fraction * half))
            if late():
                # Out of time: an attempt not made leaves every token.
                return total_tokens + 1, 0
            if limit not in results:
                taken = complement_rows[rooms <= limit]
                pool_counts = counts - np.bincount(taken.ravel(), minlength=max_len + 1)
                pool_counts[0] = 0
                matched, left = _match_random_halves(
                    np.repeat(np.arange(max_len + 1, dtype=np.int32), pool_counts),
                    max_len, matching, np.random.default_rng(seed), late)
                results[limit] = ExactFill(
                    rows=np.concatenate([full, taken, matched]),
                    residual=np.bincount(left, minlength=max_len + 1)[1:],
                    complement_limit=limit)
            return _residual_size(results[limit].residual)

        centre, step = LIMIT_CENTRE, LIMIT_STEP
        if attempt(centre)[0] > GIVE_UP_FRACTION * total_tokens:
            if late():
                return
            yield []
            continue
        for _ in range(LIMIT_REFINEMENTS):
            centre = min((centre - step, centre, centre + step), key=attempt)
            step /= 2
        if late():
            return
        yield sorted(results.values(), key=lambda r: _residual_size(r.residual))


def _residual_size(residual: np.ndarray) -> tuple[int, int]:
    """Tokens, then sequences, left to the residual: what the search minimises."""
    return int(residual @ np.arange(1, residual.size + 1)), int(residual.sum())


def _complements_for_longest(counts: np.ndarray, max_len: int, limit: int,
                             late=lambda: False) -> tuple[np.ndarray, np.ndarray]:
    """Rows for the sequences longer than S / 2 whose room is at most `limit`.

    Longest first, each length's sequences take the most balanced triples of
    still-available lengths summing to their room (then pairs, then one
    sequence); `counts` (indexed by length) is consumed. Returns the rows
    ([R, 4], longest first, 0-padded) and each row's room, non-decreasing
    (fewer once ``late()``).
    """
    half = max_len // 2
    rows, rooms = [], []
    for length in range(max_len - 1, half, -1):
        room = max_len - length
        if room > limit or late():
            break
        need = int(counts[length])
        for combinations in itertools.chain(_widening_triples(room), (
                _balanced_pairs(room), np.array([[room]]))):
            if not need or late():
                break
            # Availability only falls as sequences are taken: one vectorised
            # pass finds the candidates, each is then re-checked in order.
            for number, candidate in enumerate(
                    np.flatnonzero(_available(counts, combinations))):
                if number % 64 == 63 and late():
                    break
                chosen = combinations[candidate]
                take = min(int(_available(counts, chosen[None])[0]), need)
                if not take:
                    continue
                np.subtract.at(counts, chosen, take)
                need -= take
                row = np.zeros(4, dtype=np.int64)
                row[0] = length
                row[1:1 + chosen.size] = chosen[::-1]
                rows.append(np.broadcast_to(row, (take, 4)))
                rooms.append(np.full(take, room))
                if not need:
                    break
        counts[length] = need
    if not rows:
        return np.zeros((0, 4), dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(rows), np.concatenate(rooms)


def _balanced_triples(room: int, max_spread: int | None = None) -> np.ndarray:
    """[K, 3] lengths b <= c <= d with b + c + d = room (and d - b at most
    `max_spread`), most balanced (smallest d - b) first."""
    max_spread = room if max_spread is None else max_spread
    smallest = np.arange(max(1, -(-(room - 2 * max_spread) // 3)), room // 3 + 1)
    # For each b, c runs from max(b, room - 2b - max_spread) to (room - b) // 2.
    lowest = np.maximum(smallest, room - 2 * smallest - max_spread)
    per_smallest = np.maximum((room - smallest) // 2 - lowest + 1, 0)
    b = np.repeat(smallest, per_smallest)
    c = np.repeat(lowest, per_smallest) + np.arange(b.size) - np.repeat(
        np.cumsum(per_smallest) - per_smallest, per_smallest)
    triples = np.stack([b, c, room - b - c], axis=1)
    return triples[np.argsort(triples[:, 2] - triples[:, 0], kind="stable")]


def _widening_triples(room: int):
    """`_balanced_triples(room)` in growing windows of spread (16, 64, 256,
    ..., then all): the most balanced available triple is usually among the first few,
    and listing all of them costs O(room^2)."""
    spread = 16
    while spread < room:
        yield _balanced_triples(room, spread)
        spread *= 4
    yield _balanced_triples(room)


def _balanced_pairs(room: int) -> np.ndarray:
    """[K, 2] lengths b <= c with b + c = room, most balanced first."""
    b = np.arange(room // 2, 0, -1)
    return np.stack([b, room - b], axis=1)


def _available(counts: np.ndarray, combinations: np.ndarray) -> np.ndarray:
    """How many copies of each combination of lengths (one per row) `counts`
    holds: a length appearing k times in a row can be used counts // k times."""
    width = combinations.shape[1]
    copies = None
    for i in range(width):
        multiplicity = sum(combinations[:, i] == combinations[:, j] for j in range(width))
        here = counts[combinations[:, i]] // multiplicity
        copies = here if copies is None else np.minimum(copies, here)
    return copies


def _match_random_halves(pool: np.ndarray, max_len: int, matching: Matching,
                         rng: np.random.Generator,
                         late=lambda: False) -> tuple[np.ndarray, np.ndarray]:
    """Rows of two halves (p, S - p) matched from random halves of `pool`
    (sequence lengths), and the lengths left unmatched (all that are left
    once ``late()``)."""
    rows = []
    for _ in range(MAX_ROUNDS):
        if not pool.size or late():
            break
        size = pool.size
        mean = pool.mean()
        # Halves average S / 2 when this fraction of halves is one sequence.
        single_halves = float(np.clip(2 - max_len / 2 / mean, 0.0, 1.0))
        singles = int(round(matching.single_fraction * single_halves / (2 - single_halves)
                            * size))
        singles += (size - singles) % 2
        rng.shuffle(pool)
        pairs = pool[singles:].reshape(-1, 2)
        pair_sums = pairs.sum(axis=1)
        rows.append(np.pad(pairs[pair_sums == max_len], ((0, 0), (0, 2))))
        back = [pairs[pair_sums > max_len].ravel()]
        pairs = pairs[pair_sums < max_len]
        members = np.concatenate([
            np.stack([pool[:singles], np.zeros(singles, dtype=pool.dtype)], axis=1),
            pairs])
        # Singles and pairs mixed, so that neither is matched first.
        members = members[rng.permutation(len(members))]
        sums = members.sum(axis=1)
        matched_rows, unmatched = _match_halves(sums, max_len, rng)
        if matching.hold_single_share:
            matched_rows, returned = _hold_single_share(
                matched_rows, members[:, 1] == 0, single_halves, rng)
            unmatched = np.concatenate([unmatched, returned])
        rows.append(np.concatenate([members[matched_rows[:, 0]],
                                    members[matched_rows[:, 1]]], axis=1))
        back.append(members[unmatched].ravel())
        pool = np.concatenate(back)
        pool = pool[pool > 0]
        if size - pool.size < STALL_FRACTION * size:
            break
    if not rows:
        return np.zeros((0, 4), dtype=np.int64), pool
    return np.concatenate(rows), pool


def _hold_single_share(matched_rows: np.ndarray, is_single: np.ndarray, share: float,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Keeps matched rows (in random order) while their one-sequence halves
    are at most `share` of all their halves; returns the kept rows and the
    halves of the others."""
    singles_per_row = is_single[matched_rows].sum(axis=1)
    order = rng.permutation(len(matched_rows))
    spent = np.cumsum(singles_per_row[order])
    keep = np.zeros(len(matched_rows), dtype=bool)
    keep[order] = (singles_per_row[order] == 0) | (spent <= share * 2 * len(matched_rows))
    return matched_rows[keep], matched_rows[~keep].ravel()


def _sort_type(max_len: int):
    return np.uint16 if max_len < 1 << 16 else np.int64


def _match_halves(sums: np.ndarray, max_len: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Matches halves of sum p with halves of sum S - p, as many as the
    histogram of sums allows, chosen at random within each sum.

    Returns [M, 2] indices (low half, high half) and the unmatched indices.
    """
    per_sum = np.bincount(sums, minlength=max_len + 1)
    matchable = np.minimum(per_sum, per_sum[::-1])  # per_sum[::-1][p]: sum S - p
    if max_len % 2 == 0:  # halves of sum S / 2 meet each other
        matchable[max_len // 2] = per_sum[max_len // 2] // 2 * 2
    # The halves come shuffled, so a stable sort by sum orders each sum's
    # halves at random (16-bit keys: numpy radix-sorts them).
    order = np.argsort(sums.astype(_sort_type(max_len)), kind="stable")
    sorted_sums = sums[order]
    starts = np.cumsum(per_sum) - per_sum
    rank = np.arange(sums.size) - starts[sorted_sums]
    matched = rank < matchable[sorted_sums]
    index, value, rank = order[matched], sorted_sums[matched], rank[matched]
    # The k-th half of sum p < S/2 meets the k-th of sum S - p; at S/2, the
    # 2k-th meets the (2k+1)-th. Low halves are already in (p, k) order; high
    # ones are in (S - p, k) order once their sums are sorted descending.
    low = (2 * value < max_len) | ((2 * value == max_len) & (rank % 2 == 0))
    low_index = index[low]
    high_index = index[~low]
    high_index = high_index[np.argsort((max_len - value[~low]).astype(_sort_type(max_len)),
                                       kind="stable")]
    unmatched = np.ones(sums.size, dtype=bool)
    unmatched[index] = False
    return np.stack([low_index, high_index], axis=1), np.flatnonzero(unmatched)
