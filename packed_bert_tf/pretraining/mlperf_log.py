"""A run's MLPerf log: the ``:::MLLOG`` lines that MLPerf's compliance checker
reads, written with MLCommons' own logger (`mlperf_logging.mllog`).

`MlperfLog` writes one file and nothing else (mllog's default logger would
also print every line to stdout). A new run starts the file afresh: two runs
appended into one file fail the checker. A resumed run appends: its earlier
lines (``init_*``, ``run_start``, the evaluations so far) stay, and it goes on
from where it stopped. Only the chief of several workers writes a log
(`open_mlperf_log`); the others get `NO_LOG`, which writes nothing.

Each line's metadata names the file and line of the call, as the checker's
tools expect (``stack_offset``: the caller of `MlperfLog.event`, not this
module).
"""

from __future__ import annotations

import logging
import os

from mlperf_logging.mllog.mllog import MLLogger

# The project's root: file names in the log are relative to it.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class MlperfLog:
    """The ``:::MLLOG`` lines of one run, in one file.

    Args:
      path: the log file; made afresh, or appended to when ``append``.
      append: a resumed run: keep the lines already there.

    Raises:
      ValueError: the file cannot be opened for writing (its folder is
        missing, say), naming ``--mlperf_log_file``.
    """

    def __init__(self, path: str, *, append: bool = False):
        try:
            self._handler = logging.FileHandler(path, mode="a" if append else "w")
        except OSError as error:
            raise ValueError(f"--mlperf_log_file={path} cannot be written "
                             f"({error.strerror or error})") from None
        self.path = path
        # A logger of its own, outside logging's registry: it writes this file only.
        logger = logging.Logger(f"mlperf_log:{path}", level=logging.INFO)
        logger.addHandler(self._handler)
        self._mllogger = MLLogger(logger=logger, default_stack_offset=2,
                                        root_dir=_ROOT)

    def event(self, key: str, value=None, metadata: dict | None = None) -> None:
        """A point in time (``POINT_IN_TIME``)."""
        self._mllogger.event(key=key, value=value, metadata=metadata)

    def start(self, key: str, value=None, metadata: dict | None = None) -> None:
        """The start of an interval (``INTERVAL_START``): ``init_start``, ``run_start``..."""
        self._mllogger.start(key=key, value=value, metadata=metadata)

    def end(self, key: str, value=None, metadata: dict | None = None) -> None:
        """The end of an interval (``INTERVAL_END``)."""
        self._mllogger.end(key=key, value=value, metadata=metadata)

    def close(self) -> None:
        self._handler.close()


class _NoLog:
    """A log that writes nothing: no ``--mlperf_log_file``, or not the chief."""

    path = None

    def event(self, key, value=None, metadata=None) -> None:
        pass

    start = end = event

    def close(self) -> None:
        pass


NO_LOG = _NoLog()


def open_mlperf_log(path: str | None, *, is_chief: bool = True, append: bool = False):
    """The run's `MlperfLog` at ``path`` on the chief; `NO_LOG` without a path or
    on another worker."""
    if not path or not is_chief:
        return NO_LOG
    return MlperfLog(path, append=append)


__all__ = ["MlperfLog", "NO_LOG", "open_mlperf_log"]
