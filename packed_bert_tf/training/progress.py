"""Training progress: log lines, a progress bar on a terminal, TensorBoard summaries."""

from __future__ import annotations

import os

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
    """

    def __init__(self, output_dir: str | None, total_steps: int, *, subdir: str = "train",
                 progress_bar: bool | None = None):
        self.subdir = subdir
        self.writer = (tf.summary.create_file_writer(os.path.join(output_dir, subdir))
                       if output_dir else None)
        if progress_bar is None:
            progress_bar = stderr_is_terminal()
        self.progress_bar = None
        if progress_bar:
            import keras

            self.progress_bar = keras.utils.Progbar(total_steps, unit_name="step")

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
            self.progress_bar.update(step, values=shown, finalize=False)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def write_scalar_summary(name: str, value: float) -> None:
    """A TensorBoard scalar without importing the ``tensorboard`` package.

    ``tf.summary.scalar`` needs TensorBoard installed; this writes the same
    event (a float32 tensor tagged for the scalars plugin) with core TF.
    """
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    tf.summary.write(name, tf.constant(value, tf.float32), metadata=metadata)
