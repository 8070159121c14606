"""What every command-line tool of the project shares: quiet start-up, flag
errors in one line.

absl's own handling of a bad flag prints ``FATAL Flags parsing error: ...``
and a second line about ``--helpshort``; the project's tools end every error
with one line ``PROGRAM: why`` instead (a user, or a script, reads the last
line), so `parse_flags` is given to ``absl.app.run`` as ``flags_parser``.
TensorFlow's C++ log lines (oneDNN, CUDA probing, CPU features, input
pipeline notices) say nothing a user of these tools acts on. Two ways to keep
them off stderr, unless the user asks for detail (`wants_detail`: an explicit
``--verbosity``/``-v`` of 0 or more):

- `quiet_native_logs` (the training front ends): every line written to file
  descriptor 2 goes through a filter that drops native log lines only, so
  anything else, a C++ crash message included, still comes out;
- `discard_native_output` (the Beam data-prep tools): descriptor 2 goes to
  ``/dev/null`` for good and Python's ``sys.stderr`` keeps the terminal, which
  also silences Beam's worker processes (they inherit the descriptor, and
  their log-level option does not reach FnApiRunner's workers).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys

from absl import flags

# Lines of native (C++) logging, which a tool's user never acts on: absl's
# before its initialisation (TensorFlow 2.18+ writes them whatever
# TF_CPP_MIN_LOG_LEVEL says), TensorFlow's own format, and the second line of
# TensorFlow's CPU-features notice. absl's Python log lines carry a real date
# ("I1201 ..."), so the project's own log lines pass.
NATIVE_LOG_LINE = (
    r"^(?:WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IWE]0000 00:00:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] \S+:\d+\]"
    r"|To enable the following instructions: .* rebuild TensorFlow with)")

# The filter runs in a process of its own, so that whatever the tool does
# (exit, crash, abort in C++) everything else written to stderr comes out.
_FILTER_PROGRAM = f"""
import re, signal, sys
# Ctrl-C reaches the whole process group: the filter outlives it, passing on
# the tool's own last line, and ends when the tool closes the pipe.
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
native = re.compile({NATIVE_LOG_LINE!r})
for line in sys.stdin.buffer:
    if not native.match(line.decode("utf-8", "replace")):
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
"""


def wants_detail(argv: list[str]) -> bool:
    """Whether the command line asks for detail: ``--verbosity``/``-v`` given, >= 0
    (absl's levels: 0 info, 1 debug; -1 warnings only)."""
    for index, arg in enumerate(argv[1:], start=1):
        name, equals, value = arg.partition("=")
        if name in ("-v", "--v", "--verbosity"):
            if not equals:  # "-v 1"
                value = argv[index + 1] if index + 1 < len(argv) else ""
            try:
                return int(value) >= 0
            except ValueError:
                return False
    return False


def quiet_native_logs(argv: list[str] | None = None) -> None:
    """Drops TensorFlow's (and absl's, gRPC's) C++ log lines from stderr, unless the
    command line asks for detail (``--verbosity=1``) or ``TF_CPP_MIN_LOG_LEVEL=0``
    does.

    Call first thing in a tool's ``__main__``: stderr (file descriptor 2, inherited
    by child processes such as Beam's workers) is routed through a small filter
    process; every other line is written as it comes.
    """
    argv = sys.argv if argv is None else argv
    if wants_detail(argv) or os.environ.get(TF_LOG_LEVEL_ENV) == "0":
        return
    os.environ.setdefault(TF_LOG_LEVEL_ENV, "2")  # what TensorFlow itself honours
    global _stderr_is_terminal
    _stderr_is_terminal = os.isatty(2)
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    log_filter = subprocess.Popen([sys.executable, "-S", "-c", _FILTER_PROGRAM],
                                  stdin=read_end, stdout=subprocess.DEVNULL)
    os.close(read_end)
    original_stderr = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)

    def drain() -> None:
        # The last lines (a one-line error among them) come out before the
        # tool exits, not after the shell's next prompt.
        sys.stderr.flush()
        os.dup2(original_stderr, 2)
        try:
            log_filter.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a child process still holds the pipe
            pass

    atexit.register(drain)


#: Whether stderr was a terminal before `quiet_native_logs` put its filter's
#: pipe in between (None: no filter).
_stderr_is_terminal: bool | None = None


def stderr_is_terminal() -> bool:
    """Whether the program's stderr is a terminal (a user watching), also behind
    the filter of `quiet_native_logs`, where ``sys.stderr.isatty()`` is False."""
    if _stderr_is_terminal is not None:
        return _stderr_is_terminal
    return sys.stderr.isatty()


def discard_native_output() -> None:
    """File descriptor 2 -> ``/dev/null`` (native code, child processes);
    ``sys.stderr`` -> a copy of the original descriptor (the tool's own lines).

    Idempotent. See the module docstring for when to prefer `quiet_native_logs`.
    """
    if getattr(sys.stderr, "_packed_bert_tf_original", False):
        return  # already done
    sys.stderr.flush()
    try:
        original = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep quiet
        return
    stream = os.fdopen(original, "w", buffering=1, encoding=sys.stderr.encoding,
                       errors="backslashreplace")
    stream._packed_bert_tf_original = True  # type: ignore[attr-defined]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    sys.stderr = stream


#: TensorFlow's C++ log threshold (0 all, 1 no INFO, 2 no WARNING, 3 no ERROR).
TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"


def program_name(argv0: str) -> str:
    """``run_pretraining`` for ``.../run_pretraining.py`` (a script or ``-m`` module)."""
    return os.path.splitext(os.path.basename(argv0))[0]


def parse_flags(argv: list[str], *, known_only: bool = False) -> list[str]:
    """``absl.app.run``'s ``flags_parser``: parses ``argv``; a bad flag ends the
    program with one line ``PROGRAM: --flag=value: why`` and exit status 2 (the
    usual one for a usage error).

    Args:
      argv: the command line, ``argv[0]`` the program.
      known_only: leave unknown flags in the result (they are another
        library's, e.g. Beam's pipeline options).

    Returns:
      The arguments absl did not consume (``argv[0]`` first).
    """
    try:
        return flags.FLAGS(argv, known_only=known_only)
    except flags.Error as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"{program_name(argv[0])}: {message}", file=sys.stderr)
        sys.exit(2)
