"""Training checkpoints: model, optimizer, step (and so the data position), resumable."""

from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

CHECKPOINT_SUBDIR = "checkpoints"


class TrainingCheckpoints:
    """`tf.train.CheckpointManager` over the model, optimizer, global step and dropout seeds.

    The data position is the global step: a resumed run skips the batches
    the step accounts for (``pretraining_dataset(skip_batches=...)``).
    Checkpoints go to ``<output_dir>/checkpoints/ckpt-<step>``.

    Args:
      output_dir: the run's output folder.
      model, optimizer: the Keras objects being trained.
      step: the trainer's global step variable (updates done).
      max_to_keep: checkpoints kept (older ones are deleted).
    """

    def __init__(self, output_dir: str, *, model, optimizer, step: tf.Variable,
                 max_to_keep: int = 3):
        self.directory = os.path.join(output_dir, CHECKPOINT_SUBDIR)
        self.step = step
        # Dropout's random state too, so that a resumed run draws the masks
        # the uninterrupted run would have drawn.
        seed_states = [v for v in model.variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer,
                                              global_step=step, seed_states=seed_states)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                  max_to_keep=max_to_keep,
                                                  step_counter=step)
        #: The step of the last checkpoint written or restored here.
        self.saved_step: int | None = None

    @staticmethod
    def exists(output_dir: str) -> bool:
        """Whether ``output_dir`` holds a checkpoint a run would resume from."""
        return tf.train.latest_checkpoint(os.path.join(output_dir, CHECKPOINT_SUBDIR)) \
            is not None

    @property
    def latest(self) -> str | None:
        return self.manager.latest_checkpoint

    def restore_latest(self) -> int | None:
        """Restores the latest checkpoint; its step, or None when there is none."""
        path = self.latest
        if path is None:
            return None
        # Every saved object must find its variable: a checkpoint of another
        # model or optimizer fails here rather than training from half of it.
        self.checkpoint.restore(path).assert_existing_objects_matched()
        step = self.saved_step = int(self.step.numpy())
        logging.info("resumed from %s at step %d", path, step)
        return step

    def save(self) -> str:
        """Writes a checkpoint for the current step (at most once per step)."""
        step = int(self.step.numpy())
        path = self.manager.save(checkpoint_number=step)
        self.saved_step = step
        logging.info("saved checkpoint %s", path)
        return path
