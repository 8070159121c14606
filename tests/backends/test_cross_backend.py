"""Models saved under TensorFlow, loaded, run and trained under JAX.

This process is TensorFlow's: a module fixture saves a compiled
`BertPretrainingModel` after `STEPS` steps of `fit`, its initial weights,
docs/layers.md's ``PackedTokenClassifier`` and a keras-hub ``BertBackbone``
into a folder, with what TensorFlow computed from them. One JAX subprocess
(tests/backends/cross_backend_check.py) reads the folder, also runs the
page's blocks not marked TensorFlow only, and prints one JSON line; the tests
below compare.
"""

import importlib.util
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from packed_bert_tf.models import (
    BertPretrainingModel,
    bert_config_from_keras_hub,
    load_keras_hub_backbone,
)
from tests.backends.cross_backend_check import (
    ROWS,
    SHAPES,
    STEPS,
    first_batch,
    fit_steps,
    numpy_outputs,
    optimizer_arrays,
    step_losses,
)
from tests.models.packed_batches import TINY_CONFIG, layout, random_packs
from tests.test_docs_layers import DOC, python_blocks
from tests.tool_runs import REPOSITORY, tool_environment

pytestmark = [pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed (pip install 'jax[cpu]', part of the test extra)"),
    pytest.mark.slow]

HAS_KERAS_HUB = importlib.util.find_spec("keras_hub") is not None


def save_keras_hub_side(folder, arrays, outputs):
    """A tiny random keras-hub backbone, and our model's backbone outputs once it
    is loaded (the heads are not in it: they stay as initialised)."""
    import keras_hub

    from tests.models.test_keras_hub_weights import tiny_backbone

    backbone = tiny_backbone(keras_hub, seed=3)
    backbone.save(str(folder / "keras_hub_backbone.keras"))
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(backbone))
    load_keras_hub_backbone(model, backbone)
    got = numpy_outputs(model(first_batch(arrays)))
    for name in ("sequence_output", "pooled_output"):
        outputs[f"keras_hub/{name}"] = got[name]


def save_tensorflow_side(folder):
    """Writes the files the JAX side reads; returns what TensorFlow computed."""
    assert keras.backend.backend() == "tensorflow"
    packs = random_packs(np.random.default_rng(11), 3, num_packs=ROWS * STEPS,
                         sequence_length=SHAPES["sequence_length"])
    features, _ = layout(packs, **SHAPES)
    arrays = {name: ops.convert_to_numpy(value) for name, value in features.items()}
    np.savez(folder / "batches.npz", **arrays)

    keras.utils.set_random_seed(0)
    model = BertPretrainingModel.from_bert_config(TINY_CONFIG)
    model.build()
    model.save_weights(str(folder / "initial.weights.h5"))
    # Each batch's loss without training: the steps below must move it.
    batches = [{name: value[step * ROWS:(step + 1) * ROWS] for name, value in arrays.items()}
               for step in range(STEPS)]
    untrained = [float(model.compute_loss(x=batch, y_pred=model(batch))) for batch in batches]
    # Eager: for five steps cheaper than tracing (and XLA, seconds); the same losses.
    logs = fit_steps(model, arrays, run_eagerly=True)
    model.save(str(folder / "pretraining.keras"))
    want = {f"logs/{name}": np.array([entry[name] for entry in logs]) for name in logs[0]}
    want["untrained_losses"] = np.array(untrained)
    want.update((f"outputs/{name}", value)
                for name, value in numpy_outputs(model(first_batch(arrays))).items())
    want.update((f"optimizer/{index}", value)
                for index, value in optimizer_arrays(model.optimizer).items())

    # The page's classifier and packer (its first two blocks), saved untrained.
    names = {"__name__": "docs_layers"}
    for block in python_blocks(DOC.read_text())[:2]:
        exec(compile(block, DOC.name, "exec"), names)
    names["model"].save(str(folder / "tagger.keras"))
    want["tagger/logits"] = ops.convert_to_numpy(names["packed_logits"])

    if HAS_KERAS_HUB:
        save_keras_hub_side(folder, arrays, want)
    np.savez(folder / "tensorflow.npz", **want)
    return want


@pytest.fixture(scope="module")
def tensorflow_side(tmp_path_factory):
    """The folder the JAX side reads, and what TensorFlow computed."""
    folder = tmp_path_factory.mktemp("cross_backend")
    return folder, save_tensorflow_side(folder)


@pytest.fixture(scope="module")
def results(tensorflow_side):
    folder, _ = tensorflow_side
    result = subprocess.run(
        [sys.executable, "-m", "tests.backends.cross_backend_check", str(folder)],
        capture_output=True, text=True, timeout=600, cwd=str(REPOSITORY),
        env=tool_environment(KERAS_BACKEND="jax"))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_jax_side_ran_under_jax_and_loaded_without_tensorflow(results):
    assert results["backend"] == "jax"
    # Loading the .keras files (load_model's checks included) and fit.
    assert results["tensorflow_imported"] is False


def test_a_compiled_model_saved_under_tensorflow_loads_under_jax(results):
    loaded = results["pretraining"]
    assert loaded["class"] == "BertPretrainingModel"
    assert loaded["outputs"] <= 1e-5, loaded
    assert loaded["largest_output"] > 0.1  # not a comparison of zeros
    # The optimizer's state comes along: the step count and every momentum, exactly.
    assert loaded["optimizer"] == "SGD" and loaded["iterations"] == STEPS
    assert loaded["optimizer_variables"] == 2 + 46  # step, rate; one per weight
    assert loaded["optimizer_difference"] == 0.0


def test_fit_under_jax_takes_tensorflows_steps(tensorflow_side, results):
    _, want = tensorflow_side
    fit = results["fit"]
    assert len(fit["logs"]) == STEPS
    assert fit["log_difference"] <= 1e-4, fit
    want_losses = step_losses([{"loss": loss} for loss in want["logs/loss"]])
    np.testing.assert_allclose(fit["step_losses"], want_losses, rtol=0, atol=1e-4)
    # The comparison could fail: each step moved the next batch's loss by ten
    # times the tolerance or more, and JAX's own initial weights give
    # another first loss.
    assert want_losses[0] == pytest.approx(want["untrained_losses"][0], abs=1e-6)
    moved = np.abs(np.array(want_losses[1:]) - want["untrained_losses"][1:])
    assert moved.min() > 1e-3, moved
    assert abs(fit["own_initial_loss"] - want_losses[0]) > 1e-2


def test_a_model_needing_an_unregistered_class_is_one_line(tensorflow_side, results):
    folder, _ = tensorflow_side
    errors = results["missing_class"]
    assert errors["tagger"] == (
        f"{folder / 'tagger.keras'}: needs the custom object "
        f"'docs>PackedTokenClassifier', which is not registered in this process "
        f"(import the module that defines it)")
    # The file checks, with TensorFlow's messages and without it.
    assert errors["folder"] == (f"{folder} is a folder, not a .keras file (a SavedModel "
                                f"export loads with tf.saved_model.load)")
    assert errors["not_keras"] == (f"{folder / 'batches.npz'}: a Keras model file must "
                                   f"end in .keras")


def test_the_docs_classifier_saved_under_tensorflow_loads_under_jax(results):
    tagger = results["tagger"]
    assert tagger["class"] == "PackedTokenClassifier"
    assert tagger["outputs"] <= 1e-5, tagger


def test_the_docs_page_runs_under_jax_and_its_claims_hold(results):
    docs = results["docs"]
    assert docs["blocks"] == [0, 1, 2, 3, 5]  # 4 and 6 export SavedModels
    assert docs["shapes"] == [[1, 16, 5], [2, 16, 5]]
    assert docs["packed_a"] <= 1e-5 and docs["packed_b"] <= 1e-5, docs
    assert docs["trained_packed_b"] <= 1e-5, docs
    assert docs["one_sequence_b"] > 1e-3  # the check above could fail
    losses = docs["losses"]
    assert len(losses) == 5 and losses[-1] < 0.8 * losses[0], losses
    assert docs["restored"] == 0.0
    assert docs["classifier"] == "BertClassifierModel"
    assert docs["classifier_optimizer"] == "Adam"
    assert docs["classifier_logits"][1:] == [3, 2]  # [B, D, L]


@pytest.mark.skipif(not HAS_KERAS_HUB, reason="keras-hub is an optional extra: "
                    "pip install -e '.[keras-hub]'")
def test_keras_hub_weights_load_under_jax_as_under_tensorflow(results):
    hub = results["keras_hub"]
    assert hub["backbone"] == "BertBackbone"
    num_layers = TINY_CONFIG.num_hidden_layers
    assert hub["loaded"] == 5 + 16 * num_layers + 2 and hub["unused"] == []
    assert len(hub["missing"]) == 7  # the pre-training heads
    assert hub["outputs"] <= 1e-5, hub
    assert hub["way_back"] == 0.0
