"""What the data-prep tools print: their own lines, not Beam's or TensorFlow's.

By default a tool prints what it read, a progress line on long work, a summary
or one error line, and nothing else:

- absl's ``--verbosity`` defaults to -1 (warnings) instead of ``app.run``'s 0
  (info): the project's warnings show, one line each; Python log records
  from other packages (Apache Beam, TensorFlow, gRPC) are dropped, their
  warnings ignored (a failure they log is the tool's one error line, and
  what Beam's workers log as Ctrl-C reaches them is not the user's to read);
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
import threading
import warnings

from absl import flags, logging

from packed_bert_tf import command_line

#: Where the project's own code lives: its log records always pass.
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_MODULES = r"(?!packed_bert_tf|data_prep|__main__)"


class _OwnRecordsOnly(logging_module.Filter):
    """Passes the project's records only."""

    def filter(self, record: logging_module.LogRecord) -> bool:
        return os.path.abspath(record.pathname).startswith(_PROJECT_ROOT + os.sep) \
            and "site-packages" not in record.pathname


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
    # The log handlers that write to stderr (absl's) hold the stream of
    # descriptor 2, /dev/null from here on: they follow the tool's own lines,
    # so that the project's warnings (a vocabulary's repeated token, a lock
    # taken over) reach the user.
    stderr = sys.stderr
    handlers = [handler for handler in _stream_handlers() if handler.stream is stderr]
    command_line.discard_native_output()
    for handler in handlers:
        handler.setStream(sys.stderr)
    return True


def _stream_handlers() -> list[logging_module.StreamHandler]:
    """The stream handlers of the root logger, absl's among them."""
    found = []
    for handler in logging_module.getLogger().handlers:
        handler = getattr(handler, "python_handler", handler)  # absl's wraps one
        if isinstance(handler, logging_module.StreamHandler):
            found.append(handler)
    return found


#: Outputs that got their names before an interrupt came (see `completing`).
_completed: list[str] = []


class _Holding:
    """Whether an interrupt waits (`completing`), and the one that came meanwhile."""
    active = False
    pending: int | None = None


@contextlib.contextmanager
def interrupts_held():
    """Holds SIGINT and SIGTERM over a step that must not be cut in two; one
    that came meanwhile is raised (as KeyboardInterrupt) once the step is done.

    Held in Python (`one_line_on_interrupt`'s handler notes the signal), not
    by a signal mask: the kernel gives a process's signal to any of its
    threads that does not block it (a tokenizer's, say).
    """
    _Holding.active = True
    try:
        yield
    finally:
        _Holding.active = False
        if _Holding.pending is not None:
            _Holding.pending = None
            raise KeyboardInterrupt


@contextlib.contextmanager
def completing(paths: list[str]):
    """Holds SIGINT and SIGTERM while a run's outputs get their names (renames
    of complete files, `interrupts_held`), so that an interrupt comes before
    all of them or after all of them; one that comes after says they are
    complete."""
    with interrupts_held():
        yield
        _completed.extend(paths)


@contextlib.contextmanager
def signals_reach_the_main_thread():
    """Sends SIGINT and SIGTERM on to the main thread whichever thread the
    kernel gave them to, for as long as the block runs.

    Python runs its signal handlers in the main thread, but the kernel gives a
    process's signal to any of its threads: one that lands in a worker's
    thread (Beam's, a process pool's) leaves a main thread that waits on a
    lock for those workers (which Ctrl-C killed too) waiting forever. A
    thread of ours reads each signal's number from `signal.set_wakeup_fd`
    and sends it on to the main thread (`signal.pthread_kill`), which then
    wakes and runs its handler. Handlers must take a signal twice in a row
    (the one sent on lands again); each signal is sent on once. Does nothing
    outside the main thread (where no handler can be set either).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    previous = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    main_thread = threading.main_thread().ident
    forwarded = set()  # signals sent on whose copy has not come back yet

    def forward():
        while True:
            data = os.read(reader, 64)
            for signum in data:
                if signum == 0:  # the block ended
                    return
                if signum not in (signal.SIGINT, signal.SIGTERM):
                    continue
                if signum in forwarded:
                    forwarded.discard(signum)  # the copy we sent
                    continue
                forwarded.add(signum)
                signal.pthread_kill(main_thread, signum)

    forwarder = threading.Thread(target=forward, name="signals-to-main", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.write(writer, b"\0")
        forwarder.join()
        os.close(reader)
        os.close(writer)


class _Run:
    """What the running tool holds until its ``main`` ends (`held_until_the_end`)."""
    stack: contextlib.ExitStack | None = None


def held_until_the_end(context):
    """Enters ``context`` (an output lock, say) and holds it until the tool's
    ``main`` ends, however it ends (`one_line_on_interrupt` exits it); returns
    what entering it gave."""
    if _Run.stack is None:
        raise RuntimeError("held_until_the_end outside a tool's main")
    return _Run.stack.enter_context(context)


#: Seconds a failing thread waits for an interrupt that may be on its way
#: (see `one_line_on_interrupt`) before its traceback is printed.
_INTERRUPT_GRACE_SECONDS = 2.0


def one_line_on_interrupt(tool: str):
    """Decorates a tool's ``main``: SIGINT (Ctrl-C) and SIGTERM end it with
    ``TOOL: interrupted by SIG...`` and exit status 128 + the signal, no traceback.

    The exception unwinds the stack first, so context managers remove their
    temporary files (and what `held_until_the_end` holds goes); a signal that
    lands in another thread is sent on to the main thread
    (`signals_reach_the_main_thread`), and a second one while the tool ends
    changes nothing.
    """
    def decorate(main):
        @functools.wraps(main)
        def wrapped(argv):
            received = []
            interrupted = threading.Event()

            def interrupt(signum, frame):
                if received:  # already ending (or the copy sent to the main thread)
                    return
                received.append(signum)
                interrupted.set()
                if _Holding.active:  # a step that must not be cut: after it (`interrupts_held`)
                    _Holding.pending = signum
                    return
                raise KeyboardInterrupt

            signal.signal(signal.SIGINT, interrupt)
            signal.signal(signal.SIGTERM, interrupt)
            previous_hook = threading.excepthook

            def quiet_after_an_interrupt(args):
                # Ctrl-C reaches the tool's subprocesses too (Beam's workers):
                # a thread watching one fails as it dies, often before the
                # main thread has taken the signal. Its traceback is the
                # interrupt's, and the one line says it.
                if not interrupted.wait(_INTERRUPT_GRACE_SECONDS):
                    previous_hook(args)

            threading.excepthook = quiet_after_an_interrupt
            try:
                with signals_reach_the_main_thread(), contextlib.ExitStack() as held:
                    _Run.stack = held
                    try:
                        return main(argv)
                    finally:
                        _Run.stack = None
            except KeyboardInterrupt:
                signum = received[-1] if received else signal.SIGINT
                sys.stdout.flush()
                written = (f"after writing {', '.join(_completed)}" if _completed
                           else "nothing written")
                sys.stderr.write(f"{tool}: interrupted by "
                                 f"{signal.Signals(signum).name}; {written}\n")
                sys.exit(128 + signum)
            finally:
                if not interrupted.is_set():  # else threads may still fail as it ends
                    threading.excepthook = previous_hook
        return wrapped
    return decorate
