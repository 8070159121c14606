"""Trainer under MirroredStrategy on 2 logical CPUs equals one device (subprocess)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "tests.training.distributed_training_check"],
        cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_mirrored_updates_equal_single_device_updates(results):
    # Two LAMB updates of 2 accumulated micro-batches per replica, clipping
    # active: clipping after the replica sum makes them equal.
    result = results["lamb"]
    assert result["replicas"] == 2
    assert result["weights"] < 1e-4
    assert result["sequences"] == result["want_sequences"]


def test_the_distributed_step_is_traced_once(results):
    assert results["lamb"]["traces"] == 1
