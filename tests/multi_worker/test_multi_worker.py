"""--distribution_strategy=multi_worker_mirrored with real worker processes on
127.0.0.1 (TF_CONFIG, reserved ports), against one process with 2 replicas
(`tests.multi_worker.workers`): run_pretraining.py.

Every global batch holds the same rows in both (records are shared between
replicas, not processes: `packed_bert_tf.data.inputs.pretraining_dataset.pretraining_dataset`),
and dropout draws the same masks per replica, so the weights agree (dropout
stays on).
"""

import json
import os
import pathlib
import re
import signal
import time

import pytest
import tensorflow as tf

from tests.multi_worker.workers import (
    MULTI,
    finish_all,
    killed_at_the_end,
    max_difference,
    reserve_ports,
    run_both_ways,
    start_workers,
    tf_config,
    weights,
    worker_folder,
)
from tests.pretraining.tiny_runs import P, S
from tests.tool_runs import finish_tool, one_line_error_problems, start_tool

pytestmark = pytest.mark.slow

#: Updates x micro-batches: valid whether the step flags count updates or
#: micro-batches (multiples of --steps_per_update=2).
STEPS = 12
#: How long a surviving worker is given to notice a killed peer and exit (a
#: deadline against a hang on a busy machine; it notices within seconds).
FAILURE_DEADLINE = 300
#: --cluster_timeout_seconds of the runs whose peers never come.
CONNECT_SECONDS = 5


def pretraining_flags(config_file, files, output_dir, *, evaluate=True, **overrides) -> list:
    values = dict(bert_config_file=config_file, input_file=",".join(files),
                  eval_input_file=",".join(files), output_dir=output_dir,
                  max_seq_length=S, max_predictions_per_seq=P, train_batch_size=4,
                  eval_batch_size=8, learning_rate=1e-3, num_train_steps=STEPS,
                  num_warmup_steps=2, save_checkpoints_steps=2, iterations_per_loop=2,
                  log_every_n_steps=2, steps_per_update=2, seed=3, shuffle_buffer_size=50,
                  cluster_timeout_seconds=120)
    values.update(overrides)
    return ["--do_train", *(["--do_eval"] if evaluate else []), "--nojit_compile",
            *(f"--{name}={value}" for name, value in values.items())]


@pytest.fixture(scope="module")
def pretraining(tmp_path_factory, config_file, packed_files):
    """Two workers and one process of 2 replicas, the same run."""
    root = tmp_path_factory.mktemp("multi_worker")
    # Evaluations during training every 40 sequences (about 4 updates) and at
    # the end, and MLPerf's log, written by the chief alone. One loop per evaluation
    # interval and checkpoints at the evaluations alone, not every update: each
    # loop and save costs every process CPU, and no check here is about them
    # (the killed run saves every 2 steps).
    results = run_both_ways("run_pretraining.py", lambda name: (
        pretraining_flags(config_file, packed_files, str(root / name),
                          eval_interval_samples=40, eval_at_end=True,
                          iterations_per_loop=STEPS,
                          save_checkpoints_steps=STEPS,
                          mlperf_log_file=str(root / f"{name}.mlperf.log"))))
    return {"root": root, **results}


def test_two_workers_end_with_the_weights_of_one_process_with_two_replicas(pretraining):
    root = pretraining["root"]
    two, one = (weights(root / name / f"model.ckpt-{STEPS}")
                for name in ("two_workers", "one_process"))
    assert max_difference(two, one) <= 1e-5
    summaries = [json.loads((root / name / "train_summary.json").read_text())
                 for name in ("two_workers", "one_process")]
    assert [s["replicas"] for s in summaries] == [2, 2]
    assert summaries[0]["train"]["sequences"] == summaries[1]["train"]["sequences"]


def test_evaluations_during_training_agree_and_the_chief_alone_logs(pretraining):
    root = pretraining["root"]
    two, one = (json.loads((root / name / "train_summary.json").read_text())["train"]
                ["evaluations"] for name in ("two_workers", "one_process"))
    assert len(two) >= 2 and [e["step"] for e in two] == [e["step"] for e in one]
    assert [e["samples_count"] for e in two] == [e["samples_count"] for e in one]
    for a, b in zip(two, one):
        assert abs(a["masked_lm_accuracy"] - b["masked_lm_accuracy"]) <= 1e-6
    lines = (root / "two_workers.mlperf.log").read_text().splitlines()
    keys = [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in lines]
    assert keys.count("run_start") == 1 and keys.count("eval_accuracy") == len(two)


def test_the_two_workers_log_holds_the_values_used_and_passes_mlperfs_checker(
        pretraining, tmp_path):
    from tests.pretraining.mlperf_logs import compliance_check, mllog_lines

    root = pretraining["root"]
    summary = json.loads((root / "two_workers" / "train_summary.json").read_text())
    values = {line["key"]: line["value"] for line in mllog_lines(
        root / "two_workers.mlperf.log")}
    one = {line["key"]: line["value"] for line in mllog_lines(
        root / "one_process.mlperf.log")}
    assert values["seed"] == 3
    assert values["gradient_accumulation_steps"] == 2  # --steps_per_update
    assert values["global_batch_size"] == 4 * 2 * round(summary["packing_factor"])
    assert values["opt_learning_rate_training_steps"] == STEPS
    assert values["train_samples"] == int(summary["train"]["sequences"])
    # The same run: the same values (accuracies agree to 1e-6, above).
    different = {key for key in values if values[key] != one.get(key)}
    assert different <= {"submission_platform", "eval_accuracy"}, different
    for name in ("two_workers", "one_process"):
        result = compliance_check(root / f"{name}.mlperf.log", tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_evaluation_record_is_read_once_across_the_workers(pretraining, packed_files):
    stats = json.loads((pathlib.Path(packed_files[0]).parent / "packing_stats.json")
                       .read_text())
    for name in ("two_workers", "one_process"):
        results = json.loads((pretraining["root"] / name / "eval_results.json").read_text())
        assert results["sequences"] == stats["sequences"]
    for index, result in enumerate(pretraining["workers"]):
        for kind in ("training", "evaluation"):
            assert (f"{kind} input pipeline {index} feeds replicas [{index}] of 2: "
                    f"{len(packed_files)} files, sharded by file") in result.stderr


def test_only_the_chief_writes_into_the_output_folder(pretraining):
    output_dir = pretraining["root"] / "two_workers"
    chief, other = pretraining["workers"]
    assert sorted(path.name for path in output_dir.iterdir()) == [
        "checkpoints", "eval_results.json", f"model.ckpt-{STEPS}.data-00000-of-00001",
        f"model.ckpt-{STEPS}.index", "train", "train_summary.json", "trajectory.json"]
    assert f"saved checkpoint {output_dir}" in chief.stderr
    assert str(output_dir) not in other.stderr.split("its own files go to")[1]
    assert not worker_folder(other).exists()  # removed at the end
    assert len(list((output_dir / "train").iterdir())) == 1  # one events file


def test_a_killed_worker_stops_the_other_and_a_restart_resumes(pretraining, config_file,
                                                               packed_files, tmp_path):
    output_dir = tmp_path / "killed"
    # Without evaluations (they change no weight): each worker traces no evaluation.
    flags = pretraining_flags(config_file, packed_files, str(output_dir), evaluate=False) + [
        f"--distribution_strategy={MULTI}"]
    first_checkpoint = output_dir / "checkpoints" / "ckpt-2.index"
    with killed_at_the_end(start_workers("run_pretraining.py", flags)) as (chief, other):
        deadline = time.monotonic() + 400
        while not first_checkpoint.exists():
            assert chief.poll() is None and time.monotonic() < deadline, \
                chief.communicate()[1][-3000:]
            time.sleep(0.02)
        os.kill(other.pid, signal.SIGKILL)
        result = finish_tool(chief, timeout=FAILURE_DEADLINE)
    assert not one_line_error_problems(result, "run_pretraining", "worker 1 stopped",
                                       max_lines=10_000), result.stderr[-3000:]
    assert re.fullmatch(
        r"run_pretraining: worker 0 of 2: the cluster failed: worker 1 stopped \((no "
        r"heartbeat|connection reset by peer|socket closed|broken pipe|connection refused|"
        r"its address refuses connections)\); restart every worker to resume from the "
        rf"last checkpoint in "
        rf"{re.escape(str(output_dir))}", result.last_line), result.last_line
    saved = tf.train.latest_checkpoint(str(output_dir / "checkpoints"))
    assert int(saved.rsplit("-", 1)[1]) < STEPS  # killed mid-run

    # Restarted without --seed: every worker takes the one the run was started with.
    unseeded = [flag for flag in flags if not flag.startswith("--seed=")]
    with killed_at_the_end(start_workers("run_pretraining.py", unseeded)) as processes:
        chief_result, other_result = finish_all(processes)
    assert f"resumed from {saved}" in chief_result.stderr
    for result in (chief_result, other_result):
        assert f"--seed=3: the seed {output_dir} was started with" in result.stderr
    resumed = weights(output_dir / f"model.ckpt-{STEPS}")
    uninterrupted = weights(pretraining["root"] / "two_workers" / f"model.ckpt-{STEPS}")
    assert max_difference(resumed, uninterrupted) <= 1e-5


def test_workers_without_a_seed_take_the_one_the_chief_drew(config_file, packed_files,
                                                            tmp_path):
    output_dir = tmp_path / "unseeded"
    flags = [flag for flag in pretraining_flags(
        config_file, packed_files, str(output_dir), evaluate=False, num_train_steps=2,
        save_checkpoints_steps=2, iterations_per_loop=2) if not flag.startswith("--seed=")]
    with killed_at_the_end(start_workers(
            "run_pretraining.py", [*flags, f"--distribution_strategy={MULTI}"])) as processes:
        results = finish_all(processes)
    drawn = [re.findall(r"drew --seed=(\d+) \(pass it to repeat this run\)", result.stderr)
             for result in results]
    assert len(drawn[0]) == 1 and drawn[0] == drawn[1], [r.stderr[-2000:] for r in results]
    record = json.loads((output_dir / "trajectory.json").read_text())
    assert record["segments"][-1]["values"]["--seed"] == int(drawn[0][0])


def _bad_runs(config_file, packed_files, root):
    """Name -> (processes, expected text of the last line)."""
    flags = [*pretraining_flags(config_file, packed_files, str(root / "out"),
                                cluster_timeout_seconds=CONNECT_SECONDS),
             f"--distribution_strategy={MULTI}"]

    def alone(index):  # the other worker of the cluster never starts
        return start_workers("run_pretraining.py", flags, indices=[index])

    def one(*more_flags, tf_config_value):
        return [start_tool("run_pretraining.py", *flags, *more_flags,
                           env={"TF_CONFIG": tf_config_value}, grappler_off=True)]

    return {
        "not_json": (one(tf_config_value="{'cluster': "), "TF_CONFIG is not JSON"),
        "no_such_task": (one(tf_config_value=tf_config(["127.0.0.1:1", "127.0.0.1:2"], 2)),
                         "TF_CONFIG: task 'worker' 2 is not in the cluster (2 worker)"),
        "indivisible": (one("--train_batch_size=6", tf_config_value=tf_config(
            [f"127.0.0.1:{p}" for p in reserve_ports(4)], 0)),
                        ("--train_batch_size=6 is not a multiple of the 4 workers of "
                         "TF_CONFIG")),
        "chief_alone": (alone(0), ("worker 0 of 2 could not connect to the cluster of "
                                   "TF_CONFIG (127.0.0.1:")),
        "worker_alone": (alone(1), "worker 1 of 2 could not connect"),
    }


def test_bad_clusters_end_with_one_line(config_file, packed_files, tmp_path):
    runs = _bad_runs(config_file, packed_files, tmp_path)
    with killed_at_the_end([p for processes, _ in runs.values() for p in processes]):
        for name, (processes, expected) in runs.items():
            result = finish_tool(processes[0], timeout=CONNECT_SECONDS + 300)
            assert not one_line_error_problems(result, "run_pretraining", expected,
                                               max_lines=40), (name, result.stderr[-3000:])
            if name in ("chief_alone", "worker_alone"):
                assert f"within {CONNECT_SECONDS} s: start every worker" in \
                    result.last_line
    # Refused before anything was made: the chief never made --output_dir.
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
