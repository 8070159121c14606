"""Pieces every training run shares (run_pretraining.py and run_squad.py)."""

from __future__ import annotations

import contextlib
import os

import keras
import tensorflow as tf
from absl import logging

from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.distribution import set_mixed_precision


def read_bert_config(path: str | None, flag: str = "--bert_config_file") -> BertConfig:
    """The model config; one clear error for a missing or bad file."""
    if not path:
        raise ValueError(f"{flag} is required")
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{flag}={path}: no such file")
    return BertConfig.from_json_file(path)


@contextlib.contextmanager
def mixed_precision_policy(mode: str):
    """Sets the global Keras dtype policy for ``mode`` and restores the previous one."""
    previous = keras.mixed_precision.global_policy()
    try:
        set_mixed_precision(mode)
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def restore_or_initialize(checkpoints: TrainingCheckpoints, init_fn=None,
                          init_checkpoint: str | None = None) -> int:
    """Resumes from the latest checkpoint in the output folder, else initialises.

    ``init_checkpoint`` (read by ``init_fn(path)``) is used only when the run
    has no checkpoint of its own: a restarted run continues where it stopped.

    Returns:
      The step training starts from.
    """
    step = checkpoints.restore_latest()
    if step is not None:
        if init_checkpoint:
            logging.info("ignoring --init_checkpoint=%s: resuming from %s", init_checkpoint,
                         checkpoints.latest)
        return step
    if init_checkpoint:
        if not (tf.io.gfile.exists(init_checkpoint + ".index")
                or tf.io.gfile.isdir(init_checkpoint)):
            raise ValueError(f"--init_checkpoint={init_checkpoint}: no checkpoint there "
                             f"(expected {init_checkpoint}.index)")
        init_fn(init_checkpoint)
    return 0


def make_output_dir(output_dir: str | None) -> str:
    if not output_dir:
        raise ValueError("--output_dir is required")
    tf.io.gfile.makedirs(output_dir)
    return output_dir


def google_checkpoint_path(output_dir: str, step: int) -> str:
    """Where the final weights go in the original BERT format."""
    return os.path.join(output_dir, f"model.ckpt-{step}")
