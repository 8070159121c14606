"""Run as a script, ``python -m tests.training.distributed_fine_tuning_check
TASK`` (``squad`` or ``classification``): the task's pipeline, loss and
prediction under MirroredStrategy over 2 logical CPUs.

Prints one JSON line: relative errors of the summed per-replica loss and
gradients against the single-device batch (rows matched by ``pack_index``),
with the normaliser counted inside the step (global and, wrongly, per
replica) and precomputed for an XLA step; and the largest difference of the
logits gathered from the replicas against single-device prediction. A
separate process because the logical devices must be configured before
TensorFlow runs any op.
"""

import dataclasses
import json
import sys
from typing import Callable

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from packed_bert_tf.data.inputs.rows_dataset import rows_dataset  # noqa: E402
from tests.graph_options import switch_off_grappler  # noqa: E402
from tests.models.packed_batches import TINY_CONFIG, gradient_errors, relative_error  # noqa: E402

# One layer: the reductions over replicas are the claim, not depth (each
# layer more is seconds more to compile under MirroredStrategy).
CONFIG = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)


@dataclasses.dataclass
class Case:
    """A task's side of the check.

    Attributes:
      model: made (and built) under the strategy's scope.
      packs: its `PackedRows`.
      batch_size: global.
      seed: of the training rows' order.
      loss: ``(batch, outputs, normalisers, global_normaliser) -> loss``.
      normalisers: ``batch -> the loss's counts`` (summed over the replicas).
      predict: ``(model, packs, batch_size, strategy=..., jit_compile=...)
        -> (examples, [logits, ...])``: how many examples it predicted, and
        an array per output.
      examples: how many examples ``packs`` holds.
    """

    model: object
    packs: object
    examples: int
    batch_size: int
    seed: int
    loss: Callable
    normalisers: Callable
    predict: Callable


def squad_case() -> Case:
    from packed_bert_tf.layers.losses import sequence_loss_normalisers
    from packed_bert_tf.models import BertSquadModel
    from packed_bert_tf.models.bert_squad import squad_span_loss
    from packed_bert_tf.squad.dataset import predict_logits
    from packed_bert_tf.squad.packing import pack_features
    from tests.squad.squad_data import make_features

    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(4, 12, 30), rng.integers(30, 48, 10)])
    features = make_features(lengths, 48, vocab_size=CONFIG.vocab_size)

    def loss(batch, outputs, normalisers, global_normaliser):
        return squad_span_loss(batch, outputs, normalisers=normalisers,
                               global_normaliser=global_normaliser)["loss"]

    def predict(*args, **kwargs):
        logits = predict_logits(*args, **kwargs)  # ragged: a row per token
        return len(logits), [logits.start_logits, logits.end_logits]

    tf.random.set_seed(0)
    return Case(BertSquadModel.from_bert_config(CONFIG),
                pack_features(features, max_sequences_per_pack=3), len(lengths),
                batch_size=8, seed=3, loss=loss,
                normalisers=sequence_loss_normalisers, predict=predict)


def classification_case() -> Case:
    from packed_bert_tf.classification.dataset import predict_logits
    from packed_bert_tf.classification.packing import pack_features
    from packed_bert_tf.layers.losses import sequence_loss_normalisers
    from packed_bert_tf.models import BertClassifierModel
    from packed_bert_tf.models.bert_classifier import sequence_classification_loss
    from tests.classification.classifier_data import random_features

    rng = np.random.default_rng(0)
    # Short and long examples: packs of very different numbers of sequences.
    lengths = np.concatenate([rng.integers(4, 10, 30), rng.integers(30, 48, 8)])
    features = random_features(lengths, 48, vocab_size=CONFIG.vocab_size, num_labels=3)

    def loss(batch, outputs, normalisers, global_normaliser):
        return sequence_classification_loss(
            batch, outputs, is_regression=False, normalisers=normalisers,
            global_normaliser=global_normaliser)["loss"]

    def predict(*args, **kwargs):
        logits = predict_logits(*args, **kwargs)  # a row per example
        return len(logits), [logits]

    tf.random.set_seed(0)
    return Case(BertClassifierModel.from_bert_config(CONFIG, 3),
                pack_features(features, max_sequences_per_pack=6), len(lengths),
                batch_size=4, seed=1, loss=loss,
                normalisers=sequence_loss_normalisers, predict=predict)


CASES = {"squad": squad_case, "classification": classification_case}


def check(strategy, case: Case) -> dict:
    """The figures the JSON line holds."""
    model = case.model
    variables = model.trainable_variables

    def replica_step(batch, normalisers=None, global_normaliser=True):
        with tf.GradientTape() as tape:
            loss = case.loss(batch, model(batch, training=True), normalisers,
                             global_normaliser)
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    compiled_replica_step = tf.function(replica_step, jit_compile=True)

    def distributed_step(batch, mode):
        def replica_fn(batch):
            if mode == "compiled":  # the all-reduce of the count stays outside XLA
                return compiled_replica_step(batch, case.normalisers(batch))
            return replica_step(batch, global_normaliser=mode == "global")
        loss, gradients = strategy.run(replica_fn, args=(batch,))
        total = tf.distribute.ReduceOp.SUM
        return (strategy.reduce(total, loss, axis=None),
                [strategy.reduce(total, g, axis=None) for g in gradients])

    distributed = strategy.distribute_datasets_from_function(
        lambda context: rows_dataset(case.packs, case.batch_size, is_training=True,
                                     seed=case.seed, input_context=context))
    for batch in distributed:  # the first batch whose replicas differ in sequences
        sequences = [float(t.numpy().sum()) for t in
                     strategy.experimental_local_results(batch["sequence_weights"])]
        if sequences[0] != sequences[1]:
            break
    rows = np.concatenate([t.numpy() for t in
                           strategy.experimental_local_results(batch["pack_index"])])
    single = {name: tf.constant(value[rows]) for name, value in case.packs.arrays.items()}
    want_loss, want_gradients = replica_step(single)
    results = {"sequences_per_replica": sequences}
    # The normaliser counted inside the step runs eagerly (tracing a backward
    # pass under the strategy costs seconds, and the replicas' sums are the
    # same); the XLA step inside a tf.function, as a run's.
    for mode, step in (("global", distributed_step), ("local", distributed_step),
                       ("compiled", tf.function(distributed_step))):
        loss, gradients = step(batch, mode)
        results[f"train_{mode}"] = {
            "loss": relative_error(loss, want_loss),
            "gradients": max(gradient_errors(gradients, want_gradients))}

    # Prediction: every row once across the replicas, matched back by pack_index.
    # The reference: the default strategy (one device), eager (a traced
    # function would cost seconds and check nothing more).
    tf.config.run_functions_eagerly(True)
    examples, want = case.predict(model, case.packs, case.batch_size)
    tf.config.run_functions_eagerly(False)
    for mode, jit_compile in (("eager", False), ("compiled", True)):
        _, got = case.predict(model, case.packs, case.batch_size, strategy=strategy,
                              jit_compile=jit_compile)
        results[f"predict_{mode}_max_abs_difference"] = max(
            float(np.abs(g - w).max()) for g, w in zip(got, want))
    results["predicted_examples"] = [examples, case.examples]  # predicted, held
    return results


def main(task: str):
    switch_off_grappler()  # seconds of CPU a function, and not what is checked
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        case = CASES[task]()
        case.model.build()
    print(json.dumps(check(strategy, case)))


if __name__ == "__main__":
    main(*sys.argv[1:])
