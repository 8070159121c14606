"""Trainer under MirroredStrategy on 2 logical CPUs equals one device (subprocesses)."""

import pytest

from tests.tool_runs import run_json_check

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results():
    """`tests.training.distributed_training_check`'s two checks, each in a
    fresh interpreter of its own (one MirroredStrategy a process), each with
    its own time limit (minutes on a loaded machine)."""
    check = "tests.training.distributed_training_check"
    return {**run_json_check("-m", check, timeout=900),
            **run_json_check("-m", check, "run_pretraining", timeout=900)}


@pytest.mark.parametrize("case", ["lamb", "lamb_clip_per_micro_batch"])
def test_mirrored_updates_equal_single_device_updates(results, case):
    # Two LAMB updates of 2 accumulated micro-batches per replica, clipping
    # active: clipping after the replica sum (of the update, or of each
    # micro-batch) makes them equal.
    result = results[case]
    assert result["replicas"] == 2
    assert result["weights"] < 1e-4
    assert result["sequences"] == result["want_sequences"]


def test_the_distributed_step_is_traced_once(results):
    assert results["lamb"]["traces"] == 1
    assert results["lamb_clip_per_micro_batch"]["traces"] == 1


def test_a_whole_run_under_the_mirrored_strategy_reads_every_eval_record_once(results):
    run = results["run_pretraining"]
    assert run["replicas"] == 2 and run["final_step"] == 4 and run["traces"] == 1
    # 90 records in batches of 8 (4 per replica): the last step half empty.
    assert run["eval_sequences"] == 90
    assert 0 <= run["masked_lm_accuracy"] <= 1
