"""Two ways to run the project's command-line tools in a test.

`run_main` runs a tool in this process, as ``python TOOL ARGS`` would run it:
its ``__main__`` block (its flags defined, ``absl.app.run`` and its ``main``)
with its own ``sys.argv``, working folder, environment, standard output and
error, and exit status. Errors, outputs and statuses are tested this way: no
new process, no second import of TensorFlow.

`run_tool` (and `start_tool` with `finish_tool`, `start_in_terminal`,
`run_json_check`) runs a tool in a fresh interpreter, never a fork of this
one (TensorFlow's threads do not survive a fork), for the claims that are about the process itself: an entry point
that installs and runs, what a fresh process prints from its first line
(TensorFlow's native log lines, which reach file descriptor 2 and so never
`run_main`'s captured streams), Ctrl-C and SIGTERM, kill and resume,
clusters of workers, a process per Keras backend, and a process per
``tf.distribute`` strategy (`run_json_check`).

What `run_main` puts back after each run, so that runs do not see each other
or the tests around them: the flags (those the run defined are deleted, the
others get their values back), absl's verbosity and the log handlers' filters,
the warning filters, the SIGINT and SIGTERM handlers, the environment, the
working folder, ``sys.argv`` and ``sys.path``. Keras's global state (layer
names, the dtype policy) is reset before a run, as a fresh process has it.
What it leaves to the process: file descriptor 2 (the front ends' filter of
native log lines and the data-prep tools' ``/dev/null`` are not installed;
absl's lines go where they would, `_captured_streams`) and atexit handlers
(the tools register none of their own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging as python_logging
import os
import pathlib
import resource
import runpy
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import warnings

from absl import app, flags, logging
from absl.testing import flagsaver

#: The repository root (where run_pretraining.py and run_squad.py live).
REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
_ROOT = str(REPOSITORY)
_INSTALLED = tuple({os.path.abspath(path) for path in (
    sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"])})


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """What a command-line tool did: its exit status, stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def last_line(self) -> str:
        """The last non-empty line of stderr (where a one-line error goes)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


# In process.

def _exit_status(code, stderr) -> int:
    """The exit status of ``sys.exit(code)``, as the interpreter gives it (a
    message goes to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=stderr)
    return 1


def _is_ours(module) -> bool:
    """Whether a module is the repository's own (not an installed package's,
    even where the virtual environment lies inside the checkout)."""
    path = os.path.abspath(getattr(module, "__file__", None) or _ROOT)
    return path.startswith(_ROOT) and not path.startswith(_INSTALLED)


@contextlib.contextmanager
def _flags_restored():
    """The flags as they were before the block: values put back, and the flags
    the block defined deleted, except those an installed package defined when
    the run imported it (Grain defines absl flags at import): that package
    stays imported and reads them."""
    saved = flagsaver.save_flag_values()
    try:
        yield
    finally:
        for name in list(flags.FLAGS):
            module = sys.modules.get(flags.FLAGS.find_module_defining_flag(name) or "")
            if name not in saved and module is not None and not _is_ours(module):
                flags.FLAGS[name].unparse()
                saved[name] = dict(flags.FLAGS[name].__dict__)
        flagsaver.restore_flag_values(saved)


@contextlib.contextmanager
def _restored_process_state(cwd, env, max_file_bytes, tmp_path):
    """The working folder, environment, file-size limit and temporary folder of
    a run, and everything else a run may change (see the module docstring),
    put back after it."""
    saved_environment = dict(os.environ)
    saved_cwd, saved_argv, saved_path = os.getcwd(), sys.argv[:], sys.path[:]
    saved_signals = {signum: signal.getsignal(signum)
                     for signum in (signal.SIGINT, signal.SIGTERM)}
    saved_verbosity = logging.get_verbosity()
    saved_filters = [(handler, handler.filters[:])
                     for handler in python_logging.getLogger().handlers]
    saved_tempdir = tempfile.tempdir
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        os.environ.update({name: str(value) for name, value in (env or {}).items()})
        if tmp_path is not None:  # read by tempfile afresh, as at a process's start
            os.environ["TMPDIR"], tempfile.tempdir = str(tmp_path), None
        os.chdir(str(cwd or REPOSITORY))
        if max_file_bytes:  # as `ulimit -f`: a full disk, as the tool sees it
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(max_file_bytes), hard))
        with warnings.catch_warnings(), _flags_restored():
            # runpy's note that the tool's module was imported before (by the
            # test that calls its functions): it runs afresh as __main__.
            warnings.filterwarnings("ignore", "'.*' found in sys.modules after import",
                                    RuntimeWarning)
            yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        tempfile.tempdir = saved_tempdir
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environment)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        for signum, handler in saved_signals.items():
            signal.signal(signum, handler)
        logging.set_verbosity(saved_verbosity)
        for handler, filters in saved_filters:
            handler.filters[:] = filters


@contextlib.contextmanager
def _captured_streams(stdout: io.StringIO, stderr: io.StringIO):
    """``sys.stdout``, ``sys.stderr`` and absl's log lines into the buffers,
    as a tool's process has them on file descriptors 1 and 2. What the tools
    do to descriptor 2 is done to absl's handler instead (a test process
    keeps its descriptor 2): the front ends' filter of native log lines is
    left out, and where a data-prep tool sends descriptor 2 to ``/dev/null``
    (`packed_bert_tf.command_line.discard_native_output`), absl's handler
    writes to nothing until the tool points it at its own ``sys.stderr``
    (`data_prep.tool_output.quiet_unless_verbose`), as in a process."""
    from packed_bert_tf import command_line

    handler = logging.get_absl_handler().python_handler
    saved = handler.stream, command_line.quiet_native_logs, command_line.discard_native_output

    def discard_native_output():
        handler.stream = io.StringIO()  # absl writes to descriptor 2: gone

    command_line.quiet_native_logs = lambda argv=None: None
    command_line.discard_native_output = discard_native_output
    handler.stream = stderr
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            yield
    finally:
        (handler.stream, command_line.quiet_native_logs,
         command_line.discard_native_output) = saved


def _fresh_keras() -> None:
    """Keras's global state as a new process has it: layer names counted from
    0 (checkpoints hold them) and the float32 policy."""
    if "keras" in sys.modules:
        import keras

        keras.backend.clear_session()
        keras.mixed_precision.set_global_policy("float32")


# The modules `_run_as_main` took out of `sys.modules`, kept alive: absl
# remembers a module that calls `flags.disclaim_key_flags()` by its id(), and
# a freed module's id, reused by a later script's `__main__`, would have absl
# file that script's flags under "runpy", which the clean-up keeps.
_RETIRED_MODULES: list = []


def _run_as_main(tool: str, argv: list) -> None:
    """Executes ``python TOOL ARGV...``'s ``__main__``: ``TOOL`` is ``NAME.py``
    (a script of the repository or its benchmarks/) or a module."""
    if tool.endswith(".py"):
        path = os.path.join(REPOSITORY, tool)
        folder = os.path.dirname(path)
        sys.argv = [path, *argv]
        sys.path.insert(0, folder)  # as `python SCRIPT`
        before = set(sys.modules)
        try:
            runpy.run_path(path, run_name="__main__")
        finally:  # the modules beside it (benchmarks' common) imported afresh next time
            for name, module in list(sys.modules.items()):
                if name not in before and os.path.dirname(
                        getattr(module, "__file__", None) or "") == folder:
                    _RETIRED_MODULES.append(sys.modules.pop(name))
    else:
        sys.argv = [tool, *argv]  # run_module puts the module's path first
        runpy.run_module(tool, run_name="__main__", alter_sys=True)


def run_main(tool: str, *args, cwd=None, env=None, tmp_path=None,
             max_file_bytes=None) -> ToolResult:
    """Runs ``python TOOL ARGS`` in this process (see the module docstring).

    Args:
      tool: ``data_prep.NAME`` (a module), ``run_pretraining.py`` or
        ``benchmarks/NAME.py`` (a script).
      args: its command-line arguments.
      cwd: working folder (default: the repository).
      env: environment variables to set for the run.
      tmp_path: the run's temporary folder (``TMPDIR``; Beam leaves
        beam-temp* folders there).
      max_file_bytes: the largest file the run may write (``ulimit -f``: a
        full disk, as the tool sees it; the write fails with EFBIG).

    Returns:
      The run's `ToolResult`: exit status, what it printed to stdout, and to
      stderr (absl's log lines included).
    """
    app.define_help_flags()  # once per process, before the flags are saved
    stdout, stderr = io.StringIO(), io.StringIO()
    _fresh_keras()
    with _restored_process_state(cwd, env, max_file_bytes, tmp_path), \
            _captured_streams(stdout, stderr):
        try:
            _run_as_main(tool, [str(arg) for arg in args])
            status = 0
        except SystemExit as error:
            status = _exit_status(error.code, stderr)
        except BaseException:  # as the interpreter: the traceback, status 1
            traceback.print_exc(file=stderr)
            status = 1
    return ToolResult(status, stdout.getvalue(), stderr.getvalue())


def defined_flags(define) -> contextlib.AbstractContextManager:
    """Flags ``define()`` defines, for a test of a tool's own functions: they
    are deleted again at the end of the ``with`` block, and every other flag
    gets its value back."""
    @contextlib.contextmanager
    def scope():
        with flagsaver.flagsaver():
            define()
            yield flags.FLAGS

    return scope()


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


# In a subprocess.

def tool_command(tool: str, *args, python_options=(), **process_options) -> list:
    """The command line of a tool: ``data_prep.NAME`` runs as a module,
    ``NAME.py`` (run_pretraining.py, ...) as a script of the repository, ``-c``
    as ``python -c CODE`` (``args`` start with the code). ``process_options``
    (``terminal``, ``max_file_bytes``, ``two_cpu_replicas``, ``grappler_off``)
    go through `tests.launch`, which sets them up before the tool runs."""
    script = tool.endswith(".py")
    target = ([os.path.join(REPOSITORY, tool)] if script
              else ["-c"] if tool == "-c" else ["-m", tool])
    launch = [f"--{name}" if value is True else f"--{name}={value}"
              for name, value in process_options.items() if value]
    if launch:
        target = ["-m", "tests.launch", *launch, "--", *([tool] if script else target)]
    return [sys.executable, *python_options, *target, *map(str, args)]


def tool_environment(tmp_path=None, **extra) -> dict:
    """The environment of a tool's process: a user's (the tools quiet
    TensorFlow's C++ logging themselves), with this checkout first on the path
    and ``TMPDIR`` in ``tmp_path`` (Beam leaves beam-temp* folders there)."""
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if tmp_path is not None:
        environment["TMPDIR"] = str(tmp_path)
    environment.update({name: str(value) for name, value in extra.items()})
    return environment


def start_tool(tool: str, *args, cwd=None, tmp_path=None, python_options=(),
               env=None, **process_options) -> subprocess.Popen:
    """Starts a command-line tool as a user would, in a fresh interpreter (see
    `run_tool`; `finish_tool` collects it), its output in pipes.

    ``process_options`` (`tool_command`): ``max_file_bytes`` (the largest
    file it may write, as ``ulimit -f``: a full disk), ``two_cpu_replicas``,
    ``grappler_off``."""
    return subprocess.Popen(
        tool_command(tool, *args, python_options=python_options, **process_options),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=str(cwd or REPOSITORY), env=tool_environment(tmp_path, **(env or {})))


def start_in_terminal(tool: str, *args, cwd=None, env=None, **process_options):
    """Starts a tool in a new pseudo-terminal, its controlling terminal, in a
    session of its own (as a terminal's shell starts a job: Ctrl-C typed into
    the terminal reaches it). Returns (the process, the terminal's master file
    descriptor, to read its output from and type into; the caller closes it)."""
    import pty

    master, slave = pty.openpty()
    try:
        process = subprocess.Popen(
            tool_command(tool, *args, terminal=True, **process_options),
            stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
            cwd=str(cwd or REPOSITORY), env=tool_environment(**(env or {})))
    finally:
        os.close(slave)
    return process, master


def ctrl_c_in_terminal(process: subprocess.Popen, terminal: int, ready,
                       timeout: float = 240) -> tuple[int, str]:
    """Reads what a tool `start_in_terminal` started writes to its terminal
    and types Ctrl-C there once ``ready(what it wrote so far)`` is true (SIGINT
    to the terminal's foreground process group: the tool and every process it
    started). Returns (its exit status, everything any process wrote to the
    terminal); closes ``terminal``. Raises AssertionError when the tool ends
    before Ctrl-C was typed."""
    import select

    output, typed, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not typed and ready(output.decode(errors="replace")):
                os.write(terminal, b"\x03")
                typed = True
            waiting, _, _ = select.select([terminal], [], [], 0.005)
            if waiting:
                try:
                    data = os.read(terminal, 65536)
                except OSError:  # the terminal closed: every process on it ended
                    break
                if not data:
                    break
                output += data
        status = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(terminal)
    assert typed, f"the tool ended before Ctrl-C (status {status}):\n{output[-3000:]}"
    return status, output.decode(errors="replace")


def finish_tool(process: subprocess.Popen, timeout: float = 300) -> ToolResult:
    """Waits for a tool `start_tool` started; what it did. Past ``timeout``
    seconds it is killed and ``subprocess.TimeoutExpired`` raised."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return ToolResult(process.returncode, stdout, stderr)


def run_tool(tool: str, *args, cwd=None, tmp_path=None, timeout: float = 300,
             python_options=(), env=None, **process_options) -> ToolResult:
    """Runs a command-line tool as a user would, in a subprocess.

    Args:
      tool: ``data_prep.NAME`` (a module) or ``run_pretraining.py`` (a script).
      args: its command-line arguments.
      cwd: working folder (default: the repository).
      tmp_path: ``TMPDIR`` of the run.
      timeout: seconds to wait for this run; past them it is killed and
        ``subprocess.TimeoutExpired`` raised.
      python_options: interpreter options put before the tool (``("-X",
        "importtime")``).
      env: more environment variables.
      process_options: what the process is set up with (`start_tool`).
    """
    return finish_tool(start_tool(tool, *args, cwd=cwd, tmp_path=tmp_path,
                                  python_options=python_options, env=env,
                                  **process_options), timeout)


def run_json_check(*python_args, timeout: float = 900, **process_options) -> dict:
    """Runs ``python *python_args`` (``-m tests.MODULE ...`` or ``-c SCRIPT
    ...``) in a fresh interpreter and returns the JSON object its last line of
    stdout prints, asserting it succeeded. For checks under a
    ``tf.distribute`` strategy: a process holds one (a second strategy in the
    same process mixes up the first one's collective instances), and its
    logical devices are set before TensorFlow runs an op. ``timeout``: for
    this run alone, on a machine busy with other work (a check takes a minute
    or two alone)."""
    tool, *args = map(str, python_args)
    if tool == "-m":
        tool, *args = args
    result = run_tool(tool, *args, timeout=timeout, **process_options)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


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
