"""Run as a script under the JAX backend of Keras, on a folder that a
TensorFlow process wrote (see test_cross_backend.py): what was saved under
TensorFlow, loaded and run under JAX, printed as one JSON line.

    KERAS_BACKEND=jax python -m tests.backends.cross_backend_check FOLDER

The folder holds the packed batches (``batches.npz``), a compiled
`BertPretrainingModel` trained ``STEPS`` steps (``pretraining.keras``), its
initial weights, and what TensorFlow computed from them (``tensorflow.npz``):
per-step losses, outputs, optimizer variables. Also docs/layers.md's
``PackedTokenClassifier`` (``tagger.keras``) and a keras-hub ``BertBackbone``
(``keras_hub_backbone.keras``, when keras-hub is installed). In this order:

* ``missing_class``: `load_model` of ``tagger.keras`` before anything
  defines its class (the one-line error), and the file checks' errors;
* ``pretraining``: the saved model's outputs against TensorFlow's, its
  optimizer's variables, its step count;
* ``fit``: the per-step logs of `fit` from the initial weights, as under
  TensorFlow (same batches, same optimizer);
* ``tensorflow_imported``: whether the above imported TensorFlow (no:
  nothing here calls ``keras.utils.set_random_seed``, which would);
* ``docs``: docs/layers.md's blocks but those marked TensorFlow only, run in
  order in a folder of their own, and what the page claims of them;
* ``tagger``: ``tagger.keras`` loaded once the page defined its class;
* ``keras_hub``: the backbone's weights loaded into a `BertPretrainingModel`
  as under TensorFlow (keras-hub itself imports TensorFlow: last).

Functions used on both sides (the fit, the logs) live here too.
"""

import json
import os
import pathlib
import sys
import time

import keras
import numpy as np
from keras import ops

STEPS = 5            # fit steps, one batch each
ROWS = 4             # rows per batch
SHAPES = dict(sequence_length=48, max_sequences_per_pack=3, max_masked=9)
LEARNING_RATE = 0.1


class StepLogs(keras.callbacks.Callback):
    """The logs of every training batch (Keras' running means over the epoch)."""

    def __init__(self):
        super().__init__()
        self.logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append({name: float(value) for name, value in (logs or {}).items()})


def step_losses(logs) -> list:
    """Each step's own loss from the running means of the epoch (equal batch sizes)."""
    means = [entry["loss"] for entry in logs]
    return [(k + 1) * mean - k * previous
            for k, (mean, previous) in enumerate(zip(means, [0.0] + means[:-1]))]


def fit_steps(model, arrays, **compile_options) -> list:
    """``STEPS`` steps of `fit` (SGD with momentum, batches in order): the logs
    of each.

    SGD rather than Adam: under TensorFlow an embedding's gradient is a
    ``tf.IndexedSlices`` of one slice per occurrence of a row, and Keras'
    Adam squares it slice by slice (``ops.square`` keeps it sparse), so the
    second moment of a row used k times sums k squares where JAX's dense
    gradient squares the sum; the losses differ by 3e-3 after one step at
    rate 1e-2. SGD with momentum is linear in the gradient: the same steps.
    """
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=0.9),
                  **compile_options)
    recorder = StepLogs()
    model.fit(arrays, batch_size=ROWS, epochs=1, shuffle=False, verbose=0,
              callbacks=[recorder])
    return recorder.logs


def numpy_outputs(outputs) -> dict:
    return {name: ops.convert_to_numpy(value) for name, value in outputs.items()}


def optimizer_arrays(optimizer) -> dict:
    """The optimizer's variables by position (their paths hold layer names that
    depend on what the process built before)."""
    return {f"{index:03d}": ops.convert_to_numpy(variable)
            for index, variable in enumerate(optimizer.variables)}


def first_batch(arrays) -> dict:
    return {name: value[:ROWS] for name, value in arrays.items()}


def largest_difference(got: dict, want: dict, prefix: str) -> float:
    """Max |got - want| over the arrays of ``want`` named ``prefix/...``."""
    return max(float(np.abs(np.asarray(got[name[len(prefix) + 1:]], np.float64)
                            - want[name]).max())
               for name in want.files if name.startswith(prefix + "/"))


def error_line(call) -> str:
    """The message of the ValueError ``call()`` raises ("" if none)."""
    try:
        call()
    except ValueError as error:
        return str(error)
    return ""


def check_loading(folder, want):
    from packed_bert_tf.models import BertPretrainingModel, load_model

    results = {"missing_class": {
        "tagger": error_line(lambda: load_model(str(folder / "tagger.keras"))),
        "folder": error_line(lambda: load_model(str(folder))),
        "not_keras": error_line(lambda: load_model(str(folder / "batches.npz"))),
    }}
    arrays = dict(np.load(folder / "batches.npz"))
    model = load_model(str(folder / "pretraining.keras"), BertPretrainingModel)
    got = numpy_outputs(model(first_batch(arrays)))
    optimizer = optimizer_arrays(model.optimizer)
    results["pretraining"] = {
        "class": type(model).__name__,
        "outputs": largest_difference(got, want, "outputs"),
        "largest_output": max(float(np.abs(want[name]).max()) for name in want.files
                              if name.startswith("outputs/")),
        "optimizer": type(model.optimizer).__name__,
        "iterations": int(ops.convert_to_numpy(model.optimizer.iterations)),
        "optimizer_variables": len(optimizer),
        "optimizer_difference": largest_difference(optimizer, want, "optimizer"),
    }
    return results, arrays


def check_fit(folder, arrays, want):
    from packed_bert_tf.models import BertPretrainingModel
    from tests.models.packed_batches import TINY_CONFIG

    model = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    model.build()
    batch = first_batch(arrays)
    # The loss of this backend's own initialisation: the comparison below
    # depends on the weights loaded after it.
    own_loss = float(model.compute_loss(x=batch, y_pred=model(batch)))
    model.load_weights(str(folder / "initial.weights.h5"))
    logs = fit_steps(model, arrays)
    return {"logs": logs, "step_losses": step_losses(logs), "own_initial_loss": own_loss,
            "log_difference": max(abs(entry[name] - float(want[f"logs/{name}"][step]))
                                  for step, entry in enumerate(logs) for name in entry)}


def check_docs(folder):
    from tests.test_docs_layers import DOC, backend_neutral_blocks

    os.chdir(folder)
    names = {"__name__": "docs_layers"}
    blocks = backend_neutral_blocks(DOC.read_text())
    for index, block in blocks:
        exec(compile(block, f"{DOC.name} block {index + 1}", "exec"), names)
    packed, unpacked = names["packed_logits"], names["unpacked_logits"]
    model = names["model"]
    trained_packed, trained_unpacked = model(names["packed"]), model(names["unpacked"])
    one_sequence = dict(names["packed"])
    one_sequence["input_mask"] = ops.cast(ops.greater(one_sequence["input_mask"], 0),
                                          "int32")
    classifier = names["classifier"]
    rows = dict(names["packs"].arrays)
    return {
        "blocks": [index for index, _ in blocks],
        "shapes": [list(packed.shape), list(unpacked.shape)],
        "packed_a": float(ops.max(ops.abs(packed[0, :6] - unpacked[0, :6]))),
        "packed_b": float(ops.max(ops.abs(packed[0, 6:15] - unpacked[1, :9]))),
        "trained_packed_b": float(ops.max(ops.abs(trained_packed[0, 6:15]
                                                  - trained_unpacked[1, :9]))),
        "one_sequence_b": float(ops.max(ops.abs(model(one_sequence)[0, 6:15]
                                                - trained_unpacked[1, :9]))),
        "losses": [float(loss) for loss in names["losses"]],
        "restored": float(ops.max(ops.abs(names["restored"](names["packed"])
                                          - trained_packed))),
        "classifier": type(classifier).__name__,
        "classifier_optimizer": type(classifier.optimizer).__name__,
        "classifier_logits": list(ops.shape(classifier(rows)["logits"])),
    }, names["packed"]


def check_tagger(folder, packed, want):
    from packed_bert_tf.models import load_model

    tagger = load_model(str(folder / "tagger.keras"))
    return {"class": type(tagger).__name__,
            "outputs": float(np.abs(ops.convert_to_numpy(tagger(packed))
                                    - want["tagger/logits"]).max())}


def check_keras_hub(folder, arrays, want):
    if not (folder / "keras_hub_backbone.keras").exists():
        return None  # keras-hub is not installed where the folder was written
    from packed_bert_tf.models import (
        BertPretrainingModel,
        bert_config_from_keras_hub,
        keras_hub_named_weights,
        load_keras_hub_backbone,
        to_keras_hub_backbone,
    )

    backbone = keras.models.load_model(str(folder / "keras_hub_backbone.keras"))
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(backbone))
    report = load_keras_hub_backbone(model, backbone)
    got = numpy_outputs(model(first_batch(arrays)))
    source = keras_hub_named_weights(backbone)
    back = keras_hub_named_weights(to_keras_hub_backbone(model))
    return {"backbone": type(backbone).__name__, "loaded": len(report.loaded),
            "missing": list(report.missing), "unused": list(report.unused),
            "outputs": largest_difference(got, want, "keras_hub"),
            "way_back": max(float(np.abs(back[name] - value).max())
                            for name, value in source.items())}


def main(folder: pathlib.Path) -> dict:
    want = np.load(folder / "tensorflow.npz")
    cpu = {"start": time.process_time()}
    results, arrays = check_loading(folder, want)
    cpu["loading"] = time.process_time()
    results["fit"] = check_fit(folder, arrays, want)
    cpu["fit"] = time.process_time()
    results["backend"] = keras.backend.backend()
    results["tensorflow_imported"] = "tensorflow" in sys.modules
    docs_folder = folder / "docs_jax"
    docs_folder.mkdir()
    results["docs"], packed = check_docs(docs_folder)
    cpu["docs"] = time.process_time()
    results["tagger"] = check_tagger(folder, packed, want)
    results["keras_hub"] = check_keras_hub(folder, arrays, want)
    cpu["keras_hub"] = time.process_time()
    # The CPU seconds of each part, and of the imports before them.
    results["cpu_seconds"] = {name: round(value - previous, 1) for (name, value), previous
                              in zip(cpu.items(), [0.0] + list(cpu.values()))}
    return results


if __name__ == "__main__":
    print(json.dumps(main(pathlib.Path(sys.argv[1]).resolve())))
