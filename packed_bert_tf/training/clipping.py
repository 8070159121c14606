"""Global-norm clipping after the cross-replica gradient sum, for Keras 3 optimizers."""

import keras
import tensorflow as tf


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
