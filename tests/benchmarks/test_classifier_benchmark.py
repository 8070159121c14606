"""benchmarks/classifier_benchmark.py runs: one shape, a tiny model, one chunk,
uncompiled, in this process with the graph optimizer off (no check here is
about it)."""

import re

import pytest

from tests.tool_runs import run_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


def test_the_benchmark_writes_its_section(tmp_path):
    markdown = tmp_path / "BENCHMARKS.md"
    result = run_main(
        "benchmarks/classifier_benchmark.py", "--shapes=single", "--num_layers=1",
        "--hidden_size=32", "--num_heads=2", "--intermediate_size=64", "--batch_size=8",
        "--chunks=1", "--steps_per_chunk=2", "--wordpiece_vocab_size=1000",
        # XLA is not what is checked here: the script's figures and section are.
        "--nojit_compile",
        f"--write_markdown={markdown}", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    text = markdown.read_text()
    assert "<!-- classifier_benchmark:begin -->" in text
    assert "Command: `python benchmarks/classifier_benchmark.py --shapes=single" in text
    # The sentences of Python's documentation, one example each; at most 16 a row.
    row = re.search(r"\| single \| ([\d,]+) \| [\d.]+ \| \1 \(([\d.]+) %\) \| ([\d,]+) "
                    r"\(([\d.]+) %\) \| ([\d.]+) \|", text)
    assert row, text
    examples, packed_rows = (int(row.group(i).replace(",", "")) for i in (1, 3))
    assert examples > 10_000 and float(row.group(2)) > 50  # mostly padding unpacked
    assert abs(float(row.group(5)) - examples / packed_rows) < 1e-3
    assert "AdamW, no XLA;" in text
    assert "| pair |" not in text and "at most 16 examples per row" in text
