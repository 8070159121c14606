"""A run's checkpoints: the training state it resumes from (`TrainingCheckpoints`:
model, optimizer, global step, dropout seeds, the run's totals), and where its
final weights go in the original BERT format (`google_checkpoint_path`)."""

from __future__ import annotations

import contextlib
import json
import os
import re

import tensorflow as tf
from absl import logging

from packed_bert_tf import filesystem

CHECKPOINT_SUBDIR = "checkpoints"


class RunTotals(tf.Module):
    """Whole-run counts and logged points, saved with every checkpoint.

    A resumed run starts from the totals of the checkpoint it resumes (the
    steps after it are done again and counted again), so that its summary
    covers every segment of the run, not only the last one.

    Attributes:
      counts: `NAMES` -> float64 variable (`TrainingSummary`'s fields).
      history: every logged point so far, as JSON.
      evaluations: every evaluation during training so far, as JSON.
    """

    NAMES = ("sequences", "tokens", "padded_tokens", "seconds", "steady_seconds",
             "steady_cpu_seconds", "steady_sequences", "steady_tokens", "attention_pairs",
             "steady_attention_pairs", "measured_peak_flops_per_second")

    def __init__(self):
        super().__init__(name="run_totals")
        self.counts = {name: tf.Variable(0.0, dtype=tf.float64, trainable=False, name=name)
                       for name in self.NAMES}
        self.history = tf.Variable("[]", dtype=tf.string, trainable=False, name="history")
        self.evaluations = tf.Variable("[]", dtype=tf.string, trainable=False,
                                       name="evaluations")

    def read(self) -> tuple[dict, list, list]:
        """(name -> float, list of logged points, list of evaluations)."""
        return ({name: float(value.numpy()) for name, value in self.counts.items()},
                json.loads(self.history.numpy().decode()),
                json.loads(self.evaluations.numpy().decode()))

    def write(self, counts: dict, history: list, evaluations: list) -> None:
        for name, value in self.counts.items():
            value.assign(counts[name])
        self.history.assign(json.dumps(history))
        self.evaluations.assign(json.dumps(evaluations))


class TrainingCheckpoints:
    """`tf.train.CheckpointManager` over the model, optimizer, global step, dropout
    seeds and the run's totals (`RunTotals`).

    The data position follows from the global step: a resumed run skips what
    was read before it (pre-training: the rows of
    `packed_bert_tf.training.trajectory.rows_read`; fine-tuning: the updates
    done).
    Checkpoints go to ``<output_dir>/checkpoints/ckpt-<step>``.

    Args:
      output_dir: the run's output folder, where checkpoints are written.
      model, optimizer: the Keras objects being trained.
      step: the trainer's global step variable (`Trainer.step`).
      max_to_keep: checkpoints kept (older ones are deleted).
      resume_dir: the output folder to resume from, when not `output_dir`:
        a worker other than the chief of several resumes from the chief's
        ``--output_dir`` and writes its own (collective) saves into a
        temporary folder.
    """

    def __init__(self, output_dir: str, *, model, optimizer, step: tf.Variable,
                 max_to_keep: int = 3, resume_dir: str | None = None):
        self.directory = os.path.join(output_dir, CHECKPOINT_SUBDIR)
        repair_state_file(self.directory)
        self.step = step
        # Dropout's random state too, so that a resumed run draws the masks
        # the uninterrupted run would have drawn.
        seed_states = [v for v in model.variables if "seed_generator" in v.path]
        self.totals = RunTotals()
        training = dict(model=model, optimizer=optimizer, global_step=step,
                        seed_states=seed_states)
        self.checkpoint = tf.train.Checkpoint(**training, run_totals=self.totals)
        # Restored apart: the training state strictly, the totals as far as a
        # checkpoint holds them (one written before a count was added lacks it).
        self._training_state = tf.train.Checkpoint(**training)
        self._totals_only = tf.train.Checkpoint(run_totals=self.totals)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                  max_to_keep=max_to_keep,
                                                  step_counter=step)
        #: Where checkpoints are resumed from (read only, when not `manager`).
        self.source = self.manager
        if resume_dir is not None and os.path.join(resume_dir, CHECKPOINT_SUBDIR) \
                != self.directory:
            self.source = tf.train.CheckpointManager(
                self.checkpoint, os.path.join(resume_dir, CHECKPOINT_SUBDIR),
                max_to_keep=None, step_counter=step)
        #: The step of the last checkpoint written or restored here.
        self.saved_step: int | None = None

    @staticmethod
    def exists(output_dir: str) -> bool:
        """Whether ``output_dir`` holds a checkpoint a run would resume from."""
        return bool(checkpoints_on_disk(os.path.join(output_dir, CHECKPOINT_SUBDIR)))

    @staticmethod
    def newest_step(output_dir: str) -> int:
        """The step of the newest checkpoint in ``output_dir`` (the one a run
        resumes from), read without restoring it; 0 when there is none."""
        found = checkpoints_on_disk(os.path.join(output_dir, CHECKPOINT_SUBDIR))
        return _step_of(found[-1]) if found else 0

    @staticmethod
    def model_parts(output_dir: str) -> set[str]:
        """The model's attributes saved in ``output_dir``'s newest checkpoint
        (``masked_lm_head``, ...), read without restoring it: what kind of model
        wrote it. Empty when there is none."""
        found = checkpoints_on_disk(os.path.join(output_dir, CHECKPOINT_SUBDIR))
        if not found:
            return set()
        try:
            names = [name for name, _ in tf.train.list_variables(found[-1])]
        except (tf.errors.OpError, ValueError):  # damaged: restoring names it
            return set()
        return {name.split("/")[1] for name in names if name.startswith("model/")}

    def _candidates(self) -> list[str]:
        """The checkpoints to resume from, oldest first: those the state file lists
        and those whose index file is there (the state file may be older than
        them, or damaged), each once."""
        by_step = {_step_of(path): path for path in checkpoints_on_disk(
            self.source.directory)}
        by_step.update((_step_of(path), path) for path in self.source.checkpoints)
        return [by_step[step] for step in sorted(by_step)]

    @property
    def latest(self) -> str | None:
        """The newest checkpoint whose files are there (one whose files were deleted,
        a damaged one, say, is passed over)."""
        for path in reversed(self._candidates()):
            if tf.io.gfile.exists(path + ".index"):
                return path
        return None

    def restore_latest(self) -> int | None:
        """Restores the latest checkpoint; its step, or None when there is none.

        Raises:
          ValueError: the checkpoint is damaged (truncated, say: naming the
            one to fall back to), or it is not of this model and optimizer.
        """
        path = self.latest
        if path is None:
            return None
        if self.source.latest_checkpoint and _step_of(path) < _step_of(
                self.source.latest_checkpoint):
            logging.warning("%s is missing; resuming from %s",
                            self.source.latest_checkpoint, path)
        try:
            # Every saved object must find its variable: a checkpoint of another
            # model or optimizer fails here rather than training from half of it.
            self._training_state.restore(path).assert_existing_objects_matched()
            self._restore_totals(path)
        except (AssertionError, ValueError) as error:  # ValueError: another shape
            raise ValueError(f"checkpoint {path} is not of this model and optimizer "
                             f"({str(error).splitlines()[0][:200]}): use another "
                             f"--output_dir") from None
        except (IndexError, tf.errors.OpError) as error:
            raise ValueError(self._damaged(path, error)) from None
        step = self.saved_step = int(self.step.numpy())
        logging.info("resumed from %s at step %d", path, step)
        return step

    def _restore_totals(self, path: str) -> None:
        """The run's totals from ``path``; counts it lacks start at 0 (a warning
        names them: the summary's figures that use them cover the steps after
        the resume)."""
        self.totals.write({name: 0.0 for name in RunTotals.NAMES}, [], [])
        self._totals_only.restore(path).expect_partial()
        saved = {name for name, _ in tf.train.list_variables(path)}
        missing = [name for name in RunTotals.NAMES
                   if f"run_totals/counts/{name}/.ATTRIBUTES/VARIABLE_VALUE" not in saved]
        if missing:
            logging.warning("%s has no %s: counted from the resume on", path,
                            ", ".join(missing))

    def _damaged(self, path: str, error: Exception) -> str:
        """One line: which checkpoint is damaged and how to fall back."""
        why = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        earlier = [p for p in self._candidates()
                   if p != path and tf.io.gfile.exists(p + ".index")]
        fallback = (f"resume from {earlier[-1]}" if earlier
                    else "start again from step 0")
        return f"checkpoint {path} is damaged ({why}); delete {path}.* to {fallback}"

    def save(self) -> str:
        """Writes a checkpoint for the current step (at most once per step).

        Raises:
          OSError: the checkpoint could not be written (a full disk, say),
            naming the folder and the checkpoint the run can resume from. The
            files of the failed save are removed; the state file still names
            the previous checkpoint.
        """
        step = int(self.step.numpy())
        before = set(tf.io.gfile.listdir(self.directory)) if tf.io.gfile.isdir(
            self.directory) else set()
        try:
            path = self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as error:
            unfinished = [name for name in tf.io.gfile.listdir(self.directory)
                          if name not in before and name.startswith(f"ckpt-{step}")]
            for name in unfinished:
                with contextlib.suppress(tf.errors.OpError):
                    target = os.path.join(self.directory, name)
                    if tf.io.gfile.isdir(target):
                        tf.io.gfile.rmtree(target)
                    else:
                        tf.io.gfile.remove(target)
            previous = self.latest
            resume = (f"{previous} is intact: a run resumes from it" if previous
                      else "there is no earlier checkpoint")
            raise OSError(f"cannot save checkpoint ckpt-{step} in {self.directory} "
                          f"({filesystem.write_error_reason(error)}); {resume}") from None
        self.saved_step = step
        logging.info("saved checkpoint %s", path)
        return path


def google_checkpoint_path(output_dir: str, step: int) -> str:
    """Where the final weights of ``step`` go in the original BERT format."""
    return os.path.join(output_dir, f"model.ckpt-{step}")


#: The name of a checkpoint's files: ``ckpt-<step>.index``, ``ckpt-<step>.data-*``.
_CHECKPOINT_INDEX = re.compile(r"ckpt-(\d+)\.index")


def _step_of(path: str) -> int:
    return int(os.path.basename(path).rsplit("-", 1)[1])


def checkpoints_on_disk(directory: str) -> list[str]:
    """The checkpoints (``DIR/ckpt-N`` prefixes) whose index file is in
    ``directory``, by step."""
    if not tf.io.gfile.isdir(directory):
        return []
    found = [(int(match[1]), os.path.join(directory, f"ckpt-{match[1]}"))
             for match in map(_CHECKPOINT_INDEX.fullmatch, tf.io.gfile.listdir(directory))
             if match]
    return [path for _, path in sorted(found)]


def repair_state_file(directory: str) -> None:
    """Rewrites the ``checkpoint`` state file of ``directory`` when it is missing,
    unreadable, or names an older checkpoint than the newest whose files are
    there, so that a run never starts again from step 0 over checkpoints it
    did not write. The checkpoints it lists again are kept, never pruned
    (`tf.train.CheckpointManager` prunes only what it saved).

    One warning says what was wrong and which checkpoint the run resumes from.
    """
    on_disk = checkpoints_on_disk(directory)
    if not on_disk:
        return
    state_file = os.path.join(directory, "checkpoint")
    with _tensorflow_warnings_off():  # a damaged file's ParseError: said below, once
        state = tf.train.get_checkpoint_state(directory)
    newest = on_disk[-1]
    if state is not None and state.model_checkpoint_path and _step_of(
            state.model_checkpoint_path) >= _step_of(newest):
        return
    problem = ("is missing" if not tf.io.gfile.exists(state_file) else
               "cannot be read" if state is None or not state.model_checkpoint_path else
               f"names {os.path.basename(state.model_checkpoint_path)}, not the newest")
    with _tensorflow_warnings_off():  # deprecated for hand edits: this is a repair
        tf.compat.v1.train.update_checkpoint_state(
            directory, newest, all_model_checkpoint_paths=on_disk)
    logging.warning("%s %s: rewrote it from the %d checkpoints there; resuming from the "
                    "newest, %s", state_file, problem, len(on_disk), newest)


@contextlib.contextmanager
def _tensorflow_warnings_off():
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)
