"""Length-aware batching: bucketing, token budgets, balanced data-parallel sharding.

The alternatives to packing for cutting padding, and the means to compare
them. numpy planning first, tf.data on top:

* `bucket_batches` plans an epoch of bucketed batches (pools sorted by
  length, fixed batch size or token budget, optional fixed shapes per
  bucket: the options of a `Bucketing`); `padded_batches` and `packed_batches` plan the baselines in the
  same `BatchPlan` form; `bucket_boundaries` chooses bucket edges.
* `balance_across_workers` deals a plan's batches to W synchronous workers
  with comparable cost per step and reports the imbalance.
* `batching_metrics` and `batch_costs` measure any plan.
* `bucketed_pretraining_dataset` (``packed_bert_tf.batching.dataset``, the
  only part that imports TensorFlow, loaded on first use) reads unpacked
  records into bucketed batches in the packed layout.
"""

from packed_bert_tf.batching.bucketing import (
    Bucketing,
    BucketSpec,
    bucket_batches,
    bucket_boundaries,
    packed_batches,
    padded_batches,
)
from packed_bert_tf.batching.plan import (
    COSTS,
    BatchingMetrics,
    BatchPlan,
    batch_costs,
    batching_metrics,
    sequence_costs,
)
from packed_bert_tf.batching.sharding import (
    METHODS,
    PoolPlan,
    WorkerAssignment,
    balance_across_workers,
    expected_max_cost,
    plan_pool,
)

__all__ = [
    "COSTS", "METHODS", "BatchPlan", "BatchingMetrics", "BucketSpec", "Bucketing",
    "PoolPlan", "WorkerAssignment", "balance_across_workers", "batch_costs",
    "batching_metrics",
    "bucket_batches", "bucket_boundaries", "bucketed_pretraining_dataset",
    "default_boundaries", "expected_max_cost", "packed_batches", "padded_batches",
    "plan_pool", "sequence_costs",
]

_DATASET_NAMES = ("bucketed_pretraining_dataset", "default_boundaries")


def __getattr__(name):
    # The tf.data layer imports TensorFlow; the planning functions do not.
    if name in _DATASET_NAMES:
        from packed_bert_tf.batching import dataset
        return getattr(dataset, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
