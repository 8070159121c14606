"""benchmarks/batching_benchmark.py runs: plans and scaling on small histograms."""

import json

from tests.tool_runs import run_main


def test_plan_and_scaling_parts_write_a_section_and_a_plot(tmp_path):
    peaked = [0] * 4 + [3] * 40 + [1] * 19 + [30]  # lengths 5..64, a peak at 64
    for name, counts in (("tiny_a", peaked), ("tiny_b", peaked[::-1][:60])):
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"counts": counts, "max_sequence_length": len(counts)}))
    markdown, plot = tmp_path / "BENCHMARKS.md", tmp_path / "scaling.png"
    result = run_main(
        "benchmarks/batching_benchmark.py",
        f"--histograms={tmp_path / 'tiny_a.json'},{tmp_path / 'tiny_b.json'}",
        "--measure=false", "--plan_sequences=3000", "--pool_sizes=32,256",
        "--max_accelerators=64", f"--plot={plot}", f"--write_markdown={markdown}",
        env={"MPLBACKEND": "Agg"})
    assert result.returncode == 0, result.stderr[-3000:]
    text = markdown.read_text()
    assert "<!-- batching_benchmark:begin -->" in text
    # The header every benchmark writes (benchmarks/common.py: section_header).
    for expected in ("Command: `python benchmarks/batching_benchmark.py --histograms=",
                     "Flags in effect: `--histograms=", "--num_layers=1 --hidden_size=128",
                     "Machine: ", "Date: "):
        assert expected in text, expected
    for expected in ("| tiny_a | padded |", "| tiny_b | packed (optimal, D = 3) |",
                     "| tiny_a | un-padding, tokens |", "N = 64 |", "![speed-up"):
        assert expected in text, expected
    assert plot.stat().st_size > 10_000
