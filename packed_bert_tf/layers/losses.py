"""Losses as weighted sums: the one design every loss of the package follows.

A loss or accuracy is a `WeightedSum` (``total``, ``count``) of this
replica's batch instead of a mean, so that the caller chooses the
normaliser; `weighted_mean` divides with ``divide_no_nan`` by the count
summed over all replicas (`packed_bert_tf.replicas.cross_replica_sum`: the
``tf.distribute`` replicas on TensorFlow; on JAX and PyTorch Keras'
data parallelism sees the global batch, whose count is global already). The
gradient then does not depend on how the sequences landed on the replicas:
each replica contributes ``local total / global count`` and the replicas'
gradients are summed.

The task models' losses are built on it, next to their models:
`packed_bert_tf.models.bert_pretraining` (masked-LM and next-sentence),
`packed_bert_tf.models.bert_squad` (the span loss) and
`packed_bert_tf.models.bert_classifier` (cross entropy or squared error).

Everything here is `keras.ops`, so it runs on every Keras backend.
"""

from typing import Any, NamedTuple

from keras import ops

from packed_bert_tf.replicas import cross_replica_sum


class WeightedSum(NamedTuple):
    """A weighted sum and its normaliser, both float32 scalars (this replica's)."""
    total: Any
    count: Any


def weighted_mean(weighted_sum: WeightedSum, *, global_normaliser: bool = True):
    """``divide_no_nan(total, count)``; the count is summed across replicas.

    Args:
      weighted_sum: the (total, count) of a loss or an accuracy.
      global_normaliser: divide by the count of the global batch (summed
        over the replicas with `cross_replica_sum`, the default); False
        divides by this replica's count.

    Returns:
      float32 scalar: this replica's share of the global mean (summing it
      over the replicas gives the mean over the global batch).
    """
    count = weighted_sum.count
    if global_normaliser:
        count = cross_replica_sum(count)
    return ops.divide_no_nan(weighted_sum.total, count)


def sequence_loss_normalisers(features, *, global_normaliser: bool = True):
    """The count a per-sequence fine-tuning loss divides by: real sequences.

    For an XLA per-replica step: compute (and all-reduce) it outside the
    compiled function, pass it to the loss as ``normalisers``.

    Args:
      features: dict with ``sequence_weights`` [B, D] (1 real, 0 empty slot).
      global_normaliser: sum the count over the replicas of the current
        replica context.

    Returns:
      dict: ``sequences``, a float32 scalar.
    """
    count = ops.sum(ops.cast(features["sequence_weights"], "float32"))
    return {"sequences": cross_replica_sum(count) if global_normaliser else count}


def sequence_means(parts: dict, *, global_normaliser: bool = True, normalisers=None):
    """Each `WeightedSum` of a per-sequence fine-tuning loss as a mean.

    Args:
      parts: dict of name -> `WeightedSum`, counted in real sequences.
      global_normaliser: see `weighted_mean`; ignored with ``normalisers``.
      normalisers: precomputed `sequence_loss_normalisers` (an XLA step's,
        all-reduced outside it); None divides by each part's own count.

    Returns:
      dict of name -> float32 scalar: this replica's share of the mean.
    """
    if normalisers is None:
        return {name: weighted_mean(part, global_normaliser=global_normaliser)
                for name, part in parts.items()}
    return {name: ops.divide_no_nan(part.total, normalisers["sequences"])
            for name, part in parts.items()}
