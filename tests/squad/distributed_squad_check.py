"""Run as a script: the SQuAD pipeline under MirroredStrategy over 2 logical CPUs.

Prints one JSON line: relative errors of the summed per-replica loss and
gradients against the single-device batch (rows matched by ``pack_index``),
with the normaliser counted inside the step and precomputed for an XLA step,
and the largest difference of per-feature logits gathered from the replicas
against single-device prediction. A separate process because the logical
devices must be configured before TensorFlow runs any op.
"""

import dataclasses
import json

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from packed_bert_tf.layers import squad_loss_normalisers, squad_span_loss  # noqa: E402
from packed_bert_tf.models import BertSquadModel  # noqa: E402
from packed_bert_tf.data.rows_dataset import rows_dataset  # noqa: E402
from packed_bert_tf.squad.dataset import predict_logits  # noqa: E402
from packed_bert_tf.squad.packing import pack_features  # noqa: E402
from tests.graph_options import switch_off_grappler  # noqa: E402
from tests.models.packed_batches import (TINY_CONFIG, gradient_errors,  # noqa: E402
                                         relative_error)
from tests.squad.squad_data import make_features  # noqa: E402

# One layer: the reductions over replicas are the claim, not depth (each
# layer more is seconds more to compile under MirroredStrategy).
CONFIG = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)
BATCH_SIZE = 8  # global


def main():
    switch_off_grappler()  # seconds of CPU a function, and not what is checked
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(4, 12, 30), rng.integers(30, 48, 10)])
    features = make_features(lengths, 48, vocab_size=CONFIG.vocab_size)
    packs = pack_features(features, max_sequences_per_pack=3)
    with strategy.scope():
        tf.random.set_seed(0)
        model = BertSquadModel(CONFIG)
        model.build()
    variables = model.trainable_variables

    def replica_step(batch, normalisers=None, global_normaliser=True):
        with tf.GradientTape() as tape:
            loss = squad_span_loss(batch, model(batch, training=True),
                                   normalisers=normalisers,
                                   global_normaliser=global_normaliser)["loss"]
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

    compiled_replica_step = tf.function(replica_step, jit_compile=True)

    def distributed_step(batch, mode):
        def replica_fn(batch):
            if mode == "compiled":  # the all-reduce of the count stays outside XLA
                return compiled_replica_step(batch, squad_loss_normalisers(batch))
            return replica_step(batch, global_normaliser=mode == "global")
        loss, gradients = strategy.run(replica_fn, args=(batch,))
        total = tf.distribute.ReduceOp.SUM
        return (strategy.reduce(total, loss, axis=None),
                [strategy.reduce(total, g, axis=None) for g in gradients])

    def gathered_rows(batch):
        return np.concatenate([t.numpy() for t in
                               strategy.experimental_local_results(batch["pack_index"])])

    # Seed 3: the first batch gives the two replicas different numbers of sequences.
    distributed = strategy.distribute_datasets_from_function(
        lambda context: rows_dataset(packs, BATCH_SIZE, is_training=True, seed=3,
                                      input_context=context))
    batch = next(iter(distributed))
    rows = gathered_rows(batch)
    single = {name: tf.constant(value[rows]) for name, value in packs.arrays.items()}
    want_loss, want_gradients = replica_step(single)
    results = {}
    results["sequences_per_replica"] = [
        float(t.numpy().sum()) for t in
        strategy.experimental_local_results(batch["sequence_weights"])]
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
    want = predict_logits(model, packs, BATCH_SIZE)
    tf.config.run_functions_eagerly(False)
    for mode, jit_compile in (("eager", False), ("compiled", True)):
        got = predict_logits(model, packs, BATCH_SIZE, strategy=strategy,
                             jit_compile=jit_compile)
        results[f"predict_{mode}_max_abs_difference"] = float(max(
            np.abs(got.start_logits - want.start_logits).max(),
            np.abs(got.end_logits - want.end_logits).max()))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
