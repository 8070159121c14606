"""The classifier's loss and prediction under MirroredStrategy (2 logical CPUs,
in a subprocess: see distributed_classifier_check.py)."""

import pytest

from tests.conftest import run_json_check

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results():
    return run_json_check("-m", "tests.classification.distributed_classifier_check")


def test_replicas_hold_different_numbers_of_sequences(results):
    first, second = results["sequences_per_replica"]
    assert first != second


# Tolerances as tests/squad/test_distributed.py's (XLA and threads sum in
# another order than the eager single-device reference).
@pytest.mark.parametrize("mode, gradient_tolerance", [("global", 1e-4), ("compiled", 5e-4)])
def test_summed_replica_losses_and_gradients_are_the_global_batch(results, mode,
                                                                  gradient_tolerance):
    error = results[f"train_{mode}"]
    assert error["loss"] < 1e-5 and error["gradients"] < gradient_tolerance


def test_a_per_replica_normaliser_would_be_wrong(results):
    error = results["train_local"]
    assert error["loss"] > 1e-2 and error["gradients"] > 1e-2


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_prediction_gathered_from_replicas_equals_single_device(results, mode):
    assert results["predicted_examples"] == 38
    assert results[f"predict_{mode}_max_abs_difference"] < 1e-5
