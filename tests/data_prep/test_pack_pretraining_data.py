"""pack_pretraining_data and verify_packing end to end, as a user runs them."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that

from data_prep.process_tree import descendants
from packed_bert_tf import filesystem
from packed_bert_tf.data.packed.pretraining_records import pack_records, unpack_records
from packed_bert_tf.data.preparation import beam_packing
from packed_bert_tf.data.records import record_files, tensorflow_records
from packed_bert_tf.data.records.packing_verification import infer_record_format, verify_packing
from packed_bert_tf.packing import PackAssignment
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH, write_unpacked_dataset
from tests.tool_runs import (
    ToolResult,
    ctrl_c_in_terminal,
    run_main,
    start_in_terminal,
    start_tool,
    tool_command,
    tool_environment,
)

pytestmark = pytest.mark.slow

# Fast, single-process Beam for the error cases; the default (multi-process)
# runner is exercised by the first test.
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

#: The line the tool prints (stderr, not a terminal) every 10 s of packing.
PROGRESS_LINE = re.compile(
    r"packing, written: [0-9.,]+ MB, [0-9.,]+ MB/s, ([0-9]+ min )?[0-9]+ s")


def _pack(unpacked, output_dir, tmp_path, *extra):
    return run_main("data_prep.pack_pretraining_data",
                    *_pack_arguments(unpacked, output_dir, *extra), tmp_path=tmp_path)


def _pack_arguments(unpacked, output_dir, *extra):
    return [f"--input_file={','.join(unpacked)}", f"--output_dir={output_dir}",
            "--num_output_shards=2", f"--max_seq_length={SMALL_SEQ_LENGTH}",
            f"--max_predictions_per_seq={SMALL_PREDICTIONS}", *extra]


@pytest.fixture(scope="module")
def packed_runs(tmp_path_factory, unpacked_files):
    """Two default (multi-process) runs at once: with default flags as a user
    runs the tool, and with --verbosity=1 and -X importtime. The second is also
    the running run a second run into its folder is refused by: its workers
    are held (stopped) while that one starts (`_refused_while_held`).

    Returns the folder, the two runs' ToolResults, and the refused run's with
    the pid of the verbose run."""
    tmp_path = tmp_path_factory.mktemp("packed")
    quiet = subprocess.Popen(
        tool_command("data_prep.pack_pretraining_data",
                     *_pack_arguments(unpacked_files, tmp_path / "out")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=tool_environment(tmp_path))
    # -X importtime lists the launching process's imports (not the workers').
    verbose = start_tool("data_prep.pack_pretraining_data",
                         *_pack_arguments(unpacked_files, tmp_path / "verbose"),
                         "--verbosity=1", tmp_path=tmp_path,
                         python_options=("-X", "importtime"))
    # Its stderr (imports, Beam's logging) is read meanwhile: a full pipe
    # would stop the run.
    stderr = []
    reader = threading.Thread(target=lambda: stderr.append(verbose.stderr.read()),
                              daemon=True)
    reader.start()
    try:
        first_line = verbose.stdout.readline()
        refused = _refused_while_held(verbose, first_line, unpacked_files,
                                      tmp_path / "verbose", tmp_path)
        rest = verbose.stdout.read()
        verbose.wait(timeout=300)
        reader.join(timeout=60)
    finally:
        if verbose.poll() is None:
            verbose.kill()
    verbose_pid = verbose.pid
    verbose = ToolResult(verbose.returncode, first_line + rest, "".join(stderr))
    stdout, stderr = quiet.communicate(timeout=300)
    return (tmp_path, ToolResult(quiet.returncode, stdout, stderr), verbose,
            (refused, verbose_pid))


def _refused_while_held(first, first_line, unpacked_files, output_dir, tmp_path):
    """Runs the tool into the output folder of `first`, a default run whose
    first line of stdout was `first_line`, while `first`'s workers are stopped;
    the refused run's ToolResult."""
    assert first_line.startswith("packing 3 files")  # the lock is held
    workers, deadline = [], time.monotonic() + 120
    try:
        while not workers:
            assert first.poll() is None and time.monotonic() < deadline
            workers = list(descendants(first.pid))
            time.sleep(0.005)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        return _pack(unpacked_files, output_dir, tmp_path, "--overwrite", *IN_MEMORY)
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass


@pytest.fixture(scope="module")
def packed_dir(packed_runs):
    tmp_path, result, _, _ = packed_runs
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "out", result.stdout


def test_a_default_run_prints_a_few_lines_of_its_own(packed_runs):
    _, result, _, _ = packed_runs
    assert result.returncode == 0, result.stderr[-3000:]
    # Nothing but the tool's progress, printed only when a run takes 10 s (a
    # loaded machine's).
    assert [line for line in result.stderr.splitlines()
            if not PROGRESS_LINE.fullmatch(line)] == [], result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stdout
    assert lines[0].startswith("packing 3 files (") and lines[1].startswith("packed 900 ")


def test_verbosity_brings_back_beam_and_tensorflow_detail(packed_runs):
    tmp_path, _, verbose, _ = packed_runs
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert len(verbose.stderr.splitlines()) > 50
    assert "sdk_worker" in verbose.stderr  # Beam's workers' logging
    assert "Packing 3 files into 2 shards" in verbose.stderr  # the tool's own log
    for shard in ("part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"):
        assert (tmp_path / "verbose" / shard).read_bytes() == \
            (tmp_path / "out" / shard).read_bytes()


def test_the_launching_process_never_imports_tensorflow(packed_runs):
    # Seconds of start-up saved: only the workers read and write records.
    _, _, verbose, _ = packed_runs
    imports = [line.rsplit("|", 1)[-1].strip() for line in verbose.stderr.splitlines()
               if line.startswith("import time:")]
    assert "apache_beam" in imports  # the listing is there
    assert not [name for name in imports if name.split(".")[0] == "tensorflow"]


def test_pack_writes_shards_and_stats(packed_dir, unpacked_files):
    output_dir, stdout = packed_dir
    names = sorted(os.listdir(output_dir))
    assert names == ["packing_stats.json", "part-00000-of-00002.tfrecord",
                     "part-00001-of-00002.tfrecord"]
    stats = json.loads((output_dir / "packing_stats.json").read_text())
    assert stats["sequences_in"] == stats["sequences_out"] == 900
    assert sum(stats["records_per_shard"]) == stats["packs"]
    assert abs(stats["packing_factor"] - 900 / stats["packs"]) < 1e-12
    assert stats["max_masked_tokens"] == SMALL_PREDICTIONS + 2
    assert stats["scope"] == "groups" and stats["plan"]["algorithm"] == "optimal"
    assert stats["efficiency"] == stats["real_tokens"] / (stats["packs"] * SMALL_SEQ_LENGTH)
    assert stats["efficiency"] > 0.98
    assert f"packed 900 sequences into {stats['packs']:,} packs" in stdout
    record_format = infer_record_format(str(output_dir / "part-00000-of-00002.tfrecord"))
    assert record_format.is_packed and record_format.max_masked_tokens == 12
    assert record_format.max_sequences_per_pack == 3


def test_verify_accepts_the_packed_set(verify_runs):
    result = verify_runs["shards"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert "OK: 900 sequences" in result.stdout


def test_same_seed_same_bytes_whatever_the_runner(packed_dir, in_memory_runs):
    output_dir, _ = packed_dir
    root, results = in_memory_runs
    result = results["again"]
    assert result.returncode == 0, result.stderr[-3000:]
    for shard in ("part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"):
        assert (root / "again" / "out" / shard).read_bytes() == \
            (output_dir / shard).read_bytes()


def _tampered_copy(packed_dir, tmp_path, edit):
    output_dir, _ = packed_dir
    path = output_dir / "part-00000-of-00002.tfrecord"
    arrays = record_files.read_arrays(str(path), infer_record_format(str(path)))
    edit(arrays)
    target = tmp_path / "tampered"
    target.mkdir()
    record_files.write_arrays(str(target / "part-00000.tfrecord"), arrays)
    (target / "part-00001.tfrecord").write_bytes(
        (output_dir / "part-00001-of-00002.tfrecord").read_bytes())
    return target


def _bad_file(folder, kind):
    paths = write_unpacked_dataset(folder / "bad", num_files=2, per_file=20, seed=3)
    if kind == "empty":
        open(paths[1], "wb").close()
    elif kind == "corrupt":
        data = bytearray(open(paths[1], "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(paths[1], "wb").write(bytes(data))
    return paths


#: Bad input to pack_pretraining_data: the input files, flags, and what the
#: error line says.
BAD_INPUTS = [
    ("ok", ["--input_file=/nonexistent/*"], "--input_file: '/nonexistent/*' matches no files"),
    ("empty", [], "unpacked-001.tfrecord: the file holds no records"),
    ("corrupt", [], "unpacked-001.tfrecord: record "),
    ("ok", [f"--max_seq_length={SMALL_SEQ_LENGTH // 2}"],
     f"unpacked-000.tfrecord: record 0 feature 'input_ids' has {SMALL_SEQ_LENGTH} values"),
    ("ok", ["--algorithm=magic"], "--algorithm='magic' is not one of"),
    ("ok", ["--num_output_shards=0"], "--num_output_shards must be >= 1"),
]

#: A run's leftovers (temporary files) in its output folder.
LEFTOVERS = ["part-00000-of-00002.tfrecord.tmp-0a1b2c3d",
             "part-00001-of-00002.tfrecord.tmp-0a1b2c3d.tmp-4e5f6a7b",
             "packing_stats.json.tmp-1234"]


def _copy_of(output_dir, folder):
    folder.mkdir(parents=True)
    for name in os.listdir(output_dir):
        (folder / name).write_bytes((output_dir / name).read_bytes())
    return folder


@pytest.fixture(scope="module")
def in_memory_runs(packed_dir, unpacked_files, tmp_path_factory):
    """The single-process (in-memory Beam) runs of the tool, each on inputs and an
    output folder of its own (``root / NAME``), one after the other in this
    process (`tests.tool_runs.run_main`). Returns ``root`` and each run's
    ToolResult by name; ``"full_disk"``'s leftovers or why no small disk could
    be mounted."""
    root = tmp_path_factory.mktemp("in_memory")
    output_dir, _ = packed_dir
    runs = {}

    def pack(name, inputs, output, *extra):
        runs[name] = ([*_pack_arguments(inputs, output, *extra), *IN_MEMORY],
                      root / name)

    for name in ("again", "overwrite", "overwrite_fails", "global", "leftovers", "full"):
        (root / name).mkdir()
    pack("again", unpacked_files, root / "again" / "out")
    for index, (kind, flags, _) in enumerate(BAD_INPUTS):
        folder = root / f"bad_{index}"
        paths = _bad_file(folder, kind)
        args = [f"--input_file={','.join(paths)}", f"--output_dir={folder / 'out'}",
                f"--max_seq_length={SMALL_SEQ_LENGTH}",
                f"--max_predictions_per_seq={SMALL_PREDICTIONS}", *IN_MEMORY]
        args = [a for a in args
                if not any(a.split("=")[0] == f.split("=")[0] for f in flags)]
        runs[f"bad_{index}"] = ([*args, *flags], folder)
    (root / "not_overwritten").mkdir()
    pack("not_overwritten", unpacked_files, output_dir)
    again = _copy_of(output_dir, root / "overwrite" / "again")
    (again / "part-00005-of-00009.tfrecord").write_bytes(b"stale")  # another run's
    (again / "notes.txt").write_text("kept")
    pack("overwrite", unpacked_files, again, "--overwrite")
    _copy_of(output_dir, root / "overwrite_fails" / "again")
    pack("overwrite_fails", _bad_file(root / "overwrite_fails", "corrupt"),
         root / "overwrite_fails" / "again", "--overwrite")
    pack("global", unpacked_files, root / "global" / "out", "--packing_scope=global")
    (root / "leftovers" / "out").mkdir()
    for name in LEFTOVERS:
        (root / "leftovers" / "out" / name).write_bytes(b"half")
    runs["leftovers"] = ([
        f"--input_file={','.join(unpacked_files)}",
        f"--output_dir={root / 'leftovers' / 'out'}", "--num_output_shards=2",
        f"--max_sequence_length={SMALL_SEQ_LENGTH}",
        f"--max_predictions_per_sequence={SMALL_PREDICTIONS}", *IN_MEMORY],
        root / "leftovers")
    full = root / "full" / "full"
    cannot_mount = _tmpfs(full, "64k")  # the shards need about 400 kB
    if not cannot_mount:
        pack("full_disk", unpacked_files, full / "out")
    try:
        results = {name: run_main("data_prep.pack_pretraining_data", *arguments,
                                  tmp_path=folder)
                   for name, (arguments, folder) in runs.items()}
        if not cannot_mount:
            results["full_disk_leftovers"] = [p for p in full.rglob("*") if p.is_file()]
    finally:
        if not cannot_mount:
            subprocess.run(["umount", str(full)], check=True)
    results["cannot_mount"] = cannot_mount
    return root, results


#: Edits of a packed shard, and what verify_packing says of the edited set.
MISMATCHES = [
    (lambda a: a["input_ids"].__setitem__((4, 1), a["input_ids"][4, 1] + 1),
     "is not in the packed set"),
    (lambda a: [a.__setitem__(k, v[1:]) for k, v in list(a.items())],
     "is not in the packed set"),
    (lambda a: [a.__setitem__(k, np.concatenate([v, v[:1]])) for k, v in list(a.items())],
     "once too often"),
    (lambda a: a["positions"].__setitem__((0, 0), 1), "positions do not restart"),
]


@pytest.fixture(scope="module")
def verify_runs(packed_dir, in_memory_runs, unpacked_files, tmp_path_factory):
    """verify_packing on the packed set (its shards; every file of its folder), on
    the globally planned set of `in_memory_runs` ("global") and on a tampered
    copy per edit of MISMATCHES (keyed by the edit's index), each run in this
    process (`tests.tool_runs.run_main`)."""
    root = tmp_path_factory.mktemp("verify")
    output_dir, _ = packed_dir
    unpacked = f"--unpacked={','.join(unpacked_files)}"
    runs = {"shards": [unpacked, f"--packed={output_dir}/part-*"],
            "every_file": [unpacked, f"--packed={output_dir}/*"],
            "global": [unpacked, f"--packed={in_memory_runs[0] / 'global' / 'out'}/part-*"]}
    for index, (edit, _) in enumerate(MISMATCHES):
        (root / str(index)).mkdir()
        target = _tampered_copy(packed_dir, root / str(index), edit)
        runs[index] = [unpacked, f"--packed={target}/*"]
    return {name: run_main("data_prep.verify_packing", *arguments, tmp_path=root)
            for name, arguments in runs.items()}


@pytest.mark.parametrize("edit, message", MISMATCHES)
def test_verify_finds_the_first_mismatch(verify_runs, edit, message):
    result = verify_runs[[e for e, _ in MISMATCHES].index(edit)]
    assert result.returncode != 0
    assert message in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("index", range(len(BAD_INPUTS)),
                         ids=[message for _, _, message in BAD_INPUTS])
def test_bad_input_fails_cleanly_and_leaves_no_output(in_memory_runs, index):
    root, results = in_memory_runs
    _, _, message = BAD_INPUTS[index]
    result = results[f"bad_{index}"]
    output_dir = root / f"bad_{index}" / "out"
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("pack_pretraining_data: ")
    assert message in last_line
    assert "[while running" not in last_line and "Traceback" not in result.stderr
    leftovers = os.listdir(output_dir) if output_dir.exists() else []
    assert leftovers == []


def test_an_earlier_run_is_not_overwritten_by_accident(packed_dir, in_memory_runs):
    output_dir, _ = packed_dir
    result = in_memory_runs[1]["not_overwritten"]
    assert result.returncode != 0
    assert "already holds" in result.stderr.splitlines()[-1]
    assert "pass --overwrite to replace" in result.stderr.splitlines()[-1]
    assert (output_dir / "packing_stats.json").exists()


def test_overwrite_replaces_an_earlier_run(packed_dir, in_memory_runs):
    # Its folder held a copy of the packed set, another run's shard and notes.txt.
    output_dir, _ = packed_dir
    root, results = in_memory_runs
    again = root / "overwrite" / "again"
    result = results["overwrite"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(os.listdir(again)) == sorted(os.listdir(output_dir) + ["notes.txt"])
    for shard in ("part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"):
        assert (again / shard).read_bytes() == (output_dir / shard).read_bytes()


def test_match_files(tmp_path):
    for name in ("b.tfrecord", "a.tfrecord", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.tfrecord").write_bytes(b"")
    files = beam_packing.match_files(f"{tmp_path}/*.tfrecord,{tmp_path}/a*")
    assert files == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    assert files == filesystem.expand_file_patterns(f"{tmp_path}/*.tfrecord,{tmp_path}/a*")
    assert beam_packing.match_files([str(tmp_path / "c.txt")]) == [str(tmp_path / "c.txt")]
    with pytest.raises(ValueError, match=r"--input_file: '.*/nothing\*' matches no files"):
        beam_packing.match_files(f"{tmp_path}/nothing*")
    with pytest.raises(ValueError, match="--input_file is empty"):
        beam_packing.match_files(" , ")


def test_more_groups_than_shards_is_refused_before_any_work(unpacked_files):
    with pytest.raises(ValueError, match=r"--packing_scope=groups writes each group of "
                                         r"input files to shards of its own: 3 groups "
                                         r"for --num_output_shards=2"):
        beam_packing.PackingJob(
            input_files=tuple(unpacked_files), output_dir="out", num_output_shards=2,
            max_seq_length=SMALL_SEQ_LENGTH, max_predictions_per_seq=SMALL_PREDICTIONS)


def test_transform_in_a_test_pipeline(tmp_path, unpacked_files):
    job = beam_packing.PackingJob(
        input_files=tuple(unpacked_files), output_dir=str(tmp_path),
        num_output_shards=4, max_seq_length=SMALL_SEQ_LENGTH,
        max_predictions_per_seq=SMALL_PREDICTIONS, algorithm="spfhp", seed=1)

    def check(stats_list):
        (stats,) = stats_list
        assert stats["sequences_out"] == 900
        assert stats["plan"]["algorithm"] == "spfhp"
        assert len(stats["records_per_shard"]) == 4

    with BeamTestPipeline(runner="FnApiRunner") as pipeline:
        stats = pipeline | beam_packing.PackPretrainingData(job)
        assert_that(stats, check)
    assert sorted(os.listdir(tmp_path))[0] == "packing_stats.json"
    shards = sorted(str(tmp_path / n) for n in os.listdir(tmp_path) if n.startswith("part-"))
    assert len(shards) == 4
    report = verify_packing(unpacked_files, shards)
    assert report.packed_sequences == report.unpacked_sequences == 900


#: sha256 of the two shards that --packing_scope=global writes of `unpacked_files`
#: (900 generated sequences): the packer's bytes, pinned. (Scope "groups"
#: groups the files by the machine's cores, so its bytes are not fixed.)
GLOBAL_SHARD_DIGESTS = ["403248631c8fde587393c6d71f765e9473793b747ddbd5dcce513cef1b3554d7",
                        "2214faff589be812ec5e2c2968b3b9533fdec7a3282de228219b67a48225e1c5"]
#: The same for the masked-LM overflow of `test_sequences_replanned_...`
#: (either scope: one input file).
OVERFLOW_SHARD_DIGESTS = ["c263f6b39c167f2e79cf3b80021db834e9bf1137b9ec81f89a9b2165230725bc",
                          "0415120485dc9312f13261253e11ff5e66e4b06c54667bf919e3b24e97412c03"]


def _shard_digests(folder):
    return [hashlib.sha256((folder / f"part-{shard:05d}-of-00002.tfrecord").read_bytes())
            .hexdigest() for shard in range(2)]


def test_the_bytes_are_pinned_and_are_the_layout_of_the_packs_they_hold(in_memory_runs,
                                                                        tmp_path):
    root, results = in_memory_runs
    assert results["global"].returncode == 0, results["global"].stderr[-3000:]
    output_dir = root / "global" / "out"
    assert _shard_digests(output_dir) == GLOBAL_SHARD_DIGESTS
    # Without the pipeline: each shard cut into its packs' sequences and laid
    # out again, pack by pack, gives the same bytes.
    for shard in sorted(output_dir.glob("part-*")):
        record_format = infer_record_format(str(shard))
        sequences, record_of = unpack_records(record_files.read_arrays(str(shard),
                                                                       record_format))
        packs = PackAssignment.from_sequences_per_pack(np.bincount(record_of),
                                                       np.arange(record_of.size))
        again = tmp_path / shard.name
        record_files.write_arrays(str(again), pack_records(sequences, packs, record_format))
        assert again.read_bytes() == shard.read_bytes()


def test_global_scope_plans_the_whole_dataset_at_once(packed_dir, in_memory_runs,
                                                       verify_runs):
    root, results = in_memory_runs
    result = results["global"]
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads((root / "global" / "out" / "packing_stats.json").read_text())
    assert stats["scope"] == "global" and "groups" not in stats["plan"]
    assert stats["sequences_in"] == stats["sequences_out"] == 900
    assert stats["efficiency"] == stats["plan"]["efficiency"]
    grouped = json.loads((packed_dir[0] / "packing_stats.json").read_text())
    # One plan for everything: never more packs than a plan per group.
    assert stats["packs"] <= grouped["packs"] <= stats["packs"] + 5
    check = verify_runs["global"]
    assert check.returncode == 0, check.stderr[-2000:]


@pytest.mark.parametrize("scope", ["groups", "global"])
def test_sequences_replanned_for_masked_overflow_are_counted(tmp_path, unpacked_files,
                                                             scope):
    from apache_beam.metrics.metric import MetricsFilter

    from packed_bert_tf.data.records import synthetic_records

    # 30 % masked: three sequences of a pack need more than the 10 slots.
    lengths = np.random.default_rng(0).integers(5, SMALL_SEQ_LENGTH // 2, 300)
    path = str(tmp_path / "masked.tfrecord")
    record_files.write_arrays(path, synthetic_records.unpacked_arrays(
        lengths, max_seq_length=SMALL_SEQ_LENGTH, max_predictions_per_seq=SMALL_PREDICTIONS,
        masked_lm_prob=0.3, vocab_size=5000))
    (tmp_path / "out").mkdir()
    job = beam_packing.PackingJob(
        input_files=(path,), output_dir=str(tmp_path / "out"),
        num_output_shards=2, max_seq_length=SMALL_SEQ_LENGTH,
        max_predictions_per_seq=SMALL_PREDICTIONS, max_masked_tokens=SMALL_PREDICTIONS,
        scope=scope)
    pipeline = BeamTestPipeline(runner="FnApiRunner")
    _ = pipeline | beam_packing.PackPretrainingData(job)
    result = pipeline.run()
    result.wait_until_finish()
    (counter,) = result.metrics().query(MetricsFilter().with_name(
        "replanned_for_masked_overflow"))["counters"]
    stats = json.loads((tmp_path / "out" / "packing_stats.json").read_text())
    assert stats["replanned_for_masked_overflow"] > 0
    assert counter.committed == stats["replanned_for_masked_overflow"]
    assert _shard_digests(tmp_path / "out") == OVERFLOW_SHARD_DIGESTS


def test_verify_skips_the_stats_beside_the_shards(verify_runs):
    result = verify_runs["every_file"]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == "skipped packing_stats.json (not records)"
    assert "OK: 900 sequences" in result.stdout and "(2 files)" in result.stdout


def test_an_interrupted_run_says_so_in_one_line_and_leaves_nothing(unpacked_files,
                                                                   tmp_path):
    runs = {}
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        output_dir = tmp_path / signal.Signals(signal_number).name
        runs[signal_number] = output_dir, subprocess.Popen(
            tool_command("data_prep.pack_pretraining_data",
                         *_pack_arguments(unpacked_files, output_dir)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=tool_environment(tmp_path))
    for signal_number, (output_dir, process) in runs.items():
        # Printed once the tool's handlers are installed, as Beam starts.
        assert process.stdout.readline().startswith("packing 3 files")
    # The workers live about a second of a run of 2 s: caught then and frozen
    # (SIGSTOP), a run cannot end before its signal reaches it.
    frozen, deadline = {}, time.monotonic() + 120
    try:
        while len(frozen) < len(runs):
            for signal_number, (output_dir, process) in runs.items():
                if signal_number in frozen:
                    continue
                assert process.poll() is None and time.monotonic() < deadline, (
                    "the run ended before its workers were seen")
                if workers := list(descendants(process.pid)):
                    for pid in workers:
                        os.kill(pid, signal.SIGSTOP)
                    frozen[signal_number] = workers
                    process.send_signal(signal_number)
            time.sleep(0.005)
        _check_interrupted_runs(runs, frozen)
    finally:
        for pid in [pid for workers in frozen.values() for pid in workers]:
            try:
                os.kill(pid, signal.SIGKILL)  # not left stopped if the tool failed
            except OSError:
                pass


def _check_interrupted_runs(runs, frozen):
    for signal_number, (output_dir, process) in runs.items():
        # Ends only once nothing holds the tool's stdout: no worker outlived it
        # (one started as the signal came used to wait for its runner forever).
        stdout, stderr = process.communicate(timeout=60)
        name = signal.Signals(signal_number).name
        assert process.returncode == 128 + signal_number, stderr
        assert stdout == ""
        assert stderr.splitlines() == [stderr.strip()]  # one line
        assert re.fullmatch(f"pack_pretraining_data: interrupted by {name}; (removed "
                            f"its [0-9]+ unfinished files from|nothing written to) "
                            f"{re.escape(str(output_dir))}\n", stderr), stderr
        assert not [p for p in output_dir.rglob("*") if p.is_file()]
        assert not _alive(frozen[signal_number])  # the tool killed its workers


def _alive(pids, timeout=30):
    """Those of `pids` still running (or stopped) after up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    if stat.read().rpartition(")")[2].split()[0] != "Z":
                        alive.append(pid)
            except OSError:
                pass  # gone
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_a_killed_runs_leftovers_go_and_the_old_flag_names_still_work(
        packed_dir, in_memory_runs):
    # Run with --max_sequence_length and --max_predictions_per_sequence on a
    # folder holding LEFTOVERS.
    root, results = in_memory_runs
    output_dir = root / "leftovers" / "out"
    result = results["leftovers"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == (
        f"removed 3 unfinished files of an interrupted run in {output_dir}")
    assert sorted(os.listdir(output_dir)) == sorted(os.listdir(packed_dir[0]))
    for shard in ("part-00000-of-00002.tfrecord", "part-00001-of-00002.tfrecord"):
        assert (output_dir / shard).read_bytes() == (packed_dir[0] / shard).read_bytes()


def test_overwrite_keeps_the_earlier_run_when_the_new_one_fails(packed_dir,
                                                                in_memory_runs):
    # A copy of the packed set, overwritten from a corrupt input file.
    output_dir, _ = packed_dir
    root, results = in_memory_runs
    again = root / "overwrite_fails" / "again"
    before = {name: (output_dir / name).read_bytes() for name in os.listdir(output_dir)}
    result = results["overwrite_fails"]
    assert result.returncode != 0
    assert "unpacked-001.tfrecord: record " in result.last_line
    assert {name: (again / name).read_bytes() for name in os.listdir(again)} == before


def _tmpfs(folder, size) -> str:
    """Mounts a small tmpfs on `folder`; why it could not (empty: mounted)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)], capture_output=True)
    if mounted.returncode:
        return f"cannot mount a small tmpfs here: {mounted.stderr.decode()[:200]}"
    return ""


def test_a_full_disk_is_one_line_and_leaves_nothing(in_memory_runs):
    # The run's output folder on a tmpfs of 64 kB: the shards need about 400 kB.
    root, results = in_memory_runs
    if results["cannot_mount"]:
        pytest.skip(results["cannot_mount"])
    full = root / "full" / "full"
    result, leftovers = results["full_disk"], results["full_disk_leftovers"]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert re.fullmatch(f"pack_pretraining_data: --output_dir: cannot write {full}/out/"
                        r"part-0000[01]-of-00002\.tfrecord\.tmp-[0-9a-f]{8}: No space "
                        r"left on device", result.last_line), result.last_line
    assert leftovers == []


@pytest.mark.parametrize("writer", ["local", "tensorflow"])
def test_write_errors_name_the_file(tmp_path, unpacked_files, monkeypatch, writer):
    import errno

    import tensorflow as tf

    if writer == "local":
        def full_disk(self, buffer, offsets):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(record_files.RecordWriter, "write_serialized", full_disk)
    else:  # what TensorFlow's writer (other filesystems) says
        def full_disk(self, buffer, offsets):
            with tensorflow_records._as_os_error():
                raise tf.errors.ResourceExhaustedError(None, None, f"{self.path}; No "
                                                                   f"space left on device")

        monkeypatch.setattr(tensorflow_records.TensorFlowRecordFile, "write_records", full_disk)
        monkeypatch.setattr(record_files, "uses_record_codec", lambda path: False)
    job = beam_packing.PackingJob(
        input_files=tuple(unpacked_files[:1]), output_dir=str(tmp_path),
        num_output_shards=1, max_seq_length=SMALL_SEQ_LENGTH,
        max_predictions_per_seq=SMALL_PREDICTIONS)
    with pytest.raises(OSError, match=f"^--output_dir: cannot write {tmp_path}/part-00000-"
                                      f"of-00001.tfrecord.tmp-x: No space left on device$"):
        beam_packing.pack_group_locally(job, 0, job.input_files, 1, ".tmp-x")
    assert os.listdir(tmp_path) == []


def test_stopping_the_workers_leaves_none_behind(tmp_path):
    # A child that keeps starting children, as Beam's `sh -c` starts its
    # python: each killed before it is frozen would leave those it started
    # meanwhile to init, alive.
    marker = f"{int(time.time() * 1000) % 100_000 + 100_000}"
    script = (
        "import os, subprocess, time\n"
        "from data_prep.process_tree import descendants, kill_descendants\n"
        f"subprocess.Popen(['sh', '-c', 'while :; do sleep {marker} & sleep 0.002; done'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "time.sleep(1)\n"
        "print(len(descendants(os.getpid())))\n"
        "kill_descendants()\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=tool_environment(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout) > 10  # the tree grew
    left = _alive([pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                   if _command_line(pid) == f"sleep {marker}"], timeout=5)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as cmdline:
            return cmdline.read().replace("\0", " ").strip()
    except OSError:
        return ""


def test_a_second_run_into_the_folder_of_a_running_one_is_refused(packed_runs,
                                                                   unpacked_files):
    # The first run (packed_runs' verbose one) is held (its workers stopped)
    # while the second starts: the second is refused, naming the first, and
    # the first ends complete.
    tmp_path, _, first, (second, first_pid) = packed_runs
    output_dir = tmp_path / "verbose"
    assert second.returncode == 1
    assert re.fullmatch(rf"pack_pretraining_data: --output_dir={re.escape(str(output_dir))}"
                        rf" is in use by pid {first_pid} on host .*; wait for it or remove "
                        rf"{re.escape(str(output_dir / '.lock'))}", second.last_line)
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(os.listdir(output_dir)) == [
        "packing_stats.json", "part-00000-of-00002.tfrecord",
        "part-00001-of-00002.tfrecord"]  # complete, and the lock gone
    report = verify_packing(unpacked_files, [str(output_dir / name)
                                             for name in sorted(os.listdir(output_dir))
                                             if name.startswith("part-")])
    assert report.packed_sequences == report.unpacked_sequences == 900


def terminal_lines(output: str) -> list[str]:
    r"""The lines a terminal shows of ``output``: the echoed ``^C``, colours and
    line clearing dropped, a line redrawn after ``\r`` shown as its last state."""
    lines = []
    for line in re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\^C", "", output).replace(
            "\r\n", "\n").split("\n"):
        shown = line.split("\r")[-1].strip()
        if shown:
            lines.append(shown)
    return lines


def test_ctrl_c_in_a_terminal_is_one_line_from_every_process(unpacked_files, tmp_path):
    # Ctrl-C reaches the tool and Beam's workers (one foreground process
    # group), typed once they run: the workers' KeyboardInterrupt is no
    # traceback or CRITICAL log line on the terminal, and the tool ends.
    output_dir = tmp_path / "out"
    process, terminal = start_in_terminal(
        "data_prep.pack_pretraining_data", *_pack_arguments(unpacked_files, output_dir),
        env={"TMPDIR": tmp_path})
    workers = set()

    def running(output):
        if "packing 3 files" in output:
            workers.update(descendants(process.pid))
        return bool(workers)

    status, output = ctrl_c_in_terminal(process, terminal, running)
    assert status == 128 + signal.SIGINT, output
    lines = [line for line in terminal_lines(output) if not PROGRESS_LINE.fullmatch(line)]
    assert len(lines) == 2, output
    assert lines[0] == f"packing 3 files (0.4 MB) into 2 shards in {output_dir} ..."
    assert re.fullmatch(f"pack_pretraining_data: interrupted by SIGINT; (removed its "
                        f"[0-9]+ unfinished files from|nothing written to) "
                        f"{re.escape(str(output_dir))}", lines[1]), output
    assert not [p for p in output_dir.rglob("*") if p.is_file()]
    assert not _alive(workers)
