"""Balanced sharding: dealing batches to data-parallel workers so no one waits.

With W synchronous workers a step takes as long as its slowest local batch.
``balance_across_workers`` groups the batches of a plan into steps of W
batches of comparable cost, and reports the imbalance: the sum over steps of
the slowest worker's cost divided by the sum of the mean cost, i.e. the time
the steps take relative to perfectly even work (1.0 = no waiting).

Choice for ``tf.distribute``: the W local batches of a step share one shape
(``same_shape_per_step``), because a replicated step (MirroredStrategy, TPU)
wants per-replica batches of one shape, and XLA then compiles once per
shape, not once per combination of shapes. A step therefore takes its W
batches from one group of batches with the same bucket and rows, and pads
them to the longest of the W (a no-op when batches are padded to bucket
boundaries). Inside a group, batches are sorted by cost and dealt W at a
time, so the batches of a step are neighbours in cost; the steps are then
shuffled. When a group's batch count is not a multiple of W, its last step
has idle workers (index -1: an all-padding batch of the step's shape).

`plan_pool` is the same, one pool at a time, for input pipelines:
incomplete steps go back to the pool's leftovers instead of idling.

numpy only: this module never imports TensorFlow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.batching.bucketing import BucketSpec, cut_pool
from packed_bert_tf.batching.plan import (
    COSTS,
    BatchPlan,
    _segment_sums,
    batch_costs,
    sequence_costs,
)

METHODS = ("balanced", "round_robin")


@dataclasses.dataclass(frozen=True, eq=False)
class WorkerAssignment:
    """Batches dealt to W data-parallel workers, step by step.

    Attributes:
      batch_indices: [T, W] int64. Batch of the plan that worker w processes
        at step t; -1 = idle (with ``same_shape_per_step``, an all-padding
        batch of the step's shape).
      batch_rows, padded_lengths: [T, W] int64. Shape of each local batch (0
        where idle without a shared shape).
      costs: [T, W] float64. Cost of each local batch, by `cost`; an idle
        worker costs its all-padding batch under ``padded_tokens`` and 0
        otherwise.
      cost: str. The cost the batches were balanced by (see `batch_costs`).
    """

    batch_indices: np.ndarray
    batch_rows: np.ndarray
    padded_lengths: np.ndarray
    costs: np.ndarray
    cost: str

    @property
    def num_steps(self) -> int:
        return int(self.batch_indices.shape[0])

    @property
    def num_workers(self) -> int:
        return int(self.batch_indices.shape[1])

    @property
    def step_costs(self) -> np.ndarray:
        """[T] float64: the slowest worker's cost at each step (the step's time)."""
        return self.costs.max(axis=1) if self.num_steps else np.zeros(0)

    @property
    def step_imbalance(self) -> np.ndarray:
        """[T] float64: max / mean cost over the workers of each step (1 if all 0)."""
        mean = self.costs.mean(axis=1) if self.num_steps else np.zeros(0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(mean > 0, self.step_costs / mean, 1.0)

    @property
    def imbalance(self) -> float:
        """Sum over steps of the max cost / sum of the mean cost (>= 1).

        The factor by which waiting for the slowest worker stretches the
        epoch against perfectly even work.
        """
        total_mean = float(self.costs.mean(axis=1).sum()) if self.num_steps else 0.0
        return float(self.step_costs.sum()) / total_mean if total_mean > 0 else 1.0


def deal_steps(costs: np.ndarray, groups: np.ndarray, num_workers: int, *,
               rng: np.random.Generator | None, hold_back: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Steps of W batches of one group each, neighbours in cost.

    O(K log K).

    Args:
      costs: [K] float.
      groups: [K] int. Batches of a step all come from one group.
      num_workers: int, W.
      rng: a Generator or None. Breaks ties, picks the held-back batches and
        shuffles the steps and the workers within a step; None keeps group
        order, costliest first.
      hold_back: return a group's last ``count % W`` batches (random ones)
        instead of making a step with idle workers of them.

    Returns:
      A tuple (steps, held). steps: [T, W] int64, positions into `costs`,
      -1 = idle. held: [h] int64, the positions held back.
    """
    steps, held = [], []
    for group in np.unique(groups):
        members = np.flatnonzero(groups == group)
        if rng is not None:
            members = rng.permutation(members)
        if hold_back:
            spare = members.size % num_workers
            held.append(members[:spare])
            members = members[spare:]
        members = members[np.argsort(-costs[members], kind="stable")]
        pad = -members.size % num_workers
        steps.append(np.append(members, np.full(pad, -1)).reshape(-1, num_workers))
    steps = np.concatenate(steps) if steps else np.zeros((0, num_workers), np.int64)
    if rng is not None and steps.size:
        steps = rng.permuted(steps[rng.permutation(steps.shape[0])], axis=1)
    held = np.concatenate(held) if held else np.zeros(0, np.int64)
    return steps.astype(np.int64), held.astype(np.int64)


def _step_shapes(steps, rows, padded_lengths, same_shape_per_step):
    """[T, W] rows and S of each local batch, idle ones included."""
    idle = steps < 0
    safe = np.where(idle, 0, steps)
    step_rows = np.where(idle, 0, rows[safe])
    step_lengths = np.where(idle, 0, padded_lengths[safe])
    if same_shape_per_step and steps.size:
        step_rows = np.broadcast_to(step_rows.max(axis=1, keepdims=True), steps.shape)
        step_lengths = np.broadcast_to(step_lengths.max(axis=1, keepdims=True),
                                       steps.shape)
    return np.array(step_rows), np.array(step_lengths)


def balance_across_workers(plan: BatchPlan, num_workers: int, *,
                           cost: str = "padded_tokens", method: str = "balanced",
                           same_shape_per_step: bool = True, hidden_size: int = 1024,
                           seed: int = 0) -> WorkerAssignment:
    """Deals the batches of a plan to `num_workers` synchronous workers.

    Sorted dealing is the "sorted greedy" schedule for identical machines:
    each step's W batches are consecutive in cost order, so a step's
    imbalance is bounded by the cost gap between neighbours. O(K log K).

    Args:
      plan: the `BatchPlan`.
      num_workers: int, W, data-parallel workers (replicas) in sync.
      cost: one of ``"padded_tokens"``, ``"real_tokens"``, ``"attention"``.
        What a batch costs a worker (see `batch_costs`): padded tokens for a
        model on the whole batch tensor, real tokens (optionally plus the
        attention term) for a model that drops padding on the fly.
      method: ``"balanced"`` or ``"round_robin"``.
        ``balanced``: steps from one group of like batches, neighbours in
        cost (see the module docstring), in shuffled order.
        ``round_robin``: batch k to step k // W, worker k % W in plan order,
        what sharding a stream of batches does; the baseline.
      same_shape_per_step: balanced steps take batches of one bucket and row
        count and pad them to the step's longest; round-robin steps pad rows
        and length to the step's largest. False: batches keep their own
        shapes (a model that drops padding) and ``balanced`` sorts all
        batches together. Note: padding a step can take a token-budget batch
        without ``pad_to_bucket_boundary`` over its budget.
      hidden_size: H of the ``attention`` cost.
      seed: draws the order of the steps and the workers within a step.

    Returns:
      The `WorkerAssignment`: every batch of the plan exactly once;
      ``imbalance`` as above.

    Raises:
      ValueError: for fewer than one worker, or an unknown cost or method.

    Example:
      >>> plan = BatchPlan(lengths=[4, 1, 3, 2], row_splits=[0, 1, 2, 3, 4],
      ...                  example_indices=[0, 1, 2, 3], batch_rows=[1, 1, 1, 1],
      ...                  padded_lengths=[4, 1, 3, 2], buckets=[0, 0, 0, 0],
      ...                  boundaries=(4,))
      >>> a = balance_across_workers(plan, 2, cost="real_tokens",
      ...                            same_shape_per_step=False)
      >>> sorted(sorted(plan.lengths[a.batch_indices[t]].tolist()) for t in range(2)), a.imbalance
      ([[1, 2], [3, 4]], 1.2)
    """
    if not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    costs = batch_costs(plan, cost, hidden_size=hidden_size)
    rng = np.random.default_rng([int(seed), int(num_workers)])
    if method == "round_robin":
        pad = -len(plan) % num_workers
        steps = np.append(np.arange(len(plan)), np.full(pad, -1)).reshape(-1, num_workers)
    elif same_shape_per_step:
        # One integer key per (bucket, rows).
        key = plan.buckets * (int(plan.batch_rows.max(initial=0)) + 1) + plan.batch_rows
        steps, _ = deal_steps(costs, key, num_workers, rng=rng)
    else:
        steps, _ = deal_steps(costs, np.zeros(len(plan), np.int64), num_workers, rng=rng)
    rows, lengths = _step_shapes(steps, plan.batch_rows, plan.padded_lengths,
                                 same_shape_per_step)
    if cost == "padded_tokens":
        step_costs = (rows * lengths).astype(np.float64)
    else:
        step_costs = np.where(steps < 0, 0.0, costs[np.maximum(steps, 0)])
    return WorkerAssignment(steps.astype(np.int64), rows, lengths, step_costs, cost)


@dataclasses.dataclass(frozen=True, eq=False)
class PoolPlan:
    """One pool's batches in emission order, W consecutive batches per step.

    Batch j holds positions ``order[splits[j]:splits[j + 1]]`` of the pool
    (none for an idle batch) at shape [rows[j], padded_lengths[j]];
    `leftover` positions wait for the next pool.
    """

    order: np.ndarray
    splits: np.ndarray
    rows: np.ndarray
    padded_lengths: np.ndarray
    leftover: np.ndarray


def plan_pool(lengths, spec: BucketSpec, *, num_workers: int = 1, final: bool,
              rng: np.random.Generator | None, cost: str = "padded_tokens",
              hidden_size: int = 1024) -> PoolPlan:
    """Cuts one pool (`cut_pool`) and deals its batches into steps of W.

    The step-major order for an input pipeline that feeds W replicas
    consecutive batches: batches j W .. j W + W - 1 form step j and share one
    shape. Unless `final`, a group's batches that do not make a full step go
    back to the leftovers; with `final`, they make a step with idle (empty)
    batches. With one worker, batches keep the cut's order (bucket by
    bucket, shortest first) unless `rng` shuffles them. O(n log n).
    """
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; expected one of {', '.join(COSTS)}")
    lengths = np.asarray(lengths, dtype=np.int64)
    cut = cut_pool(lengths, spec, final=final)
    num_batches = cut.rows.size
    if cost == "padded_tokens":
        costs = (cut.rows * cut.padded_lengths).astype(np.float64)
    else:
        costs = _segment_sums(sequence_costs(lengths[cut.order], cost,
                                             hidden_size=hidden_size), cut.splits)
    if num_workers == 1:
        steps = np.arange(num_batches, dtype=np.int64)[:, None]
        if rng is not None:
            steps = steps[rng.permutation(num_batches)]
        held = np.zeros(0, np.int64)
    else:
        key = cut.buckets * (int(cut.rows.max(initial=0)) + 1) + cut.rows
        steps, held = deal_steps(costs, key, num_workers, rng=rng, hold_back=not final)
    rows, padded = _step_shapes(steps, cut.rows, cut.padded_lengths, True)
    flat = steps.reshape(-1)
    counts = np.where(flat < 0, 0, np.diff(cut.splits)[np.maximum(flat, 0)])
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    order = cut.order[np.repeat(cut.splits[:-1][np.maximum(flat, 0)], counts) + within]
    held_positions = [cut.order[cut.splits[j]:cut.splits[j + 1]] for j in held]
    leftover = np.concatenate([cut.leftover, *held_positions])
    return PoolPlan(order=order.astype(np.int64),
                    splits=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    rows=rows.reshape(-1).astype(np.int64),
                    padded_lengths=padded.reshape(-1).astype(np.int64),
                    leftover=leftover.astype(np.int64))


def expected_max_cost(costs, num_workers) -> np.ndarray:
    """E[max of W independent draws] from the empirical distribution of `costs`.

    The expected step time of W synchronous workers that each draw a batch at
    random (round-robin dealing of shuffled batches). Exact for the
    empirical distribution: with sorted costs c_1 <= ... <= c_M,
    ``sum_i c_i ((i / M)^W - ((i - 1) / M)^W)``. O(M log M + M len(W)).

    >>> float(expected_max_cost([1.0, 3.0], 1)), float(expected_max_cost([1.0, 3.0], 2))
    (2.0, 2.5)
    """
    values = np.sort(np.asarray(costs, dtype=np.float64))
    if not values.size:
        raise ValueError("no costs")
    workers = np.atleast_1d(np.asarray(num_workers, dtype=np.float64))
    if (workers < 1).any():
        raise ValueError(f"num_workers must be >= 1, got {num_workers!r}")
    quantile = np.arange(values.size + 1) / values.size  # [M + 1]
    with np.errstate(divide="ignore"):
        cdf = np.exp(workers[None, :] * np.log(quantile)[:, None])  # [M + 1, len(W)]
    result = (values[:, None] * np.diff(cdf, axis=0)).sum(axis=0)
    return result if np.ndim(num_workers) else result[0]
