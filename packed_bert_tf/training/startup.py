"""How every training run starts, whatever its task (`run_task`, `start_run`).

The three front ends (run_pretraining.py, run_squad.py, run_classifier.py)
start the same way and differ only in what they hand over:

1. `run_task`: the model config is read, the batch sizes are checked against
   the workers, the strategy is made and the output folder held
   (`packed_bert_tf.training.output_dirs.run_on_this_worker`); the task's
   body gets all of it as one `RunContext`.
2. `resume_trajectory`: what fixes the run's trajectory is checked against
   the folder's record before anything is built (`trajectory`).
3. `start_run`, under the run's `mixed_precision_policy`: the seed, the
   learning-rate schedule, the task's model and the optimizer made under the
   strategy, then a `Trainer` restored from the run's latest checkpoint or
   initialised from an original BERT checkpoint. A task states what differs
   in a `RunSpec`.
4. `packed_bert_tf.training.loop.train_and_export`: training to the end and
   the final weights in the original BERT format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import secrets
from typing import Callable, Mapping

import keras
import tensorflow as tf
from absl import logging

from packed_bert_tf.data.tokenization import WordPieceTokenizer, load_vocab
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.pretrained_weights import (
    PretrainedWeights,
    find_pretrained_weights,
    load_pretrained_weights,
)
from packed_bert_tf.training import cluster, trajectory
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.clipping import clipping
from packed_bert_tf.training.distribution import set_mixed_precision
from packed_bert_tf.training.optimizers import create_optimizer
from packed_bert_tf.training.options import TrainingOptions
from packed_bert_tf.training.output_dirs import WorkerOutputDirs, run_on_this_worker
from packed_bert_tf.training.schedules import AtUpdateSteps, PolynomialDecayWithWarmup
from packed_bert_tf.training.step_counting import StepCounting
from packed_bert_tf.training.trainer import Trainer, TrainingTask


def read_bert_config(path: str | None, flag: str = "--bert_config_file") -> BertConfig:
    """The model config; one clear error for a missing or bad file."""
    if not path:
        raise ValueError(f"{flag} is required")
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{flag}={path}: no such file")
    return BertConfig.from_json_file(path)


def make_tokenizer(options, config: BertConfig) -> WordPieceTokenizer:
    """The ``--vocab_file`` tokenizer (``--do_lower_case``); refused in one line
    if it has more ids than the model."""
    tokenizer = WordPieceTokenizer(options.vocab_file, do_lower_case=options.do_lower_case)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"--vocab_file={options.vocab_file} has {tokenizer.vocab_size} "
                         f"ids but the model's vocab_size is {config.vocab_size}")
    return tokenizer


def read_model_config(options) -> tuple[BertConfig, PretrainedWeights | None]:
    """The model config and the ``--init_checkpoint`` weights of a run.

    The config is ``--bert_config_file``'s, else that of the
    ``--init_checkpoint`` folder (Hugging Face, keras-hub); with both, they
    must agree. A run that resumes from ``--output_dir`` with a
    ``--bert_config_file`` does not look at ``--init_checkpoint``. A
    folder's vocabulary likewise stands in for a missing ``--vocab_file``
    (the options are updated; with both, they must hold the same tokens),
    and a ``--do_lower_case`` that disagrees with the folder's tokenizer is
    warned about.

    Raises:
      ValueError: one line naming the flag, the file and the key: no
        config anywhere, a key that differs, an unreadable source.
    """
    weights = None
    resuming = options.output_dir and TrainingCheckpoints.exists(options.output_dir)
    if options.init_checkpoint and not (resuming and options.bert_config_file):
        try:
            weights = find_pretrained_weights(options.init_checkpoint)
        except ValueError as error:  # it names the path, the file and the key
            raise ValueError(f"--init_checkpoint={error}") from None
    folder_config = weights.config if weights is not None else None
    if folder_config is None:
        if not options.bert_config_file:
            raise ValueError("--bert_config_file is required (or an --init_checkpoint "
                             "folder that holds its config: Hugging Face, keras-hub)")
        return read_bert_config(options.bert_config_file), weights
    difference = (read_bert_config(options.bert_config_file).first_difference(folder_config)
                  if options.bert_config_file else None)
    if difference:
        key, given, stated = difference
        raise ValueError(f"--bert_config_file={options.bert_config_file}: key {key!r} is "
                         f"{given!r} but --init_checkpoint={weights.path} ({weights.holds}) "
                         f"has {stated!r}")
    if hasattr(options, "vocab_file") and weights.vocab_file:
        if not options.vocab_file:
            options.vocab_file = weights.vocab_file
        else:
            _check_same_vocabulary(options.vocab_file, weights)
    if weights.do_lower_case is not None and \
            getattr(options, "do_lower_case", weights.do_lower_case) != weights.do_lower_case:
        logging.warning("--do_lower_case=%s but the tokenizer of --init_checkpoint=%s "
                        "has do_lower_case %s", options.do_lower_case, weights.path,
                        weights.do_lower_case)
    return folder_config, weights


def _check_same_vocabulary(vocab_file: str, weights: PretrainedWeights) -> None:
    """One line naming the first id whose token differs between ``vocab_file``
    and the folder's vocabulary."""
    if not tf.io.gfile.exists(vocab_file):
        return  # the front end's own check names the missing file
    mine, theirs = (_tokens_by_id(load_vocab(path))
                    for path in (vocab_file, weights.vocab_file))
    for index, (token, their_token) in enumerate(zip(mine, theirs)):
        if token != their_token:
            raise ValueError(f"--vocab_file={vocab_file}: id {index} is {token!r} but "
                             f"{weights.vocab_file} of --init_checkpoint has "
                             f"{their_token!r}")
    if len(mine) != len(theirs):
        raise ValueError(f"--vocab_file={vocab_file}: {len(mine)} tokens but "
                         f"{weights.vocab_file} of --init_checkpoint has {len(theirs)}")


def _tokens_by_id(vocab: dict) -> list:
    return sorted(vocab, key=vocab.get)


@contextlib.contextmanager
def mixed_precision_policy(mode: str):
    """Sets the global Keras dtype policy for ``mode`` and restores the previous one."""
    previous = keras.mixed_precision.global_policy()
    try:
        set_mixed_precision(mode)
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


@dataclasses.dataclass(frozen=True)
class RunContext:
    """Where a run runs: what `run_task` hands a task's body.

    Attributes:
      config: the model's `BertConfig` (``--bert_config_file``, or the
        ``--init_checkpoint`` folder's).
      strategy: the ``tf.distribute`` strategy.
      dirs: the output folders (`WorkerOutputDirs`: ``dirs.own`` is where this
        worker writes).
      worker: the worker this process is (`cluster.WorkerTask`).
      init_weights: what ``--init_checkpoint`` holds (None: not given).
    """

    config: BertConfig
    strategy: tf.distribute.Strategy
    dirs: WorkerOutputDirs
    worker: cluster.WorkerTask
    init_weights: PretrainedWeights | None = None


def run_task(options: TrainingOptions, body: Callable[[RunContext], dict], *,
             strategy: tf.distribute.Strategy | None = None,
             batch_flags: Mapping[str, bool]) -> dict:
    """Starts a run of any task: reads the model config and finds the
    ``--init_checkpoint`` weights (`read_model_config`), checks the batch
    sizes against the workers, makes the strategy and holds the output folder
    (`run_on_this_worker`), then returns ``body(context)``.

    Args:
      options: the front end's options (a `TrainingOptions`).
      body: the task's run, given the `RunContext`.
      strategy: a strategy already made (tests), else the options'.
      batch_flags: batch-size option name -> whether this run uses it.
    """
    config, weights = read_model_config(options)

    def run_in(dirs, made_strategy, worker):
        context = RunContext(config, made_strategy, dirs, worker, weights)
        options.seed = resolve_seed(options.seed, context)
        return body(context)

    return run_on_this_worker(options, run_in, strategy=strategy, batch_flags=batch_flags)


#: Seeds drawn for a run not given ``--seed`` lie in [0, SEED_RANGE): any of
#: them is a valid seed of Keras, TensorFlow, numpy and MLPerf's log.
SEED_RANGE = 2**31


def resolve_seed(seed: int | None, context: RunContext) -> int | None:
    """The run's seed: ``--seed``, else the one the run in ``--output_dir``
    was started with, else one drawn at random and logged, so that every run
    can be repeated. Every worker takes the chief's.

    A folder whose record says its run was started unseeded (no seed at
    all) resumes unseeded, as it was trained.
    """
    if seed is not None:
        return seed
    step = TrainingCheckpoints.newest_step(context.dirs.shared)
    segments = trajectory.read_segments(context.dirs.shared) if step else None
    recorded = [s.values for s in segments or () if s.start_step < step]
    if recorded and "--seed" in recorded[-1]:
        seed = recorded[-1]["--seed"]
        logging.info("--seed=%s: the seed %s was started with", seed, context.dirs.shared)
        return seed
    seed = cluster.chief_value(context.strategy, secrets.randbelow(SEED_RANGE),
                               context.worker)
    logging.info("--seed not given: drew --seed=%d (pass it to repeat this run)", seed)
    return seed


def resume_trajectory(context: RunContext, steps: StepCounting, values: Mapping, *,
                      rows_per_update: int, allow_flag: str | None = None,
                      allow_changes: bool = False) -> list[trajectory.Segment]:
    """Checks what fixes the run's trajectory against ``--output_dir``'s record and
    records this run (the chief), before the model is built
    (`trajectory.resume`: another config is one line, not a failed restore).

    Args:
      context: the run's `RunContext` (the model config and the replicas are
        recorded beside ``values``).
      steps: the run's `StepCounting`.
      values: flag -> value, the options that fix the data's order.
      rows_per_update: rows each replica reads per update (what a resumed run
        skips per update done).
      allow_flag: the flag that sets ``allow_changes``, for the error (see
        `trajectory.resume`).
      allow_changes: accept values that differ from the record (see
        `trajectory.resume`).

    Returns:
      The run's segments, this one last.
    """
    values = {**values, "--bert_config_file": context.config.to_dict(),
              "replicas": context.strategy.num_replicas_in_sync}
    return trajectory.resume(
        context.dirs.shared,
        trajectory.Segment(0, steps.global_steps_per_update, rows_per_update, values),
        step=TrainingCheckpoints.newest_step(context.dirs.shared),
        allow_changes=allow_changes, allow_flag=allow_flag,
        write=context.worker.is_chief)


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What a task hands `start_run`: its model, its loss and metrics, and its
    schedule's length.

    Attributes:
      make_model: ``() -> keras.Model``, called under the strategy's scope.
      task: the model's `TrainingTask` (loss, metrics, statistics).
      steps: how the run counts steps (`StepCounting`).
      num_train_steps: the schedule's length, in global steps.
      num_warmup_steps: its linear warm-up.
      start_warmup_step: the step the warm-up starts at.
      decay_power: the power of the polynomial decay after warm-up (1: linear).
      optimizer_hyperparameters: keyword arguments of
        `packed_bert_tf.training.optimizers.create_optimizer` (``beta_1``,
        ``beta_2``, ``epsilon``, ``weight_decay_rate``); missing ones take
        its defaults.
    """

    make_model: Callable[[], keras.Model]
    task: TrainingTask
    steps: StepCounting
    num_train_steps: int
    num_warmup_steps: int
    start_warmup_step: int = 0
    decay_power: float = 1.0
    optimizer_hyperparameters: Mapping = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StartedRun:
    """What `start_run` made: the model, and how far its training is.

    Attributes:
      model: built under the strategy, restored (or initialised).
      trainer: the `Trainer` of the model.
      checkpoints: the run's `TrainingCheckpoints`.
      start_step: the global step restored (0 for a new run).
      schedule: the learning-rate schedule, in global steps.
      total_steps: the run's ``num_train_steps``.
    """

    model: keras.Model
    trainer: Trainer
    checkpoints: TrainingCheckpoints
    start_step: int
    schedule: PolynomialDecayWithWarmup
    total_steps: int


def start_run(spec: RunSpec, options: TrainingOptions, context: RunContext) -> StartedRun:
    """The model, optimizer and `Trainer` of a run, restored or initialised.

    Call it under the run's `mixed_precision_policy`. In order: ``--seed``
    seeds the weights and dropout; the learning rate warms up linearly over
    ``spec.num_warmup_steps`` and decays polynomially (``spec.decay_power``) to 0 at
    ``spec.num_train_steps`` (`PolynomialDecayWithWarmup`), counted in
    updates (`AtUpdateSteps`); the model and ``--optimizer`` are made under
    the strategy, the optimizer clipping as ``options``' clipping says
    (`packed_bert_tf.training.clipping.clipping`: per micro-batch in the
    trainer, or once per update in the optimizer); then the model resumes
    from the latest checkpoint in ``dirs.shared``, else starts from
    ``--init_checkpoint`` (any form of `load_pretrained_weights`; a source
    without every backbone weight is refused unless
    ``--allow_partial_init_checkpoint``), else from its random weights.
    Checkpoints go under ``dirs.own``. Several workers must resume from one
    step (`cluster.check_same_step`).
    """
    steps, strategy = spec.steps, context.strategy
    clip = clipping(after_allreduce=options.clip_by_global_norm_after_gradient_allreduce,
                    micro_batches_per_update=steps.micro_batches_per_update)
    if options.seed is not None:
        tf.keras.utils.set_random_seed(options.seed)
    schedule = PolynomialDecayWithWarmup(options.learning_rate, spec.num_train_steps,
                                         spec.num_warmup_steps, spec.start_warmup_step,
                                         power=spec.decay_power)
    with strategy.scope():
        model = spec.make_model()
        model.build()
        optimizer = create_optimizer(
            options.optimizer, AtUpdateSteps(schedule, steps.global_steps_per_update),
            global_clipnorm=clip.optimizer_clipnorm,
            loss_scaling=options.mixed_precision == "fp16",
            **spec.optimizer_hyperparameters)
    trainer = Trainer(model, optimizer, task=spec.task, strategy=strategy,
                      steps_per_update=steps.micro_batches_per_update,
                      global_steps_per_update=steps.global_steps_per_update,
                      micro_batch_clipnorm=clip.micro_batch_clipnorm,
                      jit_compile=options.jit_compile)
    checkpoints = TrainingCheckpoints(context.dirs.own, model=model, optimizer=optimizer,
                                      step=trainer.step,
                                      max_to_keep=options.keep_checkpoint_max,
                                      resume_dir=context.dirs.shared)
    start_step = restore_or_initialize(
        checkpoints, functools.partial(
            load_pretrained_weights, model,
            allow_partial=options.allow_partial_init_checkpoint),
        context.init_weights)
    cluster.check_same_step(strategy, start_step, context.worker)
    return StartedRun(model, trainer, checkpoints, start_step, schedule,
                      spec.num_train_steps)


def restore_or_initialize(checkpoints: TrainingCheckpoints, init_fn=None,
                          init_weights: PretrainedWeights | None = None) -> int:
    """Resumes from the latest checkpoint of ``checkpoints``, else initialises.

    ``init_weights`` (loaded by ``init_fn(init_weights)``) are used only when
    the run has no checkpoint of its own: a restarted run continues where it
    stopped.

    Returns:
      The step training starts from.
    """
    step = checkpoints.restore_latest()
    if step is not None:
        if init_weights is not None:
            logging.info("ignoring --init_checkpoint=%s: resuming from %s",
                         init_weights.path, checkpoints.latest)
        return step
    if init_weights is not None:
        try:
            init_fn(init_weights)
        except ValueError as error:
            raise ValueError(f"--init_checkpoint={error}") from None
    return 0


__all__ = ["RunContext", "RunSpec", "StartedRun", "mixed_precision_policy",
           "make_tokenizer", "read_bert_config", "read_model_config", "resolve_seed",
           "restore_or_initialize",
           "resume_trajectory", "run_task", "start_run"]
