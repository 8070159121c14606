"""benchmarks/streaming_packing_benchmark.py runs: both parts, at a small size."""

import pytest

from tests.tool_runs import run_main

pytestmark = pytest.mark.slow


def test_efficiency_and_throughput_parts_write_a_section(tmp_path):
    markdown = tmp_path / "BENCHMARKS.md"
    result = run_main(
        "benchmarks/streaming_packing_benchmark.py", "--num_sequences=3000",
        "--buffer_sizes=200,10000", "--throughput_examples=300", "--throughput_repeats=2",
        f"--write_markdown={markdown}")
    # A missed target ends the run with a one-line message, after the section is written.
    assert result.returncode == 0 or result.last_line.startswith("targets missed: "), \
        result.stderr[-3000:]
    text = markdown.read_text()
    assert "<!-- streaming_packing_benchmark:begin -->" in text
    for expected in ("Command: `python benchmarks/streaming_packing_benchmark.py "
                     "--num_sequences=3000", "Flags in effect: `--num_sequences=3000 "
                     "--buffer_sizes=200,10000", "Machine: ", "Date: "):
        assert expected in text, expected
    for packer in ("streaming (ours)", "Grain first-fit", "Grain best-fit"):
        for histogram, S in (("wikipedia_512", 512), ("squad_1_1_384", 384)):
            for buffer in ("200", "10,000"):
                assert f"| {histogram} | {S} | {buffer} | {packer} |" in text
    assert "| wikipedia_512 | 512 | 10,000 | streaming (ours) |" in text
    assert text.count("| all | offline optimal plan |") == 2
    assert text.count("| all | LP bound |") == 2
    assert text.count(">= 99.5 %") == 1 and text.count(">= 98.0 %") == 1
    assert "| (b) source, `pack_dataset`, batch |" in text
    assert "| `pack_dataset` itself, 1 / (1/b - 1/a) |" in text
    assert "600 examples" in text  # 300 examples, repeated twice
