"""Length bucketing: pools of shuffled examples sorted by length and cut into batches.

``bucket_batches`` plans a whole epoch: the examples, shuffled by (seed,
epoch), are taken `pool_size` at a time; each pool is split into length
buckets (or only sorted), each bucket is cut into batches, and the batches
of the epoch are shuffled again. Examples that do not fill a batch of their
bucket wait for the next pool, so only the last pool of an epoch leaves
partial batches (at most one per bucket). A batch is cut either at a fixed
number of examples (``batch_size``) or at a token budget (as many examples
as fit under rows x S <= ``token_budget``).

Padding a bucket's batches to its upper boundary (``pad_to_bucket_boundary``)
gives a small fixed set of batch shapes, one per bucket, so XLA compiles the
step once per bucket; otherwise a batch is padded to its longest example.

`padded_batches` (random batches at the max length, or at each batch's
longest) and `packed_batches` give the baselines in the same `BatchPlan`
form, and `bucket_boundaries` chooses boundaries that minimise padding.

numpy only: this module never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.batching.plan import BatchPlan
from packed_bert_tf.packing import assign_sequences, pack_lengths


def validated_lengths(lengths) -> np.ndarray:
    """[N] int64 copy of a lengths array; ValueError unless 1-D integers >= 1."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
    lengths = lengths.astype(np.int64)
    if lengths.size and lengths.min() < 1:
        i = int(np.argmin(lengths))
        raise ValueError(f"example {i} has length {lengths[i]}; lengths must be >= 1")
    return lengths


@dataclasses.dataclass(frozen=True)
class Bucketing:
    """Length-bucketing options, as given (`BucketSpec.make` checks them); those
    with a flag (``--bucket_boundaries``, ``--pool_size``, ``--token_budget``)
    have its name.

    Attributes:
      batch_size: examples (rows) per batch. Exactly one of batch_size and
        token_budget.
      token_budget: rows x S of every batch stays <= this. With
        `pad_to_bucket_boundary` a bucket's batches have ``token_budget //
        boundary`` rows (one shape per bucket); without, each batch takes as
        many examples as fit at its longest example's length.
      pool_size: examples sorted together. Larger pools fill buckets more
        evenly and pad less, but order examples less randomly. At least one
        batch.
      bucket_boundaries: upper edges (inclusive) of the length buckets,
        increasing; a last bucket up to the max sequence length is added when
        the last edge is below it. None: `bucket_batches` makes one bucket
        (the pool only sorted), the tf.data pipelines four equal ones
        (`packed_bert_tf.batching.dataset.default_boundaries`).
      pad_to_bucket_boundary: pad each batch to its bucket's upper edge (a
        fixed set of shapes: one XLA compilation each) instead of its longest
        example.
      balance_cost: with one batch per replica in a step, the cost the
        batches of a step are balanced by (`batch_costs`; one of `COSTS`).
    """

    batch_size: int | None = None
    token_budget: int | None = None
    pool_size: int = 8192
    bucket_boundaries: tuple | None = None
    pad_to_bucket_boundary: bool = False
    balance_cost: str = "padded_tokens"


@dataclasses.dataclass(frozen=True)
class BucketSpec:
    """A `Bucketing` checked, its boundaries resolved (see `Bucketing` for the
    meaning of the fields).

    `boundaries` always ends at the max sequence length; without boundaries
    given there is one bucket and batches are padded to their longest example.
    """

    batch_size: int | None
    token_budget: int | None
    pool_size: int
    boundaries: tuple[int, ...]
    pad_to_bucket_boundary: bool

    @classmethod
    def make(cls, bucketing: Bucketing, *, max_sequence_length: int | None = None,
             longest: int | None = None) -> "BucketSpec":
        """Checks the options; `longest` is the data's longest example, if known.

        Raises ValueError, quoting what was received, for: both or neither of
        batch_size and token_budget; a pool smaller than one batch; a token
        budget below the longest sequence (or its bucket's boundary when
        padding to boundaries); boundaries that do not increase or that a
        sequence exceeds; pad_to_bucket_boundary without boundaries.
        """
        batch_size, token_budget = bucketing.batch_size, bucketing.token_budget
        pool_size, boundaries = bucketing.pool_size, bucketing.bucket_boundaries
        pad_to_bucket_boundary = bucketing.pad_to_bucket_boundary
        if (batch_size is None) == (token_budget is None):
            raise ValueError("give exactly one of batch_size and token_budget, got "
                             f"batch_size={batch_size!r}, token_budget={token_budget!r}")
        for name, value in (("batch_size", batch_size), ("token_budget", token_budget),
                            ("pool_size", pool_size),
                            ("max_sequence_length", max_sequence_length)):
            if value is not None and (not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if boundaries is not None:
            edges = np.asarray(boundaries)
            if edges.ndim != 1 or not edges.size or not np.issubdtype(
                    edges.dtype, np.integer) or edges.min() < 1 or (np.diff(edges) <= 0).any():
                raise ValueError("boundaries must be positive integers in increasing "
                                 f"order, got {boundaries!r}")
            edges = [int(e) for e in edges]
            if max_sequence_length is not None:
                if edges[-1] > max_sequence_length:
                    raise ValueError(f"boundary {edges[-1]} is above max_sequence_length="
                                     f"{max_sequence_length}")
                if edges[-1] < max_sequence_length:
                    edges.append(int(max_sequence_length))
        elif pad_to_bucket_boundary:
            raise ValueError("pad_to_bucket_boundary needs bucket boundaries")
        else:
            top = max_sequence_length if max_sequence_length is not None else longest
            edges = [int(top if top is not None else 1)]
        if longest is not None and longest > edges[-1]:
            what = ("max_sequence_length" if max_sequence_length is not None
                    else "the last boundary")
            raise ValueError(f"a sequence of length {longest} is longer than {what} "
                             f"({edges[-1]})")
        # The longest sequence's padded length bounds what a batch must hold.
        if longest is None:
            widest = edges[-1]
        elif pad_to_bucket_boundary:
            widest = edges[int(np.searchsorted(edges, longest))]
        else:
            widest = longest
        if token_budget is not None:
            if token_budget < widest:
                raise ValueError(
                    f"token_budget={token_budget} is below the longest sequence's "
                    f"{widest} tokens{' (its bucket boundary)' if pad_to_bucket_boundary else ''}"
                    ": a batch could not hold one such sequence")
            smallest_batch = token_budget // widest
            if pool_size < smallest_batch:
                raise ValueError(
                    f"pool_size={pool_size} is smaller than one batch of the longest "
                    f"sequences (token_budget={token_budget} // {widest} = "
                    f"{smallest_batch}): a pool must hold at least one batch")
        elif pool_size < batch_size:
            raise ValueError(f"pool_size={pool_size} is smaller than batch_size="
                             f"{batch_size}: a pool must hold at least one batch")
        return cls(None if batch_size is None else int(batch_size),
                   None if token_budget is None else int(token_budget), int(pool_size),
                   tuple(edges), bool(pad_to_bucket_boundary))

    def rows(self, bucket: int) -> int | None:
        """Rows of every batch of a bucket; None where the token budget sets them
        batch by batch (budget without padding to boundaries)."""
        if self.batch_size is not None:
            return self.batch_size
        if self.pad_to_bucket_boundary:
            return self.token_budget // self.boundaries[bucket]
        return None


@dataclasses.dataclass(frozen=True, eq=False)
class PoolCut:
    """Batches cut from one pool, as positions into the pool's lengths array.

    Batch j holds ``order[splits[j]:splits[j + 1]]``; `leftover` are the
    positions left for the next pool (not in any batch).
    """

    order: np.ndarray  # [n] int64
    splits: np.ndarray  # [k + 1] int64
    rows: np.ndarray  # [k] int64
    padded_lengths: np.ndarray  # [k] int64
    buckets: np.ndarray  # [k] int64
    leftover: np.ndarray  # [c] int64


def _greedy_cuts(sorted_lengths: np.ndarray, budget: int) -> np.ndarray:
    """Cut points of ascending lengths into batches with count x longest <= budget."""
    cuts = [0]
    start, end = 0, sorted_lengths.size
    while start < end:
        # All later lengths are >= this one: at most budget // it more fit.
        window = sorted_lengths[start:start + budget // int(sorted_lengths[start])]
        fits = np.arange(1, window.size + 1) * window <= budget  # True..True False..
        start += window.size if fits.all() else int(np.argmin(fits))
        cuts.append(start)
    return np.asarray(cuts, dtype=np.int64)


def cut_pool(lengths, spec: BucketSpec, *, final: bool) -> PoolCut:
    """Cuts one pool into batches: bucket, sort by length, cut.

    Ties in (bucket, length) keep the pool's order, which is random when the
    pool is. A batch that does not fill up (fewer than its bucket's rows; for
    a budget without boundaries, room for one more of its longest) is left
    over for the next pool unless `final`. O(n log n) for n examples.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    edges = np.asarray(spec.boundaries, dtype=np.int64)
    bucket = np.searchsorted(edges, lengths, side="left")
    order = np.lexsort((lengths, bucket))
    sorted_lengths, sorted_buckets = lengths[order], bucket[order]
    starts = np.searchsorted(sorted_buckets, np.arange(edges.size + 1))
    kept, splits, rows, padded, buckets, leftover = [], [0], [], [], [], []
    for b in range(edges.size):
        lo, hi = int(starts[b]), int(starts[b + 1])
        if lo == hi:
            continue
        segment = sorted_lengths[lo:hi]
        fixed_rows = spec.rows(b)
        if fixed_rows is None:
            cuts = _greedy_cuts(segment, spec.token_budget)
        else:
            cuts = np.append(np.arange(0, segment.size, fixed_rows), segment.size)
        for begin, end in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            count, longest = end - begin, int(segment[end - 1])
            batch_rows = count if fixed_rows is None else fixed_rows
            full = ((count + 1) * longest > spec.token_budget if fixed_rows is None
                    else count == fixed_rows)
            if not (full or final):
                leftover.append(order[lo + begin:lo + end])
                continue
            kept.append(order[lo + begin:lo + end])
            splits.append(splits[-1] + count)
            rows.append(batch_rows)
            padded.append(int(edges[b]) if spec.pad_to_bucket_boundary else longest)
            buckets.append(b)
    empty = np.zeros(0, np.int64)
    return PoolCut(order=np.concatenate(kept) if kept else empty,
                   splits=np.asarray(splits, np.int64), rows=np.asarray(rows, np.int64),
                   padded_lengths=np.asarray(padded, np.int64),
                   buckets=np.asarray(buckets, np.int64),
                   leftover=np.concatenate(leftover) if leftover else empty)


def ragged_reorder(values: np.ndarray, splits: np.ndarray, rows: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Rows `rows` (in that order) of a ragged array: (values, splits)."""
    counts = np.diff(splits)[rows]
    new_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    within = np.arange(new_splits[-1]) - np.repeat(new_splits[:-1], counts)
    return values[np.repeat(splits[:-1][rows], counts) + within], new_splits


def epoch_rng(seed: int, epoch: int, *more: int) -> np.random.Generator:
    """The generator of one (seed, epoch[, pool ...]): same words, same draws."""
    words = [int(seed), int(epoch), *map(int, more)]
    if min(words) < 0:
        raise ValueError(f"seed and epoch must be >= 0, got {words}")
    return np.random.default_rng(words)


def bucket_batches(lengths, bucketing: Bucketing, *,
                   max_sequence_length: int | None = None, seed: int = 0,
                   epoch: int = 0, shuffle: bool = True) -> BatchPlan:
    """Plans one epoch of length-bucketed batches.

    This is bucketing as in tensor2tensor / fairseq ("sort a pool locally by
    length, batch, shuffle the batches") with the carry-over of unfilled
    batches to the next pool. O(N log P) time for pool size P, O(N) memory.

    Args:
      lengths: [N] int. Tokens of every example.
      bucketing: the `Bucketing`: the batch size or token budget, the pool
        size, the bucket boundaries (None: one bucket, the pool only sorted)
        and whether batches are padded to their bucket's edge; `balance_cost`
        is not used here (see `balance_across_workers`).
      max_sequence_length: int, optional. Default: the last boundary, or the
        longest example.
      seed: int. The shuffles (examples into pools, then batches) are drawn
        from (seed, epoch): the same arguments give the same plan.
      epoch: int, the epoch of that (seed, epoch).
      shuffle: False: pools are the examples in dataset order and batches come
        in pool order (bucket by bucket, shortest first), for evaluation.

    Returns:
      The `BatchPlan`: every example exactly once. At most one partial batch
      per bucket, from the flush of the carry after the last pool (whose
      batches come last without `shuffle`); its missing rows are padding.

    Raises:
      ValueError: see `BucketSpec.make`; also for lengths that are not 1-D
        integers >= 1.

    Example:
      >>> plan = bucket_batches([5, 1, 7, 2, 8, 3], Bucketing(
      ...     batch_size=2, pool_size=6, bucket_boundaries=(4, 8),
      ...     pad_to_bucket_boundary=True), shuffle=False)
      >>> [plan[k].tolist() for k in range(len(plan))], plan.padded_lengths.tolist()
      ([[1, 3], [0, 2], [5], [4]], [4, 8, 4, 8])
    """
    lengths = validated_lengths(lengths)
    spec = BucketSpec.make(bucketing, max_sequence_length=max_sequence_length,
                           longest=int(lengths.max()) if lengths.size else None)
    rng = epoch_rng(seed, epoch)
    stream = rng.permutation(lengths.size) if shuffle else np.arange(lengths.size)
    carry = np.zeros(0, np.int64)
    parts = []
    pools = [stream[start:start + spec.pool_size]
             for start in range(0, lengths.size, spec.pool_size)]
    # The last, empty pool flushes the carry (as the tf.data pipeline does).
    for pool, final in zip(pools + [stream[:0]], [False] * len(pools) + [True]):
        candidates = np.concatenate([carry, pool])
        cut = cut_pool(lengths[candidates], spec, final=final)
        parts.append((candidates[cut.order], np.diff(cut.splits), cut.rows,
                      cut.padded_lengths, cut.buckets))
        carry = candidates[cut.leftover]
    indices, counts, rows, padded, buckets = (np.concatenate(p) for p in zip(*parts))
    splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if shuffle:
        batch_order = rng.permutation(counts.size)
        indices, splits = ragged_reorder(indices, splits, batch_order)
        rows, padded, buckets = rows[batch_order], padded[batch_order], buckets[batch_order]
    return BatchPlan(lengths, splits, indices, rows, padded, buckets, spec.boundaries)


def padded_batches(lengths, *, batch_size: int, max_sequence_length: int | None = None,
                   pad_to_longest: bool = False, seed: int = 0, epoch: int = 0,
                   shuffle: bool = True) -> BatchPlan:
    """Random batches without bucketing: the baselines.

    Consecutive `batch_size` examples of the (seed, epoch) shuffle (the
    dataset order without `shuffle`), every batch at `max_sequence_length`
    (the padded model) or, with `pad_to_longest`, at its longest example
    (dynamic shapes: what a model that drops padding on the fly sees). The
    last batch may be partial; its missing rows are padding. O(N).
    """
    lengths = validated_lengths(lengths)
    if max_sequence_length is None:
        max_sequence_length = int(lengths.max()) if lengths.size else 1
    spec = BucketSpec.make(Bucketing(batch_size=batch_size, pool_size=batch_size),
                           max_sequence_length=max_sequence_length,
                           longest=int(lengths.max()) if lengths.size else None)
    order = (epoch_rng(seed, epoch).permutation(lengths.size) if shuffle
             else np.arange(lengths.size))
    num_batches = -(-lengths.size // spec.batch_size)
    splits = np.minimum(np.arange(num_batches + 1) * spec.batch_size, lengths.size)
    if pad_to_longest:
        padded = np.maximum.reduceat(lengths[order], splits[:-1]) if num_batches \
            else np.zeros(0, np.int64)
    else:
        padded = np.full(num_batches, max_sequence_length)
    return BatchPlan(lengths, splits, order, np.full(num_batches, spec.batch_size),
                     padded, np.zeros(num_batches, np.int64), (int(max_sequence_length),))


def packed_batches(lengths, *, batch_size: int, max_sequence_length: int,
                   max_sequences_per_pack: int = 3, algorithm: str = "optimal",
                   seed: int = 0) -> BatchPlan:
    """Batches of `batch_size` packs (histogram packing), as a `BatchPlan`.

    The packs come from ``pack_lengths`` and ``assign_sequences`` (shuffled
    by `seed`); batch k holds the examples of packs kB .. kB + B - 1, all at
    [B, max_sequence_length] (the last batch's missing packs are padding).
    """
    lengths = validated_lengths(lengths)
    plan = pack_lengths(lengths, max_sequence_length, max_sequences_per_pack,
                        algorithm=algorithm)
    packs = assign_sequences(lengths, plan, seed=seed)
    num_batches = -(-len(packs) // batch_size)
    pack_splits = packs.row_splits[np.minimum(np.arange(num_batches + 1) * batch_size,
                                              len(packs))]
    return BatchPlan(lengths, pack_splits, packs.sequence_indices,
                     np.full(num_batches, batch_size), np.full(num_batches,
                                                               max_sequence_length),
                     np.zeros(num_batches, np.int64), (int(max_sequence_length),),
                     max_sequences_per_row=plan.max_sequences_per_pack)


def bucket_boundaries(histogram, num_buckets: int, *, multiple_of: int = 1
                      ) -> tuple[int, ...]:
    """Bucket edges that minimise padding when each bucket pads to its edge.

    Padded tokens are ``sum over buckets of (sequences in it) x edge`` (the
    partial batches aside, whether batches have a fixed size or a token
    budget). Exact dynamic programming over the candidate edges: O(K E^2)
    for K buckets and E candidate edges (E <= S / multiple_of + 1).

    Args:
      histogram: [S] int. ``histogram[i]`` = number of sequences of length
        i + 1 (S = the max sequence length, always the last edge).
      num_buckets: at most this many buckets (fewer if more would not pad
        less).
      multiple_of: edges are multiples of this (hardware tiles), except the
        last.

    Returns:
      A tuple of int, increasing, ending at S.

    Example:
      >>> bucket_boundaries([0, 0, 5, 0, 0, 0, 0, 5], 2)
      (3, 8)
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    if histogram.ndim != 1 or not histogram.size or (histogram < 0).any():
        raise ValueError("histogram must be a 1-D array of non-negative counts, got "
                         f"shape {histogram.shape}")
    if num_buckets < 1 or multiple_of < 1:
        raise ValueError(f"num_buckets and multiple_of must be >= 1, got "
                         f"{num_buckets}, {multiple_of}")
    max_len = histogram.size
    edges = np.unique(np.append(np.arange(multiple_of, max_len, multiple_of), max_len))
    below = np.cumsum(histogram)[edges - 1].astype(np.float64)  # sequences <= edge
    # best[j]: least padded tokens for lengths <= edges[j], last bucket ending there.
    best = below * edges
    choices = []
    ahead = np.arange(edges.size)[:, None] < np.arange(edges.size)[None, :]  # i < j
    for _ in range(num_buckets - 1):
        # Last bucket (edges[i], edges[j]] after the best split up to i.
        total = best[:, None] + (below[None, :] - below[:, None]) * edges[None, :]
        total = np.where(ahead, total, np.inf)
        previous = np.argmin(total, axis=0)
        improved = total[previous, np.arange(edges.size)] < best
        choices.append(np.where(improved, previous, -1))
        best = np.where(improved, total[previous, np.arange(edges.size)], best)
    result, j = [int(edges[-1])], edges.size - 1
    for choice in reversed(choices):
        if choice[j] >= 0:
            j = int(choice[j])
            result.append(int(edges[j]))
    return tuple(sorted(result))
