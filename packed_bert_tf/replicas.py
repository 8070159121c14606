"""The sum over the replicas of a data-parallel step, on the running Keras backend.

The losses (`packed_bert_tf.layers.losses` and the task models' built on
it) are per-replica sums (a total and a count); dividing every replica's
total by the count of the *global* batch makes the replicas' gradients add
up to the global batch's, however the sequences landed on the replicas.
Which replicas there are is the backend's business, so the losses import
`cross_replica_sum` from here and never the backend:

* TensorFlow: ``tf.distribute`` runs the step once per replica on its share
  of the batch; the sum is the all-reduce of the current replica context.
  Outside ``strategy.run`` (the default context, or a cross-replica
  context) there is one replica and the value comes back unchanged.
* JAX and PyTorch: Keras' data parallelism (``keras.distribution``) runs the
  step on global arrays, whose sums are already the global batch's: the
  value comes back unchanged.

TensorFlow is imported only on the TensorFlow backend (where Keras has
imported it already).
"""

import keras


def cross_replica_sum(value):
    """``value`` summed over the replicas of the running data-parallel step.

    Args:
      value: a tensor (a count: float32 scalar).

    Returns:
      The sum over the replicas, of ``value``'s shape and dtype; ``value``
      itself where there is one replica (see the module docstring).
    """
    if keras.backend.backend() != "tensorflow":
        return value
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)
