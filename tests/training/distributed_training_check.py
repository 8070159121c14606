"""Run as a script: Trainer steps under MirroredStrategy over 2 logical CPUs.

Prints one JSON line comparing the weights after two LAMB updates (with
gradient accumulation and global-norm clipping active) against the same
updates on one device, plus the number of traces. The logical devices must
be configured before TensorFlow runs any op, hence a separate process (see
test_distributed_training.py).
"""

import json

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from tests.training.trainer_checks import (make_trainer, max_relative_difference,  # noqa: E402
                                           micro_batches, random_features, weights)

STEPS_PER_UPDATE = 2
PER_REPLICA_ROWS = 3


def main():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    # Per update: replica r gets [K, 3] rows; one device gets [K, 6] (the two
    # replicas' micro-batches side by side): the same rows in each update.
    updates = [[micro_batches(random_features(10 * step + replica, STEPS_PER_UPDATE
                                              * PER_REPLICA_ROWS), STEPS_PER_UPDATE)
                for replica in range(2)] for step in range(2)]
    per_replica_elements = [element for update in updates for element in update]
    single_elements = [{name: np.concatenate([a[name], b[name]], axis=1) for name in a}
                       for a, b in updates]

    def stacked(elements):
        return {name: np.stack([e[name] for e in elements]) for name in elements[0]}

    results = {}
    for optimizer in ("lamb",):
        # A large learning rate so that clipping to norm 1 is active.
        single = make_trainer(steps_per_update=STEPS_PER_UPDATE, optimizer=optimizer,
                              learning_rate=0.05)
        single.train_steps(iter(tf.data.Dataset.from_tensor_slices(
            stacked(single_elements))), 2)
        mirrored = make_trainer(steps_per_update=STEPS_PER_UPDATE, optimizer=optimizer,
                                strategy=strategy, learning_rate=0.05)
        # One input pipeline: consecutive elements go to replicas 0 and 1.
        dataset = strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.from_tensor_slices(
                stacked(per_replica_elements)))
        result = mirrored.train_steps(iter(dataset), 2)
        results[optimizer] = {
            "weights": max_relative_difference(weights(mirrored), weights(single)),
            "traces": mirrored.train_steps_function.experimental_get_tracing_count(),
            "sequences": result.statistics["sequences"],
            "want_sequences": float(sum(e["next_sentence_weights"].sum()
                                        for e in single_elements)),
            "replicas": strategy.num_replicas_in_sync,
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
