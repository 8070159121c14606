"""Progress of a tool's long work: a bar on a terminal, periodic lines elsewhere.

Work that may run longer than a few seconds (making instances, verifying
packs, planning, packing) shows what it has done, its rate and, where the
total is known, the time left:

- on a terminal (`command_line.stderr_is_terminal`), one line redrawn in
  place at most 5 times a second, from `Progress.quiet_for` seconds on;
- elsewhere (a log file, CI), a line every `Progress.interval` seconds, the
  first after one interval: work done sooner logs nothing.

    with Progress("making instances", unit="documents", total=40_000) as progress:
        for document in documents:
            ...
            progress.advance()

    making instances: 12,000/40,000 documents (30 %), 2,950 documents/s, 9 s left
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from packed_bert_tf.command_line import stderr_is_terminal

#: Seconds between redraws of a terminal's line.
_REDRAW_SECONDS = 0.2


class Progress:
    """The progress of one piece of work, shown on stderr.

    Args:
      what: what is being done (``"making instances"``).
      total: the count when done, if known (then a percentage and the time
        left are shown); it can also be given later, to `update`.
      unit: what is counted (``"documents"``, ``"MB"``).
      interval: seconds between lines when stderr is not a terminal (the
        first after one interval).
      quiet_for: seconds of work before a terminal's line is drawn.
      stream, terminal, clock: where to write, whether it is a terminal and
        the time (tests); default stderr, `stderr_is_terminal`,
        ``time.monotonic``.
    """

    def __init__(self, what: str, total: float | None = None, *, unit: str = "items",
                 interval: float = 10.0, quiet_for: float = 2.0,
                 stream: TextIO | None = None, terminal: bool | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.total, self.unit = what, total, unit
        self.interval, self.quiet_for = interval, quiet_for
        self.stream = stream or sys.stderr
        self.terminal = stderr_is_terminal() if terminal is None else terminal
        self.clock = clock
        self.started = clock()
        self.done = 0.0
        self._shown_at: float | None = None  # when a line was last shown
        self._width = 0  # of the terminal line drawn

    def advance(self, count: float = 1) -> None:
        """``count`` more done."""
        self.update(self.done + count)

    def update(self, done: float, total: float | None = None) -> None:
        """``done`` so far (and the total, when it becomes known)."""
        self.done = done
        if total is not None:
            self.total = total
        now = self.clock()
        if self.terminal:
            first, every = self.quiet_for, _REDRAW_SECONDS
        else:
            first = every = self.interval
        last = self.started + first - every if self._shown_at is None else self._shown_at
        if now - last >= every:
            self._show(now)

    def line(self, now: float | None = None) -> str:
        """The progress as one line of text."""
        elapsed = max((self.clock() if now is None else now) - self.started, 1e-9)
        rate = self.done / elapsed
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            left = (self.total - self.done) / rate if rate > 0 else None
            return (f"{self.what}: {_number(self.done)}/{_number(self.total)} {self.unit} "
                    f"({100 * fraction:.0f} %), {_number(rate)} {self.unit}/s, "
                    f"{_duration(left) + ' left' if left is not None else '...'}")
        return (f"{self.what}: {_number(self.done)} {self.unit}, {_number(rate)} "
                f"{self.unit}/s, {_duration(elapsed)}")

    def _show(self, now: float) -> None:
        text = self.line(now)
        if self.terminal:
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown_at = now

    def close(self) -> None:
        """Ends the display: on a terminal, the last state and a new line (if a
        line was drawn)."""
        if self._shown_at is None:
            return
        if self.terminal:
            self._show(self.clock())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _number(value: float) -> str:
    return f"{value:,.1f}" if 0 < abs(value) < 10 and value != int(value) else \
        f"{value:,.0f}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
