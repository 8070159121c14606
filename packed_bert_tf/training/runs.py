"""Pieces every training run shares (run_pretraining.py and run_squad.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import tempfile

import keras
import tensorflow as tf
from absl import logging

from packed_bert_tf import output_files
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import (load_google_checkpoint,
                                                     save_google_checkpoint)
from packed_bert_tf.training import cluster
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.distribution import create_strategy, set_mixed_precision
from packed_bert_tf.training.loop import run_training
from packed_bert_tf.training.progress import TrainingLogger, format_values
from packed_bert_tf.training.steps import Clipping, StepCounting
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


def start_training(model, optimizer, task: TrainingTask, *, strategy, output_dir: str,
                   steps: StepCounting, clip: Clipping, jit_compile: bool,
                   keep_checkpoint_max: int, init_checkpoint: str | None = None,
                   resume_dir: str | None = None,
                   worker: cluster.WorkerTask = cluster.SINGLE_WORKER
                   ) -> tuple[Trainer, TrainingCheckpoints, int]:
    """The `Trainer` of a run and its checkpoints in ``output_dir``, resumed from the
    latest of them (of ``resume_dir``'s, when given: see `WorkerOutputDirs`),
    else initialised from ``init_checkpoint`` (original BERT format); ``model``
    and ``optimizer`` (made with ``clip.optimizer_clipnorm``) were made under
    ``strategy``'s scope. Several workers must resume from one step
    (`cluster.check_same_step`).

    Returns:
      (trainer, checkpoints, the global step training starts from).
    """
    trainer = Trainer(model, optimizer, task=task, strategy=strategy,
                      steps_per_update=steps.micro_batches_per_update,
                      global_steps_per_update=steps.global_steps_per_update,
                      micro_batch_clipnorm=clip.micro_batch_clipnorm,
                      jit_compile=jit_compile)
    checkpoints = TrainingCheckpoints(output_dir, model=model, optimizer=optimizer,
                                      step=trainer.step, max_to_keep=keep_checkpoint_max,
                                      resume_dir=resume_dir)
    start_step = restore_or_initialize(
        checkpoints, functools.partial(load_google_checkpoint, model), init_checkpoint)
    cluster.check_same_step(strategy, start_step, worker)
    return trainer, checkpoints, start_step


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
    """Creates ``--output_dir``; one clear error when it is a file or cannot be made."""
    if not output_dir:
        raise ValueError("--output_dir is required")
    if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
        raise ValueError(f"--output_dir={output_dir} is a file, not a folder")
    try:
        tf.io.gfile.makedirs(output_dir)
    except tf.errors.OpError as error:
        raise ValueError(f"--output_dir={output_dir} cannot be created "
                         f"({type(error).__name__}: {error.message.splitlines()[0]})"
                         ) from None
    return output_dir


@dataclasses.dataclass(frozen=True)
class WorkerOutputDirs:
    """Where a worker reads and writes.

    Attributes:
      shared: ``--output_dir``, whose checkpoints every worker resumes from.
      own: where this worker writes: `shared` on the chief; a temporary
        folder on the other workers of a cluster (their checkpoint saves are
        collective, so they save too, but nothing of theirs is kept).
    """

    shared: str
    own: str


@contextlib.contextmanager
def worker_output_dirs(output_dir: str | None, worker: cluster.WorkerTask):
    """`WorkerOutputDirs` for the run: the chief makes and locks ``output_dir``
    (`make_output_dir`, `output_files.output_lock`); another worker gets a temporary
    folder, removed when the run ends, however it ends."""
    if worker.is_chief:
        output_dir = make_output_dir(output_dir)
        with output_files.output_lock(output_dir, flag="--output_dir"):
            yield WorkerOutputDirs(output_dir, output_dir)
        return
    if not output_dir:
        raise ValueError("--output_dir is required")
    own = tempfile.mkdtemp(prefix=f"{cluster.program_name()}-{worker.task_type}"
                                  f"{worker.task_id}-")
    logging.info("%s is not the chief: it resumes from %s and writes nothing there (its "
                 "own files go to %s, removed at the end)", worker.name, output_dir, own)
    try:
        yield WorkerOutputDirs(output_dir, own)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def run_on_this_worker(options, run_in, *, strategy=None, batch_flags: dict):
    """A front end's run on this process's worker: the batch sizes checked against
    the worker count (before connecting), the strategy created (connecting to
    the other workers of ``TF_CONFIG``, if any), then ``run_in(dirs, strategy,
    worker)`` in the `WorkerOutputDirs` of ``options.output_dir``, a lost peer
    ending in one `cluster.ClusterError` line.

    Args:
      options: the front end's options (``distribution_strategy``, ``tpu``,
        ``cluster_timeout_seconds``, ``output_dir`` and the batch sizes).
      run_in: ``(dirs, strategy, worker) -> summary``.
      strategy: a strategy already made (tests), else the options'.
      batch_flags: batch-size option name -> whether this run uses it.
    """
    worker = cluster.current_task(options.distribution_strategy)
    for flag, needed in batch_flags.items():
        if needed:
            cluster.check_worker_count(getattr(options, flag), worker, f"--{flag}")
    if strategy is None:  # connects to the other workers, if any
        strategy = create_strategy(options.distribution_strategy, tpu=options.tpu,
                                   cluster_timeout_seconds=options.cluster_timeout_seconds)
    with worker_output_dirs(options.output_dir, worker) as dirs, \
            cluster.cluster_errors(worker, dirs.shared):
        return run_in(dirs, strategy, worker)


def google_checkpoint_path(output_dir: str, step: int) -> str:
    """Where the final weights go in the original BERT format."""
    return os.path.join(output_dir, f"model.ckpt-{step}")


def train_and_export(trainer, dataset_fn, *, output_dir: str, num_train_steps: int,
                     schedule, checkpoints: TrainingCheckpoints, iterations_per_loop: int,
                     log_every_n_steps: int, save_checkpoints_steps: int,
                     progress_bar: bool | None = None) -> dict:
    """Trains to ``num_train_steps`` and writes the final weights in the BERT format.

    ``dataset_fn`` is given to ``strategy.distribute_datasets_from_function``;
    the loop's arguments are `run_training`'s (in global steps), ``schedule``
    the learning rate of the global step, ``progress_bar`` the logger's.

    Returns:
      The `TrainingSummary` as a dict, plus ``google_checkpoint`` (the path
      written) and ``train_steps_function_traces`` (1 when no step retraced).
    """
    iterator = iter(trainer.strategy.distribute_datasets_from_function(dataset_fn))
    logger = TrainingLogger(output_dir, num_train_steps, progress_bar=progress_bar)
    try:
        result = run_training(
            trainer, iterator, num_train_steps=num_train_steps,
            iterations_per_loop=iterations_per_loop, log_every_n_steps=log_every_n_steps,
            save_checkpoints_steps=save_checkpoints_steps,
            checkpoints=checkpoints, logger=logger,
            learning_rate_at=lambda step: float(schedule(step)))
    finally:
        logger.close()
    path = save_google_checkpoint(trainer.model,
                                  google_checkpoint_path(output_dir, result.final_step))
    logging.info("final weights in the original BERT format: %s", path)
    logging.info("trained steps %d..%d: %s", result.start_step, result.final_step,
                 format_values({**result.final_metrics,
                                "sequences_per_second": result.sequences_per_second,
                                "tokens_per_second": result.tokens_per_second,
                                "occupancy": result.occupancy}))
    train = result.to_dict()
    train.update(google_checkpoint=path, train_steps_function_traces=(
        trainer.train_steps_function.experimental_get_tracing_count()))
    return train
