"""Trainer under MirroredStrategy on 2 logical CPUs equals one device (subprocesses)."""

import json

import pytest

from tests.conftest import forked_run, run_tools_forked

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results():
    """`tests.training.distributed_training_check`'s two checks (one
    MirroredStrategy a process), each in a child forked from one process that
    imported TensorFlow once."""
    check = "tests.training.distributed_training_check"
    outputs = {}
    for result in run_tools_forked(
            [forked_run(check), forked_run(check, "run_pretraining")],
            preload=["tensorflow"],
            timeout=900):  # as run_json_check's: minutes on a loaded machine
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.update(json.loads(result.stdout.strip().splitlines()[-1]))
    return outputs


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
