"""A whole pre-training run (what ``run_pretraining.py`` does), from options.

It starts as every run does (`packed_bert_tf.training.startup`): the model
config is read, the batch sizes are checked against the workers, the
strategy is made and the chief makes and locks the output folder. Then every
input is checked (files, record sizes, the first records' token ids, batch
sizes, packing statistics) before anything is built; the model
(`BertPretrainingModel`) and LAMB, with the packing adjustment of its
hyper-parameters, are made under the strategy (`startup.start_run`), restored
from the output folder's latest checkpoint (or initialised from
``init_checkpoint``), trained to ``num_train_steps``, written as a
Google-format checkpoint, evaluated, and summarised in
``train_summary.json`` / ``eval_results.json``.

The input pipeline checks every token id as it reads; when it fails mid-run
(a truncated file, a record missing a feature, an id beyond the vocabulary)
the input files are read on the host to name the file and record
(`task.find_bad_record`), and the run stops with that one line.

Of the pre-training modules this one alone reads `PretrainingOptions`;
`packed_bert_tf.pretraining.task` takes explicit arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import time

import tensorflow as tf
from absl import logging

from packed_bert_tf import filesystem
from packed_bert_tf.batching.bucketing import Bucketing
from packed_bert_tf.data.inputs.dynamic_masking import MaskingOptions
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling
from packed_bert_tf.data.inputs.text_dataset import TextInput, text_files_of
from packed_bert_tf.data.inputs.text_sequences import (
    TextSequenceOptions,
    check_text_files,
    text_sequences,
)
from packed_bert_tf.data.records.record_format import IdLimits, RecordFormat
from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.pretraining import task
from packed_bert_tf.pretraining.comparison import TRAIN_SUMMARY_FILE
from packed_bert_tf.pretraining.hyperparameters import (
    PACKING_MODES,
    adjust_for_packing,
    read_packing_factor,
)
from packed_bert_tf.pretraining.mlperf import (
    TARGET_METRIC,
    MlperfRun,
    check_mlperf_options,
    default_eval_interval_samples,
    nominal_packing_factor,
)
from packed_bert_tf.training import interrupts, trajectory
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.clipping import clipping
from packed_bert_tf.training.distribution import check_global_batch_size, check_static_shapes
from packed_bert_tf.training.loop import PeriodicEvaluation, train_and_export
from packed_bert_tf.training.options import BATCHING, TrainingOptions
from packed_bert_tf.training.progress import format_values
from packed_bert_tf.training.startup import (
    RunContext,
    RunSpec,
    StartedRun,
    make_tokenizer,
    mixed_precision_policy,
    resume_trajectory,
    run_task,
    start_run,
)
from packed_bert_tf.training.step_counting import StepCounting
from packed_bert_tf.training.trainer import Trainer

EVAL_RESULTS_FILE = "eval_results.json"


@dataclasses.dataclass
class PretrainingOptions(TrainingOptions):
    """The options of a run: `TrainingOptions` and these; ``run_pretraining.py``'s
    flags of the same names (their defaults are these)."""

    max_seq_length: int = 512
    optimizer: str = "lamb"
    input_file: str | None = None
    eval_input_file: str | None = None
    max_predictions_per_seq: int = 76
    eval_batch_size: int = 8
    num_train_steps: int = 100_000
    num_warmup_steps: int = 10_000
    start_warmup_step: int = 0
    lamb_beta_1: float = 0.9
    lamb_beta_2: float = 0.999
    lamb_weight_decay_rate: float = 0.01
    lamb_epsilon: float = 1e-6
    log_epsilon: float | None = None
    num_gpus: int = 0
    do_eval: bool = False
    max_eval_steps: int = 0
    packed_input: bool | None = None
    packing_hyperparameter_adjustment: str = "none"
    packing_factor: float | None = None
    shuffle_buffer_size: int = 10_000
    packing_buffer_size: int = 10_000
    token_budget: int | None = None
    resume_with_changed_flags: bool = False
    poly_power: float = 1.0
    eval_interval_samples: int | None = None
    eval_at_end: bool | None = None
    stop_threshold: float | None = None
    mlperf_log_file: str | None = None
    drop_page_cache: bool = False
    submission_org: str = "packed_bert_tf"
    submission_division: str = "open"
    submission_status: str = "research"
    submission_platform: str | None = None
    input_text_file: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    pretraining_objective: str = "nsp"
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False


@dataclasses.dataclass
class _Inputs:
    """What the checks found out about the inputs (``text``: training from
    text files instead of ``train_files``)."""

    train_files: list
    train_format: object
    eval_files: list
    eval_format: object
    packing_factor: float | None
    pack_on_the_fly: PackOnTheFly | None = None
    text: TextInput | None = None


def _check_positive(options: PretrainingOptions) -> None:
    for name in ("max_seq_length", "max_predictions_per_seq", "train_batch_size",
                 "eval_batch_size", "num_train_steps", "steps_per_update",
                 "iterations_per_loop", "log_every_n_steps", "max_sequences_per_pack",
                 "packing_buffer_size"):
        if getattr(options, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(options, name)}")
    for name in ("num_warmup_steps", "save_checkpoints_steps", "max_eval_steps"):
        if getattr(options, name) < 0:
            raise ValueError(f"--{name} must be >= 0, got {getattr(options, name)}")
    if options.batching not in BATCHING:
        raise ValueError(f"--batching={options.batching!r} is not one of "
                         f"{', '.join(BATCHING)}")
    if options.do_train:  # whole updates (and a valid --step_unit)
        StepCounting(options.step_unit, options.steps_per_update,
                     options.steps_per_update).updates(options.num_train_steps)
    if options.packing_hyperparameter_adjustment not in PACKING_MODES:
        raise ValueError(f"--packing_hyperparameter_adjustment="
                         f"{options.packing_hyperparameter_adjustment!r} is not one of "
                         f"{', '.join(PACKING_MODES)}")
    _take_log_epsilon(options)


def _take_log_epsilon(options: PretrainingOptions) -> None:
    """``--log_epsilon`` (MLPerf's TPU command lines): LAMB's epsilon is
    10 ** log_epsilon, and ``--lamb_epsilon``, if also given, must agree."""
    if options.log_epsilon is None:
        return
    epsilon = 10.0 ** options.log_epsilon
    default = PretrainingOptions.lamb_epsilon
    if options.lamb_epsilon not in (default, epsilon) and \
            not math.isclose(options.lamb_epsilon, epsilon, rel_tol=1e-12):
        raise ValueError(f"--log_epsilon={options.log_epsilon:g} (epsilon {epsilon:g}) "
                         f"and --lamb_epsilon={options.lamb_epsilon:g} disagree")
    options.lamb_epsilon = epsilon


def check_inputs(options: PretrainingOptions, config, strategy) -> _Inputs:
    """Every check that can fail before training starts; one clear error each."""
    _check_positive(options)
    check_mlperf_options(options)
    if not (options.do_train or options.do_eval):
        raise ValueError("nothing to do: give --do_train and/or --do_eval")
    if config.max_position_embeddings < options.max_seq_length:
        raise ValueError(f"--max_seq_length={options.max_seq_length} exceeds "
                         f"max_position_embeddings {config.max_position_embeddings} of "
                         f"--bert_config_file")
    sizes = dict(max_seq_length=options.max_seq_length,
                 max_predictions_per_seq=options.max_predictions_per_seq,
                 max_sequences_per_pack=options.max_sequences_per_pack)
    train_files = train_format = eval_files = eval_format = packing_factor = None
    pack_on_the_fly = None
    text = None
    if options.do_train and options.input_text_file:
        check_global_batch_size(options.train_batch_size, strategy, "--train_batch_size")
        check_static_shapes(options.batching, strategy)
        text, pack_on_the_fly, packing_factor = _check_text(options, config)
        train_format = RecordFormat.unpacked(options.max_seq_length,
                                             options.max_predictions_per_seq)
    elif options.do_train:
        if not options.input_file:
            raise ValueError("--do_train needs --input_file (or --input_text_file)")
        check_global_batch_size(options.train_batch_size, strategy, "--train_batch_size")
        check_static_shapes(options.batching, strategy)
        train_files = filesystem.expand_file_patterns(options.input_file, flag="input_file")
        train_format = task.expected_record_format(
            train_files, packed_input=options.packed_input, **sizes)
        _check_batching(options, train_files, train_format)
        _check_first_records(train_files, train_format, IdLimits.of_config(config))
        if options.batching == "packed" and not train_format.is_packed:
            pack_on_the_fly = PackOnTheFly(options.max_sequences_per_pack,
                                           options.packing_buffer_size)
        packing_factor = _packing_factor(options, train_files, train_format,
                                         pack_on_the_fly)
    if options.do_eval:
        flag = "eval_input_file" if options.eval_input_file else "input_file"
        if not getattr(options, flag):
            raise ValueError("--do_eval needs --eval_input_file (or --input_file)")
        if flag == "input_file":
            logging.info("no --eval_input_file: evaluating --input_file, as the MLPerf "
                         "reference does")
        check_global_batch_size(options.eval_batch_size, strategy, "--eval_batch_size")
        eval_files = filesystem.expand_file_patterns(getattr(options, flag), flag=flag)
        eval_format = task.expected_record_format(eval_files, **sizes)
        _check_first_records(eval_files, eval_format, IdLimits.of_config(config))
    return _Inputs(train_files, train_format, eval_files, eval_format, packing_factor,
                   pack_on_the_fly, text)


def _check_text(options: PretrainingOptions, config):
    """``--input_text_file``: the files, the tokenizer and the masking, checked.

    Returns:
      (`TextInput`, packing on the fly or None, the packing factor).
    """
    if options.input_file:
        raise ValueError("--input_file and --input_text_file are both given: train on "
                         "records or on text")
    if options.batching == "bucketed":
        raise ValueError("--batching=bucketed takes records: with --input_text_file use "
                         "--batching=packed or padded")
    if not options.vocab_file or not tf.io.gfile.exists(options.vocab_file):
        raise ValueError(f"--input_text_file needs --vocab_file (a vocab.txt or a "
                         f"tokenizer.json): {options.vocab_file!r} is not a file")
    tokenizer = make_tokenizer(options, config)
    files = text_files_of(options.input_text_file)
    check_text_files(files)
    text = TextInput(
        files, options.vocab_file, options.do_lower_case,
        TextSequenceOptions(options.pretraining_objective, options.max_seq_length,
                            options.short_seq_prob),
        MaskingOptions(options.max_predictions_per_seq, options.masked_lm_prob,
                       options.do_whole_word_mask))
    if options.batching != "packed":
        return text, None, 1.0
    packing = PackOnTheFly(options.max_sequences_per_pack, options.packing_buffer_size)
    if options.packing_factor is not None:
        return text, packing, options.packing_factor
    sequences = text_sequences(files, tokenizer, text.sequences, seed=options.seed or 0,
                               epoch=0)
    factor = task.lengths_packing_factor(
        ((ids != 0).sum(keepdims=True) for ids, _, _ in sequences),
        options.max_seq_length, packing, max_records=10_000)
    logging.info("packing factor of packing on the fly: %.4f sequences per pack "
                 "(estimated on the first sequences of the text; --packing_factor "
                 "overrides it)", factor)
    return text, packing, factor


def _check_first_records(files, record_format, id_limits: IdLimits) -> None:
    """The first records of each file, before anything is built: a config whose
    vocabulary (or token types, positions) is smaller than the data's fails
    here, not after compiling. (The input pipeline checks every record as it
    reads.)"""
    problem = task.find_bad_record(files, record_format, id_limits,
                                   records_per_file=256)
    if problem:
        raise ValueError(problem)


def _check_batching(options, files, record_format) -> None:
    """``--batching``: packed takes packed records (one pack per row) or packs
    unpacked ones as it reads them; padded and bucketed need unpacked records
    (one sequence per row)."""
    if options.batching == "packed":
        if not record_format.is_packed:
            logging.info("%s holds unpacked records: packing them on the fly (at most %d "
                         "sequences per pack, decided over --packing_buffer_size=%d "
                         "records; packing them offline with data_prep."
                         "pack_pretraining_data reaches the LP bound)", files[0],
                         options.max_sequences_per_pack, options.packing_buffer_size)
        return
    if record_format.is_packed:
        raise ValueError(f"--batching={options.batching} needs unpacked records, but "
                         f"{files[0]} is packed")
    if options.batching == "bucketed":
        if options.steps_per_update != 1:
            raise ValueError("--batching=bucketed gives batches of different shapes, "
                             "which cannot be stacked for accumulation: use "
                             "--steps_per_update=1")


def _packing_factor(options, files, record_format, pack_on_the_fly) -> float | None:
    """The packing factor: the option, else the dataset's packing_stats.json
    (packed records) or the packer run over the first records' lengths
    (packed on the fly)."""
    if options.packing_factor is not None and (record_format.is_packed or pack_on_the_fly):
        return options.packing_factor
    if pack_on_the_fly is not None:
        factor = task.streaming_packing_factor(files, record_format, pack_on_the_fly)
        logging.info("packing factor of packing on the fly: %.4f sequences per pack "
                     "(estimated on the first records; --packing_factor overrides it)",
                     factor)
        return factor
    if not record_format.is_packed:
        return 1.0
    try:
        return read_packing_factor(os.path.dirname(files[0]))
    except ValueError as error:
        if options.packing_hyperparameter_adjustment != "none":
            raise ValueError(f"--packing_hyperparameter_adjustment="
                             f"{options.packing_hyperparameter_adjustment} needs the "
                             f"packing factor: {error}; or give --packing_factor") from None
        logging.warning("packing factor unknown (%s)", error)
        return None


def run_pretraining(options: PretrainingOptions,
                    strategy: tf.distribute.Strategy | None = None) -> dict:
    """Runs training and/or evaluation as the options say; returns the summary dict.

    Raises:
      ValueError: a bad option or input (before anything is trained), an
        output folder in use by another run, a damaged checkpoint, or a bad
        record met while training or evaluating (naming the file and record).
      NonFiniteLossError: the loss became NaN (the last good checkpoint is kept).
    """
    return run_task(options, functools.partial(_run_in, options),
                    strategy=strategy, batch_flags={"train_batch_size": options.do_train,
                                                    "eval_batch_size": options.do_eval})


def _run_in(options: PretrainingOptions, context: RunContext) -> dict:
    """`run_pretraining` once it holds the output folder (``context.dirs.own``:
    where this worker writes)."""
    config, strategy, output_dir = context.config, context.strategy, context.dirs.own
    inputs = check_inputs(options, config, strategy)
    summary = {"options": dataclasses.asdict(options),
               "replicas": strategy.num_replicas_in_sync}

    adjustment = adjust_for_packing(
        options.packing_hyperparameter_adjustment if inputs.packing_factor else "none",
        inputs.packing_factor or 1.0, beta_1=options.lamb_beta_1,
        beta_2=options.lamb_beta_2, steps_per_update=options.steps_per_update)
    logging.info("packing hyper-parameter adjustment: %s", adjustment.description)
    steps = StepCounting(options.step_unit, options.steps_per_update,
                         adjustment.steps_per_update)
    clip = clipping(after_allreduce=options.clip_by_global_norm_after_gradient_allreduce,
                    micro_batches_per_update=steps.micro_batches_per_update)
    if options.do_train:
        logging.info("steps: %s; gradients clipped to global norm 1.0 %s",
                     steps.describe(num_train_steps=options.num_train_steps,
                                    train_batch_size=options.train_batch_size,
                                    sequences_per_row=inputs.packing_factor),
                     "per micro-batch, before accumulating" if clip.micro_batch_clipnorm
                     else "once per update")
    summary.update(packing_factor=inputs.packing_factor,
                   adjustment=dataclasses.asdict(adjustment),
                   steps={**dataclasses.asdict(steps), **dataclasses.asdict(clip)})

    id_limits = IdLimits.of_config(config)
    mlperf = MlperfRun(options, is_chief=context.worker.is_chief and options.do_train,
                       resumed=bool(TrainingCheckpoints.newest_step(context.dirs.shared)))
    mlperf.init_start(platform=_platform(strategy))
    segments = None
    if options.do_train:
        values, rows = _trajectory_values(options, inputs, steps, strategy)
        segments = resume_trajectory(context, steps, values, rows_per_update=rows,
                                     allow_flag="--resume_with_changed_flags",
                                     allow_changes=options.resume_with_changed_flags)
    with mixed_precision_policy(options.mixed_precision):
        packed_model = inputs.pack_on_the_fly is not None or any(
            f is not None and f.is_packed for f in (inputs.train_format, inputs.eval_format))
        spec = RunSpec(
            functools.partial(BertPretrainingModel.from_bert_config, config,
                              packed=packed_model),
            task.MASKED_LM_TASK if inputs.text is not None
            and options.pretraining_objective == "mlm" else task.PRETRAINING_TASK,
            steps, num_train_steps=options.num_train_steps,
            num_warmup_steps=options.num_warmup_steps,
            start_warmup_step=options.start_warmup_step, decay_power=options.poly_power,
            optimizer_hyperparameters=dict(
                beta_1=adjustment.beta_1, beta_2=adjustment.beta_2,
                epsilon=options.lamb_epsilon,
                weight_decay_rate=options.lamb_weight_decay_rate))
        run = start_run(spec, options, context)
        try:
            _train_and_evaluate(options, inputs, run, mlperf, summary,
                                dict(segments=segments, steps=steps, adjustment=adjustment,
                                     output_dir=output_dir, id_limits=id_limits))
        except interrupts.TrainingInterrupted:
            raise  # the run goes on when resumed: no run_stop
        except BaseException:
            mlperf.run_stop(success=False)
            raise
        finally:
            mlperf.close()
    summary_path = os.path.join(output_dir, TRAIN_SUMMARY_FILE)
    if "train" not in summary:
        # An evaluation of a trained run keeps the training figures.
        summary.update(_earlier_training(summary_path))
    write_json_atomically(summary_path, summary, sort_keys=True)
    return summary


def _train_and_evaluate(options, inputs, run: StartedRun, mlperf: MlperfRun,
                        summary: dict, where: dict) -> None:
    """Trains (evaluating during training with --do_eval) and/or evaluates, into
    ``summary``; ``where``: the run's ``segments``, ``steps``, ``adjustment``,
    ``output_dir`` and ``id_limits``."""
    id_limits, output_dir, steps = where["id_limits"], where["output_dir"], where["steps"]
    # Text has no records to look into: a bad line is named as it is read.
    train_files = inputs.train_files if inputs.text is None else None

    def evaluate_now(step: int) -> dict:
        with _naming_the_bad_record(inputs.eval_files, inputs.eval_format, id_limits):
            return evaluate(run.trainer, inputs.eval_files, inputs.eval_format,
                            options.eval_batch_size, options.max_eval_steps,
                            id_limits=id_limits)

    if options.do_train:
        # Sequences per update, as MLPerf counts them: packs times the nominal
        # packing factor in the log and its evaluation interval; the measured
        # one where the updates' sequences are counted.
        rows_per_update = options.train_batch_size * steps.micro_batches_per_update
        global_batch_size = rows_per_update * nominal_packing_factor(inputs.packing_factor)
        interval = (options.eval_interval_samples if options.eval_interval_samples is not None
                    else default_eval_interval_samples(global_batch_size))
        mlperf.run_start(global_batch_size=global_batch_size, steps=steps,
                         adjustment=where["adjustment"],
                         packing_factor=inputs.packing_factor, interval_samples=interval)
        evaluation = None
        if options.do_eval:
            if mlperf.stop_threshold is not None and options.stop_threshold is None:
                logging.info("stopping at the first evaluation whose %s reaches %g, "
                             "MLPerf's target (--stop_threshold sets another)",
                             TARGET_METRIC, mlperf.stop_threshold)
            evaluation = mlperf.periodic_evaluation(
                evaluate_now, interval_samples=interval,
                samples_per_update=rows_per_update * (inputs.packing_factor or 1.0),
                earlier=run.checkpoints.totals.read()[2])
            summary["eval_interval_samples"] = interval
        skip_rows = trajectory.rows_read(where["segments"], run.start_step)
        with _naming_the_bad_record(train_files, inputs.train_format, id_limits):
            summary["train"] = _train(options, inputs, run, output_dir, id_limits,
                                      skip_rows, evaluation)
        train = summary["train"]
        mlperf.run_stop(success=train["stopped_at_target"], samples=train["sequences"])
        # The last evaluation is the trained model's when it came at the end.
        if options.do_eval and train["evaluations"] and \
                train["evaluations"][-1]["step"] == train["final_step"]:
            summary["eval"] = {name: value for name, value in train["evaluations"][-1].items()
                               if name != "samples_count"}
    if options.do_eval:
        if "eval" not in summary:
            summary["eval"] = evaluate_now(int(run.trainer.step.numpy()))
        write_json_atomically(os.path.join(output_dir, EVAL_RESULTS_FILE), summary["eval"])


def _platform(strategy) -> str:
    """``<replicas>x<device kind>``, e.g. ``2xCPU``: the MLPerf log's default platform."""
    try:
        kind = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
    except RuntimeError:  # the default strategy has no worker devices
        kind = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    return f"{strategy.num_replicas_in_sync}x{kind}"


def _earlier_training(summary_path: str) -> dict:
    """The ``train`` section of an earlier ``train_summary.json``, if any."""
    if not tf.io.gfile.exists(summary_path):
        return {}
    with tf.io.gfile.GFile(summary_path) as handle:
        earlier = json.load(handle)
    return {"train": earlier["train"]} if "train" in earlier else {}


@contextlib.contextmanager
def _naming_the_bad_record(files, record_format, id_limits: IdLimits):
    """An input-pipeline error mid-run becomes one ValueError naming the file and
    record at fault (found by reading the files on the host; tf.data's own
    errors name neither). Other errors pass unchanged.

    Any TensorFlow error is looked into: without XLA, an iterator error inside
    the training loop can come out as another one (an ``AlreadyExistsError``
    of a temporary variable of the loop, TF 2.21).
    """
    try:
        yield
    except tf.errors.OpError as error:
        if files is None:
            raise
        logging.info("the input pipeline failed (%s: %s); reading the input files to find "
                     "the record at fault", type(error).__name__,
                     error.message.splitlines()[0][:200])
        problem = task.find_bad_record(files, record_format, id_limits)
        if problem is None:
            raise
        raise ValueError(problem) from None


def _trajectory_values(options, inputs, steps: StepCounting, strategy) -> tuple[dict, int]:
    """What fixes this run's trajectory (`trajectory`), and the rows each replica
    reads per update."""
    values = {f"--{name}": getattr(options, name) for name in (
        "train_batch_size", "steps_per_update", "step_unit", "max_seq_length",
        "max_predictions_per_seq", "batching", "seed", "shuffle_buffer_size")}
    if options.batching == "packed":
        values.update({"--max_sequences_per_pack": options.max_sequences_per_pack,
                       "--packing_buffer_size": options.packing_buffer_size})
    if options.batching == "bucketed":
        values.update({"--bucket_boundaries": list(options.bucket_boundaries or []),
                       "--pool_size": options.pool_size,
                       "--token_budget": options.token_budget})
    flag, files = (("--input_file", inputs.train_files) if inputs.text is None
                   else ("--input_text_file", inputs.text.files))
    values[flag] = [filesystem.absolute_path(path) for path in files]
    if inputs.text is not None:
        values.update({f"--{name}": getattr(options, name) for name in (
            "pretraining_objective", "masked_lm_prob", "short_seq_prob",
            "do_whole_word_mask", "do_lower_case")})
        values["--vocab_file"] = filesystem.absolute_path(options.vocab_file)
    # Bucketed batches hold varying rows: their resume skips whole updates
    # (rows_per_update 1: an update).
    rows = (1 if options.batching == "bucketed" else
            options.train_batch_size // strategy.num_replicas_in_sync
            * steps.micro_batches_per_update)
    return values, rows


def _train(options, inputs, run: StartedRun, output_dir, id_limits, skip_rows: int,
           evaluation: PeriodicEvaluation | None) -> dict:
    """Trains from the restored step, each replica skipping ``skip_rows`` rows of its
    data first (updates, with bucketed batches: see `_trajectory_values`),
    evaluating as ``evaluation`` says."""
    shuffling = Shuffling(seed=options.seed, shuffle_buffer_size=options.shuffle_buffer_size)
    if inputs.text is not None:
        dataset_fn = task.text_train_dataset_fn(
            inputs.text, global_batch_size=options.train_batch_size,
            steps_per_update=run.trainer.steps_per_update, shuffling=shuffling,
            skip_rows=skip_rows, pack_on_the_fly=inputs.pack_on_the_fly)
    elif options.batching == "bucketed":
        bucketing = Bucketing(
            batch_size=None if options.token_budget else options.train_batch_size,
            token_budget=options.token_budget, pool_size=options.pool_size,
            bucket_boundaries=options.bucket_boundaries, pad_to_bucket_boundary=True)
        dataset_fn = task.bucketed_train_dataset_fn(
            inputs.train_files, record_format=inputs.train_format, bucketing=bucketing,
            shuffling=shuffling, skip_steps=skip_rows, id_limits=id_limits)
    else:
        dataset_fn = task.train_dataset_fn(
            inputs.train_files, global_batch_size=options.train_batch_size,
            steps_per_update=run.trainer.steps_per_update, record_format=inputs.train_format,
            shuffling=shuffling, skip_rows=skip_rows, id_limits=id_limits,
            pack_on_the_fly=inputs.pack_on_the_fly)
    return train_and_export(run.trainer, dataset_fn, options, output_dir=output_dir,
                            num_train_steps=options.num_train_steps, schedule=run.schedule,
                            checkpoints=run.checkpoints, evaluation=evaluation)


def evaluate(trainer: Trainer, files, record_format, eval_batch_size: int,
             max_eval_steps: int = 0, *, id_limits: IdLimits | None = None) -> dict:
    """Masked-LM and next-sentence accuracy (and losses) over the evaluation records.

    Every record is read exactly once (the last batch filled up with empty
    records) unless ``max_eval_steps`` cuts it short; the metrics are ratios
    of totals, so packed and unpacked copies of a set give the same numbers.
    """
    strategy = trainer.strategy
    steps = task.evaluation_steps(files, global_batch_size=eval_batch_size,
                                  strategy=strategy, max_eval_steps=max_eval_steps)
    iterator = iter(strategy.distribute_datasets_from_function(
        task.eval_dataset_fn(files, global_batch_size=eval_batch_size,
                             record_format=record_format, id_limits=id_limits)))
    started = time.perf_counter()
    sums = trainer.evaluate(iterator, steps, task.eval_sums)
    results = task.eval_results(sums)
    results.update(steps=steps, seconds=time.perf_counter() - started,
                   step=int(trainer.step.numpy()))
    logging.info("eval at step %d over %d sequences: %s", results["step"],
                 results["sequences"], format_values(
                     {name: results[name] for name in task.METRIC_NAMES}))
    return results
