"""The packing report end to end, as a user runs it."""

import json

import pytest

from tests.conftest import run_tool


def _run(*flags, cwd):
    return run_tool("data_prep.packing_report", *flags, cwd=cwd)


@pytest.fixture
def histogram_file(tmp_path):
    rng = __import__("numpy").random.default_rng(0)
    counts = rng.integers(0, 50, size=64).tolist()
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"name": "small", "max_sequence_length": 64,
                                "counts": counts}))
    return path, sum(counts)


def test_report_table_plot_and_json(tmp_path, histogram_file):
    path, sequences = histogram_file
    plot, summary = tmp_path / "report.png", tmp_path / "report.json"
    result = _run(f"--histogram={path}", "--max_sequences_per_pack=3",
                  "--algorithms=all", f"--plot={plot}", f"--output_json={summary}",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("algorithm"))
    for column in ("packs", "padding tokens", "efficiency %", "packing factor",
                   "time s", "gap to LP bound"):
        assert column in header
    rows = {line.split()[0]: line.split() for line in lines
            if line.split() and line.split()[0] in
            ("none", "greedy", "bfd", "spfhp", "lpfhp", "nnlshp", "optimal")}
    assert set(rows) == {"none", "greedy", "bfd", "spfhp", "lpfhp", "nnlshp", "optimal"}
    assert rows["none"][1] == f"{sequences:,}"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    document = json.loads(summary.read_text())
    plans = {p["algorithm"]: p for p in document["plans"]}
    assert plans["none"]["num_packs"] == sequences
    assert rows["optimal"][-1] == str(plans["optimal"]["num_packs"]
                                      - document["lp_lower_bound_packs"])
    assert plans["optimal"]["num_packs"] <= min(p["num_packs"] for p in plans.values())


def test_a_subset_of_algorithms_reports_the_lp_gap_when_asked(tmp_path, histogram_file):
    path, _ = histogram_file
    result = _run(f"--histogram={path}", "--algorithms=spfhp,lpfhp", "--lp_bound",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    spfhp = next(line for line in result.stdout.splitlines() if line.startswith("spfhp"))
    assert spfhp.split()[-1] != "-"


def test_heuristics_alone_compute_no_lp_bound(tmp_path, histogram_file):
    # The bound is column generation: minutes on a long-context histogram,
    # where the heuristics take a second.
    path, _ = histogram_file
    summary = tmp_path / "report.json"
    result = _run(f"--histogram={path}", "--algorithms=bfd", f"--output_json={summary}",
                  cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "LP lower bound not computed (--lp_bound)" in result.stdout
    bfd = next(line for line in result.stdout.splitlines() if line.startswith("bfd"))
    assert bfd.split()[-1] == "-"
    assert json.loads(summary.read_text())["lp_lower_bound_packs"] is None


@pytest.mark.parametrize("flags, message", [
    (["--histogram=/nonexistent/h.json"], "--histogram: histogram '/nonexistent/h.json'"),
    (["--algorithms=spfhp,magic"], "--algorithms: unknown magic"),
    (["--max_sequences_per_pack=0"], "max_sequences_per_pack must be an integer >= 1"),
    (["--max_seq_length=10"], "sequences longer than max_sequence_length=10"),
    (["--max_sequence_length=10"], "sequences longer than max_sequence_length=10"),
])
def test_bad_flags_fail_cleanly_without_output(tmp_path, histogram_file, flags, message):
    path, _ = histogram_file
    args = [f"--histogram={path}", f"--plot={tmp_path / 'out.png'}", *flags]
    if flags[0].startswith("--histogram"):
        args = [flags[0], f"--plot={tmp_path / 'out.png'}"]
    result = _run(*args, cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.png").exists()


def test_the_histogram_flag_is_required(tmp_path):
    result = _run(cwd=tmp_path)
    assert result.returncode != 0
    assert "--histogram" in result.stderr


def test_the_papers_histograms_are_found_by_name(tmp_path):
    result = _run("--histogram=squad_1_1_384", "--algorithms=optimal", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "squad_1_1_384 (the paper's, installed with packed_bert_tf): 88,641 sequences, "
        "15,249,479 tokens; max 384 tokens and 3 sequences per pack")
    assert "optimal    40,195" in result.stdout
