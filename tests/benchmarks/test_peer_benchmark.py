"""benchmarks/peer_benchmark.py runs on a tiny config, and says so when keras-hub is missing."""

import importlib.util
import sys
from unittest import mock

import pytest

from tests.tool_runs import run_main

pytestmark = pytest.mark.slow

TINY = ("--num_layers=1", "--hidden_size=32", "--num_heads=2", "--intermediate_size=64",
        "--vocab_size=2000", "--batch_size=2", "--sequence_length=128",
        "--max_predictions_per_row=20", "--repetitions=1")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, grappler_off_for_module):
    """Both tests' runs of the script, in this process, with the graph optimizer
    off (no check here is about it): (the tiny run's folder, its ToolResult, the
    ToolResult of a run where keras-hub cannot be imported)."""
    tiny = tmp_path_factory.mktemp("tiny")
    # Uncompiled: XLA is not what is checked here, the script's section is.
    result = run_main("benchmarks/peer_benchmark.py", *TINY, "--nojit_compile",
                      f"--write_markdown={tiny / 'BENCHMARKS.md'}", tmp_path=tiny)
    with mock.patch.dict(sys.modules, {"keras_hub": None}):  # its import fails
        missing = run_main("benchmarks/peer_benchmark.py", *TINY)
    return tiny, result, missing


def test_tiny_config_writes_a_section(runs):
    if importlib.util.find_spec("keras_hub") is None:
        pytest.skip("keras-hub is an optional extra: pip install -e '.[keras-hub]'")
    tiny, result, _ = runs
    assert result.returncode == 0, result.stderr[-3000:]
    text = (tiny / "BENCHMARKS.md").read_text()
    assert "<!-- peer_benchmark:begin -->" in text and "<!-- peer_benchmark:end -->" in text
    for expected in ("Command: `python benchmarks/peer_benchmark.py --num_layers=1",
                     "--mixed_precision=none", "Machine: ", "Date: ", "| 1 | wall |",
                     "| 1 | CPU |", "policy `float32`",
                     "### float32, no XLA, dropout 0.1, layers 1", "`jit_compile=False`"):
        assert expected in text, expected


def test_missing_keras_hub_is_one_clear_message(runs):
    _, _, result = runs
    assert result.returncode == 1
    assert result.last_line == ("peer_benchmark: keras-hub is not installed; install it "
                                "with pip install -e '.[keras-hub]'")
