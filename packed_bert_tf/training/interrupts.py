"""Ctrl-C and SIGTERM in a training run: stop at the next step boundary, with a checkpoint.

A run started by a front end (`packed_bert_tf.training.flags.run_or_exit`)
holds `stop_on_signals` for its whole length. While the training loop runs
(`at_step_boundaries`), the first SIGINT or SIGTERM is only noted: the loop
finishes the chunk of steps in flight (at most ``--iterations_per_loop``
steps), writes a checkpoint and raises `TrainingInterrupted`, which the
front end turns into one line and exit status 128 + the signal. A resumed
run then goes on as the uninterrupted one would have (the checkpoint holds
the step, and so the data position). A second signal, or one outside the
loop (while the data is checked, the model built, an evaluation runs),
stops at once with ``KeyboardInterrupt``.

Without `stop_on_signals` (a library user's own loop) nothing is installed
and `requested` is always None.
"""

from __future__ import annotations

import contextlib
import signal
import threading

from absl import logging

#: The signals a run stops on.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(Exception):
    """The run stopped at a step boundary on a signal, its checkpoint written."""

    def __init__(self, signal_number: int, step: int, num_train_steps: int,
                 checkpoint: str | None):
        self.signal_number = signal_number
        self.step = step
        saved = (f"checkpoint {checkpoint} written; run the same command to resume"
                 if checkpoint else "no checkpoint written")
        super().__init__(f"interrupted by {signal.Signals(signal_number).name} at step "
                         f"{step} of {num_train_steps}; {saved}")


class _State:
    installed = False
    deferring = False
    requested: int | None = None  # the first signal noted while deferring
    received: int | None = None  # the last signal received


_state = _State()


def requested() -> int | None:
    """The signal that asked the loop to stop at the next step boundary, if any."""
    return _state.requested


def last_signal() -> int:
    """The last stop signal received (SIGINT when none: a ``KeyboardInterrupt``
    raised by Python itself)."""
    return _state.received or signal.SIGINT


def _handle(signum, frame) -> None:
    del frame
    _state.received = signum
    if _state.deferring and _state.requested is None:
        _state.requested = signum
        logging.warning("%s: stopping at the next step boundary, with a checkpoint "
                        "(again to stop at once, without one)",
                        signal.Signals(signum).name)
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_on_signals():
    """Installs the run's SIGINT and SIGTERM handlers (in the main thread; elsewhere
    nothing is installed), restoring the previous ones at the end."""
    if threading.current_thread() is not threading.main_thread() or _state.installed:
        yield
        return
    previous = {number: signal.signal(number, _handle) for number in STOP_SIGNALS}
    _state.installed, _state.requested, _state.received = True, None, None
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _state.installed, _state.requested = False, None


@contextlib.contextmanager
def at_step_boundaries():
    """Inside (the training loop), the first stop signal is noted, not raised."""
    _state.deferring = True
    try:
        yield
    finally:
        _state.deferring = False
