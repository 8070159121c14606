"""benchmarks/peer_benchmark.py runs on a tiny config, and says so when keras-hub is missing."""

import pytest

from tests.conftest import REPOSITORY, run_tool

pytestmark = pytest.mark.slow

TINY = ("--num_layers=1", "--hidden_size=32", "--num_heads=2", "--intermediate_size=64",
        "--vocab_size=2000", "--batch_size=2", "--sequence_length=128",
        "--max_predictions_per_row=20", "--repetitions=1")


def test_tiny_config_writes_a_section(tmp_path):
    pytest.importorskip("keras_hub", reason="keras-hub is an optional extra: "
                        "pip install -e '.[keras-hub]'")
    markdown = tmp_path / "BENCHMARKS.md"
    # Uncompiled: XLA is not what is checked here, the script's section is.
    result = run_tool("benchmarks/peer_benchmark.py", *TINY, "--nojit_compile",
                      f"--write_markdown={markdown}", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    text = markdown.read_text()
    assert "<!-- peer_benchmark:begin -->" in text and "<!-- peer_benchmark:end -->" in text
    for expected in ("Command: `python benchmarks/peer_benchmark.py --num_layers=1",
                     "--mixed_precision=none", "Machine: ", "Date: ", "| 1 | wall |",
                     "| 1 | CPU |", "policy `float32`",
                     "step time (float32, no XLA, CPU)", "`jit_compile=False`"):
        assert expected in text, expected


def test_missing_keras_hub_is_one_clear_message(tmp_path):
    # A keras_hub that fails to import, first on the path.
    (tmp_path / "keras_hub.py").write_text("raise ImportError('no keras_hub here')\n")
    result = run_tool("benchmarks/peer_benchmark.py", *TINY, tmp_path=tmp_path,
                      env={"PYTHONPATH": f"{tmp_path}:{REPOSITORY}"})
    assert result.returncode == 1
    assert result.last_line == ("peer_benchmark: keras-hub is not installed; install it "
                                "with pip install -e '.[keras-hub]'")
