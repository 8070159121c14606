"""Training progress: log lines, a progress bar on a terminal, TensorBoard summaries."""

from __future__ import annotations

import contextlib
import io
import os
import sys

import tensorflow as tf
from absl import logging
from tensorflow.core.framework import summary_pb2

from packed_bert_tf.command_line import stderr_is_terminal

# Order and format of the values on a log line (others follow, as %.4g).
_LINE_FORMATS = {
    "loss": "{:.4f}",
    "masked_lm_accuracy": "{:.4f}",
    "next_sentence_accuracy": "{:.4f}",
    "learning_rate": "{:.3e}",
    "sequences_per_second": "{:.1f}",
    "tokens_per_second": "{:.0f}",
    "occupancy": "{:.4f}",
    "model_flops_per_second": "{:.3e}",
    "mfu": "{:.4f}",
}


def format_values(values: dict) -> str:
    """``name value`` pairs, the known ones first, each formatted for reading."""
    names = [name for name in _LINE_FORMATS if name in values]
    names += sorted(name for name in values if name not in _LINE_FORMATS)
    return "  ".join(f"{name} {_LINE_FORMATS.get(name, '{:.4g}').format(values[name])}"
                     for name in names)


class TrainingLogger:
    """Writes each logged point to absl logging, TensorBoard and a progress bar.

    Args:
      output_dir: TensorBoard event files go to ``<output_dir>/<subdir>``;
        None: no TensorBoard.
      total_steps: the step the run ends at (for the progress bar).
      subdir: ``train`` or ``eval``.
      progress_bar: show a Keras progress bar; default: when stderr is a
        terminal (`command_line.stderr_is_terminal`).
      utilisation: the run's `packed_bert_tf.training.flops.Utilisation`:
        the training loop adds each point's model FLOPs per second and MFU
        to its values; None: not counted.
    """

    def __init__(self, output_dir: str | None, total_steps: int, *, subdir: str = "train",
                 progress_bar: bool | None = None, utilisation=None):
        self.subdir = subdir
        self.utilisation = utilisation
        self.writer = (tf.summary.create_file_writer(os.path.join(output_dir, subdir))
                       if output_dir else None)
        if progress_bar is None:
            progress_bar = stderr_is_terminal() and sys.stdout.isatty()
        self.progress_bar = BarBelowLogs(total_steps) if progress_bar else None

    def log(self, step: int, values: dict) -> None:
        """Logs ``values`` (floats) at ``step``."""
        values = {name: float(value) for name, value in values.items()}
        logging.info("%s step %d  %s", self.subdir, step, format_values(values))
        if self.writer is not None:
            with self.writer.as_default(step=step):
                for name, value in values.items():
                    write_scalar_summary(name, value)
            self.writer.flush()
        if self.progress_bar is not None:
            shown = [(name, values[name]) for name in ("loss", "sequences_per_second")
                     if name in values]
            self.progress_bar.update(step, shown)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.progress_bar is not None:
            self.progress_bar.close()
            self.progress_bar = None


class BarBelowLogs:
    """A Keras progress bar on the terminal's last line, every log line above it.

    The bar and the log lines would otherwise share a line: the bar ends
    without a new line, and the log lines reach the terminal by another way
    (stderr, through the filter of `command_line.quiet_native_logs`). While
    the bar is shown, absl's log lines are written to the bar's stream
    (stdout, the same terminal) instead: the bar's line is cleared, the log
    line written, and the bar drawn again below it.

    Args:
      total_steps: the step the bar is full at.
    """

    #: Carriage return, then erase to the end of the line (ANSI).
    CLEAR_LINE = "\r\x1b[K"

    def __init__(self, total_steps: int):
        import keras

        self.stream = sys.stdout
        self.bar = keras.utils.Progbar(total_steps, unit_name="step")
        self.line = ""  # the bar as last drawn
        self._handler = logging.get_absl_handler().python_handler
        self._log_stream = self._handler.stream
        self._handler.setStream(self)

    def update(self, step: int, values: list) -> None:
        """Draws the bar at ``step`` with ``values`` ((name, value) pairs)."""
        drawn = io.StringIO()
        with contextlib.redirect_stdout(drawn):
            self.bar.update(step, values=values, finalize=False)
        if drawn.getvalue():  # Keras draws at most every 0.05 s
            self.line = drawn.getvalue().rsplit("\r", 1)[-1].rstrip("\n")
            self._draw()

    def write(self, text: str) -> int:
        """A log record's text (absl's handler writes here): above the bar."""
        self.stream.write(self.CLEAR_LINE + text)
        if text.endswith("\n"):
            self._draw()
        else:
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def _draw(self) -> None:
        self.stream.write(self.CLEAR_LINE + self.line)
        self.stream.flush()

    def close(self) -> None:
        """Leaves the bar as drawn, on a line of its own, and gives absl's
        log lines their stream back."""
        self._handler.setStream(self._log_stream)
        if self.line:
            self.stream.write("\n")
            self.stream.flush()


def write_scalar_summary(name: str, value: float) -> None:
    """A TensorBoard scalar without importing the ``tensorboard`` package.

    ``tf.summary.scalar`` needs TensorBoard installed; this writes the same
    event (a float32 tensor tagged for the scalars plugin) with core TF.
    """
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    tf.summary.write(name, tf.constant(value, tf.float32), metadata=metadata)
