"""Where the gradient is clipped: per micro-batch or once per update (`clipping`),
and global-norm clipping after the cross-replica gradient sum for Keras 3
optimizers (`ClipAfterCrossReplicaSum`)."""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

#: MLPerf's clipping norm (``tf.clip_by_global_norm(grads, clip_norm=1.0)``).
CLIP_NORM = 1.0


@dataclasses.dataclass(frozen=True)
class Clipping:
    """Where the global-norm clipping happens.

    Attributes:
      optimizer_clipnorm: the optimizer's ``global_clipnorm`` (clip the
        update's gradient, after the sum over micro-batches and replicas), or
        None.
      micro_batch_clipnorm: the trainer clips each micro-batch's gradient
        (summed over the replicas) to this norm before accumulating, or None.
    """

    optimizer_clipnorm: float | None
    micro_batch_clipnorm: float | None


def clipping(*, after_allreduce: bool, micro_batches_per_update: int,
             clip_norm: float = CLIP_NORM) -> Clipping:
    """``--clip_by_global_norm_after_gradient_allreduce`` as a `Clipping`.

    False (the reference's default): each micro-batch's gradient is clipped
    before it is accumulated. True: the accumulated gradient is clipped once.
    With one micro-batch per update the two are the same computation; the
    optimizer then clips (one all-reduce per update, not one per micro-batch).

    One departure from the reference: it clips each replica's micro-batch
    gradient before the cross-replica sum, so its update changes with the
    number of replicas whenever clipping is active; here a micro-batch's
    gradient is summed over the replicas first, so that one device and many
    take the same steps (tested), at the same cost in all-reduces as the
    reference (one per micro-batch).
    """
    if after_allreduce or micro_batches_per_update == 1:
        return Clipping(optimizer_clipnorm=clip_norm, micro_batch_clipnorm=None)
    return Clipping(optimizer_clipnorm=None, micro_batch_clipnorm=clip_norm)


class ClipAfterCrossReplicaSum:
    """Mixin: clip all gradients to ``global_clipnorm`` after summing them over replicas.

    Keras clips in ``apply`` (each replica's partial gradients) before
    ``_backend_update_step`` sums them, so a replicated step would differ
    from the single-device step on the whole batch whenever clipping is
    active. With this mixin first in the bases, clipping happens on the sum:
    both steps are the same. Without a strategy the result is Keras' own.

    ``sum_over_replicas = False`` (set by a trainer that has already summed
    the gradients over the replicas, micro-batch by micro-batch) skips the
    sum: every replica then holds the same, complete gradient.
    """

    #: Sum the gradients over the replicas before clipping and applying them.
    sum_over_replicas = True

    def _clip_gradients(self, grads):
        # Clipping happens in _backend_update_step, after the cross-replica sum.
        return grads

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        """``TFOptimizer._backend_update_step`` with the clipping after the all-reduce."""
        trainable_variables = [v.value if isinstance(v, keras.Variable) else v
                               for v in trainable_variables]
        grads_and_vars = list(zip(grads, trainable_variables))
        if self.sum_over_replicas:
            grads_and_vars = self._all_reduce_sum_gradients(grads_and_vars)
        if self.global_clipnorm:
            clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars],
                                                self.global_clipnorm)
            grads_and_vars = [(g, v) for g, (_, v) in zip(clipped, grads_and_vars)]
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_tf_update_step, self._distribution_strategy,
            grads_and_vars, learning_rate)
