import json

import pytest

from packed_bert_tf.pretraining.comparison import comparison_table, load_summary
from tests.tool_runs import one_line_error_problems, run_main, run_tool


def _summary(sequences_per_second, packing_factor, loss):
    return {"packing_factor": packing_factor, "train": {
        "final_step": 100, "sequences": 1600.0, "sequences_per_second": sequences_per_second,
        "tokens_per_second": 1000.0, "occupancy": 0.5, "final_metrics": {"loss": loss}}}


def test_the_table_gives_the_speed_up_over_the_first_run():
    table = comparison_table({"unpacked": _summary(10.0, None, 7.5),
                              "packed": _summary(19.5, 1.99, 7.4)})
    lines = table.splitlines()
    assert lines[0].split()[0] == "run" and lines[0].split()[-1] == "speed-up"
    assert lines[2].split()[-1] == "1.000" and lines[3].split()[-1] == "1.950"
    assert "1.9900" in lines[3] and "7.4000" in lines[3]
    # A summary without "steps" counted one step per update: 1600 / 100.
    assert lines[2].split()[1:5] == ["100", "100", "1,600", "16.0"]


def test_updates_and_sequences_per_update_follow_the_step_unit():
    unpacked = _summary(10.0, None, 7.5)
    unpacked["steps"] = {"unit": "micro_batch", "steps_per_update": 4,
                         "micro_batches_per_update": 4}
    packed = _summary(19.5, 2.0, 7.4)  # half the micro-batches, twice the sequences each
    packed["steps"] = {"unit": "micro_batch", "steps_per_update": 4,
                       "micro_batches_per_update": 2}
    in_updates = _summary(10.0, None, 7.5)
    in_updates["steps"] = {"unit": "update", "steps_per_update": 4,
                           "micro_batches_per_update": 4}
    lines = comparison_table({"unpacked": unpacked, "packed": packed,
                              "updates": in_updates}).splitlines()
    assert lines[0].split()[1:5] == ["steps", "updates", "sequences", "seq/update"]
    assert lines[2].split()[1:5] == ["100", "25", "1,600", "64.0"]
    assert lines[3].split()[1:5] == ["100", "25", "1,600", "64.0"]
    assert lines[4].split()[1:5] == ["100", "100", "1,600", "16.0"]


def test_an_unfinished_run_is_named(tmp_path):
    with pytest.raises(ValueError, match="no train_summary.json"):
        load_summary(str(tmp_path))
    (tmp_path / "train_summary.json").write_text(json.dumps({"eval": {}}))
    with pytest.raises(ValueError, match="did not train"):
        load_summary(str(tmp_path))


def _write_run(folder, summary_text):
    folder.mkdir(parents=True)
    (folder / "train_summary.json").write_text(summary_text)
    return folder


def test_the_tool_ends_each_bad_input_with_one_line(tmp_path):
    good = _summary(10.0, None, 7.5)
    good["train"]["history"] = [{"sequences_seen": 16.0, "loss": 7.5}]
    run = _write_run(tmp_path / "run", json.dumps(good))
    broken = _write_run(tmp_path / "broken", '{"train": {')
    foreign = _write_run(tmp_path / "foreign", json.dumps({"train": {"loss": 1.0}}))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    cases = {
        "no_folder": ([f"--runs={tmp_path / 'nothing'}"],
                      f"{tmp_path / 'nothing'}: no such run folder"),
        "unfinished": ([f"--runs={tmp_path}"],
                       f"{tmp_path}: no train_summary.json (did the run finish?)"),
        "broken_json": ([f"--runs={broken}"], f"{broken}/train_summary.json: not a JSON"),
        "foreign_json": ([f"--runs={foreign}"],
                         f"{foreign}/train_summary.json: the 'train' section lacks "
                         f"final_step"),
        "labels": ([f"--runs={run},{run}", "--labels=a"], "1 --labels for 2 --runs"),
        "same_labels": ([f"--runs={run},{run}"], "repeat: run,run; give --labels"),
        "plot_format": ([f"--runs={run}", f"--plot={tmp_path}/curves.pgn"],
                        "unknown image format 'pgn'"),
        "plot_folder": ([f"--runs={run}", f"--plot={tmp_path / 'no' / 'c.png'}"],
                        f"--plot={tmp_path / 'no' / 'c.png'}"),
        "plot_is_a_folder": ([f"--runs={run}", f"--plot={a_file.parent}"],
                             f"--plot={a_file.parent}"),
        "bad_flag": ([f"--runs={run}", "--plots=x.png"], "Unknown command line flag"),
    }
    # In this process, one after the other: the imports (matplotlib) once.
    results = [run_main("compare_runs.py", *arguments, tmp_path=tmp_path)
               for arguments, _ in cases.values()]
    for name, result in zip(cases, results):
        assert not one_line_error_problems(result, "compare_runs", cases[name][1],
                                           max_lines=1), (name, result.stderr)
    assert not list(tmp_path.rglob("*.png")) and not list(tmp_path.rglob("*.pgn"))


def test_the_tool_prints_the_table_and_draws_the_curves(tmp_path):
    runs = []
    for label, speed in (("unpacked", 10.0), ("packed", 19.5)):
        summary = _summary(speed, 1.99 if label == "packed" else None, 7.5)
        summary["train"]["history"] = [{"sequences_seen": 16.0, "loss": 7.5},
                                       {"sequences_seen": 32.0, "loss": 7.0}]
        runs.append(str(_write_run(tmp_path / label, json.dumps(summary))))
    plot = tmp_path / "curves.png"
    # A fresh process: its stderr is empty from its first line (no native log
    # lines, no warnings of its imports), which only a process of its own shows.
    result = run_tool("compare_runs.py", f"--runs={','.join(runs)}", f"--plot={plot}",
                      timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[0] == "run" and lines[3].split()[-1] == "1.950"
    assert lines[-1] == f"loss curves: {plot}" and plot.stat().st_size > 5000
    assert result.stderr == ""
