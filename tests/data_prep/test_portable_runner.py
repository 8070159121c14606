"""pack_pretraining_data through Beam's portability framework, as a cluster runs it.

The pipeline is submitted to Beam's job service, and its DoFns run in SDK
worker processes started by an SDK worker pool (``--environment_type=EXTERNAL``):
three kinds of process that share no memory, none of them the test's
(`data_prep.local_portable_runner`). The output must be the default runner's,
byte for byte.
"""

import json
import os
import re
import shutil
import signal
import socket

import pytest

from data_prep.local_portable_runner import local_portable_runner
from packed_bert_tf.data.records.packing_verification import verify_packing
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH, write_unpacked_dataset
from tests.tool_runs import (
    ctrl_c_in_terminal,
    one_line_error_problems,
    run_main,
    run_tool,
    start_in_terminal,
    tool_environment,
)

pytestmark = pytest.mark.slow

TOOL = "data_prep.pack_pretraining_data"
NUM_FILES, PER_FILE, NUM_SHARDS = 4, 600, 4
#: The module of the DoFns that read and write records: imported where they run.
PIPELINE_MODULE = "packed_bert_tf.data.preparation.beam_packing"
#: Fields of packing_stats.json that are timings, not results.
TIMINGS = ("planning_seconds", "solve_time_seconds")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """A job service and an SDK worker pool; the workers log their imports
    (``PYTHONPROFILEIMPORTTIME``) to the pool's log."""
    folder = tmp_path_factory.mktemp("services")
    environment = tool_environment(folder, PYTHONPROFILEIMPORTTIME=1)
    with local_portable_runner(str(folder), environment=environment) as running:
        yield running


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """2,400 sequences in 4 files, in a folder the tests run the tool from."""
    folder = tmp_path_factory.mktemp("portable")
    write_unpacked_dataset(folder / "data", num_files=NUM_FILES, per_file=PER_FILE, seed=7)
    return folder


def _arguments(output_dir, *extra, input_file="data/unpacked-*"):
    return [f"--input_file={input_file}", f"--output_dir={output_dir}",
            f"--num_output_shards={NUM_SHARDS}", f"--max_seq_length={SMALL_SEQ_LENGTH}",
            f"--max_predictions_per_seq={SMALL_PREDICTIONS}", *extra]


def _without_timings(stats):
    stats = dict(stats, plan=dict(stats["plan"]))
    for key in TIMINGS:
        stats.pop(key, None)
        stats["plan"].pop(key, None)
    return stats


def _refusing_port() -> socket.socket:
    """A socket bound to a port of its own and not listening: connections to
    the port are refused for as long as the socket is held (a port found free
    and released could be taken by another process meanwhile)."""
    held = socket.socket()
    held.bind(("localhost", 0))
    return held


#: Runs on a service that is not there or not named: flags and the error line.
UNREACHABLE = [
    (["--runner=PortableRunner", "--job_endpoint=localhost:{port}",
      "--job_server_timeout=2"],
     "--job_endpoint=localhost:{port}: no job service answered within 2 s"),
    (["--runner=PortableRunner"], "--runner=PortableRunner needs --job_endpoint="),
    (["--runner=PortableRunner", "--job_endpoint={job_endpoint}",
      "--environment_type=EXTERNAL", "--environment_config=localhost:{port}"],
     ("--environment_config: the runner could not reach a service it needs at "
      "127.0.0.1:{port}")),
]


@pytest.fixture(scope="module")
def runs(services, dataset, tmp_path_factory):
    """The module's tool runs but those that list their imports (-X importtime
    needs a process of its own): one after the other in this process
    (`tests.tool_runs.run_main`). Returns, by name, the run's folder, its
    ToolResult and (the unreachable runs) its port."""
    root = tmp_path_factory.mktemp("runs")
    runs, folders, ports = {}, {}, {}
    for scope in ("groups", "global"):
        folder = folders[f"default_{scope}"] = root / f"default_{scope}"
        folder.mkdir()
        runs[f"default_{scope}"] = (
            _arguments(folder / "default", f"--packing_scope={scope}"), dataset, folder)

    folder = folders["failing"] = root / "failing"
    data = folder / "data"
    shutil.copytree(dataset / "data", data)
    last = data / f"unpacked-{NUM_FILES - 1:03d}.tfrecord"
    corrupt = bytearray(last.read_bytes())
    corrupt[len(corrupt) // 2] ^= 0xFF
    last.write_bytes(bytes(corrupt))
    # Two groups of two files: the first group's shards are written under
    # temporary names before the second group fails.
    runs["failing"] = (_arguments(folder / "out", "--files_per_group=2",
                                  *services.pipeline_args), folder, folder)

    held = []
    for index, (flags, _) in enumerate(UNREACHABLE):
        name = f"unreachable_{index}"
        folder = folders[name] = root / name
        folder.mkdir()
        held.append(_refusing_port())
        ports[name] = held[-1].getsockname()[1]
        values = {"port": ports[name], "job_endpoint": services.job_endpoint}
        runs[name] = ([*_arguments(folder / "out"),
                       *[flag.format(**values) for flag in flags]], dataset, folder)

    try:
        results = {name: run_main(TOOL, *arguments, cwd=cwd, tmp_path=tmp_path)
                   for name, (arguments, cwd, tmp_path) in runs.items()}
    finally:
        for port in held:
            port.close()
    return {name: (folders[name], result, ports.get(name))
            for name, result in results.items()}


@pytest.mark.parametrize("scope", ["groups", "global"])
def test_the_portable_runner_writes_the_default_runners_bytes(services, dataset,
                                                              runs, tmp_path, scope):
    folder, default, _ = runs[f"default_{scope}"]
    default_dir, portable_dir = folder / "default", tmp_path / "portable"
    # Relative paths: the SDK workers run in a folder of their own, so the tool
    # must resolve them first. -X importtime: the launching process's imports.
    portable = run_tool(TOOL, *_arguments(portable_dir, f"--packing_scope={scope}",
                                          "--verbosity=0", *services.pipeline_args),
                        cwd=dataset, tmp_path=tmp_path, python_options=("-X", "importtime"),
                        timeout=120)
    assert default.returncode == 0, default.stderr[-3000:]
    assert portable.returncode == 0, portable.stderr[-3000:]

    names = sorted(os.listdir(default_dir))
    assert sorted(os.listdir(portable_dir)) == names
    shards = [name for name in names if name.startswith("part-")]
    assert len(shards) == NUM_SHARDS
    for shard in shards:
        assert (portable_dir / shard).read_bytes() == (default_dir / shard).read_bytes()
    stats = [json.loads((folder / "packing_stats.json").read_text())
             for folder in (default_dir, portable_dir)]
    assert _without_timings(stats[1]) == _without_timings(stats[0])
    assert stats[1]["sequences_out"] == NUM_FILES * PER_FILE
    assert stats[1]["scope"] == scope
    assert f"packed 2,400 sequences into {stats[0]['packs']:,} packs" in portable.stdout
    unpacked = sorted(str(path) for path in (dataset / "data").iterdir())
    report = verify_packing(unpacked, [str(portable_dir / shard) for shard in shards])
    assert report.packed_sequences == report.unpacked_sequences == NUM_FILES * PER_FILE

    # The records were read and written in the pool's SDK worker processes,
    # by the C reader and writer: TensorFlow was imported nowhere.
    launcher_imports = [line.rsplit("|", 1)[-1].strip()
                        for line in portable.stderr.splitlines()
                        if line.startswith("import time:")]
    assert "apache_beam" in launcher_imports  # the listing is there
    assert "tensorflow" not in launcher_imports
    with open(services.worker_pool_log, errors="replace") as f:
        pool_log = f.read()
    assert "Starting worker with command" in pool_log
    assert f"| {PIPELINE_MODULE}\n" in pool_log
    assert "| tensorflow\n" not in pool_log


def test_a_failing_portable_run_removes_its_files(runs):
    # Two groups of two files, the last file corrupt: the first group's shards
    # are written under temporary names before the second group fails.
    folder, result, _ = runs["failing"]
    assert one_line_error_problems(result, "pack_pretraining_data",
                                   "unpacked-003.tfrecord: record ") == []
    assert [path for path in (folder / "out").rglob("*") if path.is_file()] == []


@pytest.mark.parametrize("flags, expected", UNREACHABLE)
def test_unreachable_services_are_one_line(services, runs, flags, expected):
    name = f"unreachable_{UNREACHABLE.index((flags, expected))}"
    folder, result, port = runs[name]
    values = {"port": port, "job_endpoint": services.job_endpoint}
    assert one_line_error_problems(result, "pack_pretraining_data",
                                   expected.format(**values)) == []
    assert not [path for path in (folder / "out").rglob("*") if path.is_file()]


def test_finalize_is_safe_to_run_again(unpacked_files, tmp_path):
    # A runner retries a step that failed part-way: the shards it renamed
    # already are found in place, the rest are renamed, the stats rewritten.
    from packed_bert_tf.data.preparation import beam_packing

    job = beam_packing.PackingJob(
        input_files=tuple(unpacked_files), output_dir=str(tmp_path),
        num_output_shards=2, max_seq_length=SMALL_SEQ_LENGTH,
        max_predictions_per_seq=SMALL_PREDICTIONS, files_per_group=3)
    result = beam_packing.pack_group_locally(job, 0, job.input_files, 1, ".tmp-retry")
    first = result["shards"][0]
    os.rename(first["path"], job.shard_path(first["shard"]))  # the first attempt's work
    stats = beam_packing.finalize(job, result["shards"], result["summary"], ".tmp-retry")
    assert sorted(os.listdir(tmp_path)) == ["packing_stats.json",
                                            "part-00000-of-00002.tfrecord",
                                            "part-00001-of-00002.tfrecord"]
    again = beam_packing.finalize(job, result["shards"], result["summary"], ".tmp-retry")
    assert again == stats and stats["sequences_out"] == 900
    assert sorted(os.listdir(tmp_path)) == ["packing_stats.json",
                                            "part-00000-of-00002.tfrecord",
                                            "part-00001-of-00002.tfrecord"]


def test_ctrl_c_in_a_terminal_is_one_line(services, dataset, tmp_path):
    # The services run in sessions of their own (as on a cluster): Ctrl-C
    # reaches the launching process alone, which asks the job service to
    # cancel the job and ends with one line.
    from tests.data_prep.test_pack_pretraining_data import PROGRESS_LINE, terminal_lines

    output_dir = tmp_path / "out"
    pool_log_size = os.path.getsize(services.worker_pool_log)
    process, terminal = start_in_terminal(
        TOOL, *_arguments(output_dir, *services.pipeline_args), cwd=dataset,
        env={"TMPDIR": tmp_path})

    def job_running(output):  # the pool started an SDK worker for the job
        with open(services.worker_pool_log, errors="replace") as log:
            log.seek(pool_log_size)
            return "Starting worker with command" in log.read()

    status, output = ctrl_c_in_terminal(process, terminal, job_running)
    assert status == 128 + signal.SIGINT, output
    lines = [line for line in terminal_lines(output) if not PROGRESS_LINE.fullmatch(line)]
    assert len(lines) == 2, output
    assert lines[0] == f"packing 4 files (1.2 MB) into 4 shards in {output_dir} ..."
    # (The cancel is asked for once Beam's submission returns, a moment after
    # the job starts; the job service acknowledges it without stopping the
    # job: docs/pack_pretraining_data.md.)
    assert re.fullmatch(
        f"pack_pretraining_data: interrupted by SIGINT; (asked the job service to "
        f"cancel the job; )?(removed its [0-9]+ unfinished files from|nothing written "
        f"to) {re.escape(str(output_dir))}", lines[1]), output
