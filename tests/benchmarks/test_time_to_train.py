"""benchmarks/time_to_train.py: its statistics on known numbers, and runs of a
tiny model on a slice of the corpus, two seeds of both arms, the figures
read off their MLPerf logs, the section and the plot written, a stopped
run resumed alone, and a run made with other flags refused.

The script runs in this process (`tests.tool_runs.run_main`); each tool it
starts (the data-prep tools, run_pretraining.py) is a process of its own, as
the benchmark times them. The packing tool runs its Beam pipeline in its own
process (``--pack_beam_options``), not in a worker process per core that
imports TensorFlow again."""

import importlib.util
import json
import math
import sys

import numpy as np
import pytest
from scipy import stats

from tests.tool_runs import REPOSITORY, defined_flags, one_line_error_problems, run_main

pytestmark = pytest.mark.slow

SCRIPT = REPOSITORY / "benchmarks" / "time_to_train.py"
TINY_CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
               "intermediate_size": 64, "max_position_embeddings": 128,
               "num_attention_heads": 2, "num_hidden_layers": 1, "type_vocab_size": 2,
               "vocab_size": 1000}
THRESHOLD = 0.01
SEEDS = (0, 1)
ARMS = ("unpacked", "packed")
RESUMED = ("1", "packed")  # the run the second benchmark resumes


# ------------------------------------------------------------------ functions
@pytest.fixture(scope="module")
def script():
    """The script as a module, for its functions (its flags defined only while
    it loads; the functions tested here do not read them)."""
    loaded = []

    def load():
        sys.path.insert(0, str(SCRIPT.parent))  # its `common`, as `python SCRIPT` has it
        try:
            spec = importlib.util.spec_from_file_location("time_to_train_functions", SCRIPT)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(SCRIPT.parent))
        loaded.append(module)

    with defined_flags(load):
        pass
    return loaded[0]


def test_fieller_interval_is_where_the_paired_t_test_stops_rejecting(script):
    unpacked, packed = [10000.0, 12000.0, 11000.0], [10400.0, 12100.0, 11800.0]
    found = script.ratio_of_means(packed, unpacked)
    assert found["ratio"] == pytest.approx(34300 / 33000, rel=1e-12) and found["n"] == 3
    assert (found["low"], found["high"]) == pytest.approx((0.963258252, 1.135885774),
                                                          rel=1e-8)
    critical = stats.t.ppf(0.975, 2)  # 4.303
    for bound, sign in ((found["low"], 1), (found["high"], -1)):
        differences = np.array(packed) - bound * np.array(unpacked)
        assert stats.ttest_1samp(differences, 0).statistic == pytest.approx(sign * critical)


def test_fieller_interval_without_spread_unbounded_and_single(script):
    assert script.ratio_of_means([1100.0] * 3, [1000.0] * 3) == dict(
        ratio=1.1, low=1.1, high=1.1, n=3)
    # Two pairs: t = 12.7, the unpacked mean is not clearly away from zero.
    wide = script.ratio_of_means([1100.0, 2200.0], [1000.0, 2000.0])
    assert (wide["low"], wide["high"]) == (-math.inf, math.inf)
    assert script.ratio_of_means([1100.0], [1000.0]) == dict(ratio=1.1, low=None, high=None,
                                                             n=1)
    with pytest.raises(ValueError, match="2 numerators and 1 denominators"):
        script.ratio_of_means([1.0, 2.0], [1.0])


def rows(pairs, *, reached=True):
    """`per_seed` rows: (packed samples, packed seconds) against 10,000 samples
    and 100 s unpacked (MLPerf's samples: the same)."""
    return [dict(seed=seed, reached=reached, unpacked_samples=10000.0,
                 unpacked_mlperf_samples=10000.0, unpacked_seconds=100.0,
                 packed_samples=samples, packed_mlperf_samples=samples,
                 packed_seconds=seconds)
            for seed, (samples, seconds) in enumerate(pairs)]


def test_claims_hold_only_as_the_issue_states(script):
    bound = 1 / (0.9 * 1.25)  # 0.8889
    tight = [(9900.0, 88.0), (10100.0, 88.0), (10000.0, 88.0)]  # samples [0.975, 1.025]
    verdict = script.claims(rows(tight), 1.25, 500)
    assert verdict["samples"]["low"] == pytest.approx(0.97516, abs=1e-5)
    assert verdict["samples"]["high"] == pytest.approx(1.02484, abs=1e-5)
    assert verdict["samples_met"] and verdict["time_met"]
    assert verdict["time"]["ratio"] == pytest.approx(0.88) and verdict["time_bound"] == \
        pytest.approx(bound)
    assert verdict["eval_interval_fraction"] == pytest.approx(0.05)
    # The interval contains 1 but is wider than [0.95, 1.05].
    wide = script.claims(rows([(9000.0, 80.0), (11000.0, 80.0), (10000.0, 80.0)]), 1.25, 500)
    assert wide["samples"]["low"] < 0.95 < 1 < 1.05 < wide["samples"]["high"]
    assert not wide["samples_met"] and wide["time_met"]
    # Within [0.95, 1.05] but not around 1.
    low = script.claims(rows([(9700.0, 80.0), (9720.0, 80.0), (9710.0, 80.0)]), 1.25, 500)
    assert 0.95 < low["samples"]["low"] < low["samples"]["high"] < 1
    assert not low["samples_met"]
    # Time just above the bound.
    slow = script.claims(rows([(samples, 100 * bound + 0.01) for samples, _ in tight]),
                         1.25, 500)
    assert slow["samples_met"] and not slow["time_met"]
    # A seed that missed the target: neither claim, the other seeds' figures kept.
    missed = script.claims(rows(tight) + rows([(10000.0, 50.0)], reached=False), 1.25, 500)
    assert (missed["seeds"], missed["seeds_reached"], missed["all_reached"]) == (4, 3, False)
    assert missed["samples"] == verdict["samples"]
    assert not missed["samples_met"] and not missed["time_met"]
    assert script.claims([], 1.25, 500)["samples"] is None


def mllog(key, time_ms, value=None, **metadata):
    return dict(key=key, value=value, time_ms=time_ms, metadata=metadata)


def curve(*points):
    """`mlperf_result`'s evaluations at (samples, accuracy)."""
    return [dict(samples=samples, accuracy=accuracy) for samples, accuracy in points]


def test_samples_to_target_are_interpolated_between_the_evaluations_around_it(script):
    # Between 2,000 (0.25) and 3,000 (0.5): 0.375 is half way.
    rising = curve((1000, 0.125), (2000, 0.25), (3000, 0.5), (4000, 0.625))
    assert script.interpolated_samples(rising, 0.375) == 2500.0
    # An evaluation exactly at the target is the crossing.
    assert script.interpolated_samples(rising, 0.5) == 3000.0
    # A dip: from the last evaluation below the target (0.125 at 2,000), not the
    # first (0.25 at 1,000, where the curve was still below it too).
    dipping = curve((1000, 0.25), (2000, 0.125), (3000, 0.625))
    assert script.interpolated_samples(dipping, 0.375) == 2500.0
    # Uneven samples, as a packed run's updates end.
    assert script.interpolated_samples(curve((13040, 0.1), (14043, 0.15)),
                                       0.12) == pytest.approx(13441.2, rel=1e-12)
    assert script.interpolated_samples(rising, 0.75) is None
    assert script.interpolated_samples([], 0.1) is None


def test_a_first_evaluation_at_the_target_is_interpolated_from_the_start(script):
    assert script.START_ACCURACY == 0.0
    first = curve((1000, 0.5), (2000, 0.625))
    assert script.interpolated_samples(first, 0.375) == 750.0  # from (0, 0.0)
    assert script.interpolated_samples(first, 0.375, start_accuracy=0.25) == 500.0
    assert script.interpolated_samples(first, 0.25, start_accuracy=0.25) == 0.0


def run_log(points, *, status="success", seconds=100.0):
    """A run's MLPerf log lines: evaluations at (samples, accuracy), then run_stop."""
    lines = [mllog("global_batch_size", 0, 48), mllog("gradient_accumulation_steps", 0, 6),
             mllog("packing_factor", 0, 1.0), mllog("run_start", 0)]
    lines += [mllog("eval_accuracy", 10 * samples, accuracy, epoch_num=samples)
              for samples, accuracy in points]
    return lines + [mllog("run_stop", 1000 * seconds, status=status)]


def test_the_samples_claim_is_judged_on_the_interpolated_samples(script):
    # Every run reaches the target 0.12 at its third evaluation; the packed
    # runs' evaluations fall a few samples later (their updates overshoot), so
    # MLPerf's samples are packed 14,043, 14,035, 14,043 against 14,016.
    logs = {0: {"unpacked": [(12000, 0.1), (13008, 0.11), (14016, 0.13)],
                "packed": [(12013, 0.1), (13040, 0.115), (14043, 0.125)]},
            1: {"unpacked": [(12000, 0.1), (13008, 0.115), (14016, 0.125)],
                "packed": [(12038, 0.1), (13036, 0.11), (14035, 0.13)]},
            2: {"unpacked": [(12000, 0.1), (13008, 0.1125), (14016, 0.1225)],
                "packed": [(12013, 0.1), (13003, 0.11), (14043, 0.13)]}}
    expected = {0: {"unpacked": 13512.0, "packed": 13541.5},
                1: {"unpacked": 13512.0, "packed": 13535.5},
                2: {"unpacked": 13764.0, "packed": 13523.0}}
    results = {}
    for seed, arms in logs.items():
        results[seed] = {}
        for arm, points in arms.items():
            result = script.mlperf_result(run_log(points, seconds=80.0 if arm == "packed"
                                                  else 100.0), [dict(started=0.0,
                                                                     log_lines=0)])
            result["interpolated_samples"] = script.interpolated_samples(
                result["evaluations"], 0.12)
            assert result["interpolated_samples"] == pytest.approx(expected[seed][arm],
                                                                   rel=1e-12)
            results[seed][arm] = result
    rows = script.per_seed(results)
    assert [row["packed_mlperf_samples"] for row in rows] == [14043, 14035, 14043]
    assert [row["unpacked_mlperf_samples"] for row in rows] == [14016] * 3
    assert [row["packed_samples"] for row in rows] == pytest.approx([13541.5, 13535.5,
                                                                     13523.0], rel=1e-12)
    verdict = script.claims(rows, 1.2, 1000)
    # MLPerf's samples: the interval excludes 1, from the overshoot alone.
    assert verdict["mlperf_samples"]["ratio"] == pytest.approx(42121 / 42048, rel=1e-12)
    assert 1 < verdict["mlperf_samples"]["low"] < verdict["mlperf_samples"]["high"] < 1.003
    # Interpolated: (13541.5 + 13535.5 + 13523) / (13512 + 13512 + 13764).
    assert verdict["samples"]["ratio"] == pytest.approx(40600 / 40788, rel=1e-12)
    assert (verdict["samples"]["low"], verdict["samples"]["high"]) == pytest.approx(
        (0.968017413, 1.024258976), rel=1e-8)
    assert verdict["samples_met"] and verdict["time_met"]
    assert verdict["eval_interval_fraction"] == pytest.approx(3000 / 40788, rel=1e-12)
    # The same rows judged on MLPerf's samples would fail the claim.
    mlperf_rows = [dict(row, packed_samples=row["packed_mlperf_samples"],
                        unpacked_samples=row["unpacked_mlperf_samples"]) for row in rows]
    assert not script.claims(mlperf_rows, 1.2, 1000)["samples_met"]
    # A run without an evaluation at the target: its seed has not reached it.
    results[2]["packed"] = dict(results[2]["packed"], status="aborted",
                                interpolated_samples=None)
    missed = script.claims(script.per_seed(results), 1.2, 1000)
    assert (missed["seeds_reached"], missed["samples_met"]) == (2, False)


def test_a_resumed_runs_time_leaves_out_the_pause(script):
    lines = [mllog("global_batch_size", 0, 24), mllog("gradient_accumulation_steps", 0, 3),
             mllog("packing_factor", 0, 1.0), mllog("run_start", 1000),
             mllog("eval_start", 2000), mllog("eval_stop", 2500),
             mllog("eval_accuracy", 2500, 0.05, epoch_num=150),
             mllog("eval_start", 3000),  # killed during the evaluation
             # Restarted at 10 s: the evaluation at 300 samples done again.
             mllog("eval_start", 12000), mllog("eval_stop", 13000),
             mllog("eval_accuracy", 13000, 0.2, epoch_num=300),
             mllog("run_stop", 14000, status="success")]
    attempts = [dict(started=0.5, log_lines=0), dict(started=10.0, log_lines=8)]
    result = script.mlperf_result(lines, attempts)
    # 13 s on the clock, less the 7 s from the line at 3 s to the restart.
    assert (result["clock_seconds"], result["seconds"], result["restarts"]) == (13.0, 6.0, 1)
    assert result["evaluations"] == [dict(samples=150, accuracy=0.05, seconds=1.5),
                                     dict(samples=300, accuracy=0.2, seconds=5.0)]
    assert result["evaluation_seconds"] == 1.5 and result["status"] == "success"
    assert (result["samples"], result["accuracy"]) == (300, 0.2)


# ------------------------------------------------------------------ runs
def arguments(root, **changed) -> list:
    values = dict(
        work_dir=root / "work", write_markdown=root / "BENCHMARKS.md",
        plot=root / "time_to_train.png", bert_config_file=root / "tiny_bert_config.json",
        max_documents=60, heldout_every=5, dupe_factor=2, eval_dupe_factor=3,
        num_eval_samples=64, seeds=",".join(map(str, SEEDS)), train_batch_size=8,
        steps_per_update=3, num_train_steps=48, num_warmup_steps=6,
        eval_interval_samples=150, jit_compile="false", save_checkpoints_steps=12,
        stop_threshold=THRESHOLD, pack_beam_options="--direct_running_mode=in_memory")
    values.update(changed)
    return [f"--{name}={value}" for name, value in values.items()]


def run_folder(root, seed, arm):
    return root / "work" / "s128" / f"seed{seed}" / arm


def mllog_lines(path) -> list:
    return [json.loads(line.split(":::MLLOG ", 1)[1])
            for line in open(path) if line.startswith(":::MLLOG ")]


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    """One run of the script in the tiny setting; its folders and output."""
    root = tmp_path_factory.mktemp("time_to_train")
    (root / "tiny_bert_config.json").write_text(json.dumps(TINY_CONFIG))
    result = run_main("benchmarks/time_to_train.py", *arguments(root), tmp_path=root)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((root / "work" / "s128" / "report.json").read_text())
    return dict(root=root, result=result, report=report,
                markdown=(root / "BENCHMARKS.md").read_text())


@pytest.fixture(scope="module")
def rerun(benchmark):
    """The benchmark again, after one run lost its ``run_stop``: the logs and
    records of every run before and after."""
    root = benchmark["root"]
    folders = {(str(seed), arm): run_folder(root, seed, arm) for seed in SEEDS for arm in ARMS}
    before = {key: ((folder / "mlperf.log").read_text(), (folder / "run.json").read_text())
              for key, folder in folders.items()}
    log = folders[RESUMED] / "mlperf.log"
    kept = log.read_text().splitlines(keepends=True)
    assert '"key": "run_stop"' in kept[-1]
    log.write_text("".join(kept[:-1]))
    result = run_main("benchmarks/time_to_train.py", *arguments(root), tmp_path=root)
    assert result.returncode == 0, result.stderr[-3000:]
    after = {key: ((folder / "mlperf.log").read_text(), (folder / "run.json").read_text())
             for key, folder in folders.items()}
    report = json.loads((root / "work" / "s128" / "report.json").read_text())
    return dict(before=before, after=after, truncated="".join(kept[:-1]), report=report,
                first_report=benchmark["report"])


def test_every_seed_runs_both_arms_in_a_folder_of_its_own(benchmark):
    runs = benchmark["report"]["runs"]
    assert sorted(runs) == ["0", "1"] and all(sorted(runs[s]) == sorted(ARMS) for s in runs)
    for seed in SEEDS:
        for arm in ARMS:
            folder = run_folder(benchmark["root"], seed, arm)
            record = json.loads((folder / "run.json").read_text())
            assert record["flags"]["seed"] == str(seed)
            assert record["flags"]["stop_threshold"] == str(THRESHOLD)
            assert "save_checkpoints_steps" not in record["flags"]  # a resume may change it
            # Every --save_checkpoints_steps=12 (the runs stop after step 12), and the last.
            assert len(list((folder / "output" / "checkpoints").glob("ckpt-*.index"))) >= 2
            assert len(record["attempts"]) == 1
            assert runs[str(seed)][arm]["mlperf_log"] == str(folder / "mlperf.log")
            lines = mllog_lines(folder / "mlperf.log")
            assert [line["value"] for line in lines if line["key"] == "seed"] == [seed]


def test_per_seed_figures_are_those_of_the_runs_logs(benchmark):
    for seed, arms in benchmark["report"]["runs"].items():
        for arm, run in arms.items():
            summary = json.loads(open(f"{run['output_dir']}/train_summary.json").read())[
                "train"]
            evaluations = summary["evaluations"]
            assert [e["samples"] for e in run["evaluations"]] == \
                [int(e["samples_count"]) for e in evaluations]
            assert [e["accuracy"] for e in run["evaluations"]] == \
                pytest.approx([e["masked_lm_accuracy"] for e in evaluations])
            assert run["samples"] == int(evaluations[-1]["samples_count"]) > 0
            assert run["status"] == ("success" if summary["stopped_at_target"]
                                     else "aborted")
            lines = mllog_lines(run["mlperf_log"])
            times = {line["key"]: line["time_ms"] for line in lines}
            assert run["seconds"] == run["clock_seconds"] == pytest.approx(
                (times["run_stop"] - times["run_start"]) / 1000)
            assert lines[-1]["key"] == "run_stop" and run["restarts"] == 0
            assert 0 < run["evaluation_seconds"] < run["seconds"]
            crossing = run["interpolated_samples"]
            if run["status"] == "success":  # after the evaluation before the last
                before = run["evaluations"][-2]["samples"] if len(run["evaluations"]) > 1 else 0
                assert before < crossing <= run["samples"]
            else:
                assert crossing is None
    rows = benchmark["report"]["per_seed"]
    assert [row["seed"] for row in rows] == list(SEEDS)
    for row in rows:
        arms = benchmark["report"]["runs"][str(row["seed"])]
        for arm in ARMS:
            assert row[f"{arm}_samples"] == arms[arm]["interpolated_samples"]
            assert row[f"{arm}_mlperf_samples"] == arms[arm]["samples"]
            assert row[f"{arm}_seconds"] == arms[arm]["seconds"]


def test_the_claims_are_computed_from_the_seeds(benchmark):
    report = benchmark["report"]
    claims, rows = report["claims"], [r for r in report["per_seed"] if r["reached"]]
    assert claims["seeds"] == 2 and claims["seeds_reached"] == len(rows)
    packing_factor = report["packing_stats"]["packing_factor"]
    assert claims["packing_factor"] == pytest.approx(packing_factor)
    assert claims["time_bound"] == pytest.approx(1 / (0.9 * packing_factor))
    if rows:
        mean = {f"{arm}_{figure}": sum(r[f"{arm}_{figure}"] for r in rows) / len(rows)
                for arm in ARMS for figure in ("samples", "mlperf_samples", "seconds")}
        assert claims["samples"]["ratio"] == pytest.approx(
            mean["packed_samples"] / mean["unpacked_samples"])
        assert claims["mlperf_samples"]["ratio"] == pytest.approx(
            mean["packed_mlperf_samples"] / mean["unpacked_mlperf_samples"])
        assert claims["time"]["ratio"] == pytest.approx(
            mean["packed_seconds"] / mean["unpacked_seconds"])
        assert claims["eval_interval_fraction"] == pytest.approx(
            150 / mean["unpacked_samples"])


def test_the_section_and_the_plot_are_written(benchmark):
    text, root = benchmark["markdown"], benchmark["root"]
    assert "<!-- time_to_train/s128 bert_config_file=" in text
    assert "### S = 128, packing factor about 1.18 (s128)" in text
    assert "Flags in effect: `--bert_config_file=" in text and "--seeds=0,1 " in text
    for seed, arms in benchmark["report"]["runs"].items():
        for arm, run in arms.items():
            crossing = run["interpolated_samples"]
            assert (f"| {seed} | {arm} | {run['status']} | 0 | "
                    f"{run['micro_batches_per_update']} | {len(run['evaluations'])} | "
                    f"{run['samples']:,} | "
                    f"{'-' if crossing is None else f'{crossing:,.0f}'} | "
                    f"{run['seconds']:.1f} | ") in text
    assert "| samples at the last evaluation (MLPerf) | samples to target (interpolated) |" \
        in text
    claims = benchmark["report"]["claims"]
    if claims["samples"] is not None:
        assert (f"Samples to target (interpolated), packed / unpacked (ratio of the means, "
                f"Fieller's interval for paired seeds): "
                f"**{claims['samples']['ratio']:.4f}**") in text
        assert (f"MLPerf's samples, packed / unpacked: "
                f"**{claims['mlperf_samples']['ratio']:.4f}**") in text
        assert f"Time to target, packed / unpacked: **{claims['time']['ratio']:.4f}**" in text
    assert "![every seed's accuracy against samples and time](time_to_train.png)" in text
    assert (root / "time_to_train.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| seed | run | status |" in benchmark["result"].stdout


def test_a_rerun_resumes_only_the_run_without_run_stop(rerun):
    for key in rerun["before"]:
        if key != RESUMED:  # read again, not rerun
            assert rerun["after"][key] == rerun["before"][key], key
    log, record = rerun["after"][RESUMED]
    assert log.startswith(rerun["truncated"]) and len(log) > len(rerun["truncated"])
    lines = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in log.splitlines()]
    assert lines[-1]["key"] == "run_stop"
    assert [line["key"] for line in lines].count("run_start") == 1
    attempts = json.loads(record)["attempts"]
    assert len(attempts) == 2
    assert attempts[1]["log_lines"] == rerun["truncated"].count(":::MLLOG ")
    seed, arm = RESUMED
    resumed = rerun["report"]["runs"][seed][arm]
    earlier = rerun["first_report"]["runs"][seed][arm]
    assert resumed["restarts"] == 1
    assert (resumed["samples"], resumed["status"]) == (earlier["samples"], earlier["status"])
    pause = attempts[1]["started"] - lines[attempts[1]["log_lines"] - 1]["time_ms"] / 1000
    assert pause > 0
    assert resumed["seconds"] == pytest.approx(resumed["clock_seconds"] - pause)
    for other_seed, arms in rerun["report"]["runs"].items():
        for other_arm, run in arms.items():
            if (other_seed, other_arm) != RESUMED:
                assert run == rerun["first_report"]["runs"][other_seed][other_arm]


def test_a_run_made_with_other_flags_is_refused(benchmark, rerun):
    root = benchmark["root"]
    result = run_main("benchmarks/time_to_train.py",
                      *arguments(root, stop_threshold=0.02), tmp_path=root)
    assert not one_line_error_problems(result, "time_to_train",
                                       "stop_threshold: 0.01 -> 0.02"), result.stderr[-2000:]
    assert "--redo_changed_runs" in result.last_line
    for key, (log, record) in rerun["after"].items():  # nothing run, nothing removed
        folder = run_folder(root, *key)
        assert ((folder / "mlperf.log").read_text(), (folder / "run.json").read_text()) == \
            (log, record)


@pytest.mark.parametrize("seeds", ["0,0", "a", "-1"])
def test_bad_seeds_are_one_line_errors(tmp_path, seeds):
    result = run_main("benchmarks/time_to_train.py", *arguments(tmp_path, seeds=seeds),
                      tmp_path=tmp_path)
    assert not one_line_error_problems(result, "time_to_train", f"--seeds={seeds}: "), \
        result.stderr[-2000:]
