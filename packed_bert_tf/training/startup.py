"""How a training run starts: its model config, its mixed-precision policy, and a
`Trainer` restored from the run's latest checkpoint or initialised from an
original BERT checkpoint."""

from __future__ import annotations

import contextlib
import functools

import keras
import tensorflow as tf
from absl import logging

from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import load_google_checkpoint
from packed_bert_tf.training import cluster
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.distribution import set_mixed_precision
from packed_bert_tf.training.options import TrainingOptions
from packed_bert_tf.training.output_dirs import WorkerOutputDirs
from packed_bert_tf.training.steps import StepCounting, clipping
from packed_bert_tf.training.trainer import Trainer, TrainingTask


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


def start_training(model, optimizer, task: TrainingTask, options: TrainingOptions, *,
                   strategy: tf.distribute.Strategy, steps: StepCounting,
                   dirs: WorkerOutputDirs,
                   worker: cluster.WorkerTask = cluster.SINGLE_WORKER
                   ) -> tuple[Trainer, TrainingCheckpoints, int]:
    """The `Trainer` of a run and its checkpoints under ``dirs.own``, resumed from the
    latest checkpoint in ``dirs.shared``, else initialised from
    ``options.init_checkpoint`` (original BERT format).

    ``model`` and ``optimizer`` were made under ``strategy``'s scope, the
    optimizer with the ``optimizer_clipnorm`` of ``options``' clipping for
    ``steps`` (`packed_bert_tf.training.steps.clipping`); the trainer clips
    each micro-batch where that clipping says so. ``options`` also gives
    ``jit_compile`` and ``keep_checkpoint_max``. Several workers must resume
    from one step (`cluster.check_same_step`).

    Returns:
      (trainer, checkpoints, the global step training starts from).
    """
    clip = clipping(after_allreduce=options.clip_by_global_norm_after_gradient_allreduce,
                    micro_batches_per_update=steps.micro_batches_per_update)
    trainer = Trainer(model, optimizer, task=task, strategy=strategy,
                      steps_per_update=steps.micro_batches_per_update,
                      global_steps_per_update=steps.global_steps_per_update,
                      micro_batch_clipnorm=clip.micro_batch_clipnorm,
                      jit_compile=options.jit_compile)
    checkpoints = TrainingCheckpoints(dirs.own, model=model, optimizer=optimizer,
                                      step=trainer.step,
                                      max_to_keep=options.keep_checkpoint_max,
                                      resume_dir=dirs.shared)
    start_step = restore_or_initialize(
        checkpoints, functools.partial(load_google_checkpoint, model),
        options.init_checkpoint)
    cluster.check_same_step(strategy, start_step, worker)
    return trainer, checkpoints, start_step


def restore_or_initialize(checkpoints: TrainingCheckpoints, init_fn=None,
                          init_checkpoint: str | None = None) -> int:
    """Resumes from the latest checkpoint of ``checkpoints``, else initialises.

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


__all__ = ["mixed_precision_policy", "read_bert_config", "restore_or_initialize",
           "start_training"]
