"""Global normalisers under MirroredStrategy (2 logical CPUs, in a subprocess)."""


import pytest

from tests.tool_runs import run_json_check

pytestmark = pytest.mark.slow  # MirroredStrategy and XLA in a subprocess


@pytest.fixture(scope="module")
def errors():
    return run_json_check("-m", "tests.models.distributed_loss_check")


@pytest.mark.parametrize("per_sequence", [False, True])
def test_global_normaliser_makes_the_split_irrelevant(errors, per_sequence):
    # Replica 0 holds 2 sequences, replica 1 holds 6: summed over replicas,
    # loss and gradients equal the single-device batch.
    error = errors[f"per_sequence={per_sequence},global=True"]
    assert error["loss"] < 1e-5 and error["gradients"] < 1e-5


@pytest.mark.parametrize("per_sequence", [False, True])
def test_per_replica_normaliser_would_depend_on_the_split(errors, per_sequence):
    error = errors[f"per_sequence={per_sequence},global=False"]
    assert error["loss"] > 0.1 and error["gradients"] > 0.1


def test_fit_under_the_strategy_takes_the_single_device_step(errors):
    assert errors["fit_sgd_step"] < 1e-3


def test_xla_per_replica_step_with_precomputed_global_normalisers(errors):
    error = errors["xla_per_replica"]
    assert error["loss"] < 1e-5 and error["gradients"] < 1e-5
