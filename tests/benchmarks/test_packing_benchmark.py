"""benchmarks/packing_benchmark.py's mixes section runs at a small size and
resumes from its file of finished cases."""

import json

import pytest

from tests.tool_runs import run_main

pytestmark = pytest.mark.slow


def test_the_mixes_section_is_written_and_resumed(tmp_path):
    markdown, finished = tmp_path / "BENCHMARKS.md", tmp_path / "mixes.jsonl"
    flags = ["benchmarks/packing_benchmark.py", "--sections=mixes",
             "--mix_names=lognormal-6,zipf", "--mix_lengths=512", "--mix_caps=2,4",
             "--mix_sequences=2000", f"--mix_resume_file={finished}",
             f"--write_markdown={markdown}"]
    result = run_main(*flags)
    # A missed target ends the run with a one-line message, after the section.
    assert result.returncode == 0 or result.last_line == "some targets were missed", \
        result.stderr[-3000:]
    rows = [json.loads(line) for line in finished.read_text().splitlines()]
    assert [(r["mix"], r["length"], r["cap"]) for r in rows] == [
        ("lognormal-6", 512, 2), ("lognormal-6", 512, 4), ("zipf", 512, 2), ("zipf", 512, 4)]
    for row in rows:
        assert row["bound"] - 1e-6 <= row["packs"] <= row["bfd_packs"]
        assert row["met"] == ("yes" if row["gap"] <= 5e-4 and row["wall"] <= row["target"]
                              else "NO")
    text = markdown.read_text()
    assert "<!-- packing_benchmark/mixes:begin -->" in text
    assert text.count("| lognormal-6 | 512 |") == 2 and text.count("| zipf | 512 |") == 2
    met = sum(r["met"] == "yes" for r in rows)
    assert f"Target met in {met} of 4 cases." in text
    # Run again: every case is read back, none solved again (same figures).
    again = run_main(*flags)
    assert again.returncode == result.returncode
    assert [json.loads(line) for line in finished.read_text().splitlines()] == rows
