"""The host side of training: chunks of steps, logging, checkpoints, evaluation
during training and the stop at a target (`PeriodicEvaluation`), the stop on
a non-finite loss or a signal, the run's summary (`run_training`), and a run
trained to its end with its final weights in the original BERT format
(`train_and_export`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

from absl import logging

from packed_bert_tf.models.google_checkpoint import save_google_checkpoint
from packed_bert_tf.training import interrupts
from packed_bert_tf.training.checkpoints import (
    RunTotals,
    TrainingCheckpoints,
    google_checkpoint_path,
)
from packed_bert_tf.training.flops import EncoderShape, Utilisation, peak_devices, run_peak
from packed_bert_tf.training.options import TrainingOptions
from packed_bert_tf.training.progress import TrainingLogger, format_values
from packed_bert_tf.training.step_counting import crossed, updates_to_boundary
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

    A run killed and resumed is one run: the counts, times and history cover
    every update from step 0 to `final_step`, whichever process did it (they
    are kept in the checkpoints, `RunTotals`).

    Attributes:
      start_step, final_step: updates done before and after this segment
        (this process's part of the run).
      final_metrics: the task's metrics, mean over the last logged interval.
      sequences, tokens, padded_tokens: counted over the run.
      seconds: wall time of the run's steps (compilation included).
      steady_seconds, steady_sequences, steady_tokens: the same without the
        first chunk of steps of each segment (the one that traces and compiles).
      steady_cpu_seconds: the processes' CPU time (all threads, input
        pipeline included) over the same steps: less sensitive than wall time
        to other processes on a shared machine.
      history: every logged point of the run.
      evaluations: every evaluation during training (`PeriodicEvaluation`):
        its ``step``, ``samples_count`` and results.
      stopped_at_target: the run stopped at an evaluation that reached
        `PeriodicEvaluation.stop_threshold`.
      attention_pairs, steady_attention_pairs: the sequences' squared
        lengths summed, over the run and its steady steps (the attention
        part of the FLOP count, `packed_bert_tf.training.flops`).
      utilisation: with the run's `Utilisation`, the model FLOPs utilisation
        over the steady steps (`utilisation_so_far`): ``mfu``,
        ``model_flops_per_second``, ``peak_flops_per_second`` (all the run's
        devices), ``peak_flops_source`` (``measured`` or ``flag``),
        ``peak_flops_dtype``, ``peak_devices``, ``flops_parameters`` (N of
        the count); empty without.
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
    evaluations: list = dataclasses.field(default_factory=list)
    stopped_at_target: bool = False
    attention_pairs: float = 0.0
    steady_attention_pairs: float = 0.0
    utilisation: dict = dataclasses.field(default_factory=dict)

    @property
    def sequences_per_second(self) -> float:
        """Over the steady steps; over all steps when every segment was one chunk."""
        if self.steady_seconds:
            return self.steady_sequences / self.steady_seconds
        return self.sequences / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_second(self) -> float:
        """As `sequences_per_second`, of real tokens."""
        if self.steady_seconds:
            return self.steady_tokens / self.steady_seconds
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def occupancy(self) -> float:
        return self.tokens / self.padded_tokens if self.padded_tokens else 0.0

    def to_dict(self) -> dict:
        """The fields, the rates and `utilisation`'s values, all at the top level."""
        values = dataclasses.asdict(self)
        values.update(sequences_per_second=self.sequences_per_second,
                      tokens_per_second=self.tokens_per_second, occupancy=self.occupancy,
                      **values.pop("utilisation"))
        return values


def utilisation_so_far(utilisation: Utilisation, totals: dict) -> dict:
    """`Utilisation.values` and `Utilisation.describe` of a run's totals
    (`RunTotals.NAMES`): over the steady steps, over all steps when every
    segment was one chunk (as `TrainingSummary.tokens_per_second`)."""
    part = "steady_" if totals["steady_seconds"] else ""
    return {**utilisation.values(totals[f"{part}tokens"], totals[f"{part}attention_pairs"],
                                 totals[f"{part}seconds"]),
            **utilisation.describe()}


@dataclasses.dataclass(frozen=True)
class LoopIntervals:
    """How often the host loop acts, in global steps (the flags of the same names).

    Attributes:
      iterations_per_loop: steps per call of the compiled loop (rounded up to
        whole updates).
      log_every_n_steps: steps between log points (one at the end too).
      save_checkpoints_steps: steps between checkpoints (one at the end
        too); 0: only at the end.
    """

    iterations_per_loop: int = 1
    log_every_n_steps: int = 100
    save_checkpoints_steps: int = 0

    @classmethod
    def of(cls, options: TrainingOptions) -> "LoopIntervals":
        """The intervals a run's options give."""
        return cls(options.iterations_per_loop, options.log_every_n_steps,
                   options.save_checkpoints_steps)


@dataclasses.dataclass(frozen=True)
class PeriodicEvaluation:
    """Evaluation during training, counted in training samples, and the stop at a
    target (MLPerf's way: an evaluation every ``interval_samples`` sequences,
    the run ends at the first that reaches the target accuracy).

    Attributes:
      evaluate: ``(step, samples_count) -> results``: one evaluation of the
        model as it is (it must not change the training state), its results
        a dict holding `metric`.
      interval_samples: training sequences between evaluations: one at the
        first update boundary at or after each multiple; 0: only at the end.
      metric: the result that `stop_threshold` is compared with.
      stop_threshold: stop at the first evaluation whose `metric` is at
        least this; None: train to the end.
      samples_per_update: the training sequences an update holds, about
        (packs: the packing factor times the packs): how many updates a
        chunk can run without passing the next evaluation's boundary.
      at_end: evaluate at the end of the run too when the end falls between
        two multiples (off the interval's schedule).
      progress: called before each evaluation with the run's model FLOPs
        utilisation so far (`utilisation_so_far`), when the loop counts it;
        None: not told.
    """

    evaluate: Callable[[int, float], dict]
    interval_samples: int
    metric: str
    stop_threshold: float | None = None
    samples_per_update: float = 1.0
    at_end: bool = True
    progress: Callable[[dict], None] | None = None

    def due(self, samples_before: float, samples: float, last: bool) -> bool:
        """Whether an evaluation falls after the update that took the run from
        ``samples_before`` to ``samples`` training sequences (``last``: the
        run's last update)."""
        if crossed(samples_before, samples, self.interval_samples):
            return True
        return last and (self.at_end or not self.interval_samples)

    def updates_before_boundary(self, samples: float) -> int:
        """Updates a chunk may run from ``samples`` without passing the next
        multiple of `interval_samples` by more than one update: 1 near it."""
        if not self.interval_samples:
            return 2 ** 62
        remaining = (samples // self.interval_samples + 1) * self.interval_samples - samples
        # 10 % slack: packed updates hold about, not exactly, samples_per_update.
        return max(1, math.floor(remaining / (1.1 * self.samples_per_update)))

    def reached(self, results: dict) -> bool:
        return self.stop_threshold is not None and results[self.metric] >= self.stop_threshold


def _run_chunk(trainer: Trainer, iterator, step: int, num_train_steps: int,
               updates_per_loop: int, intervals: tuple):
    """One call of the compiled loop: at most ``updates_per_loop`` updates, as many
    as fit before the next log point, checkpoint (``intervals``, 0: none) or
    the end. Returns (result, updates, wall seconds, CPU seconds)."""
    per_update = trainer.global_steps_per_update
    updates = min(updates_per_loop, (num_train_steps - step) // per_update)
    for every in intervals:
        if every:
            updates = min(updates, updates_to_boundary(step, every, per_update))
    started, cpu_started = time.perf_counter(), time.process_time()
    result = trainer.train_steps(iterator, updates)
    return (result, updates, time.perf_counter() - started,
            time.process_time() - cpu_started)


def run_training(trainer: Trainer, iterator, *, num_train_steps: int,
                 intervals: LoopIntervals = LoopIntervals(),
                 checkpoints: TrainingCheckpoints | None = None,
                 logger: TrainingLogger | None = None,
                 learning_rate_at: Callable[[int], float] | None = None,
                 evaluation: PeriodicEvaluation | None = None) -> TrainingSummary:
    """Trains from the trainer's current step to `num_train_steps`.

    Steps are the trainer's global steps: an update advances them by
    ``trainer.global_steps_per_update`` (K), so every count here is in those
    steps and every event happens at an update boundary. Each call of the
    compiled loop runs ``intervals.iterations_per_loop`` steps' worth of
    updates (rounded up to whole updates), fewer when the update that
    reaches the next log point, checkpoint or the end comes sooner. A log
    point at the first update boundary at or after each multiple of
    ``intervals.log_every_n_steps`` (and at the end) carries
    the task's metrics averaged over the updates since the last point, the
    learning rate of the last update, sequences and real tokens per second,
    the occupancy (real / padded tokens) and, when the ``logger`` has a
    `Utilisation`, the model FLOPs per second and MFU (``mfu``, over its
    peak). A checkpoint likewise every
    ``intervals.save_checkpoints_steps`` (0: none) and at the end.

    With an ``evaluation``, the model is evaluated at the first update
    boundary at or after each multiple of its ``interval_samples`` training
    sequences and (`PeriodicEvaluation.at_end`) at the end, each evaluation followed by a checkpoint (so
    that a resumed run neither repeats nor skips one: the sequences counted
    are the run's, kept in the checkpoints); the loop stops at the first
    evaluation that reaches its ``stop_threshold``.

    Raises:
      ValueError: `num_train_steps` or the trainer's step is not a multiple of
        K (a checkpoint written with another ``--steps_per_update``).
      NonFiniteLossError: an update's loss was NaN or infinite (naming the
        step it ended at); nothing is saved after it.
      interrupts.TrainingInterrupted: a SIGINT or SIGTERM came while a chunk
        ran (`interrupts`): the loop stopped after it, with a checkpoint.
    """
    per_update = trainer.global_steps_per_update
    start_step = int(trainer.step.numpy())
    if num_train_steps % per_update:
        raise ValueError(f"--num_train_steps={num_train_steps} is not a multiple of the "
                         f"{per_update} steps of an update")
    if start_step % per_update:
        raise ValueError(f"the run resumes at step {start_step}, which is not a multiple "
                         f"of the {per_update} steps of an update: its checkpoints were "
                         f"written with another --steps_per_update or --step_unit")
    step = start_step
    # The run's totals so far: those of the checkpoint resumed, else zeros.
    if checkpoints is not None:
        totals, history, evaluations = checkpoints.totals.read()
    else:
        totals, history, evaluations = dict.fromkeys(RunTotals.NAMES, 0.0), [], []
    stopped_at_target = bool(evaluations) and evaluation is not None and \
        evaluation.reached(evaluations[-1])
    interval = _Interval(trainer.metric_names)
    utilisation = logger.utilisation if logger is not None else None
    if utilisation is not None and utilisation.peak.source == "measured":
        totals["measured_peak_flops_per_second"] = utilisation.peak.flops_per_second
    first_chunk = True
    updates_per_loop = max(1, -(-intervals.iterations_per_loop // per_update))
    # A stop signal while the loop runs is noted, not raised: the loop stops
    # after the chunk in flight, with a checkpoint (`interrupts`).
    with interrupts.at_step_boundaries():
        while step < num_train_steps and not stopped_at_target:
            chunk_updates = updates_per_loop if evaluation is None else min(
                updates_per_loop, evaluation.updates_before_boundary(totals["sequences"]))
            samples_before = totals["sequences"]
            result, updates, elapsed, cpu_elapsed = _run_chunk(
                trainer, iterator, step, num_train_steps, chunk_updates,
                (intervals.log_every_n_steps, intervals.save_checkpoints_steps))
            if result.first_nonfinite_step >= 0:
                raise NonFiniteLossError(
                    step + (result.first_nonfinite_step + 1) * per_update,
                    checkpoints.latest if checkpoints else None)
            previous_step, step = step, step + updates * per_update
            totals["seconds"] += elapsed
            for name in STATISTICS:
                totals[name] += result.statistics[name]
            if not first_chunk:
                totals["steady_seconds"] += elapsed
                totals["steady_cpu_seconds"] += cpu_elapsed
                totals["steady_sequences"] += result.statistics["sequences"]
                totals["steady_tokens"] += result.statistics["tokens"]
                totals["steady_attention_pairs"] += result.statistics["attention_pairs"]
            first_chunk = False
            interval.add(result, elapsed)
            evaluated = False
            if evaluation is not None and evaluation.due(
                    samples_before, totals["sequences"], step == num_train_steps):
                if evaluation.progress is not None and utilisation is not None:
                    evaluation.progress(utilisation_so_far(utilisation, totals))
                results = evaluation.evaluate(step, totals["sequences"])
                evaluations.append({"step": step, "samples_count": totals["sequences"],
                                    **results})
                evaluated = True
                stopped_at_target = evaluation.reached(results)
            if (crossed(previous_step, step, intervals.log_every_n_steps)
                    or step == num_train_steps or stopped_at_target):
                values = interval.values(utilisation)
                if learning_rate_at is not None:
                    values["learning_rate"] = learning_rate_at(step - 1)
                values["sequences_seen"] = totals["sequences"]
                values = {name: float(value) for name, value in values.items()}
                history.append({"step": step, **values})
                if logger is not None:
                    logger.log(step, values)
                interval = _Interval(trainer.metric_names)
            stop = interrupts.requested() if step < num_train_steps else None
            last = step == num_train_steps or stop is not None or stopped_at_target
            if checkpoints is not None and (
                    crossed(previous_step, step, intervals.save_checkpoints_steps)
                    or evaluated or (last and checkpoints.saved_step != step)):
                checkpoints.totals.write(totals, history, evaluations)
                checkpoints.save()
            if stop is not None:
                raise interrupts.TrainingInterrupted(
                    stop, step, num_train_steps, checkpoints.latest if checkpoints else None)
    if stopped_at_target:
        logging.info("stopped at step %d: the evaluation after %d training sequences "
                     "reached %s >= %s", step, evaluations[-1]["samples_count"],
                     evaluation.metric, evaluation.stop_threshold)
    elif step == start_step:
        logging.info("nothing to train: already at step %d of %d", step, num_train_steps)
    final_metrics = {name: history[-1][name] for name in trainer.metric_names
                     if history and name in history[-1]}
    return TrainingSummary(
        start_step=start_step, final_step=step, final_metrics=final_metrics,
        sequences=totals["sequences"], tokens=totals["tokens"],
        padded_tokens=totals["padded_tokens"], seconds=totals["seconds"],
        steady_seconds=totals["steady_seconds"], steady_sequences=totals["steady_sequences"],
        steady_tokens=totals["steady_tokens"],
        steady_cpu_seconds=totals["steady_cpu_seconds"], history=history,
        evaluations=evaluations, stopped_at_target=stopped_at_target,
        attention_pairs=totals["attention_pairs"],
        steady_attention_pairs=totals["steady_attention_pairs"],
        utilisation=utilisation_so_far(utilisation, totals) if utilisation else {})


def train_and_export(trainer: Trainer, dataset_fn, options: TrainingOptions, *,
                     output_dir: str, num_train_steps: int, schedule,
                     checkpoints: TrainingCheckpoints,
                     evaluation: PeriodicEvaluation | None = None) -> dict:
    """Trains to ``num_train_steps`` and writes the final weights in the BERT format.

    ``dataset_fn`` is given to ``strategy.distribute_datasets_from_function``;
    the loop is `run_training`'s (in global steps), with ``options``'
    `LoopIntervals`, and its `TrainingLogger` writes to ``output_dir`` (with
    ``options.progress_bar``), counting the model FLOPs utilisation of the
    model's encoder (`run_utilisation`);
    ``schedule`` gives the logged learning rate of a global step; ``evaluation``:
    evaluation during training and the stop at a target (`PeriodicEvaluation`).

    Returns:
      The `TrainingSummary` as a dict, plus ``google_checkpoint`` (the path
      written, `google_checkpoint_path`) and ``train_steps_function_traces``
      (1 when no step retraced).
    """
    utilisation = run_utilisation(
        trainer, options, checkpoints.totals.read()[0]["measured_peak_flops_per_second"])
    iterator = iter(trainer.strategy.distribute_datasets_from_function(dataset_fn))
    logger = TrainingLogger(output_dir, num_train_steps, progress_bar=options.progress_bar,
                            utilisation=utilisation)
    try:
        result = run_training(
            trainer, iterator, num_train_steps=num_train_steps,
            intervals=LoopIntervals.of(options),
            checkpoints=checkpoints, logger=logger,
            learning_rate_at=lambda step: float(schedule(step)), evaluation=evaluation)
    finally:
        logger.close()
    path = save_google_checkpoint(trainer.model,
                                  google_checkpoint_path(output_dir, result.final_step))
    logging.info("final weights in the original BERT format: %s", path)
    logging.info("trained steps %d..%d: %s", result.start_step, result.final_step,
                 format_values({**result.final_metrics,
                                "sequences_per_second": result.sequences_per_second,
                                "tokens_per_second": result.tokens_per_second,
                                "occupancy": result.occupancy,
                                **{name: result.utilisation[name] for name in
                                   ("model_flops_per_second", "mfu")
                                   if name in result.utilisation}}))
    train = result.to_dict()
    train.update(google_checkpoint=path, train_steps_function_traces=(
        trainer.train_steps_function.experimental_get_tracing_count()))
    return train


def run_utilisation(trainer: Trainer, options: TrainingOptions,
                    measured: float = 0.0) -> Utilisation | None:
    """The `Utilisation` of a run: the encoder of the trainer's model (its
    ``bert_config``; None for a model without one) and the peak of
    ``--peak_flops_per_second``, else the one an earlier segment ``measured``
    (0: none), else measured now in the run's compute dtype on its first
    device (`packed_bert_tf.training.flops.run_peak`)."""
    config = getattr(trainer.model, "bert_config", None)
    if config is None:
        return None
    peak = run_peak(options.peak_flops_per_second, options.mixed_precision,
                    strategy=trainer.strategy, measured=measured)
    utilisation = Utilisation(EncoderShape.of_config(config), peak,
                              peak_devices(trainer.strategy))
    logging.info("model FLOPs utilisation over a peak of %.3e FLOPs per second (%s%s, "
                 "%d device(s)); %d weights of the encoder's matrix multiplies",
                 utilisation.peak_flops_per_second, peak.source,
                 f" in {peak.dtype}" if peak.dtype else "", utilisation.devices,
                 utilisation.encoder.parameters)
    return utilisation


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

    def values(self, utilisation: Utilisation | None = None) -> dict:
        """The metrics' means, the rates and occupancy; with a ``utilisation``,
        the model FLOPs per second and ``mfu`` too."""
        values = {name: total / self.steps for name, total in self.metrics.items()}
        seconds = max(self.seconds, 1e-9)
        values["sequences_per_second"] = self.statistics["sequences"] / seconds
        values["tokens_per_second"] = self.statistics["tokens"] / seconds
        values["occupancy"] = self.statistics["tokens"] / max(
            self.statistics["padded_tokens"], 1.0)
        if utilisation is not None:
            values.update(utilisation.values(self.statistics["tokens"],
                                             self.statistics["attention_pairs"], seconds))
        return values
