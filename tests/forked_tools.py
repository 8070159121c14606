"""Runs a command-line tool on several command lines from one process: the
heavy modules (TensorFlow, Beam, the tool's library) are imported once, and
each command line runs in a child forked from there as ``python TOOL ARGS``
runs it: its own ``sys.argv``, environment, working folder, file-size limit,
flags (the tool defines them as ``__main__``), standard output and error
(file descriptors 1 and 2, native code's included), atexit handlers and exit
status. Only the imports are shared, so a test of tens of bad command lines
pays TensorFlow's import (seconds of CPU) once instead of tens of times.

What a child cannot show is what the imports themselves print: the parent
imports with ``TF_CPP_MIN_LOG_LEVEL=2``, as the tools do before importing
TensorFlow. And a child can print a line more than the tool run alone: with
TensorFlow imported, absl's ``app.run`` initialises its platform (one
``cuInit`` error line without a GPU), which a data-prep tool that imports
TensorFlow later (after sending native output to /dev/null) never prints.
Tests that check a tool's whole output from its first line run it as a real
subprocess (`tests.conftest.run_tool`).

    python -m tests.forked_tools SPEC.json
      SPEC: {"preload": [module, ...], "runs": [{"tool": "run_pretraining.py"
             or "data_prep.NAME", "args": [...], "env": {...}, "cwd": folder,
             "max_file_bytes": null or a number}, ...]}
      prints one JSON line: [{"returncode", "stdout", "stderr", "seconds"}, ...]
      (seconds: the child's wall time, from its fork to its exit)

See `tests.conftest.run_tools_forked`.
"""

import json
import os
import sys
import tempfile
import time

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
    would, through its shutdown; the exit status."""
    import atexit
    import runpy
    import threading

    try:
        if tool.endswith(".py"):
            sys.argv = [os.path.join(REPOSITORY, tool), *args]
            sys.path[0] = REPOSITORY  # as `python SCRIPT`: the script's folder
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


def _child(run: dict, stdout_path: str, stderr_path: str) -> None:
    """In the forked child: becomes ``python TOOL ARGS`` and never returns."""
    import resource

    status = 1
    try:
        os.chdir(run["cwd"])
        os.environ.clear()
        os.environ.update(run["env"])
        if run.get("max_file_bytes"):
            limit = int(run["max_file_bytes"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        for fd, path in ((1, stdout_path), (2, stderr_path)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        status = run_as_main(run["tool"], run["args"])
    except BaseException:  # before the tool ran: why, on the runner's stderr
        import traceback

        traceback.print_exc()
    finally:
        os._exit(status)


def run_all(runs: list) -> list:
    """Each of `runs` in a child of its own, one after the other."""
    import shutil

    results = []
    # Not a TemporaryDirectory: its finalizer is an atexit handler, which each
    # child runs on exit.
    folder = tempfile.mkdtemp()
    try:
        for index, run in enumerate(runs):
            stdout_path = os.path.join(folder, f"{index}.out")
            stderr_path = os.path.join(folder, f"{index}.err")
            sys.stdout.flush()
            sys.stderr.flush()
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:
                _child(run, stdout_path, stderr_path)
            _, status = os.waitpid(pid, 0)
            seconds = time.monotonic() - start
            outputs = []
            for path in (stdout_path, stderr_path):
                with open(path, encoding="utf-8", errors="replace") as stream:
                    outputs.append(stream.read())
            results.append({"returncode": os.waitstatus_to_exitcode(status),
                            "stdout": outputs[0], "stderr": outputs[1],
                            "seconds": seconds})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def main(spec_path: str) -> None:
    import importlib

    with open(spec_path) as stream:
        spec = json.load(stream)
    # As the tools do before their imports: TensorFlow's C++ logging reads the
    # level once, at its first line.
    had_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for module in spec.get("preload", []):
        importlib.import_module(module)
    if had_level is None:
        del os.environ["TF_CPP_MIN_LOG_LEVEL"]
    results = run_all(spec["runs"])
    sys.stdout.write("\n" + json.dumps(results) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
