"""A front end's output folder and the worker it runs on.

`run_on_this_worker` checks the batch sizes against the workers of
``TF_CONFIG``, creates the strategy, then runs in the `WorkerOutputDirs` of
``--output_dir`` (made and locked by the chief; a temporary folder of their
own for the other workers of a cluster). Every front end reaches it through
`packed_bert_tf.training.startup.run_task`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile

import tensorflow as tf
from absl import logging

from packed_bert_tf import output_files
from packed_bert_tf.training import cluster
from packed_bert_tf.training.distribution import choose_strategy, create_chosen_strategy


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
      options: the front end's `packed_bert_tf.training.options.TrainingOptions`
        (the strategy's flags, `distribution.choose_strategy`,
        ``cluster_timeout_seconds``,
        ``output_dir`` and the batch sizes are read).
      run_in: ``(dirs, strategy, worker) -> summary``.
      strategy: a strategy already made (tests), else the options'.
      batch_flags: batch-size option name -> whether this run uses it.

    Returns:
      What ``run_in`` returns.
    """
    choice = choose_strategy(options)
    worker = cluster.current_task(choice.name)
    for flag, needed in batch_flags.items():
        if needed:
            cluster.check_worker_count(getattr(options, flag), worker, f"--{flag}")
    if strategy is None:  # connects to the other workers, if any
        strategy = create_chosen_strategy(
            choice, cluster_timeout_seconds=options.cluster_timeout_seconds)
    with worker_output_dirs(options.output_dir, worker) as dirs, \
            cluster.cluster_errors(worker, dirs.shared):
        return run_in(dirs, strategy, worker)


__all__ = ["WorkerOutputDirs", "make_output_dir", "run_on_this_worker",
           "worker_output_dirs"]
