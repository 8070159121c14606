"""The packing report end to end, as a user runs it.

The runs are made by one module fixture, one after the other, each in a
folder of its own, in this process (`tests.tool_runs.run_main`: each run is
the tool's ``__main__`` with its own argv, flags, output and exit status)."""

import json

import pytest

from tests.tool_runs import run_main

BAD_FLAGS = [
    (["--histogram=/nonexistent/h.json"], "--histogram: histogram '/nonexistent/h.json'"),
    (["--algorithms=spfhp,magic"], "--algorithms: unknown magic"),
    (["--max_sequences_per_pack=0"], "max_sequences_per_pack must be an integer >= 1"),
    (["--max_seq_length=10"], "sequences longer than max_sequence_length=10"),
    (["--max_sequence_length=10"], "sequences longer than max_sequence_length=10"),
    (["--time_limit=-1"], "flag --time_limit=-1: -1.0 is not a non-negative number"),
]


def _histogram_file(folder):
    rng = __import__("numpy").random.default_rng(0)
    counts = rng.integers(0, 50, size=64).tolist()
    path = folder / "small.json"
    path.write_text(json.dumps({"name": "small", "max_sequence_length": 64,
                                "counts": counts}))
    return path, sum(counts)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each case's folder (holding the small histogram, the run's working
    folder) and the run's ToolResult, by name."""
    root = tmp_path_factory.mktemp("packing_report")
    cases = {}

    def case(name, *flags):
        folder = root / name
        folder.mkdir()
        path, _ = _histogram_file(folder)
        cases[name] = folder, [flag.format(histogram=path, folder=folder) for flag in flags]

    case("report", "--histogram={histogram}", "--max_sequences_per_pack=3",
         "--algorithms=all", "--plot={folder}/report.png",
         "--output_json={folder}/report.json")
    case("lp_gap", "--histogram={histogram}", "--algorithms=spfhp,lpfhp", "--lp_bound")
    case("no_lp_bound", "--histogram={histogram}", "--algorithms=bfd",
         "--output_json={folder}/report.json")
    for index, (flags, _) in enumerate(BAD_FLAGS):
        if flags[0].startswith("--histogram"):
            case(f"bad_{index}", flags[0], "--plot={folder}/out.png")
        else:
            case(f"bad_{index}", "--histogram={histogram}", "--plot={folder}/out.png", *flags)
    case("no_histogram")
    case("by_name", "--histogram=squad_1_1_384", "--algorithms=optimal")
    case("no_time", "--histogram=squad_1_1_384", "--algorithms=optimal",
         "--max_sequences_per_pack=3", "--time_limit=0")
    return {name: (folder, run_main("data_prep.packing_report", *flags, cwd=folder))
            for name, (folder, flags) in cases.items()}


def test_report_table_plot_and_json(runs):
    folder, result = runs["report"]
    _, sequences = _histogram_file(folder)
    plot, summary = folder / "report.png", folder / "report.json"
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


def test_a_subset_of_algorithms_reports_the_lp_gap_when_asked(runs):
    _, result = runs["lp_gap"]  # --algorithms=spfhp,lpfhp --lp_bound
    assert result.returncode == 0, result.stderr
    spfhp = next(line for line in result.stdout.splitlines() if line.startswith("spfhp"))
    assert spfhp.split()[-1] != "-"


def test_heuristics_alone_compute_no_lp_bound(runs):
    # The bound is column generation: minutes on a long-context histogram,
    # where the heuristics take a second.
    folder, result = runs["no_lp_bound"]  # --algorithms=bfd
    summary = folder / "report.json"
    assert result.returncode == 0, result.stderr
    assert "LP lower bound not computed (--lp_bound)" in result.stdout
    bfd = next(line for line in result.stdout.splitlines() if line.startswith("bfd"))
    assert bfd.split()[-1] == "-"
    assert json.loads(summary.read_text())["lp_lower_bound_packs"] is None


@pytest.mark.parametrize("index", range(len(BAD_FLAGS)),
                         ids=[" ".join(flags) for flags, _ in BAD_FLAGS])
def test_bad_flags_fail_cleanly_without_output(runs, index):
    # The small histogram (unless the flags name another), --plot, the flags.
    folder, result = runs[f"bad_{index}"]
    _, message = BAD_FLAGS[index]
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (folder / "out.png").exists()


def test_the_histogram_flag_is_required(runs):
    _, result = runs["no_histogram"]
    assert result.returncode != 0
    assert "--histogram" in result.stderr


def test_the_papers_histograms_are_found_by_name(runs):
    _, result = runs["by_name"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "squad_1_1_384 (the paper's, installed with packed_bert_tf): 88,641 sequences, "
        "15,249,479 tokens; max 384 tokens and 3 sequences per pack")
    assert "optimal    40,195" in result.stdout
    assert "optimal: 40,195 packs, proven optimal (lower bound 40,195 packs)" in result.stdout


def test_the_time_limit_returns_the_best_plan_so_far_with_its_gap(runs):
    # No time at all: the best-fit decreasing seed, with the token, count and
    # long-sequence bounds (the last the best here: 39,775 packs, where the
    # token bound gives 39,713), and the gap they prove.
    _, result = runs["no_time"]
    assert result.returncode == 0, result.stderr
    assert "optimal    40,631" in result.stdout
    assert ("optimal: 40,631 packs, at most 2.1521 % above the optimum (lower bound "
            "39,775 packs); the time limit stopped the search after") in result.stdout


def test_the_optimal_plans_progress_shows_the_phase_and_the_gap():
    import io

    from data_prep.packing_report import _PlanProgress

    stream, now = io.StringIO(), [0.0]
    progress = _PlanProgress("optimal plan", stream=stream, terminal=False, interval=5,
                             clock=lambda: now[0])
    progress.report("best-fit decreasing", 334_358, None)
    now[0] = 6.0
    progress.report("LP of 1,023 length classes", 278_549.6, 278_385.1)
    now[0] = 12.0
    progress.report("rounding", 278_466.0, 278_451.3)
    assert stream.getvalue().splitlines() == [
        "optimal plan: LP of 1,023 length classes, 278,550 packs, 0.059 % above the "
        "bound 278,385.1, 6 s",
        "optimal plan: rounding, 278,466 packs, 0.005 % above the bound 278,451.3, 12 s"]
