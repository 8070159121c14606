"""Shared fixtures: the paper's real length histograms, small generated
datasets, and one way to run the project's command-line tools."""

import dataclasses
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from packed_bert_tf.packing import histograms

# XLA's back end (LLVM) at its lowest optimisation level, for this process and
# every process a test starts (they inherit the environment), set before any
# of them compiles: the tests check what compiled steps compute, not how fast
# they run, and each compilation then costs about a third less CPU.
XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
if XLA_TEST_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()


def pytest_collection_modifyitems(config, items):
    """The test files marked slow first, in their own order (the sort is
    stable): the two xdist workers then share out the short files last
    instead of one worker finishing a long file alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="module")
def grappler_off_for_module():
    """TensorFlow's graph optimizer off for a module's tests, restored after
    (`tests.graph_options`): each new step or evaluation function spends
    about a second of CPU in it, and no check of those modules is about it.
    A module asks for it with ``pytest.mark.usefixtures``."""
    from tests.graph_options import grappler_off

    with grappler_off():
        yield


@pytest.fixture(scope="session")
def wikipedia_512():
    return histograms.load_histogram("wikipedia_512")


@pytest.fixture(scope="session")
def squad_384():
    return histograms.load_histogram("squad_1_1_384")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# Small unpacked pre-training datasets (generated, never committed).
SMALL_SEQ_LENGTH = 64
SMALL_PREDICTIONS = 10


def write_unpacked_dataset(folder, *, num_files=3, per_file=300, seed=0,
                           max_seq_length=SMALL_SEQ_LENGTH,
                           max_predictions_per_seq=SMALL_PREDICTIONS):
    """Writes unpacked shards of synthetic sequences (a third at full length)."""
    from packed_bert_tf.data.records import record_files, synthetic_records

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(num_files):
        lengths = np.where(rng.random(per_file) < 0.3, max_seq_length,
                           rng.integers(5, max_seq_length + 1, per_file))
        arrays = synthetic_records.unpacked_arrays(
            lengths, max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq, vocab_size=5000,
            seed=seed * 100 + index)
        path = folder / f"unpacked-{index:03d}.tfrecord"
        record_files.write_arrays(str(path), arrays)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="session")
def unpacked_files(tmp_path_factory):
    return write_unpacked_dataset(tmp_path_factory.mktemp("unpacked"))


#: The repository root (where run_pretraining.py and run_squad.py live).
REPOSITORY = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What a command-line tool run by `run_tool` did."""

    returncode: int
    stdout: str
    stderr: str
    #: Its wall time, where the runner timed it (`run_tools_forked` does).
    seconds: float | None = None

    @property
    def last_line(self) -> str:
        """The last non-empty line of stderr (where a one-line error goes)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def tool_command(tool: str, *args, python_options=()) -> list:
    """The command line of a tool: ``data_prep.NAME`` runs as a module,
    ``NAME.py`` (run_pretraining.py, ...) as a script of the repository."""
    target = [str(REPOSITORY / tool)] if tool.endswith(".py") else ["-m", tool]
    return [sys.executable, *python_options, *target, *map(str, args)]


def tool_environment(tmp_path=None, **extra) -> dict:
    """The environment of a tool run: a user's (the tools quiet TensorFlow's C++
    logging themselves), with this checkout first on the path and ``TMPDIR`` in
    ``tmp_path`` (Beam leaves beam-temp* folders there)."""
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if tmp_path is not None:
        environment["TMPDIR"] = str(tmp_path)
    environment.update({name: str(value) for name, value in extra.items()})
    return environment


def start_tool(tool: str, *args, cwd=None, tmp_path=None, python_options=(),
               env=None, max_file_bytes=None) -> subprocess.Popen:
    """Starts a command-line tool as a user would, in a subprocess (see `run_tool`;
    `finish_tool` collects it). Tests start several at once: each imports
    TensorFlow, seconds of CPU. ``max_file_bytes``: the largest file the tool
    may write (``ulimit -f``: a full disk, as the tool sees it)."""
    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.Popen(tool_command(tool, *args, python_options=python_options),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(cwd or REPOSITORY),
                            env=tool_environment(tmp_path, **(env or {})),
                            preexec_fn=limit_file_size if max_file_bytes else None)


def finish_tool(process: subprocess.Popen, timeout: float = 300) -> ToolResult:
    """Waits for a tool `start_tool` (or a fork server) started; what it did."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return ToolResult(process.returncode, stdout, stderr)


def wait_for_signal_handlers(process: subprocess.Popen, *signals,
                              timeout: float = 120) -> None:
    """Waits until `process` catches every one of `signals` (its handlers are
    installed), read from ``/proc/PID/status``; a signal sent earlier would go
    to the interpreter's default, or nowhere where the shell started the test
    run with SIGINT ignored (a background job)."""
    wanted = sum(1 << (signum - 1) for signum in signals)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the tool ended (status {process.returncode}) "
                                 "before catching the signals")
        caught = 0
        with open(f"/proc/{process.pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    caught = int(line.split()[1], 16)
        if caught & wanted == wanted:
            return
        time.sleep(0.01)
    raise AssertionError(f"the tool caught no {signals} within {timeout} s")


def run_tool(tool: str, *args, cwd=None, tmp_path=None, timeout: float = 300,
             python_options=(), env=None) -> ToolResult:
    """Runs a command-line tool as a user would, in a subprocess.

    Args:
      tool: ``data_prep.NAME`` (a module) or ``run_pretraining.py`` (a script).
      args: its command-line arguments.
      cwd: working folder (default: the repository).
      tmp_path: ``TMPDIR`` of the run.
      timeout: seconds to wait for the tool; past them it is killed and
        ``subprocess.TimeoutExpired`` raised.
      python_options: interpreter options put before the tool (``("-X",
        "importtime")``).
      env: more environment variables.
    """
    return finish_tool(start_tool(tool, *args, cwd=cwd, tmp_path=tmp_path,
                                  python_options=python_options, env=env), timeout)


def forked_run(tool: str, *args, cwd=None, tmp_path=None, env=None,
               max_file_bytes=None, imports=()) -> dict:
    """One command line for `run_tools_forked` (the arguments of `start_tool`);
    ``imports``: modules the child imports before the tool runs, beyond the
    server's (`tests.forked_tools.become`)."""
    return {"tool": tool, "args": [str(arg) for arg in args],
            "cwd": str(cwd or REPOSITORY),
            "env": tool_environment(tmp_path, **(env or {})),
            "max_file_bytes": max_file_bytes, "imports": list(imports)}


def run_tools_forked(runs, *, preload=(), timeout: float = 600) -> list:
    """Runs each of `runs` (`forked_run`'s) as `run_tool` would, one after the
    other, each in a child forked from the session's fork server that imported
    ``preload`` (TensorFlow, ...) once (`tests.multi_worker.fork_server`).
    Returns their ToolResults, each with its wall time (``seconds``: from the
    child's start to its end, without the imports it shares)."""
    from tests.multi_worker.fork_server import shared_server

    server = shared_server(preload)
    deadline = time.monotonic() + timeout
    results = []
    for run in runs:
        process = server.start_run(run)
        start = time.monotonic()
        result = finish_tool(process, max(0, deadline - time.monotonic()))
        results.append(dataclasses.replace(result, seconds=time.monotonic() - start))
    return results


def one_line_error_problems(result: ToolResult, program: str, expected: str, *,
                            max_lines: int = 10) -> list:
    """What is wrong with a tool's run on bad input (empty: nothing): it must exit
    non-zero with no traceback, print at most ``max_lines`` lines in all, and end
    with one line ``PROGRAM: ...`` that contains ``expected``."""
    output = result.stdout + result.stderr
    lines = output.strip().splitlines()
    problems = [result.returncode == 0 and "exit code 0",
                "Traceback" in output and "a traceback",
                len(lines) > max_lines and f"{len(lines)} lines",
                not result.last_line.startswith(f"{program}: ") and "no error line",
                expected not in result.last_line and f"not {expected!r}"]
    return [problem for problem in problems if problem]


def run_json_check(*python_args, timeout: float = 900) -> dict:
    """Runs ``python *python_args`` (``-m tests.MODULE ...`` or ``-c SCRIPT ...``)
    in a process of its own (one tf.distribute strategy per process), forked
    from the session's fork server that imported TensorFlow and the library
    once; asserts it succeeded and returns the JSON object its last line of
    stdout prints. The time limit is for a machine busy with other work: a
    check takes a minute or two alone."""
    from tests.multi_worker.fork_server import shared_server

    tool, *args = map(str, python_args)
    if tool == "-m":
        tool, *args = args
    result = finish_tool(shared_server().start_tool(tool, *args), timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
