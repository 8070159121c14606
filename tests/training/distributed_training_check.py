"""Run as a script: Trainer steps under MirroredStrategy over 2 logical CPUs.

Prints one JSON line comparing the weights after two LAMB updates (with
gradient accumulation and global-norm clipping active) against the same
updates on one device, plus the number of traces; with the argument
``run_pretraining``, the summary of a whole run (train and evaluate) under
``--distribution_strategy=mirrored`` instead. The logical devices must
be configured before TensorFlow runs any op, hence a fresh process for each
(test_distributed_training.py starts both). The mirrored trainer clipping
once per update is XLA-compiled, as a run's; the one clipping per
micro-batch, the single-device references
and the whole run are not (the claims are the replicas' sums, not the
compilation, and each compiled step costs many seconds under the strategy);
the single-device references run eagerly.
"""

import json
import sys

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import numpy as np  # noqa: E402

from tests.graph_options import grappler_off  # noqa: E402
from tests.training.trainer_checks import (  # noqa: E402
    ONE_LAYER,
    make_trainer,
    max_relative_difference,
    micro_batches,
    random_features,
    weights,
)

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
    # Clipping once per update (the optimizer's, after the replica sum), and
    # per micro-batch (the trainer's, each micro-batch summed over the replicas).
    for name, clipnorm, jit_compile in (("lamb", None, True),
                                        ("lamb_clip_per_micro_batch", 1.0, False)):
        # A large learning rate so that clipping to norm 1 is active.
        single = make_trainer(steps_per_update=STEPS_PER_UPDATE, learning_rate=0.05,
                              micro_batch_clipnorm=clipnorm, jit_compile=False)
        # The one-device reference eagerly: tracing its step costs seconds.
        tf.config.run_functions_eagerly(True)
        try:
            single.train_steps(iter(tf.data.Dataset.from_tensor_slices(
                stacked(single_elements))), 2)
        finally:
            tf.config.run_functions_eagerly(False)
        mirrored = make_trainer(steps_per_update=STEPS_PER_UPDATE, strategy=strategy,
                                learning_rate=0.05, micro_batch_clipnorm=clipnorm,
                                jit_compile=jit_compile)
        # One input pipeline: consecutive elements go to replicas 0 and 1.
        dataset = strategy.distribute_datasets_from_function(
            lambda context: tf.data.Dataset.from_tensor_slices(
                stacked(per_replica_elements)))
        result = mirrored.train_steps(iter(dataset), 2)
        results[name] = {
            "weights": max_relative_difference(weights(mirrored), weights(single)),
            "traces": mirrored.train_steps_function.experimental_get_tracing_count(),
            "sequences": result.statistics["sequences"],
            "want_sequences": float(sum(e["next_sentence_weights"].sum()
                                        for e in single_elements)),
            "replicas": strategy.num_replicas_in_sync,
        }
    print(json.dumps(results))


def run_pretraining_mirrored():
    """A whole run under --distribution_strategy=mirrored: train, then evaluate."""
    import pathlib
    import tempfile

    from packed_bert_tf.pretraining.run import PretrainingOptions, run_pretraining
    from tests.conftest import write_unpacked_dataset

    folder = pathlib.Path(tempfile.mkdtemp())
    files = write_unpacked_dataset(folder / "data", num_files=2, per_file=45)
    config = folder / "bert_config.json"
    ONE_LAYER.__class__(**{**ONE_LAYER.to_dict(), "vocab_size": 5000}).to_json_file(
        str(config))
    summary = run_pretraining(PretrainingOptions(
        bert_config_file=str(config), output_dir=str(folder / "out"),
        input_file=",".join(files), eval_input_file=",".join(files), do_train=True,
        do_eval=True, max_seq_length=64, max_predictions_per_seq=10, train_batch_size=4,
        eval_batch_size=8, num_train_steps=4, num_warmup_steps=1, iterations_per_loop=2,
        log_every_n_steps=2, save_checkpoints_steps=2, seed=0, progress_bar=False,
        batching="padded", distribution_strategy="mirrored", jit_compile=False))
    return {"replicas": summary["replicas"], "final_step": summary["train"]["final_step"],
            "traces": summary["train"]["train_steps_function_traces"],
            "eval_sequences": summary["eval"]["sequences"],
            "masked_lm_accuracy": summary["eval"]["masked_lm_accuracy"]}


if __name__ == "__main__":
    # One MirroredStrategy per process: a second one in the same process can
    # mix up the collective instances of the first.
    with grappler_off():  # seconds of CPU a step function, and not what is checked
        if sys.argv[1:] == ["run_pretraining"]:
            print(json.dumps({"run_pretraining": run_pretraining_mirrored()}))
        else:
            main()
