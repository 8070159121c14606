"""The packed models under ``KERAS_BACKEND=jax`` and ``KERAS_BACKEND=torch``:
packed equals unpacked per sequence, and one sequence never moves another,
as under TensorFlow.

The backend is chosen when Keras is imported, so the checks run in one
subprocess per backend for the whole module
(tests/backends/equivalence_check.py); the tests below read its results.
Under PyTorch the bits check runs eagerly only (in ``torch.no_grad``):
``torch.compile`` would add 20-45 s of CPU (see
`tests.backends.equivalence_check.forward_passes`).
"""

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.backends.jax_environment import jax_environment
from tests.tool_runs import REPOSITORY, tool_environment

pytestmark = pytest.mark.slow


def backend(name, label, install):
    """The backend ``name`` as a parameter, skipped where its package is missing."""
    return pytest.param(name, marks=pytest.mark.skipif(
        importlib.util.find_spec(name) is None,
        reason=f"{label} is not installed ({install}, part of the test extra)"))


MODELS = pytest.mark.parametrize("name", ["pretraining", "squad", "classifier"])
#: The gradient tolerance of the TensorFlow tests (test_packed_equivalence.py,
#: test_bert_squad.py, test_bert_classifier.py).
GRADIENT_TOLERANCE = 1e-5
#: The forward passes of the bits check, per backend.
FORWARD_PASSES = {"jax": ["eager", "jit"], "torch": ["eager"]}


@pytest.fixture(scope="module", params=[
    backend("jax", "JAX", "pip install 'jax[cpu]'"),
    backend("torch", "PyTorch", "pip install torch==2.13.0")])
def results(request):
    result = subprocess.run(
        [sys.executable, "-m", "tests.backends.equivalence_check"],
        capture_output=True, text=True, timeout=600, cwd=str(REPOSITORY),
        env=jax_environment() if request.param == "jax"
        else tool_environment(KERAS_BACKEND=request.param))
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert results["backend"] == request.param
    return results


def test_the_models_run_without_tensorflow(results):
    assert results["tensorflow_imported"] is False


@MODELS
def test_packed_outputs_equal_unpacked_bert_per_sequence(results, name):
    assert results[name]["outputs"] <= 1e-5, results[name]
    assert results[name]["largest_output"] > 0.1  # not a comparison of zeros


@MODELS
def test_packed_losses_and_gradients_equal_unpacked(results, name):
    losses = results[name]["losses"]
    assert losses and max(losses.values()) <= 1e-5, losses
    assert results[name]["gradients"] < GRADIENT_TOLERANCE


def test_pretraining_losses_of_both_normalisations_and_accuracies(results):
    losses, accuracies = results["pretraining"]["losses"], results["pretraining"]["accuracies"]
    assert len(losses) == 7 and len(accuracies) == 4  # compute_loss, 3 losses x 2
    assert max(accuracies.values()) <= 1e-6, accuracies


def test_changing_one_sequence_leaves_the_others_bit_for_bit_unchanged(results):
    bits = results["pretraining"]["bits"]
    assert list(bits) == FORWARD_PASSES[results["backend"]]
    for mode, counts in bits.items():
        assert counts == {"changed_others": 0, "unchanged_targets": 0, "sequences": 6}, mode


def test_both_ablations_differ(results):
    # Each far beyond the 1e-5 the packed model keeps: the checks above could fail.
    ablations = results["pretraining"]["ablations"]
    assert ablations["none"] <= 1e-5
    assert ablations["no_block_diagonal_mask"] > 1e-3
    assert ablations["positions_along_the_row"] > 1e-2
