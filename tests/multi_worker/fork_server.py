"""Starts command-line tools while a test goes on, each in a child forked from
one server process that imported TensorFlow and the tools' libraries once.

Each child is started on request and is, as ``python TOOL ARGS`` would be, a
process of its own (`tests.forked_tools`): its own pid (the test signals or
kills it), ``sys.argv``, environment, working folder, file-size limit, flags
(the tool defines them as ``__main__``), atexit handlers and exit status, and
the standard streams the test hands over (pipe ends, or a pseudo-terminal that
becomes the child's controlling terminal in a session of its own, as a
terminal's shell starts a job). Only the imports are shared, which saves each
process TensorFlow's import (seconds of CPU); what that changes (the imports'
own output) is in `tests.forked_tools`.

The test side is `ForkServer`; its processes are `ForkedProcess` (what
`tests.conftest.finish_tool` and the tests use of ``subprocess.Popen``).
`shared_server` keeps one server per set of imports for the whole test
session (per test process), so that the test modules share their imports.

    python -m tests.multi_worker.fork_server FD MODULE...
      FD: a SOCK_SEQPACKET Unix socket: requests come in as one JSON message
          each ({"tool", "args", "cwd", "env", "max_file_bytes", "imports",
          "terminal"})
          with the child's stdin, stdout and stderr descriptors attached;
          the server answers {"started": pid}, and {"ended": pid, "status": s}
          when a child ends. The socket's end stops the server (its children
          still running are killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

from tests.forked_tools import become

#: The repository root (run_pretraining.py is there).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# The server.

def _child(request: dict, fds: list) -> None:
    """In the forked child: becomes ``python TOOL ARGS`` and never returns."""
    import io

    try:
        stdin, stdout, stderr = fds
        if request["terminal"]:  # a session of its own, the terminal its own
            os.setsid()
            import fcntl
            import termios

            fcntl.ioctl(stdin, termios.TIOCSCTTY, 0)
        for fd, target in enumerate((stdin, stdout, stderr)):
            os.dup2(target, fd)
        for target in set(fds):
            if target > 2:
                os.close(target)
        # The streams as the interpreter makes them at start-up: stdout
        # line-buffered on a terminal only, stderr always.
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), line_buffering=os.isatty(1))
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), line_buffering=True,
            errors="backslashreplace")
    except BaseException:  # before the tool ran: why, on the child's stderr
        import traceback

        traceback.print_exc()
        os._exit(1)
    become(request)


def serve(connection: socket.socket) -> None:
    """Forks a child per request until the connection ends; reports each end."""
    children = set()
    try:
        while True:
            ready, _, _ = select.select([connection], [], [], 0.05)
            if ready:
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                if not message:
                    break
                request = json.loads(message)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    connection.close()
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                children.add(pid)
                connection.send(json.dumps({"started": pid}).encode())
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                children.discard(pid)
                connection.send(json.dumps(
                    {"ended": pid, "status": os.waitstatus_to_exitcode(status)}).encode())
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            os.waitpid(pid, 0)


def main(fd: str, *preload: str) -> None:
    import importlib

    connection = socket.socket(fileno=int(fd))
    # As the tools do before their imports: TensorFlow's C++ logging reads the
    # level once, at its first line.
    had_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for module in preload:
        importlib.import_module(module)
    if had_level is None:
        del os.environ["TF_CPP_MIN_LOG_LEVEL"]
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        serve(connection)


# The test side.

class ForkedProcess:
    """A child of the fork server, as much of ``subprocess.Popen`` as the tests use:
    ``pid``, ``returncode``, ``stdout``/``stderr`` (text pipes, when started with
    pipes), `poll`, `wait`, `communicate`, `send_signal`, `kill`."""

    def __init__(self, server: "ForkServer", pid: int, stdout=None, stderr=None):
        self._server = server
        self.pid = pid
        self.returncode = None
        self.stdout = os.fdopen(stdout, errors="replace") if stdout is not None else None
        self.stderr = os.fdopen(stderr, errors="replace") if stderr is not None else None
        self._output = None

    def poll(self):
        if self.returncode is None:
            self.returncode = self._server._status(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self._server._status(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode

    def communicate(self, timeout=None):
        """(stdout, stderr) read to their end, then waits for the exit status."""
        if self._output is None:
            self._output = {}
            self._readers = [threading.Thread(target=self._read, args=(name,), daemon=True)
                             for name in ("stdout", "stderr")
                             if getattr(self, name) is not None]
            for reader in self._readers:
                reader.start()
        deadline = None if timeout is None else _now() + timeout
        for reader in self._readers:
            reader.join(None if deadline is None else max(0, deadline - _now()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
        self.wait(None if deadline is None else max(0, deadline - _now()))
        return self._output.get("stdout"), self._output.get("stderr")

    def _read(self, name):
        stream = getattr(self, name)
        self._output[name] = stream.read()
        stream.close()

    def send_signal(self, signal_number):
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def _now() -> float:
    import time

    return time.monotonic()


class ForkServer:
    """The test side of a fork server: `start_tool` (pipes, as
    `tests.conftest.start_tool`), `start_in_terminal`, `close`."""

    def __init__(self, preload=("tensorflow",)):
        import tempfile

        from tests.conftest import tool_environment

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The imports' native log lines stay out of the test run's output; the
        # server's own errors come back in `_failure`.
        self._log = tempfile.TemporaryFile()
        self._server = subprocess.Popen(
            [sys.executable, "-m", "tests.multi_worker.fork_server", str(theirs.fileno()),
             *preload], pass_fds=[theirs.fileno()], cwd=REPOSITORY,
            env=tool_environment(), stdin=subprocess.DEVNULL, stderr=self._log)
        theirs.close()
        self._connection = ours
        self._request_lock = threading.Lock()
        self._changed = threading.Condition()
        self._started = []
        self._ended = {}
        self._children = set()
        self._closed = False
        self._listener = threading.Thread(target=self._listen, daemon=True)
        self._listener.start()

    def _listen(self):
        while True:
            try:
                message = self._connection.recv(1 << 16)
            except OSError:
                message = b""
            with self._changed:
                if not message:
                    self._closed = True
                    self._changed.notify_all()
                    return
                answer = json.loads(message)
                if "started" in answer:
                    self._started.append(answer["started"])
                else:
                    self._ended[answer["ended"]] = answer["status"]
                self._changed.notify_all()

    def _status(self, pid: int, timeout):
        with self._changed:
            self._changed.wait_for(lambda: pid in self._ended or self._closed, timeout)
            if pid not in self._ended and self._closed:
                raise RuntimeError(f"the fork server ended before process {pid} did"
                                   + self._failure())
            return self._ended.get(pid)

    def _failure(self) -> str:
        """The end of the server's stderr."""
        self._log.seek(0)
        return ": " + self._log.read().decode(errors="replace")[-3000:]

    def _start(self, run: dict, fds, terminal: bool) -> int:
        request = dict(run, terminal=terminal)
        with self._request_lock, self._changed:
            socket.send_fds(self._connection, [json.dumps(request).encode()], fds)
            # The server imports before it answers the first request.
            if not self._changed.wait_for(lambda: self._started or self._closed, 600):
                raise RuntimeError("the fork server did not answer" + self._failure())
            if not self._started:
                raise RuntimeError("the fork server ended" + self._failure())
            pid = self._started.pop(0)
            self._children.add(pid)
            return pid

    def busy(self) -> bool:
        """Whether a child of this server is still running."""
        with self._changed:
            return not self._children <= self._ended.keys()

    def start_run(self, run: dict) -> ForkedProcess:
        """A run as `tests.conftest.forked_run` makes it ({"tool", "args",
        "cwd", "env", "max_file_bytes"}), its stdout and stderr pipes to the
        test."""
        stdout, stderr = os.pipe(), os.pipe()
        with open(os.devnull) as devnull:
            try:
                pid = self._start(run, [devnull.fileno(), stdout[1], stderr[1]], False)
            finally:
                os.close(stdout[1])
                os.close(stderr[1])
        return ForkedProcess(self, pid, stdout[0], stderr[0])

    def start_tool(self, tool: str, *args, env=None, cwd=None, imports=()) -> ForkedProcess:
        """``tool`` (``NAME.py`` a script of the repository, ``-c`` with the
        code first in ``args``, else a module) with ``args``, its stdout and
        stderr pipes to the test (`tool_environment` plus ``env``; ``imports``
        as `tests.conftest.forked_run`'s)."""
        from tests.conftest import forked_run

        return self.start_run(forked_run(tool, *args, cwd=cwd, env=env, imports=imports))

    def start_in_terminal(self, tool: str, *args, env=None, cwd=None, imports=()):
        """``tool`` in a new pseudo-terminal, its controlling terminal and
        foreground process group; returns (the process, the terminal's master
        descriptor, the caller's to read, write and close)."""
        from tests.conftest import forked_run

        master, slave = os.openpty()
        try:
            pid = self._start(forked_run(tool, *args, cwd=cwd, env=env, imports=imports),
                              [slave] * 3, True)
        finally:
            os.close(slave)
        return ForkedProcess(self, pid), master

    def close(self):
        """Ends the server (its children still running are killed)."""
        with contextlib.suppress(OSError):
            self._connection.shutdown(socket.SHUT_RDWR)
        self._connection.close()
        try:
            self._server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._log.close()


@contextlib.contextmanager
def fork_server(preload=("tensorflow",)):
    """A `ForkServer` for the block."""
    server = ForkServer(preload)
    try:
        yield server
    finally:
        server.close()


#: What a shared server that imports TensorFlow imports of the library: what
#: the tests' forked training runs and checks use, so that one server serves
#: them all. Other modules a preload names are added to it and make a server
#: of their own; a test whose runs need a module more (one imported for its
#: effect, such as the graph optimizer off) names it in the runs' ``imports``
#: instead, for each child to import, and shares the server. Beam goes in a
#: server of its own or a run's imports: its import adds a handler to the root
#: logger, which doubles absl's log lines in a tool that does not use Beam.
TENSORFLOW_PRELOAD = ("tensorflow", "packed_bert_tf.pretraining.run",
                      "packed_bert_tf.squad.run", "packed_bert_tf.classification.run",
                      "packed_bert_tf.training.distribution",
                      "packed_bert_tf.data.records.packing_verification")

#: How many shared servers a test process keeps (each holds TensorFlow's
#: imports, most of a GiB): the one used longest ago goes first.
MOST_SHARED_SERVERS = 3

_shared = {}


def shared_server(preload=("tensorflow",)) -> ForkServer:
    """The test session's `ForkServer` that imported ``preload`` (with
    `TENSORFLOW_PRELOAD` where it names TensorFlow), started on first use and
    ended with the test process, or earlier to keep `MOST_SHARED_SERVERS`."""
    preload = tuple(preload)
    if "tensorflow" in preload:
        preload = TENSORFLOW_PRELOAD + tuple(
            module for module in preload if module not in TENSORFLOW_PRELOAD)
    server = _shared.pop(preload, None)
    if server is None:
        for key, idle in list(_shared.items()):
            if len(_shared) < MOST_SHARED_SERVERS:
                break
            if not idle.busy():
                idle.close()
                del _shared[key]
        server = ForkServer(preload)
        import atexit

        atexit.register(server.close)
    _shared[preload] = server  # the newest last
    return server


if __name__ == "__main__":
    main(*sys.argv[1:])
