"""The distributed training step of run_pretraining.py, run_squad.py and
run_classifier.py (`Trainer`), and their evaluation steps.

One optimizer update ("step") consumes ``steps_per_update`` micro-batches per
replica: the per-replica dataset yields them stacked, every feature shaped
[K, b, ...] (K = steps_per_update, b = per-replica batch). Within a step, on
each replica:

1. the task's loss normalisers (counts of masked tokens, sequences, ...) are
   computed from all K micro-batches and summed over the replicas, outside
   the XLA-compiled forward and backward function (an all-reduce does not
   compile inside it);
2. forward and backward passes over the K micro-batches run as one
   function, XLA-compiled with ``jit_compile`` (a loop inside it), summing
   the gradients; each micro-batch's loss is its share of the update's
   global mean, so the sum is the gradient of the mean loss over all K x
   replicas micro-batches, exactly as one big batch would give it;
3. ``optimizer.apply_gradients`` sums the gradients over the replicas and
   updates the variables; the optimizers of `packed_bert_tf.training.optimizers`
   clip to their ``global_clipnorm`` after that sum
   (`packed_bert_tf.training.clipping.ClipAfterCrossReplicaSum`).

With ``micro_batch_clipnorm`` (the MLPerf reference's default clipping, see
`packed_bert_tf.training.clipping`), steps 1 and 2 go micro-batch by micro-batch
instead: each micro-batch's loss is its own global mean (normalisers of that
micro-batch, summed over the replicas), its gradient (XLA-compiled) is summed
over the replicas, clipped to that global norm and added to the update's
gradient with weight 1 / K; the optimizer then applies it without summing or
clipping again. That costs one all-reduce per micro-batch, as in the
reference.

On a TPU (and with ``jit_compile="whole_step"``, its stand-in for one
replica elsewhere) the whole step of a replica is one XLA computation
instead.

The global step (`Trainer.step`) advances by ``global_steps_per_update`` per
update: K for the reference's micro-batch steps, 1 for update steps.

`Trainer.train_steps` runs n such steps in one ``tf.function`` call (the TPU
"iterations per loop"); n is a tensor, so changing it does not retrace the
function, and it returns the metrics and `STATISTICS` summed over the n
steps plus the index of the first step whose loss was not finite.
`Trainer.evaluate` sums a task's evaluation values over batches the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from packed_bert_tf.training.distribution import is_tpu_strategy

#: Counts every task's `TrainingTask.statistics` returns, summed over replicas and steps.
STATISTICS = ("sequences", "tokens", "padded_tokens", "attention_pairs")

Features = Mapping[str, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class TrainingTask:
    """What a task (pre-training, SQuAD) tells the `Trainer`: its loss and its counts.

    Attributes:
      metric_names: the names ``loss`` returns, ``"loss"`` first.
      loss: ``(features, outputs, normalisers) -> dict`` of float32 scalars
        with every name of `metric_names`; each value is this replica's share
        of the update's global mean (so that summing over micro-batches and
        replicas gives the global value).
      normalisers: ``features -> dict`` of float32 counts over the given
        features, summed over the replicas (``cross_replica_sum``); called in
        the replica context on the K micro-batches of an update merged.
      statistics: ``features -> dict`` with the `STATISTICS` of a batch (see
        `batch_statistics`).

    AutoGraph converts these functions when the step is traced, unless they
    are marked ``tf.autograph.experimental.do_not_convert``, as the package's
    own are: they hold no Python control flow on tensors, and converting them
    would cost every run's start tenths of a second of CPU.
    """

    metric_names: tuple
    loss: Callable[[Features, Features, Features], dict]
    normalisers: Callable[[Features], dict]
    statistics: Callable[[Features], dict]

    def __post_init__(self):
        if not self.metric_names or self.metric_names[0] != "loss":
            raise ValueError(f"metric_names must start with 'loss', got "
                             f"{self.metric_names}")


@tf.autograph.experimental.do_not_convert
def batch_statistics(input_mask: tf.Tensor, sequence_weights: tf.Tensor) -> dict:
    """Sequences, real tokens, padded tokens (rows x S) and attention pairs of a
    batch, float32.

    ``attention_pairs`` is the sum of the squared lengths of the sequences:
    the (query, key) pairs attention relates within them, which the model's
    FLOP count needs (`packed_bert_tf.training.flops`); padding adds none.

    Args:
      input_mask: [..., S], each token's sequence index 1..D, 0 on padding.
      sequence_weights: [..., D], 1 for each real sequence.
    """
    slots = sequence_weights.shape[-1]
    if slots is None:  # D unknown when traced: the batch's largest index
        slots = tf.reduce_max(input_mask)
    lengths = tf.reduce_sum(tf.one_hot(input_mask, slots + 1, dtype=tf.float32),
                            axis=-2)[..., 1:]  # [..., D]
    return {
        "sequences": tf.reduce_sum(tf.cast(sequence_weights, tf.float32)),
        "tokens": tf.reduce_sum(tf.cast(input_mask > 0, tf.float32)),
        "padded_tokens": tf.cast(tf.size(input_mask), tf.float32),
        "attention_pairs": tf.reduce_sum(tf.square(lengths)),
    }


@tf.autograph.experimental.do_not_convert
def merge_micro_batches(features: Features) -> dict:
    """[K, b, ...] features -> [K * b, ...] (for counts over a whole update).

    Works for batches whose sizes are only known at run time (bucketing).
    """
    return {name: tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], axis=0))
            for name, value in features.items()}


def stack_micro_batches(dataset: tf.data.Dataset, steps_per_update: int) -> tf.data.Dataset:
    """Per-replica batches [b, ...] -> per-step elements [K, b, ...] (K = steps_per_update)."""
    return dataset.batch(steps_per_update, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class StepsResult:
    """What `Trainer.train_steps` returns, as numpy on the host.

    Attributes:
      num_steps: optimizer updates run.
      metrics: each of the task's metrics summed over the steps (divide by
        ``num_steps`` for the mean per step).
      statistics: `STATISTICS` summed over the steps.
      first_nonfinite_step: index (0-based, within these steps) of the first
        step whose loss was NaN or infinite, -1 when every loss was finite.
    """

    num_steps: int
    metrics: dict
    statistics: dict
    first_nonfinite_step: int

    def mean(self, name: str) -> float:
        return float(self.metrics[name]) / max(self.num_steps, 1)


class Trainer:
    """Gradient-accumulating, XLA-compiled, distributed training and evaluation steps.

    Args:
      model: a Keras model called as ``model(features, training=...)``,
        created (and built) under ``strategy.scope()``.
      optimizer: a Keras optimizer (for ``--mixed_precision=fp16`` a
        `keras.optimizers.LossScaleOptimizer`); built here, inside the scope.
      task: the `TrainingTask` (loss, normalisers, statistics, metric names).
      strategy: the ``tf.distribute`` strategy (default: the current one).
      steps_per_update: K, micro-batches per update per replica.
      jit_compile: True: XLA-compile the per-replica forward/backward (and
        the evaluation step); False: nothing; ``"whole_step"``: each
        replica's whole step (normalisers, every micro-batch, the
        optimizer's update) as one computation, as a TPU does. A TPU
        strategy always compiles the whole step (TPUStrategy does);
        elsewhere ``"whole_step"`` is the TPU path's stand-in, for one
        replica: it fails where an op of the step could not run on a TPU.
      global_steps_per_update: how far `step` advances per update (default:
        `steps_per_update`, the MLPerf reference's global step, one per
        micro-batch; 1: one per update).
      micro_batch_clipnorm: clip each micro-batch's gradient, summed over the
        replicas, to this global norm before accumulating (the optimizer's
        ``global_clipnorm`` must then be None); None: the optimizer alone
        clips, once per update.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, *,
                 task: TrainingTask, strategy: tf.distribute.Strategy | None = None,
                 steps_per_update: int = 1, jit_compile: bool | str = True,
                 global_steps_per_update: int | None = None,
                 micro_batch_clipnorm: float | None = None):
        if jit_compile not in (True, False, "whole_step"):
            raise ValueError(f"jit_compile must be True, False or 'whole_step', got "
                             f"{jit_compile!r}")
        if steps_per_update < 1:
            raise ValueError(f"steps_per_update must be >= 1, got {steps_per_update}")
        if global_steps_per_update is None:
            global_steps_per_update = steps_per_update
        if global_steps_per_update < 1:
            raise ValueError(f"global_steps_per_update must be >= 1, got "
                             f"{global_steps_per_update}")
        inner_optimizer = getattr(optimizer, "inner_optimizer", optimizer)
        if micro_batch_clipnorm is not None:
            if micro_batch_clipnorm <= 0:
                raise ValueError(f"micro_batch_clipnorm must be > 0, got "
                                 f"{micro_batch_clipnorm}")
            if inner_optimizer.global_clipnorm:
                raise ValueError("clip once: the optimizer's global_clipnorm must be None "
                                 "when the trainer clips each micro-batch")
            if not hasattr(inner_optimizer, "sum_over_replicas"):
                raise ValueError(f"{type(inner_optimizer).__name__} always sums the "
                                 f"gradients over the replicas; micro_batch_clipnorm "
                                 f"needs an optimizer with ClipAfterCrossReplicaSum")
            # The trainer sums each micro-batch over the replicas itself.
            inner_optimizer.sum_over_replicas = False
        self.model = model
        self.optimizer = optimizer
        self.task = task
        self.strategy = strategy or tf.distribute.get_strategy()
        self.steps_per_update = steps_per_update
        self.global_steps_per_update = global_steps_per_update
        self.micro_batch_clipnorm = micro_batch_clipnorm
        on_tpu = is_tpu_strategy(self.strategy)
        self.compile_whole_step = on_tpu or jit_compile == "whole_step"
        if self.compile_whole_step and not on_tpu and self.strategy.num_replicas_in_sync > 1:
            raise ValueError("jit_compile='whole_step' off a TPU is for one replica: XLA on CPU "
                             "and GPU compiles no cross-replica sums")
        # The whole step compiled (a TPU's own, or the stand-in's) compiles its parts.
        self.jit_compile = jit_compile is True and not self.compile_whole_step
        whole_step_xla = self.compile_whole_step and not on_tpu
        with self.strategy.scope():
            # Inside the scope, or the optimizer's slots are not mirrored.
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._accumulate = tf.function(self._accumulate_gradients,
                                       jit_compile=self.jit_compile)
        self._micro_batch_gradients = tf.function(self._micro_step,
                                                  jit_compile=self.jit_compile)
        self._evaluate_batch = tf.function(self._evaluate_batch_fn,
                                           jit_compile=self.jit_compile or whole_step_xla)
        self._replica_step_function = (tf.function(self._replica_step, jit_compile=True)
                                       if whole_step_xla else self._replica_step)
        self.train_steps_function = tf.function(self._train_steps)
        self.eval_steps_function = tf.function(self._eval_steps)

    @property
    def metric_names(self) -> tuple:
        return tuple(self.task.metric_names)

    # Training.

    def _micro_step(self, features, normalisers):
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            results = self.task.loss(features, outputs, normalisers)
            scaled_loss = self.optimizer.scale_loss(results["loss"])
        gradients = tape.gradient(scaled_loss, variables)
        # Embedding gradients come as IndexedSlices: dense to be summed.
        gradients = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(gradients, variables)]
        return {name: tf.cast(results[name], tf.float32) for name in self.metric_names}, \
            gradients

    def _accumulate_gradients(self, features, normalisers):
        """Forward and backward over the K micro-batches of one replica; sums.

        One loop from zeros: the forward and backward pass is traced once,
        as the loop's body (0 + x is x, so the sums are those of the
        micro-batches themselves)."""
        results = {name: tf.zeros((), tf.float32) for name in self.metric_names}
        gradients = [tf.zeros_like(v) for v in self.model.trainable_variables]
        for index in tf.range(self.steps_per_update):
            micro_results, micro_gradients = self._micro_step(
                {name: value[index] for name, value in features.items()}, normalisers)
            results = {name: results[name] + micro_results[name] for name in results}
            gradients = [g + m for g, m in zip(gradients, micro_gradients)]
        return results, gradients

    def _clipped_micro_batches(self, features):
        """Sum over the K micro-batches of (each one's gradient, summed over the
        replicas and clipped) / K; the metrics likewise averaged."""
        steps = self.steps_per_update
        replica_context = tf.distribute.get_replica_context()
        loss_scale = getattr(self.optimizer, "dynamic_scale", None)
        results = gradients = None
        for index in range(steps):  # unrolled: an all-reduce per micro-batch
            micro_batch = {name: value[index] for name, value in features.items()}
            micro_results, micro_gradients = self._micro_batch_gradients(
                micro_batch, self.task.normalisers(micro_batch))
            micro_gradients = replica_context.all_reduce(tf.distribute.ReduceOp.SUM,
                                                         micro_gradients)
            if loss_scale is not None:  # clip the true gradient (scales are powers of 2)
                micro_gradients = [g / loss_scale for g in micro_gradients]
            micro_gradients, _ = tf.clip_by_global_norm(micro_gradients,
                                                        self.micro_batch_clipnorm)
            micro_gradients = [g / steps for g in micro_gradients]
            micro_results = {name: value / steps for name, value in micro_results.items()}
            if gradients is None:
                results, gradients = micro_results, micro_gradients
            else:
                results = {name: results[name] + micro_results[name] for name in results}
                gradients = [g + m for g, m in zip(gradients, micro_gradients)]
        if loss_scale is not None:
            gradients = [g * loss_scale for g in gradients]
        return results, gradients

    def _replica_step(self, features):
        merged = merge_micro_batches(features)
        statistics = self.task.statistics(merged)
        if self.micro_batch_clipnorm is None:
            results, gradients = self._accumulate(features, self.task.normalisers(merged))
        else:
            results, gradients = self._clipped_micro_batches(features)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        self.step.assign_add(self.global_steps_per_update)
        return results, statistics

    def _train_steps(self, iterator, num_steps):
        sum_ = tf.distribute.ReduceOp.SUM
        zero = tf.constant(0.0)
        totals = {name: zero for name in self.metric_names}
        statistics = {name: zero for name in STATISTICS}
        first_nonfinite = tf.constant(-1, tf.int32)
        for index in tf.range(num_steps):
            results, step_statistics = self.strategy.run(self._replica_step_function,
                                                         args=(next(iterator),))
            results = {name: self.strategy.reduce(sum_, results[name], axis=None)
                       for name in self.metric_names}
            step_statistics = {name: self.strategy.reduce(sum_, step_statistics[name],
                                                          axis=None)
                               for name in STATISTICS}
            first_nonfinite = tf.where(
                (first_nonfinite < 0) & ~tf.math.is_finite(results["loss"]),
                index, first_nonfinite)
            totals = {name: totals[name] + results[name] for name in totals}
            statistics = {name: statistics[name] + step_statistics[name]
                          for name in statistics}
        return totals, statistics, first_nonfinite

    def train_steps(self, iterator, num_steps: int) -> StepsResult:
        """Runs `num_steps` optimizer updates from a distributed iterator.

        Args:
          iterator: ``iter(strategy.distribute_datasets_from_function(...))``
            over per-replica elements shaped [K, b, ...].
          num_steps: updates to run in this call (a tensor inside: changing
            it does not retrace); `step` advances by ``num_steps *
            global_steps_per_update``.
        """
        totals, statistics, first_nonfinite = self.train_steps_function(
            iterator, tf.constant(num_steps, tf.int32))
        return StepsResult(num_steps, _to_numpy(totals), _to_numpy(statistics),
                           int(first_nonfinite))

    # Evaluation.

    def _evaluate_batch_fn(self, features, eval_fn):
        return eval_fn(features, self.model(features, training=False))

    def _eval_steps(self, iterator, num_steps, eval_fn):
        def one_batch():
            sums = self.strategy.run(lambda f: self._evaluate_batch(f, eval_fn),
                                     args=(next(iterator),))
            return tf.nest.map_structure(
                lambda value: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value,
                                                   axis=None), sums)

        totals = one_batch()
        for _ in tf.range(1, num_steps):
            totals = tf.nest.map_structure(tf.add, totals, one_batch())
        return totals

    def evaluate(self, iterator, num_steps: int, eval_fn: Callable) -> dict:
        """Sums of ``eval_fn``'s values over `num_steps` distributed batches.

        Args:
          iterator: a distributed iterator over per-replica batches [b, ...].
          num_steps: batches per replica to read.
          eval_fn: ``(features, outputs) -> nested dict`` of float32 sums
            (totals and counts, never means: they are added across batches
            and replicas, so that the caller's ratios are exact whatever the
            batching).
        """
        if num_steps < 1:
            raise ValueError(f"evaluation needs at least one batch, got {num_steps}")
        return _to_numpy(self.eval_steps_function(iterator, tf.constant(num_steps, tf.int32),
                                                  eval_fn))


def _to_numpy(structure):
    return tf.nest.map_structure(lambda value: np.asarray(value).item(), structure)
