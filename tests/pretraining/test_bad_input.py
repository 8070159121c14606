"""run_pretraining.py on bad input: one clear last line, exit status 1, no traceback,
nothing written that looks like a finished run.

The runs are made by one module-scoped fixture, one after the other, each in
this process (`tests.tool_runs.run_main`: the script's ``__main__`` with its own
argv, flags, output and exit status), with TensorFlow's graph optimizer off
(seconds of CPU a run that trains; no check here is about it).
"""

import json
import os
import re
import shutil
import socket

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.pretraining.run import run_pretraining
from tests.conftest import write_unpacked_dataset
from tests.pretraining.tiny_runs import CONFIG, P, S, options
from tests.tool_runs import ToolResult, run_main

pytestmark = pytest.mark.slow

UNPACKED = RecordFormat.unpacked(S, P)


def _flags(config_file, output_dir, input_file):
    """Two updates of 200 rows, records in file order: every record of a 400-record
    file is read, the second half by the second update."""
    return [f"--bert_config_file={config_file}", f"--output_dir={output_dir}",
            f"--input_file={input_file}", "--do_train", "--batching=padded",
            f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
            "--train_batch_size=200", "--num_train_steps=2", "--num_warmup_steps=0",
            "--iterations_per_loop=1", "--log_every_n_steps=1",
            "--save_checkpoints_steps=0", "--shuffle_buffer_size=1", "--seed=0",
            "--nojit_compile"]


def _write_examples(path, arrays, *, missing_feature=None, at_record=None):
    """One tf.train.Example per row; record `at_record` lacks `missing_feature`."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row in range(len(arrays["input_ids"])):
            features = {}
            for name, values in arrays.items():
                if row == at_record and name == missing_feature:
                    continue
                features[name] = (
                    tf.train.Feature(float_list=tf.train.FloatList(value=values[row]))
                    if values.dtype == np.float32 else
                    tf.train.Feature(int64_list=tf.train.Int64List(value=values[row])))
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=features)).SerializeToString())


def _trained_twice(config_file, packed_file, output_dir):
    """In this process: two updates, checkpoints ckpt-1 and ckpt-2."""
    return options(config_file, output_dir, do_train=True, input_file=packed_file,
                   num_train_steps=2, save_checkpoints_steps=1, iterations_per_loop=1,
                   log_every_n_steps=1, jit_compile=False)


def _resumed(config_file, output_dir, packed_file):
    """The tool's flags that resume a run of `_trained_twice` (the same values)
    to a third update, a checkpoint each."""
    return [f"--bert_config_file={config_file}", f"--output_dir={output_dir}",
            f"--input_file={packed_file}", "--do_train", f"--max_seq_length={S}",
            f"--max_predictions_per_seq={P}", "--train_batch_size=4",
            "--num_train_steps=3", "--save_checkpoints_steps=1",
            "--iterations_per_loop=1", "--seed=3", "--shuffle_buffer_size=50",
            "--nojit_compile"]


def _run(*args, **kwargs) -> tuple:
    """A command line of run_pretraining.py, run by the fixture once every
    input is written (`tests.tool_runs.run_main`'s arguments)."""
    return args, kwargs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, config_file, unpacked_files, packed_files,
         grappler_off_for_module):
    root = tmp_path_factory.mktemp("bad_input")
    arrays = record_files.read_arrays(write_unpacked_dataset(
        root / "source", num_files=1, per_file=400, seed=7)[0], UNPACKED)
    files = {name: root / f"{name}.tfrecord" for name in ("truncated", "no_feature",
                                                           "big_id", "segment_2")}
    record_files.write_arrays(str(files["truncated"]), arrays)
    with open(files["truncated"], "r+b") as handle:  # cut inside a record near 320
        handle.truncate(int(os.path.getsize(files["truncated"]) * 0.8) + 7)
    _write_examples(files["no_feature"], arrays, missing_feature="next_sentence_labels",
                    at_record=290)
    big_ids = dict(arrays, input_ids=arrays["input_ids"].copy())
    big_ids["input_ids"][300, 3] = CONFIG.vocab_size + 1000
    record_files.write_arrays(str(files["big_id"]), big_ids)
    segments = dict(arrays, segment_ids=arrays["segment_ids"].copy())
    segments["segment_ids"][290, 5] = 2  # a third token type, for type_vocab_size 2
    record_files.write_arrays(str(files["segment_2"]), segments)
    one_type = root / "one_type.json"
    CONFIG.__class__(**{**CONFIG.to_dict(), "type_vocab_size": 1}).to_json_file(
        str(one_type))
    a_file = root / "a_file"
    a_file.write_text("not a folder")
    locked = root / "locked"
    locked.mkdir()
    lock = {"host": socket.gethostname(), "pid": os.getpid(), "started": "today"}
    (locked / ".lock").write_text(
        '{"host": "%s", "pid": %d, "started": "today"}' % (lock["host"], lock["pid"]))
    good = unpacked_files[0]
    runs = {name: _run(*_flags(config_file, root / f"out_{name}", files[name]))
            for name in files}
    runs["one_type"] = _run(*_flags(one_type, root / "out_one_type", good))
    runs["output_is_a_file"] = _run(*_flags(config_file, a_file, good))
    runs["output_under_a_file"] = _run(*_flags(config_file, a_file / "sub", good))
    runs["output_in_use"] = _run(*_flags(config_file, locked, good))

    # A run with two checkpoints, the last one truncated, resumed by the tool.
    # The run is trained once and copied for the other two cases: its files name
    # no folder of their own (checkpoint paths are relative).
    damaged = root / "damaged"
    run_pretraining(_trained_twice(config_file, packed_files[0], damaged))
    damaged_state, full_disk = root / "damaged_state", root / "full_disk"
    for copy in (damaged_state, full_disk):
        shutil.copytree(damaged, copy)
    data_file = next((damaged / "checkpoints").glob("ckpt-2.data-*"))
    with open(data_file, "r+b") as handle:
        handle.truncate(os.path.getsize(data_file) // 2)
    runs["damaged_checkpoint"] = _run(*_resumed(config_file, damaged, packed_files[0]))
    # The same, with the state file (`checkpoint`) damaged: resumed from ckpt-2.
    state_file = damaged_state / "checkpoints" / "checkpoint"
    state_file.write_text(state_file.read_text()[:40])
    written = {path.name: path.read_bytes()
               for path in (damaged_state / "checkpoints").glob("ckpt-*")}
    runs["damaged_state"] = _run(*_resumed(config_file, damaged_state, packed_files[0]))
    # A disk that fills up at the second checkpoint (about 2 MB each here).
    runs["full_disk"] = _run(*_resumed(config_file, full_disk, packed_files[0]),
                             max_file_bytes=1_000_000)
    results = {name: run_main("run_pretraining.py", *args, **kwargs)
               for name, (args, kwargs) in runs.items()}
    results["damaged_state_files"] = written
    return root, files, lock, results


def _check_one_line(result: ToolResult, pattern: str) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) < 15, result.stderr
    assert re.fullmatch(pattern, result.last_line), result.last_line


def _nothing_finished(output_dir) -> None:
    assert not (output_dir / "train_summary.json").exists()
    assert not list(output_dir.glob("model.ckpt-*"))


def test_a_truncated_file_is_named_with_its_record(runs):
    root, files, _, results = runs
    _check_one_line(results["truncated"],
                    rf"run_pretraining: {re.escape(str(files['truncated']))}: record 3\d\d "
                    rf"is corrupt \(the file ends inside it\)")
    _nothing_finished(root / "out_truncated")


def test_a_record_missing_a_feature_is_named(runs):
    root, files, _, results = runs
    _check_one_line(results["no_feature"],
                    rf"run_pretraining: {re.escape(str(files['no_feature']))}: record 290 "
                    rf"has no feature 'next_sentence_labels'")
    _nothing_finished(root / "out_no_feature")


def test_every_token_id_is_checked_not_only_the_first_records(runs):
    # Record 300: beyond the 256 records per file checked before training.
    root, files, _, results = runs
    _check_one_line(results["big_id"],
                    rf"run_pretraining: {re.escape(str(files['big_id']))} record 300: "
                    rf"token id 6000 is out of range for vocab_size 5000 of "
                    rf"--bert_config_file")
    _nothing_finished(root / "out_big_id")


def test_every_segment_id_is_checked_against_the_token_types(runs):
    root, files, _, results = runs
    _check_one_line(results["segment_2"],
                    rf"run_pretraining: {re.escape(str(files['segment_2']))} record 290: "
                    rf"segment id 2 is out of range for type_vocab_size 2 of "
                    rf"--bert_config_file")
    _nothing_finished(root / "out_segment_2")
    # Two-segment records, a config of one token type: refused before training.
    _check_one_line(results["one_type"],
                    r"run_pretraining: .*unpacked-000.tfrecord record \d+: segment id 1 is "
                    r"out of range for type_vocab_size 1 of --bert_config_file")
    record = int(re.search(r"record (\d+)", results["one_type"].last_line)[1])
    assert record < 256  # among the records checked before anything is built
    _nothing_finished(root / "out_one_type")


def test_an_output_dir_that_cannot_be_a_folder_is_named(runs):
    root, _, _, results = runs
    a_file = re.escape(str(root / "a_file"))
    _check_one_line(results["output_is_a_file"],
                    rf"run_pretraining: --output_dir={a_file} is a file, not a folder")
    _check_one_line(results["output_under_a_file"],
                    rf"run_pretraining: --output_dir={a_file}/sub cannot be created "
                    rf"\(\w+Error: .+\)")
    assert (root / "a_file").read_text() == "not a folder"


def test_a_second_run_on_an_output_dir_in_use_is_refused_naming_the_first(runs):
    root, _, lock, results = runs
    locked = root / "locked"
    _check_one_line(results["output_in_use"],
                    rf"run_pretraining: --output_dir={re.escape(str(locked))} is in use by "
                    rf"pid {lock['pid']} on host {re.escape(lock['host'])} \(started "
                    rf"today\); wait for it or remove {re.escape(str(locked / '.lock'))}")
    assert (locked / ".lock").exists()  # the holder's lock is left alone
    assert sorted(p.name for p in locked.iterdir()) == [".lock"]


def test_a_damaged_checkpoint_is_named_with_the_one_to_fall_back_to(runs, config_file,
                                                                   packed_files):
    root, _, _, results = runs
    checkpoints = root / "damaged" / "checkpoints"
    _check_one_line(results["damaged_checkpoint"],
                    rf"run_pretraining: checkpoint {re.escape(str(checkpoints / 'ckpt-2'))} "
                    rf"is damaged \(IndexError: Read less bytes than requested\); delete "
                    rf"{re.escape(str(checkpoints / 'ckpt-2'))}\.\* to resume from "
                    rf"{re.escape(str(checkpoints / 'ckpt-1'))}")
    # Doing what it says resumes from ckpt-1.
    for path in checkpoints.glob("ckpt-2.*"):
        path.unlink()
    summary = run_pretraining(_trained_twice(config_file, packed_files[0],
                                             root / "damaged"))
    assert (summary["train"]["start_step"], summary["train"]["final_step"]) == (1, 2)


def test_a_damaged_state_file_resumes_from_the_newest_checkpoint(runs):
    root, _, _, results = runs
    result, written = results["damaged_state"], results["damaged_state_files"]
    checkpoints = root / "damaged_state" / "checkpoints"
    assert result.returncode == 0, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "rewrote it" in line]
    assert len(said) == 1, result.stderr[-3000:]
    assert said[0].endswith(f"{checkpoints / 'checkpoint'} cannot be read: rewrote it "
                            f"from the 2 checkpoints there; resuming from the newest, "
                            f"{checkpoints / 'ckpt-2'}")
    summary = json.loads((root / "damaged_state" / "train_summary.json").read_text())
    assert (summary["train"]["start_step"], summary["train"]["final_step"]) == (2, 3)
    # The checkpoints of the earlier run are there, unchanged.
    assert {name: (checkpoints / name).read_bytes() for name in written} == written


def test_a_full_disk_while_saving_a_checkpoint_is_one_line(runs):
    root, _, _, results = runs
    checkpoints = root / "full_disk" / "checkpoints"
    _check_one_line(results["full_disk"],
                    rf"run_pretraining: cannot save checkpoint ckpt-3 in "
                    rf"{re.escape(str(checkpoints))} \(File too large\); "
                    rf"{re.escape(str(checkpoints / 'ckpt-2'))} is intact: a run resumes "
                    rf"from it")
    assert sorted(p.name for p in checkpoints.iterdir() if "ckpt-3" in p.name) == []
    assert tf.train.get_checkpoint_state(str(checkpoints)).model_checkpoint_path \
        .endswith("ckpt-2")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_output_dir_that_is_not_writable_is_named(tmp_path, config_file,
                                                     unpacked_files):
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    try:
        with pytest.raises(ValueError, match=f"--output_dir={re.escape(str(read_only))} "
                                             f"is not writable"):
            run_pretraining(options(config_file, read_only, do_train=True,
                                    input_file=unpacked_files[0], batching="padded"))
    finally:
        read_only.chmod(0o755)
        shutil.rmtree(read_only)
