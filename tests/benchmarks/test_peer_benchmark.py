"""benchmarks/peer_benchmark.py runs on a tiny config, and says so when keras-hub is missing."""

import importlib.util

import pytest

from tests.conftest import REPOSITORY, forked_run, run_tools_forked
from tests.graph_options import GRAPPLER_OFF

pytestmark = pytest.mark.slow

TINY = ("--num_layers=1", "--hidden_size=32", "--num_heads=2", "--intermediate_size=64",
        "--vocab_size=2000", "--batch_size=2", "--sequence_length=128",
        "--max_predictions_per_row=20", "--repetitions=1")

#: What each run imports beyond the server's imports (`tests.conftest.forked_run`).
IMPORTS = GRAPPLER_OFF + ("tests.benchmarks.benchmark_paths",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both tests' runs of the script, each forked from the session's process that
    imported TensorFlow once (seconds of CPU a process), with the graph optimizer
    off (no check here is about it), as `python benchmarks/peer_benchmark.py ARGS` runs:
    `tests.forked_tools`, `tests.benchmarks.benchmark_paths`. (the tiny run's
    folder, its ToolResult, the missing keras-hub run's ToolResult)"""
    tiny, missing = tmp_path_factory.mktemp("tiny"), tmp_path_factory.mktemp("missing")
    # A keras_hub that fails to import, first on the path.
    (missing / "keras_hub.py").write_text("raise ImportError('no keras_hub here')\n")
    results = run_tools_forked([
        # Uncompiled: XLA is not what is checked here, the script's section is.
        forked_run("benchmarks/peer_benchmark.py", *TINY, "--nojit_compile",
                   f"--write_markdown={tiny / 'BENCHMARKS.md'}", tmp_path=tiny,
                   imports=IMPORTS),
        forked_run("benchmarks/peer_benchmark.py", *TINY, tmp_path=missing,
                   env={"PYTHONPATH": f"{missing}:{REPOSITORY}"}, imports=IMPORTS)],
        preload=("tensorflow",))
    return tiny, *results


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
                     "step time (float32, no XLA, CPU)", "`jit_compile=False`"):
        assert expected in text, expected


def test_missing_keras_hub_is_one_clear_message(runs):
    _, _, result = runs
    assert result.returncode == 1
    assert result.last_line == ("peer_benchmark: keras-hub is not installed; install it "
                                "with pip install -e '.[keras-hub]'")
