"""The result of any batching: `BatchPlan`, and what it costs: metrics and batch costs.

A plan says which examples form each batch and at what shape the batch is
laid out: ``batch_rows[k]`` rows of ``padded_lengths[k]`` tokens. Rows beyond
a batch's examples are all padding (weight 0), so that a partial batch keeps
its bucket's shape. Bucketing puts one example in a row; packing
(``max_sequences_per_row`` = D > 1) puts up to D. For example, a bucketed
batch of three examples of lengths 3, 2 and 4 in a bucket of 2 x 4 rows::

    batch 0 (rows 2, S 4)   a a a 0     batch 1 (rows 2, S 4)   c c c c
                            b b 0 0                             0 0 0 0

Every plan is checked on construction: each example in exactly one batch,
no batch over its rows (x D) or with an example longer than its padded
length (or, packed, more tokens than its rows x S).

numpy only: this module never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Names of the per-batch costs of `batch_costs`.
COSTS = ("padded_tokens", "real_tokens", "attention")


def _segment_sums(values: np.ndarray, row_splits: np.ndarray) -> np.ndarray:
    """[K] sums of the ragged rows ``values[row_splits[k]:row_splits[k + 1]]``."""
    totals = np.concatenate([[0], np.cumsum(values, dtype=np.float64)])
    return totals[row_splits[1:]] - totals[row_splits[:-1]]


@dataclasses.dataclass(frozen=True, eq=False)
class BatchPlan:
    """Batches of a dataset: which examples, in which order, at which shape.

    Batch ``k`` holds the examples
    ``example_indices[row_splits[k]:row_splits[k + 1]]`` (the layout of
    ``tf.RaggedTensor.from_row_splits``) and is a [``batch_rows[k]``,
    ``padded_lengths[k]``] tensor.

    Attributes:
      lengths: [N] int64. Tokens of every example of the dataset.
      row_splits: [K + 1] int64.
      example_indices: [N] int64. Every example index 0..N-1 exactly once.
      batch_rows: [K] int64. Rows of each batch tensor, B. Rows beyond the
        batch's examples (its last ``batch_rows[k] - examples`` rows with one
        example per row) are all padding.
      padded_lengths: [K] int64. Tokens per row of each batch tensor, S.
      buckets: [K] int64. Length bucket of each batch: index into `boundaries`
        (0 when the batching has a single bucket).
      boundaries: tuple of int. Upper edges (inclusive) of the length buckets,
        increasing; the last is the max sequence length.
      max_sequences_per_row: int. 1 for bucketing and padding; D for packing,
        where the packs themselves (which example in which row) are the
        `PackAssignment`.
    """

    lengths: np.ndarray
    row_splits: np.ndarray
    example_indices: np.ndarray
    batch_rows: np.ndarray
    padded_lengths: np.ndarray
    buckets: np.ndarray
    boundaries: tuple[int, ...]
    max_sequences_per_row: int = 1

    def __post_init__(self):
        for name in ("lengths", "row_splits", "example_indices", "batch_rows",
                     "padded_lengths", "buckets"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), np.int64))
        num_batches = self.row_splits.size - 1
        if num_batches < 0 or self.row_splits[0] != 0 or \
                self.row_splits[-1] != self.example_indices.size or \
                (np.diff(self.row_splits) < 0).any():
            raise ValueError("row_splits must rise from 0 to the number of example "
                             f"indices ({self.example_indices.size})")
        for name in ("batch_rows", "padded_lengths", "buckets"):
            if getattr(self, name).shape != (num_batches,):
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, "
                                 f"expected ({num_batches},): one per batch")
        counts = np.bincount(self.example_indices, minlength=self.lengths.size) \
            if self.example_indices.size else np.zeros(self.lengths.size, np.int64)
        if counts.size != self.lengths.size or (counts != 1).any():
            wrong = np.flatnonzero(counts != 1)
            first = int(wrong[0]) if wrong.size else self.lengths.size
            raise ValueError(
                f"plan does not hold every example exactly once (example {first} "
                f"appears {int(counts[first]) if first < counts.size else 'out of range'}"
                f" times; {wrong.size or 'some'} such examples)")
        examples = self.examples_per_batch
        if (examples > self.batch_rows * self.max_sequences_per_row).any():
            k = int(np.flatnonzero(examples > self.batch_rows
                                   * self.max_sequences_per_row)[0])
            raise ValueError(f"batch {k} holds {examples[k]} examples, more than "
                             f"{self.batch_rows[k]} rows x {self.max_sequences_per_row}")
        if self.max_sequences_per_row == 1:
            batch_of = np.repeat(np.arange(num_batches), examples)
            too_long = self.lengths[self.example_indices] > self.padded_lengths[batch_of]
            if too_long.any():
                i = int(np.flatnonzero(too_long)[0])
                raise ValueError(
                    f"example {self.example_indices[i]} of length "
                    f"{self.lengths[self.example_indices[i]]} is in batch {batch_of[i]} "
                    f"padded to {self.padded_lengths[batch_of[i]]}")
        elif (self.real_tokens > self.padded_tokens).any():
            k = int(np.flatnonzero(self.real_tokens > self.padded_tokens)[0])
            raise ValueError(f"batch {k} holds {self.real_tokens[k]} tokens, more than "
                             f"its {self.padded_tokens[k]}")

    def __len__(self) -> int:
        return self.row_splits.size - 1

    def __getitem__(self, batch: int) -> np.ndarray:
        """Example indices of one batch."""
        if not -len(self) <= batch < len(self):
            raise IndexError(f"batch {batch} out of range for {len(self)} batches")
        batch %= len(self)
        return self.example_indices[self.row_splits[batch]:self.row_splits[batch + 1]]

    def __iter__(self):
        for batch in range(len(self)):
            yield self[batch]

    @property
    def num_examples(self) -> int:
        return int(self.lengths.size)

    @property
    def examples_per_batch(self) -> np.ndarray:
        """[K] int64."""
        return np.diff(self.row_splits)

    @property
    def real_tokens(self) -> np.ndarray:
        """[K] int64: tokens of the examples of each batch."""
        return _segment_sums(self.lengths[self.example_indices],
                             self.row_splits).astype(np.int64)

    @property
    def padded_tokens(self) -> np.ndarray:
        """[K] int64: size of each batch tensor, rows x S."""
        return self.batch_rows * self.padded_lengths

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """The distinct (rows, S) batch shapes, sorted."""
        if not len(self):
            return ()
        pairs = np.unique(np.stack([self.batch_rows, self.padded_lengths], 1), axis=0)
        return tuple((int(rows), int(length)) for rows, length in pairs)


@dataclasses.dataclass(frozen=True)
class BatchingMetrics:
    """How well a batching uses the tokens it computes on.

    Attributes:
      num_batches, num_examples: int.
      real_tokens, padded_tokens: int. Tokens of the examples; tokens of all
        batch tensors (rows x S).
      occupancy: float. ``real_tokens / padded_tokens``.
      padding_fraction: float. ``1 - occupancy``.
      examples_per_batch, real_tokens_per_batch, padded_tokens_per_batch:
        float. Means over batches.
      num_shapes: int. Distinct batch shapes: XLA compiles the step once per
        shape.
      shapes: tuple of (rows, S).
    """

    num_batches: int
    num_examples: int
    real_tokens: int
    padded_tokens: int
    occupancy: float
    padding_fraction: float
    examples_per_batch: float
    real_tokens_per_batch: float
    padded_tokens_per_batch: float
    num_shapes: int
    shapes: tuple[tuple[int, int], ...]


def batching_metrics(plan: BatchPlan) -> BatchingMetrics:
    """Occupancy, padding, examples and tokens per batch, and shapes of a plan.

    O(N + K log K) for N examples in K batches.

    Example:
      >>> plan = BatchPlan(lengths=[3, 2, 4], row_splits=[0, 2, 3],
      ...                  example_indices=[0, 1, 2], batch_rows=[2, 2],
      ...                  padded_lengths=[4, 4], buckets=[0, 0], boundaries=(4,))
      >>> m = batching_metrics(plan)
      >>> m.real_tokens, m.padded_tokens, m.occupancy, m.shapes
      (9, 16, 0.5625, ((2, 4),))
    """
    real = int(plan.real_tokens.sum())
    padded = int(plan.padded_tokens.sum())
    occupancy = real / padded if padded else 1.0
    batches = max(len(plan), 1)
    shapes = plan.shapes
    return BatchingMetrics(
        num_batches=len(plan), num_examples=plan.num_examples, real_tokens=real,
        padded_tokens=padded, occupancy=occupancy, padding_fraction=1.0 - occupancy,
        examples_per_batch=plan.num_examples / batches,
        real_tokens_per_batch=real / batches, padded_tokens_per_batch=padded / batches,
        num_shapes=len(shapes), shapes=shapes)


def sequence_costs(lengths, cost: str, *, hidden_size: int = 1024) -> np.ndarray:
    """[N] float64 cost of each sequence computed without padding.

    ``real_tokens``: its length l. ``attention``: ``l * (1 + l / (6 H))``,
    the FLOPs of one encoder layer relative to its dense part: per token 24 H^2
    for the projections and the feed-forward layer, plus 4 H l for the
    attention scores and the weighted sum.
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    if cost == "real_tokens":
        return lengths
    if cost == "attention":
        return lengths * (1.0 + lengths / (6.0 * hidden_size))
    raise ValueError(f"unknown per-sequence cost {cost!r}; expected real_tokens or "
                     "attention")


def batch_costs(plan: BatchPlan, cost: str = "padded_tokens", *,
                hidden_size: int = 1024) -> np.ndarray:
    """[K] float64 cost of each batch of a plan.

    Args:
      plan: the `BatchPlan`.
      cost: one of ``"padded_tokens"``, ``"real_tokens"``, ``"attention"``.
        ``padded_tokens``: rows x S, the work of a model that computes on
        the whole batch tensor (the padded model, XLA, packing).
        ``real_tokens``: the batch's tokens, the work of a model that drops
        padding on the fly ("un-padding"). ``attention``: real tokens plus
        each sequence's attention term (`sequence_costs`), un-padding with
        attention quadratic in the sequence length.
      hidden_size: H of the ``attention`` cost (BERT-large: 1024).

    Returns:
      [K] float64. O(N).
    """
    if cost == "padded_tokens":
        return plan.padded_tokens.astype(np.float64)
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; expected one of {', '.join(COSTS)}")
    per_example = sequence_costs(plan.lengths[plan.example_indices], cost,
                                 hidden_size=hidden_size)
    return _segment_sums(per_example, plan.row_splits)
