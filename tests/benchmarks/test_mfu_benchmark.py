"""benchmarks/mfu_benchmark.py runs: a tiny model, two timed steps an arm,
uncompiled, the peak given, in this process with the graph optimizer off (no
check here is about it)."""

import re

import pytest

from tests.tool_runs import run_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


def test_the_benchmark_writes_its_section(tmp_path):
    markdown = tmp_path / "BENCHMARKS.md"
    result = run_main(
        "benchmarks/mfu_benchmark.py", "--num_layers=1", "--hidden_size=32",
        "--num_heads=2", "--intermediate_size=64", "--vocab_size=1000",
        "--sequence_length=64", "--max_predictions_per_seq=10", "--batch_size=2",
        "--steps=2", "--nojit_compile", "--peak_flops_per_second=1e9",
        f"--write_markdown={markdown}", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    text = markdown.read_text()
    assert "<!-- mfu_benchmark:begin -->" in text
    assert "Command: `python benchmarks/mfu_benchmark.py --num_layers=1" in text
    assert "N = 8,192 encoder weights" in text  # 1 x (4 x 32^2 + 2 x 32 x 64)
    assert "Peak: 1.000e+09 FLOP/s (given by --peak_flops_per_second)." in text
    rows = {}
    for arm in ("packed", "padded"):
        row = re.search(rf"\| {arm} \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \| ([\d.e+]+) \| "
                        rf"([\d.]+) \|", text)
        assert row, text
        rows[arm] = [float(value.replace(",", "")) for value in row.groups()]
        sequences, occupancy, tokens, model_flops, mfu = rows[arm]
        # Both as printed: FLOP/s to 4 significant digits, the MFU to 4 decimals.
        assert mfu == pytest.approx(model_flops / 1e9, rel=1e-3)
        # Over 6 N per real token, attention adds a little.
        assert 6 * 8192 * tokens <= model_flops * 1.001
    assert rows["padded"][0] == 2.0  # a sequence a row
    assert rows["packed"][0] > 2.0 and rows["packed"][1] > rows["padded"][1]
    ratio = re.search(r"Packed / padded: real tokens per second ([\d.]+)x, MFU ([\d.]+)x",
                      text)
    assert ratio, text
