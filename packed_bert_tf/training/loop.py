"""The host side of training: chunks of steps, logging, checkpoints, NaN stop, summary."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from absl import logging

from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.progress import TrainingLogger
from packed_bert_tf.training.trainer import STATISTICS, Trainer


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""

    def __init__(self, step: int, checkpoint: str | None):
        self.step = step
        self.checkpoint = checkpoint
        kept = f"the last good checkpoint is {checkpoint}" if checkpoint \
            else "no checkpoint was written"
        super().__init__(f"the loss is not finite at step {step}; training stopped, "
                         f"{kept}")


@dataclasses.dataclass
class TrainingSummary:
    """What a training run did (written as ``train_summary.json``).

    Attributes:
      start_step, final_step: updates done before and after this run.
      final_metrics: the task's metrics, mean over the last logged interval.
      sequences, tokens, padded_tokens: counted over this run.
      seconds: wall time of this run's steps (compilation included).
      steady_seconds, steady_sequences, steady_tokens: the same without the
        first chunk of steps (the one that traces and compiles).
      steady_cpu_seconds: this process's CPU time (all threads, input
        pipeline included) over the same steps: less sensitive than wall time
        to other processes on a shared machine.
      history: every logged point.
    """

    start_step: int
    final_step: int
    final_metrics: dict
    sequences: float
    tokens: float
    padded_tokens: float
    seconds: float
    steady_seconds: float
    steady_sequences: float
    steady_tokens: float
    steady_cpu_seconds: float
    history: list

    @property
    def sequences_per_second(self) -> float:
        return self.steady_sequences / self.steady_seconds if self.steady_seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.steady_tokens / self.steady_seconds if self.steady_seconds else 0.0

    @property
    def occupancy(self) -> float:
        return self.tokens / self.padded_tokens if self.padded_tokens else 0.0

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values.update(sequences_per_second=self.sequences_per_second,
                      tokens_per_second=self.tokens_per_second, occupancy=self.occupancy)
        return values


def run_training(trainer: Trainer, iterator, *, num_train_steps: int,
                 iterations_per_loop: int = 1, log_every_n_steps: int = 100,
                 save_checkpoints_steps: int = 0,
                 checkpoints: TrainingCheckpoints | None = None,
                 logger: TrainingLogger | None = None,
                 learning_rate_at: Callable[[int], float] | None = None) -> TrainingSummary:
    """Trains from the trainer's current step to `num_train_steps`.

    Each call of the compiled loop runs up to `iterations_per_loop` steps,
    never past the next log point, checkpoint or the end. A log point every
    `log_every_n_steps` (and at the end) carries the task's metrics averaged
    over the steps since the last point, the learning rate, sequences and real
    tokens per second and the occupancy (real / padded tokens). A checkpoint
    every `save_checkpoints_steps` (0: none) and at the end.

    Raises:
      NonFiniteLossError: a step's loss was NaN or infinite (naming the step);
        nothing is saved after it.
    """
    start_step = int(trainer.step.numpy())
    step = start_step
    totals = dict.fromkeys(STATISTICS, 0.0)
    steady = dict.fromkeys(("seconds", "cpu_seconds", "sequences", "tokens"), 0.0)
    interval = _Interval(trainer.metric_names)
    seconds = 0.0
    final_metrics: dict = {}
    first_chunk = True
    while step < num_train_steps:
        chunk = min(iterations_per_loop, num_train_steps - step)
        for every in (log_every_n_steps, save_checkpoints_steps):
            if every:
                chunk = min(chunk, every - step % every)
        started, cpu_started = time.perf_counter(), time.process_time()
        result = trainer.train_steps(iterator, chunk)
        elapsed = time.perf_counter() - started
        cpu_elapsed = time.process_time() - cpu_started
        if result.first_nonfinite_step >= 0:
            raise NonFiniteLossError(step + result.first_nonfinite_step + 1,
                                     checkpoints.latest if checkpoints else None)
        step += chunk
        seconds += elapsed
        for name in STATISTICS:
            totals[name] += result.statistics[name]
        if not first_chunk:
            steady["seconds"] += elapsed
            steady["cpu_seconds"] += cpu_elapsed
            steady["sequences"] += result.statistics["sequences"]
            steady["tokens"] += result.statistics["tokens"]
        first_chunk = False
        interval.add(result, elapsed)
        if step % log_every_n_steps == 0 or step == num_train_steps:
            values = interval.values()
            if learning_rate_at is not None:
                values["learning_rate"] = learning_rate_at(step - 1)
            final_metrics = {name: values[name] for name in trainer.metric_names}
            values["sequences_seen"] = totals["sequences"]
            if logger is not None:
                logger.log(step, values)
            interval = _Interval(trainer.metric_names)
        if checkpoints is not None and save_checkpoints_steps \
                and step % save_checkpoints_steps == 0:
            checkpoints.save()
    if checkpoints is not None and step > start_step and checkpoints.saved_step != step:
        checkpoints.save()
    if step == start_step:
        logging.info("nothing to train: already at step %d of %d", step, num_train_steps)
    return TrainingSummary(
        start_step=start_step, final_step=step, final_metrics=final_metrics,
        sequences=totals["sequences"], tokens=totals["tokens"],
        padded_tokens=totals["padded_tokens"], seconds=seconds,
        steady_seconds=steady["seconds"], steady_sequences=steady["sequences"],
        steady_tokens=steady["tokens"], steady_cpu_seconds=steady["cpu_seconds"],
        history=logger.history if logger else [])


class _Interval:
    """Metrics and counts since the last log point."""

    def __init__(self, metric_names):
        self.metric_names = metric_names
        self.steps = 0
        self.seconds = 0.0
        self.metrics = dict.fromkeys(metric_names, 0.0)
        self.statistics = dict.fromkeys(STATISTICS, 0.0)

    def add(self, result, seconds: float) -> None:
        self.steps += result.num_steps
        self.seconds += seconds
        for name in self.metric_names:
            self.metrics[name] += result.metrics[name]
        for name in STATISTICS:
            self.statistics[name] += result.statistics[name]

    def values(self) -> dict:
        values = {name: total / self.steps for name, total in self.metrics.items()}
        seconds = max(self.seconds, 1e-9)
        values["sequences_per_second"] = self.statistics["sequences"] / seconds
        values["tokens_per_second"] = self.statistics["tokens"] / seconds
        values["occupancy"] = self.statistics["tokens"] / max(
            self.statistics["padded_tokens"], 1.0)
        return values
