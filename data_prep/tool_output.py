"""What the data-prep tools print: their own lines, not Beam's or TensorFlow's.

By default a tool prints what it read, a progress line on long work, a summary
or one error line, and nothing else:

- absl's ``--verbosity`` defaults to -1 (warnings) instead of ``app.run``'s 0
  (info), and Python log records from other packages (Apache Beam, TensorFlow,
  gRPC) are dropped below ERROR, their warnings ignored;
- file descriptor 2 goes to ``/dev/null`` for the rest of the process, while
  Python's ``sys.stderr`` (the tool's own error line and log) keeps the
  original stream (`packed_bert_tf.command_line.discard_native_output`). That
  silences what no Python setting reaches: TensorFlow's C++ start-up lines,
  gRPC, and Beam's worker subprocesses.

``--verbosity=0`` (``-v 0``) or more brings all of it back, unchanged.

`one_line_on_interrupt` makes Ctrl-C and SIGTERM one line too; the tools
write their outputs under temporary names and rename them at the end
(`completing`), so an interrupted run leaves none.
"""

from __future__ import annotations

import contextlib
import functools
import logging as logging_module
import os
import signal
import sys
import warnings

from absl import flags, logging

from packed_bert_tf import command_line

#: Where the project's own code lives: its log records always pass.
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_MODULES = r"(?!packed_bert_tf|data_prep|__main__)"


class _OwnRecordsOnly(logging_module.Filter):
    """Passes the project's records, and errors from anywhere else."""

    def filter(self, record: logging_module.LogRecord) -> bool:
        own = os.path.abspath(record.pathname).startswith(_PROJECT_ROOT + os.sep) \
            and "site-packages" not in record.pathname
        return own or record.levelno >= logging_module.ERROR


def quiet_unless_verbose() -> bool:
    """Call first in a tool's ``main``: returns True when quiet (the default).

    Quiet unless ``--verbosity``/``-v`` was given at 0 or more (see the module
    docstring). Idempotent.
    """
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    if flags.FLAGS.verbosity >= 0:
        return False
    for handler in logging_module.getLogger().handlers:
        if not any(isinstance(f, _OwnRecordsOnly) for f in handler.filters):
            handler.addFilter(_OwnRecordsOnly())
    warnings.filterwarnings("ignore", module=_OWN_MODULES)
    command_line.discard_native_output()
    return True


#: Outputs that got their names before an interrupt came (see `completing`).
_completed: list[str] = []


class _Holding:
    """Whether an interrupt waits (`completing`), and the one that came meanwhile."""
    active = False
    pending: int | None = None


@contextlib.contextmanager
def completing(paths: list[str]):
    """Holds SIGINT and SIGTERM while a run's outputs get their names (renames
    of complete files), so that an interrupt comes before all of them or after
    all of them; one that comes after says they are complete.

    Held in Python (`one_line_on_interrupt`'s handler notes the signal), not
    by a signal mask: the kernel gives a process's signal to any of its
    threads that does not block it (a tokenizer's, say).
    """
    _Holding.active = True
    try:
        yield
        _completed.extend(paths)
    finally:
        _Holding.active = False
        if _Holding.pending is not None:
            _Holding.pending = None
            raise KeyboardInterrupt


def one_line_on_interrupt(tool: str):
    """Decorates a tool's ``main``: SIGINT (Ctrl-C) and SIGTERM end it with
    ``TOOL: interrupted by SIG...`` and exit status 128 + the signal, no traceback.

    The exception unwinds the stack first, so context managers remove their
    temporary files.
    """
    def decorate(main):
        @functools.wraps(main)
        def wrapped(argv):
            received = []

            def interrupt(signum, frame):
                received.append(signum)
                if _Holding.active:  # outputs being named: after them (`completing`)
                    _Holding.pending = signum
                    return
                raise KeyboardInterrupt

            signal.signal(signal.SIGINT, interrupt)
            signal.signal(signal.SIGTERM, interrupt)
            try:
                return main(argv)
            except KeyboardInterrupt:
                signum = received[-1] if received else signal.SIGINT
                sys.stdout.flush()
                written = (f"after writing {', '.join(_completed)}" if _completed
                           else "nothing written")
                sys.stderr.write(f"{tool}: interrupted by "
                                 f"{signal.Signals(signum).name}; {written}\n")
                sys.exit(128 + signum)
        return wrapped
    return decorate
