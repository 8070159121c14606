"""benchmarks/time_to_train.py runs: a tiny model on a slice of the corpus, both runs,
figures read off their MLPerf logs, the section and the plot written.

The script runs in this process (`tests.tool_runs.run_main`); each tool it
starts (the data-prep tools, run_pretraining.py) is a process of its own, as
the benchmark times them. The packing tool runs its Beam pipeline in its own
process (``--pack_beam_options``), not in a worker process per core that
imports TensorFlow again."""

import json

import pytest

from tests.tool_runs import run_main

pytestmark = pytest.mark.slow

TINY_CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
               "intermediate_size": 64, "max_position_embeddings": 128,
               "num_attention_heads": 2, "num_hidden_layers": 1, "type_vocab_size": 2,
               "vocab_size": 1000}
THRESHOLD = 0.01


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    """One run of the script in the tiny setting; its folders and output."""
    root = tmp_path_factory.mktemp("time_to_train")
    config = root / "tiny_bert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    paths = dict(work_dir=root / "work", markdown=root / "BENCHMARKS.md",
                 plot=root / "time_to_train.png")
    args = [
        f"--work_dir={paths['work_dir']}",
        f"--write_markdown={paths['markdown']}", f"--plot={paths['plot']}",
        f"--bert_config_file={config}", "--max_documents=60", "--heldout_every=5",
        "--dupe_factor=2", "--eval_dupe_factor=3", "--num_eval_samples=64",
        "--train_batch_size=8", "--steps_per_update=3", "--num_train_steps=48",
        "--num_warmup_steps=6", "--eval_interval_samples=150", "--nojit_compile",
        f"--stop_threshold={THRESHOLD}",
        "--pack_beam_options=--direct_running_mode=in_memory"]
    result = run_main("benchmarks/time_to_train.py", *args, tmp_path=root)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((paths["work_dir"] / "report.json").read_text())
    return dict(paths, result=result, report=report)


def mllog_lines(path) -> list:
    return [json.loads(line.split(":::MLLOG ", 1)[1])
            for line in open(path) if line.startswith(":::MLLOG ")]


def test_both_runs_end_with_a_status_that_matches_their_evaluations(benchmark):
    runs = benchmark["report"]["runs"]
    assert sorted(runs) == ["packed", "unpacked"]
    for kind, run in runs.items():
        summary = json.loads(open(f"{run['output_dir']}/train_summary.json").read())["train"]
        accuracies = [e["masked_lm_accuracy"] for e in summary["evaluations"]]
        assert run["status"] == ("success" if summary["stopped_at_target"] else "aborted")
        if run["status"] == "success":  # stopped at the first evaluation at the target
            assert accuracies[-1] >= THRESHOLD > max(accuracies[:-1], default=0), kind
        else:
            assert max(accuracies) < THRESHOLD and summary["final_step"] == 48, kind


def test_samples_and_accuracies_are_those_of_the_runs_evaluations(benchmark):
    for kind, run in benchmark["report"]["runs"].items():
        summary = json.loads(open(f"{run['output_dir']}/train_summary.json").read())["train"]
        evaluations = summary["evaluations"]
        assert [e["samples"] for e in run["evaluations"]] == \
            [int(e["samples_count"]) for e in evaluations]
        assert [e["accuracy"] for e in run["evaluations"]] == \
            pytest.approx([e["masked_lm_accuracy"] for e in evaluations])
        assert run["samples"] == int(evaluations[-1]["samples_count"]) > 0
        assert run["accuracy"] == pytest.approx(evaluations[-1]["masked_lm_accuracy"])


def test_times_are_mlperfs_run_start_to_run_stop(benchmark):
    for kind, run in benchmark["report"]["runs"].items():
        lines = mllog_lines(run["mlperf_log"])
        times = {line["key"]: line["time_ms"] for line in lines}
        assert run["seconds"] == pytest.approx((times["run_stop"] - times["run_start"]) / 1000)
        assert 0 < run["evaluation_seconds"] < run["seconds"] < run["process_seconds"]
        seconds = [e["seconds"] for e in run["evaluations"]]
        assert seconds == sorted(seconds) and 0 < seconds[-1] <= run["seconds"]
        assert run["last_evaluation_seconds"] == seconds[-1]
        assert lines[-1]["key"] == "run_stop"
        assert lines[-1]["metadata"]["status"] == run["status"]


def test_the_runs_take_the_same_sequences_per_update(benchmark):
    runs, report = benchmark["report"]["runs"], benchmark["report"]
    assert runs["unpacked"]["packing_factor"] == 1.0
    assert runs["unpacked"]["micro_batches_per_update"] == 3
    assert runs["unpacked"]["global_batch_size"] == 24
    packing_factor = report["packing_stats"]["packing_factor"]
    assert runs["packed"]["packing_factor"] == pytest.approx(packing_factor)
    micro_batches = max(1, round(3 / packing_factor))
    assert runs["packed"]["micro_batches_per_update"] == micro_batches
    assert runs["packed"]["global_batch_size"] == 8 * micro_batches * max(
        1, round(packing_factor))
    assert runs["packed"]["sequences_per_update"] == pytest.approx(
        8 * micro_batches * packing_factor)


def test_the_claims_are_computed_from_the_runs(benchmark):
    runs, claims = benchmark["report"]["runs"], benchmark["report"]["claims"]
    unpacked, packed = runs["unpacked"], runs["packed"]
    assert claims["samples_ratio"] == pytest.approx(packed["samples"] / unpacked["samples"])
    assert claims["time_ratio"] == pytest.approx(packed["seconds"] / unpacked["seconds"])
    assert claims["time_bound"] == pytest.approx(1 / (0.9 * packed["packing_factor"]))
    assert claims["last_evaluation_time_ratio"] == pytest.approx(
        packed["last_evaluation_seconds"] / unpacked["last_evaluation_seconds"])
    reached = unpacked["status"] == packed["status"] == "success"
    assert claims["both_reached"] == reached
    assert claims["samples_met"] == (reached and abs(claims["samples_ratio"] - 1) <= 0.05)
    assert claims["time_met"] == (reached and claims["time_ratio"] <= claims["time_bound"])


def test_the_evaluation_text_is_held_out(benchmark):
    data = benchmark["work_dir"] / "data"
    documents = {name: [d.strip().split("\n") for d in (data / name).read_text().split("\n\n")
                        if d.strip()] for name in ("train.txt", "heldout.txt")}
    training = {sentence for document in documents["train.txt"] for sentence in document}
    # Of documents 0, 5, ..., 55 of 60, those with two sentences or more never trained on.
    assert 6 <= len(documents["heldout.txt"]) <= 12 and len(documents["train.txt"]) == 48
    assert all(len(document) >= 2 and not training.intersection(document)
               for document in documents["heldout.txt"])


def test_the_section_and_the_plot_are_written(benchmark):
    text = benchmark["markdown"].read_text()
    assert "<!-- time_to_train:begin -->" in text and "<!-- time_to_train:end -->" in text
    assert "Command: `python benchmarks/time_to_train.py --work_dir=" in text
    assert "Flags in effect: `--bert_config_file=" in text
    runs = benchmark["report"]["runs"]
    for kind, run in runs.items():
        assert f"| {kind} | {run['status']} | " in text
        assert f"| {run['samples']:,} | {run['seconds']:.1f} | " in text
    claims = benchmark["report"]["claims"]
    assert f"Samples to target, packed / unpacked: **{claims['samples_ratio']:.4f}**" in text
    assert f"Time to target, packed / unpacked: **{claims['time_ratio']:.4f}**" in text
    assert "![accuracy against samples and time](time_to_train.png)" in text
    assert benchmark["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The section is also printed.
    assert "| run | status |" in benchmark["result"].stdout
