"""Run as a script: ``model.fit`` under MirroredStrategy over 2 logical CPUs, every model.

For each case of `tests.models.model_cases.MODEL_CASES` prints, in one JSON
line: the relative error of one SGD ``fit`` step on 2 replicas against the
gradient of the whole batch on one device, the loss ``fit`` reports against
the global loss, the error of ``compile(jit_compile=True)``, and the losses
of an eager ``mixed_bfloat16`` fit under the strategy, and how far the SavedModel
exported from the mirrored model serves other logits. The logical devices must be
configured before TensorFlow runs any op, hence a separate process (see
test_keras_fit_distributed.py).
"""

import json
import tempfile

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from packed_bert_tf.models import export_for_serving  # noqa: E402
from tests.graph_options import switch_off_grappler  # noqa: E402
from tests.models.model_cases import MODEL_CASES, S, as_tensors  # noqa: E402
from tests.models.packed_batches import gradient_errors, relative_error  # noqa: E402

LEARNING_RATE = 0.1


def check(case, strategy) -> dict:
    batch = as_tensors(case.make_batch(0))
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = case.make_model()
    # The single-device loss and gradient of the whole batch (no replica context).
    with tf.GradientTape() as tape:
        want_loss = model.compute_loss(x=batch, y_pred=model(batch, training=True))
    want_gradients = tape.gradient(want_loss, model.trainable_variables)

    results = {}
    try:
        with strategy.scope():
            model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), jit_compile=True)
        results["jit_compile_error"] = ""
    except ValueError as error:
        results["jit_compile_error"] = str(error)

    before = [v.numpy() for v in model.trainable_variables]
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE))
    # Global batch 4: replica 0 gets rows 0-1 (2 sequences), replica 1 rows 2-3 (6).
    history = model.fit(tf.data.Dataset.from_tensors(batch), epochs=1, verbose=0,
                        shuffle=False)
    steps = [(b - v.numpy()) / LEARNING_RATE
             for b, v in zip(before, model.trainable_variables)]
    results["fit_step_error"] = max(gradient_errors(steps, want_gradients))
    results["reported_loss_error"] = relative_error(history.history["loss"][0], want_loss)

    # Exported outside the scope: a plain copy serves the mirrored model's logits.
    with tempfile.TemporaryDirectory() as folder:
        served = tf.saved_model.load(export_for_serving(
            model, folder, max_seq_length=S, **case.export_sizes))
        inputs = {name: batch[name] for name in model.input_features()}
        got = served.signatures["serving_default"](**inputs)
        want = model(inputs)
        results["export_error"] = max(float(np.abs(got[name] - want[name]).max())
                                      for name in model.SERVING_OUTPUTS)
        results["export_variables_distributed"] = any(
            isinstance(v, tf.distribute.DistributedValues) for v in served.variables)

    with strategy.scope():
        keras.utils.set_random_seed(0)
        mixed = case.make_model(dtype="mixed_bfloat16")
        # SGD: the claim is the policy's dtypes and a falling loss under the
        # strategy; Adam's update would add seconds of tracing per model.
        # Eagerly: the replicas' step is fit's own either way (the float32 fit
        # above is the traced one), and tracing it costs seconds per model.
        mixed.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), run_eagerly=True)
    # Two steps: a falling loss needs no more.
    losses = mixed.fit(tf.data.Dataset.from_tensors(batch), epochs=2, verbose=0,
                       shuffle=False).history["loss"]
    results["mixed_losses"] = [float(loss) for loss in losses]
    results["mixed_variable_dtypes"] = sorted({str(v.dtype) for v in
                                               mixed.trainable_variables})
    outputs = mixed(batch)
    results["mixed_serving_output_dtypes"] = sorted({str(outputs[name].dtype.name) for name
                                                     in mixed.SERVING_OUTPUTS})
    return results


def main():
    switch_off_grappler()  # seconds of CPU a function, and not what is checked
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    print(json.dumps({case.name: check(case, strategy) for case in MODEL_CASES},
                     default=float))


if __name__ == "__main__":
    main()
