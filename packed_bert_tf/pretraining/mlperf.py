"""A pre-training run as MLPerf Training 5.0's BERT rules see it: its MLPerf log
(`MlperfRun`), the evaluation cadence in training samples
(`default_eval_interval_samples`) and the checks of the options that drive
them.

Samples are sequences, not packs, as MLPerf counts them. ``global_batch_size``
is logged as the sequences of an update: ``train_batch_size x
gradient_accumulation_steps`` rows, times the packing factor when the rows
are packs (so a packed run adjusted with ``accumulation`` logs about the
unpacked run's); the packing factor is logged too, as an extra key
(``packing_factor``), which the checker allows.

The order of the log, as the compliance checker wants it::

    cache_clear, init_start, submission_*, seed, the hyper-parameters,
    train_samples, init_stop, run_start, block_start,
    [block_stop, eval_start, eval_stop, eval_accuracy, (eval_samples once),
     block_start]..., run_stop (status success or aborted)

``eval_accuracy`` is masked-LM accuracy, with ``epoch_num`` and
``samples_count`` the training samples seen (MLPerf's BERT epochs are
samples).
"""

from __future__ import annotations

import math

from mlperf_logging.mllog import constants as mllog_keys

from packed_bert_tf.pretraining.mlperf_log import NO_LOG, open_mlperf_log
from packed_bert_tf.training.loop import PeriodicEvaluation

#: MLPerf's BERT target: masked-LM accuracy.
TARGET_METRIC = "masked_lm_accuracy"


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
        self.eval_samples_logged = False
        self.stopped = False

    @property
    def enabled(self) -> bool:
        return self.log is not NO_LOG

    def init_start(self, platform: str) -> None:
        """The run's first lines (not on resume)."""
        if self.resumed:
            return
        options = self.options
        self.log.event(mllog_keys.CACHE_CLEAR, False)  # no system cache is cleared
        self.log.start(mllog_keys.INIT_START)
        self.log.event(mllog_keys.SUBMISSION_BENCHMARK, mllog_keys.BERT)
        self.log.event(mllog_keys.SUBMISSION_ORG, options.submission_org)
        self.log.event(mllog_keys.SUBMISSION_DIVISION, options.submission_division)
        self.log.event(mllog_keys.SUBMISSION_STATUS, options.submission_status)
        self.log.event(mllog_keys.SUBMISSION_PLATFORM,
                       options.submission_platform or platform)
        self.log.event(mllog_keys.SEED, options.seed)

    def run_start(self, *, global_batch_size: float, micro_batches_per_update: int,
                  packing_factor: float | None, interval_samples: int, updates: int) -> None:
        """The hyper-parameters, ``init_stop``, ``run_start`` and the first block
        (not on resume: the open block goes on)."""
        self.block_start_samples = 0.0
        if self.resumed:
            return
        options = self.options
        for key, value in (
                (mllog_keys.GLOBAL_BATCH_SIZE, global_batch_size),
                (mllog_keys.GRADIENT_ACCUMULATION_STEPS, micro_batches_per_update),
                (mllog_keys.MAX_SEQUENCE_LENGTH, options.max_seq_length),
                (mllog_keys.OPT_BASE_LR, options.learning_rate),
                (mllog_keys.OPT_LAMB_EPSILON, options.lamb_epsilon),
                (mllog_keys.OPT_LAMB_BETA_1, options.lamb_beta_1),
                (mllog_keys.OPT_LAMB_BETA_2, options.lamb_beta_2),
                (mllog_keys.OPT_LAMB_WEIGHT_DECAY, options.lamb_weight_decay_rate),
                (mllog_keys.OPT_LAMB_LR_DECAY_POLY_POWER, options.poly_power),
                (mllog_keys.OPT_LR_TRAINING_STEPS, options.num_train_steps),
                (mllog_keys.OPT_LR_WARMUP_STEPS, options.num_warmup_steps),
                (mllog_keys.NUM_WARMUP_STEPS, options.num_warmup_steps),
                (mllog_keys.START_WARMUP_STEP, options.start_warmup_step),
                (mllog_keys.TRAIN_SAMPLES, round(global_batch_size * updates)),
                ("packing_factor", packing_factor or 1.0)):
            self.log.event(key, value)
        self.log.end(mllog_keys.INIT_STOP)
        self.log.start(mllog_keys.RUN_START)
        self._block_start(0.0, interval_samples)

    def _block_start(self, samples: float, interval_samples: int) -> None:
        self.block_start_samples = samples
        self.log.start(mllog_keys.BLOCK_START, metadata={
            mllog_keys.FIRST_EPOCH_NUM: int(samples),
            mllog_keys.EPOCH_COUNT: interval_samples or self.options.num_train_steps,
            mllog_keys.SAMPLES_COUNT: int(samples)})

    def periodic_evaluation(self, evaluate, *, interval_samples: int,
                            samples_per_update: float, earlier: list) -> PeriodicEvaluation:
        """The `PeriodicEvaluation` of the run, logging each evaluation's block,
        interval and accuracy around ``evaluate(step) -> results``.

        ``earlier``: the evaluations of the run before it was resumed (their
        last one opened the block that goes on)."""
        if earlier:
            self.block_start_samples = earlier[-1]["samples_count"]
            self.eval_samples_logged = True
        threshold = self.options.stop_threshold
        num_train_steps = self.options.num_train_steps

        def logged_evaluation(step: int, samples: float) -> dict:
            where = {mllog_keys.EPOCH_NUM: int(samples), mllog_keys.SAMPLES_COUNT: int(samples)}
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
                                  samples_per_update=samples_per_update)

    def run_stop(self, *, success: bool, samples: float | None = None) -> None:
        """``run_stop``: ``success`` when the target was reached, else ``aborted``.

        Logged once: at the evaluation that ends the run when there is one,
        later calls do nothing."""
        if self.stopped:
            return
        self.stopped = True
        metadata = {mllog_keys.STATUS: mllog_keys.SUCCESS if success else mllog_keys.ABORTED}
        if samples is not None:
            metadata.update({mllog_keys.EPOCH_NUM: int(samples),
                             mllog_keys.SAMPLES_COUNT: int(samples)})
        self.log.end(mllog_keys.RUN_STOP, metadata=metadata)

    def close(self) -> None:
        self.log.close()


__all__ = ["MlperfRun", "TARGET_METRIC", "check_mlperf_options",
           "default_eval_interval_samples"]
