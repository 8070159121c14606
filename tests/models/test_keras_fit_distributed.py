"""model.fit under MirroredStrategy (2 logical CPUs, in a subprocess), float32 and
mixed_bfloat16, and the export of the mirrored model, for every model of
tests.models.model_cases.MODEL_CASES."""

import pytest

from tests.models.model_cases import MODEL_CASES
from tests.tool_runs import run_json_check

pytestmark = pytest.mark.slow  # MirroredStrategy fits and exports in a subprocess

CASES = pytest.mark.parametrize("case", MODEL_CASES, ids=[c.name for c in MODEL_CASES])


@pytest.fixture(scope="module")
def results():
    return run_json_check("-m", "tests.models.keras_fit_check")


@CASES
def test_fit_on_two_replicas_takes_the_single_device_step(results, case):
    # Replica 0 holds 2 sequences, replica 1 holds 6 (see keras_fit_check.py):
    # the global normalisers make the replicas' summed step the whole batch's.
    # 1e-3: float32 steps recovered from weights (see
    # test_keras_fit.test_one_fit_step_is_the_trainers_step) and two replicas
    # summing in another order; normalising per replica is off by more than 0.1
    # (test_distributed_loss.py).
    result = results[case.name]
    assert result["fit_step_error"] < 1e-3
    assert result["reported_loss_error"] < 1e-5  # fit reports the global loss


@CASES
def test_fit_on_two_replicas_under_mixed_bfloat16(results, case):
    result = results[case.name]
    losses = result["mixed_losses"]
    assert losses[-1] < losses[0], losses
    assert result["mixed_variable_dtypes"] == ["float32"]
    assert result["mixed_serving_output_dtypes"] == ["float32"]


@CASES
def test_xla_under_two_replicas_is_refused_with_one_line(results, case):
    assert results[case.name]["jit_compile_error"] == (
        f"{case.model_class.__name__}.compile(jit_compile=True) under a strategy of 2 "
        f"replicas: Keras would XLA-compile the cross-replica sums, which fails; use "
        f"jit_compile=False (or 'auto'), or packed_bert_tf.training.trainer.Trainer for "
        f"XLA on several replicas")


@CASES
def test_a_mirrored_model_exports_for_serving(results, case):
    assert results[case.name]["export_error"] <= 1e-6
    assert results[case.name]["export_variables_distributed"] is False
