"""What a child forked from a process that imported the heavy modules
(TensorFlow, Beam, the tools' libraries) does to become ``python TOOL ARGS``:
its own ``sys.argv``, environment, working folder, file-size limit, flags (the
tool defines them as ``__main__``), standard output and error (file
descriptors 1 and 2, native code's included), atexit handlers and exit status.
Only the imports are shared, so a test of tens of command lines pays
TensorFlow's import (seconds of CPU) once instead of tens of times. The fork
server (`tests.multi_worker.fork_server`) forks such children on request;
`tests.conftest.run_tools_forked` and `run_json_check` run theirs there.

What a child cannot show is what the imports themselves print: the parent
imports with ``TF_CPP_MIN_LOG_LEVEL=2``, as the tools do before importing
TensorFlow. And a child can print a line more than the tool run alone: with
TensorFlow imported, absl's ``app.run`` initialises its platform (one
``cuInit`` error line without a GPU), which a data-prep tool that imports
TensorFlow later (after sending native output to /dev/null) never prints.
Tests that check a tool's whole output from its first line run it as a real
subprocess (`tests.conftest.run_tool`).
"""

import os
import sys

#: The repository root (run_pretraining.py is there).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _exit_status(code) -> int:
    """The exit status of ``sys.exit(code)``, as the interpreter gives it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_as_main(tool: str, args) -> int:
    """Runs ``python TOOL ARGS`` in this (forked) process, as the interpreter
    would, through its shutdown; the exit status. ``TOOL``: ``NAME.py`` (a
    script of the repository), ``-c`` (``ARGS`` start with the code) or a
    module."""
    import atexit
    import runpy
    import threading

    try:
        if tool == "-c":  # as `python -c CODE ARGS`
            code, *args = args
            sys.argv = ["-c", *args]
            sys.path[0] = ""
            exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
        elif tool.endswith(".py"):
            sys.argv = [os.path.join(REPOSITORY, tool), *args]
            sys.path[0] = os.path.dirname(sys.argv[0])  # as `python SCRIPT`
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:  # as `python -m MODULE`: the working folder first on the path
            sys.argv = [tool, *args]  # run_module puts the file's path
            sys.path[0] = os.getcwd()
            runpy.run_module(tool, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as error:
        status = _exit_status(error.code)
    except BaseException:  # as the interpreter does: the traceback, status 1
        sys.excepthook(*sys.exc_info())
        status = 1
    # The interpreter's shutdown: non-daemon threads, then atexit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream, as at exit
            pass
    return status


def become(run: dict) -> None:
    """In a forked child whose standard streams are in place: takes the run's
    working folder, environment and file-size limit (``max_file_bytes``, as
    ``ulimit -f``), imports the run's own ``imports`` (modules its test adds
    to what the server imported: one imported for its effect, such as the
    graph optimizer off, or Beam), then runs ``python TOOL ARGS``
    (`run_as_main`); never returns. ``run``: {"tool", "args", "cwd", "env",
    "max_file_bytes", "imports"}."""
    import importlib
    import resource

    status = 1
    try:
        os.chdir(run["cwd"])
        os.environ.clear()
        os.environ.update(run["env"])
        if run.get("max_file_bytes"):
            limit = int(run["max_file_bytes"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        for module in run.get("imports", ()):
            importlib.import_module(module)
        status = run_as_main(run["tool"], run["args"])
    except BaseException:  # before the tool ran: why, on the child's stderr
        import traceback

        traceback.print_exc()
    finally:
        os._exit(status)


def _child(run: dict, stdout_path: str, stderr_path: str) -> None:
    """In a forked child: `become` the run, its stdout and stderr written to
    the two files."""
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    become(run)
