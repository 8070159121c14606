"""Run as a script: loss and gradients under MirroredStrategy over 2 logical CPUs.

Prints one JSON line of relative errors against the single-device batch. The
logical devices must be configured before TensorFlow runs any op, hence a
separate process (see test_distributed_loss.py).
"""

import dataclasses
import json

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from packed_bert_tf.models import BertPretrainingModel  # noqa: E402
from packed_bert_tf.models.bert_pretraining import loss_normalisers, pretraining_losses  # noqa: E402
from tests.graph_options import switch_off_grappler  # noqa: E402
from tests.models.packed_batches import (  # noqa: E402
    TINY_CONFIG,
    gradient_errors,
    layout,
    random_packs,
    relative_error,
)

SHAPES = dict(sequence_length=32, max_sequences_per_pack=3, max_masked=8)
#: One layer: the normalisers act on the losses, whatever the depth; tracing
#: and XLA compilation cost CPU in proportion to the layers.
CONFIG = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)
LEARNING_RATE = 0.1


def main():
    switch_off_grappler()  # seconds of CPU a function, and not what is checked
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    # Replica 0 gets two packs of one sequence, replica 1 two packs of three:
    # very different numbers of sequences and masked tokens per replica.
    packs = (random_packs(rng, 1, num_packs=2, sequence_length=32)
             + random_packs(rng, 3, num_packs=2, sequence_length=32))
    features, _ = layout(packs, **SHAPES)
    with strategy.scope():
        tf.random.set_seed(0)
        model = BertPretrainingModel.from_bert_config(CONFIG)
        model.build()
    variables = model.trainable_variables

    def replica_step(features, per_sequence, global_normaliser):
        with tf.GradientTape() as tape:
            loss = pretraining_losses(features, model(features, training=True),
                                      per_sequence=per_sequence,
                                      global_normaliser=global_normaliser)["loss"]
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    def shard(context):
        start = 2 * context.replica_id_in_sync_group
        return {name: value[start:start + 2] for name, value in features.items()}

    sharded = strategy.experimental_distribute_values_from_function(shard)

    def distributed_step(per_sequence, global_normaliser):
        loss, gradients = strategy.run(replica_step,
                                       args=(sharded, per_sequence, global_normaliser))
        sum_ = tf.distribute.ReduceOp.SUM
        return (strategy.reduce(sum_, loss, axis=None),
                [strategy.reduce(sum_, g, axis=None) for g in gradients])

    results = {}
    # The single-device references, each computed once (no step here moves
    # the weights before fit's).
    references = {per_sequence: replica_step(features, per_sequence, True)
                  for per_sequence in (False, True)}
    for per_sequence in (False, True):
        want_loss, want_gradients = references[per_sequence]
        for global_normaliser in (True, False):
            loss, gradients = distributed_step(per_sequence, global_normaliser)
            key = f"per_sequence={per_sequence},global={global_normaliser}"
            results[key] = {
                "loss": relative_error(loss, want_loss),
                "gradients": max(gradient_errors(gradients, want_gradients))}

    # XLA per-replica step: the all-reduce of the counts happens outside it.
    @tf.function(jit_compile=True)
    def compiled_replica_step(features, normalisers):
        with tf.GradientTape() as tape:
            loss = pretraining_losses(features, model(features, training=True),
                                      normalisers=normalisers)["loss"]
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    @tf.function
    def compiled_distributed_step():
        def replica_fn(features):
            return compiled_replica_step(features, loss_normalisers(features))
        loss, gradients = strategy.run(replica_fn, args=(sharded,))
        sum_ = tf.distribute.ReduceOp.SUM
        return (strategy.reduce(sum_, loss, axis=None),
                [strategy.reduce(sum_, g, axis=None) for g in gradients])

    want_loss, want_gradients = references[False]
    loss, gradients = compiled_distributed_step()
    results["xla_per_replica"] = {
        "loss": relative_error(loss, want_loss),
        "gradients": max(gradient_errors(gradients, want_gradients))}

    # model.fit under the strategy: one SGD step equals the single-device step.
    _, want_gradients = references[False]
    before = [v.numpy() for v in variables]
    # Eagerly: the replicas' step and reductions are fit's own either way, and
    # tracing it costs seconds (keras_fit_check.py fits every model traced).
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), run_eagerly=True)
    model.fit(tf.data.Dataset.from_tensors(features), epochs=1, verbose=0)
    steps = [(b - v.numpy()) / LEARNING_RATE for b, v in zip(before, variables)]
    results["fit_sgd_step"] = max(gradient_errors(steps, want_gradients))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
