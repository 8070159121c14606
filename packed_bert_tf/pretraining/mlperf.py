"""A pre-training run as MLPerf Training 5.0's BERT rules see it: its MLPerf log
(`MlperfRun`), the evaluation cadence in training samples
(`default_eval_interval_samples`) and the checks of the options that drive
them.

Every logged value is the one the run uses:

* samples are sequences, not packs, as MLPerf counts them; ``train_samples``
  is logged at the end, the sequences the run trained on;
* ``global_batch_size`` is an integer, the sequences of an update at the
  nominal packing factor (`nominal_packing_factor`), as packed BERT
  submissions compute it (their ``avg_seq_per_pack``): ``train_batch_size x
  gradient_accumulation_steps x nominal``, so a packed run adjusted with
  ``accumulation`` logs the unpacked run's. The measured packing factor goes
  in a key of our own, ``packing_factor``, which the checker allows;
* ``opt_lamb_beta_1`` and ``opt_lamb_beta_2`` are the betas LAMB runs with,
  after the packing adjustment ``lamb_betas``;
* ``gradient_accumulation_steps`` is the micro-batches an update runs, and the
  schedule's steps (``opt_learning_rate_training_steps``, the warm-up's) are
  counted in the same micro-batches, so that training steps over
  accumulation steps is the number of updates the run makes;
* ``block_start``'s ``epoch_count`` is always in samples;
* ``cache_clear`` is true when ``--drop_page_cache`` dropped the page cache;
* ``run_stop``'s metadata holds the run's model FLOPs utilisation up to its
  last evaluation (`UTILISATION_KEYS`, `packed_bert_tf.training.flops`).

With a log, the run stops at MLPerf's target (`TARGET_ACCURACY`) unless
``--stop_threshold`` says otherwise, and evaluates on the schedule alone: an
evaluation at the end that falls between two multiples of the interval
comes only with ``--eval_at_end``, marked ``off_schedule_evaluation``.

The order of the log, as the compliance checker wants it::

    cache_clear, init_start, submission_*, seed, the hyper-parameters,
    init_stop, run_start, block_start,
    [block_stop, eval_start, eval_stop, eval_accuracy, (eval_samples once),
     block_start]..., train_samples, run_stop (status success or aborted)

``eval_accuracy`` is masked-LM accuracy, with ``epoch_num`` and
``samples_count`` the training samples seen (MLPerf's BERT epochs are
samples).
"""

from __future__ import annotations

import math
import os

from mlperf_logging.mllog import constants as mllog_keys

from packed_bert_tf.pretraining.mlperf_log import NO_LOG, open_mlperf_log
from packed_bert_tf.training.loop import PeriodicEvaluation
from packed_bert_tf.training.step_counting import crossed

#: MLPerf's BERT target: masked-LM accuracy.
TARGET_METRIC = "masked_lm_accuracy"
#: MLPerf's BERT target accuracy (closed division).
TARGET_ACCURACY = 0.720
#: The model FLOPs utilisation in ``run_stop``'s metadata (keys of our own).
UTILISATION_KEYS = ("mfu", "model_flops_per_second", "peak_flops_per_second",
                    "peak_flops_source")


def nominal_packing_factor(packing_factor: float | None) -> int:
    """The packing factor ``global_batch_size`` counts an update's sequences
    with: the measured factor rounded to the nearest integer, at least 1 (2
    for Wikipedia at 512, as the submissions' ``avg_seq_per_pack``).

    >>> nominal_packing_factor(1.97), nominal_packing_factor(1.18), nominal_packing_factor(None)
    (2, 1, 1)
    """
    return max(1, math.floor((packing_factor or 1.0) + 0.5))


def default_stop_threshold(options) -> float | None:
    """``--stop_threshold`` as the run uses it: as given, or MLPerf's target
    (`TARGET_ACCURACY`) for a run that writes an MLPerf log and evaluates
    during training; None (train to the end) otherwise."""
    if options.stop_threshold is not None:
        return options.stop_threshold
    evaluates = options.do_train and options.do_eval and options.eval_input_file
    return TARGET_ACCURACY if options.mlperf_log_file and evaluates else None


def default_eval_interval_samples(global_batch_size: float) -> int:
    """MLPerf's evaluation interval for BERT:
    ``FLOOR(0.05 * (230.23 * GBS + 3,000,000), 25,000)`` samples, GBS in
    sequences per update.

    >>> default_eval_interval_samples(256)
    150000
    >>> default_eval_interval_samples(8192)
    225000
    """
    return int(math.floor(0.05 * (230.23 * global_batch_size + 3_000_000) / 25_000)) * 25_000


#: Where Linux takes the order to drop its caches ("3": page cache, dentries, inodes).
DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache(path: str | None = None) -> None:
    """Writes dirty pages back (``sync``) and drops the page cache.

    Args:
      path: the kernel's control file; None: `DROP_CACHES`.

    Raises:
      ValueError: one line saying why the process may not (not Linux, not root,
        a read-only ``/proc``).
    """
    path = path or DROP_CACHES
    os.sync()
    try:
        with open(path, "w") as control:
            control.write("3\n")
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(f"--drop_page_cache: cannot drop the page cache ({path}: "
                         f"{reason}); run as root on Linux, or without the flag") from None


def check_mlperf_options(options) -> None:
    """One clear error per bad option of evaluation during training and the log."""
    if options.stop_threshold is not None:
        if not 0 < options.stop_threshold <= 1:
            raise ValueError(f"--stop_threshold must be in (0, 1], got "
                             f"{options.stop_threshold}")
        if not (options.do_train and options.do_eval and options.eval_input_file):
            raise ValueError("--stop_threshold needs --do_train, --do_eval and "
                             "--eval_input_file (the evaluations it is compared with)")
    if options.eval_interval_samples is not None and options.eval_interval_samples < 0:
        raise ValueError(f"--eval_interval_samples must be >= 0, got "
                         f"{options.eval_interval_samples}")


class MlperfRun:
    """The MLPerf log of one pre-training run (`NO_LOG`'s silence without
    ``--mlperf_log_file`` or off the chief).

    Args:
      options: the run's `PretrainingOptions`.
      is_chief: this process writes the log.
      resumed: the run resumes from a checkpoint: the log is appended to, and
        what was logged before ``run_start`` is not logged again.
    """

    def __init__(self, options, *, is_chief: bool, resumed: bool):
        self.log = open_mlperf_log(options.mlperf_log_file, is_chief=is_chief,
                                   append=resumed)
        self.resumed = resumed
        self.options = options
        self.block_start_samples = 0.0
        self.samples = 0.0  # trained so far, as the last evaluation counted them
        self.eval_samples_logged = False
        self.stopped = False
        self.stop_threshold = default_stop_threshold(options)
        self.utilisation = {}  # as the loop last told it, before an evaluation

    @property
    def enabled(self) -> bool:
        return self.log is not NO_LOG

    def init_start(self, platform: str) -> None:
        """The run's first lines (not on resume), after dropping the page cache
        with ``--drop_page_cache``."""
        options = self.options
        if options.drop_page_cache:  # every worker, its own host's cache
            drop_page_cache()
        if self.resumed:
            return
        self.log.event(mllog_keys.CACHE_CLEAR, bool(options.drop_page_cache))
        self.log.start(mllog_keys.INIT_START)
        self.log.event(mllog_keys.SUBMISSION_BENCHMARK, mllog_keys.BERT)
        self.log.event(mllog_keys.SUBMISSION_ORG, options.submission_org)
        self.log.event(mllog_keys.SUBMISSION_DIVISION, options.submission_division)
        self.log.event(mllog_keys.SUBMISSION_STATUS, options.submission_status)
        self.log.event(mllog_keys.SUBMISSION_PLATFORM,
                       options.submission_platform or platform)
        self.log.event(mllog_keys.SEED, options.seed)

    def run_start(self, *, global_batch_size: int, steps, adjustment,
                  packing_factor: float | None, interval_samples: int) -> None:
        """The hyper-parameters, ``init_stop``, ``run_start`` and the first block
        (not on resume: the open block goes on).

        Args:
          global_batch_size: sequences per update at the nominal packing factor.
          steps: the run's `StepCounting`.
          adjustment: the run's `PackingAdjustment` (the betas LAMB runs with).
          packing_factor: the measured packing factor; None: unpacked rows.
          interval_samples: samples between evaluations (0: one at the end).
        """
        options = self.options
        updates = steps.updates(options.num_train_steps)
        self.planned_samples = int(round(updates * steps.micro_batches_per_update
                                         * options.train_batch_size * (packing_factor or 1.0)))
        self.block_start_samples = 0.0
        if self.resumed:
            return
        # The schedule's steps in the micro-batches an update runs.
        per_step = steps.micro_batches_per_update / steps.global_steps_per_update
        warmup_steps = _whole(options.num_warmup_steps * per_step)
        for key, value in (
                (mllog_keys.GLOBAL_BATCH_SIZE, global_batch_size),
                (mllog_keys.GRADIENT_ACCUMULATION_STEPS, steps.micro_batches_per_update),
                (mllog_keys.MAX_SEQUENCE_LENGTH, options.max_seq_length),
                (mllog_keys.OPT_BASE_LR, options.learning_rate),
                (mllog_keys.OPT_LAMB_EPSILON, options.lamb_epsilon),
                (mllog_keys.OPT_LAMB_BETA_1, adjustment.beta_1),
                (mllog_keys.OPT_LAMB_BETA_2, adjustment.beta_2),
                (mllog_keys.OPT_LAMB_WEIGHT_DECAY, options.lamb_weight_decay_rate),
                (mllog_keys.OPT_LAMB_LR_DECAY_POLY_POWER, options.poly_power),
                (mllog_keys.OPT_LR_TRAINING_STEPS, updates * steps.micro_batches_per_update),
                (mllog_keys.OPT_LR_WARMUP_STEPS, warmup_steps),
                (mllog_keys.NUM_WARMUP_STEPS, warmup_steps),
                (mllog_keys.START_WARMUP_STEP, _whole(options.start_warmup_step * per_step)),
                ("packing_factor", packing_factor or 1.0)):
            self.log.event(key, value)
        self.log.end(mllog_keys.INIT_STOP)
        self.log.start(mllog_keys.RUN_START)
        self._block_start(0.0, interval_samples)

    def _block_start(self, samples: float, interval_samples: int) -> None:
        self.block_start_samples = samples
        # Samples always: the interval, or the whole run when it evaluates at the end.
        self.log.start(mllog_keys.BLOCK_START, metadata={
            mllog_keys.FIRST_EPOCH_NUM: int(samples),
            mllog_keys.EPOCH_COUNT: interval_samples or max(1, self.planned_samples),
            mllog_keys.SAMPLES_COUNT: int(samples)})

    def periodic_evaluation(self, evaluate, *, interval_samples: int,
                            samples_per_update: float, earlier: list) -> PeriodicEvaluation:
        """The `PeriodicEvaluation` of the run, logging each evaluation's block,
        interval and accuracy around ``evaluate(step) -> results``.

        ``earlier``: the evaluations of the run before it was resumed (their
        last one opened the block that goes on)."""
        if earlier:
            self.block_start_samples = self.samples = earlier[-1]["samples_count"]
            self.eval_samples_logged = True
        threshold = self.stop_threshold
        num_train_steps = self.options.num_train_steps
        at_end = self.options.eval_at_end
        if at_end is None:  # MLPerf's schedule has no evaluation at the end
            at_end = not self.options.mlperf_log_file

        def logged_evaluation(step: int, samples: float) -> dict:
            on_schedule = not interval_samples or crossed(self.samples, samples,
                                                          interval_samples)
            self.samples = samples
            where = {mllog_keys.EPOCH_NUM: int(samples), mllog_keys.SAMPLES_COUNT: int(samples)}
            if not on_schedule:
                self.log.event("off_schedule_evaluation", True, metadata=where)
            self.log.end(mllog_keys.BLOCK_STOP, metadata={
                mllog_keys.FIRST_EPOCH_NUM: int(self.block_start_samples),
                mllog_keys.SAMPLES_COUNT: int(samples)})
            self.log.start(mllog_keys.EVAL_START, metadata=where)
            results = evaluate(step)
            self.log.end(mllog_keys.EVAL_STOP, metadata=where)
            self.log.event(mllog_keys.EVAL_ACCURACY, results[TARGET_METRIC], metadata=where)
            if not self.eval_samples_logged:
                self.log.event(mllog_keys.EVAL_SAMPLES, int(results["sequences"]))
                self.eval_samples_logged = True
            reached = threshold is not None and results[TARGET_METRIC] >= threshold
            if reached or step >= num_train_steps:
                # The run stops here: the final checkpoint, export and clean-up
                # that follow are not part of its time to train.
                self.run_stop(success=reached, samples=samples)
            else:
                self._block_start(samples, interval_samples)
            return results

        return PeriodicEvaluation(logged_evaluation, interval_samples, TARGET_METRIC,
                                  stop_threshold=threshold,
                                  samples_per_update=samples_per_update, at_end=at_end,
                                  progress=self.utilisation.update)

    def run_stop(self, *, success: bool, samples: float | None = None) -> None:
        """``train_samples`` (the sequences trained) and ``run_stop``:
        ``success`` when the target was reached, else ``aborted``.

        Logged once: at the evaluation that ends the run when there is one,
        later calls do nothing. Without ``samples`` (a run that failed), the
        samples of its last evaluation."""
        if self.stopped:
            return
        self.stopped = True
        samples = self.samples if samples is None else samples
        self.log.event(mllog_keys.TRAIN_SAMPLES, int(samples))
        metadata = {mllog_keys.STATUS: mllog_keys.SUCCESS if success else mllog_keys.ABORTED,
                    mllog_keys.EPOCH_NUM: int(samples),
                    mllog_keys.SAMPLES_COUNT: int(samples)}
        metadata.update({key: self.utilisation[key] for key in UTILISATION_KEYS
                         if key in self.utilisation})
        self.log.end(mllog_keys.RUN_STOP, metadata=metadata)

    def close(self) -> None:
        self.log.close()


def _whole(value: float):
    """An int where the value is whole (a float where it is not: the value used)."""
    return int(value) if float(value).is_integer() else value


__all__ = ["DROP_CACHES", "MlperfRun", "TARGET_ACCURACY", "TARGET_METRIC",
           "check_mlperf_options", "default_eval_interval_samples",
           "default_stop_threshold", "drop_page_cache",
           "nominal_packing_factor"]
