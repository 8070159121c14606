"""What the fine-tuning front ends share (run_squad.py, run_classifier.py).

Their option dataclasses (`packed_bert_tf.squad.run.SquadOptions`,
`packed_bert_tf.classification.run.ClassifierOptions`) subclass
`FineTuningOptions`; the functions here read those options (checks, the
tokenizer, the step count, the model's start, training on packed rows, the
export) and leave the task's own (SQuAD's files and strides, GLUE's task and
data folder) to the task's run module.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from packed_bert_tf import filesystem, output_files
from packed_bert_tf.batching.dataset import bucketed_rows_dataset
from packed_bert_tf.data.inputs.rows_dataset import RepackedRows, rows_dataset
from packed_bert_tf.data.packed.packed_rows import PackedRows
from packed_bert_tf.data.records.record_format import IdLimits
from packed_bert_tf.models.export import export_for_serving
from packed_bert_tf.packing import ALGORITHMS
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.distribution import check_global_batch_size, check_static_shapes
from packed_bert_tf.training.loop import train_and_export
from packed_bert_tf.training.options import BATCHING, TrainingOptions
from packed_bert_tf.training.startup import (
    RunContext,
    RunSpec,
    StartedRun,
    resume_trajectory,
    start_run,
)
from packed_bert_tf.training.step_counting import StepCounting


@dataclasses.dataclass
class FineTuningOptions(TrainingOptions):
    """The options every fine-tuning run has: `TrainingOptions` and these; the
    front ends' flags of the same names
    (`packed_bert_tf.training.flags.define_fine_tuning_flags`, and the front
    end's own). A task's options subclass it, adding its own and changing
    defaults where the task's reference does (SQuAD's 384 tokens, say).

    Attributes:
      max_seq_length: tokens per row.
      optimizer: ``adamw`` or ``lamb`` (`packed_bert_tf.training.optimizers`).
      vocab_file: the WordPiece ``vocab.txt`` the model was trained on.
      do_lower_case: lower-case the text (uncased models).
      do_predict: predict (the task says what and where).
      predict_batch_size: rows per prediction batch.
      num_train_epochs: passes over the training rows.
      warmup_proportion: the fraction of the steps of linear warm-up.
      algorithm: the packing algorithm (`packed_bert_tf.packing.ALGORITHMS`).
      repack_each_epoch: pack the training sequences anew for every pass
        over them (`training_rows`), instead of once.
      export_dir: where the trained model goes as a SavedModel for packed
        serving (`export`); None: not exported.
    """

    max_seq_length: int = 128
    optimizer: str = "adamw"
    vocab_file: str | None = None
    do_lower_case: bool = True
    do_predict: bool = False
    predict_batch_size: int = 8
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    algorithm: str = "optimal"
    repack_each_epoch: bool = False
    export_dir: str | None = None


def check_fine_tuning_options(options, config, strategy, *, actions: Mapping[str, bool],
                              positive: Sequence[str], batch_sizes: Mapping[str, bool],
                              need_weights: Sequence[str]) -> None:
    """The checks every fine-tuning run makes before it reads data; one clear
    ValueError each, naming the flag.

    Args:
      options: the run's options dataclass.
      config: the model's `BertConfig`.
      strategy: the `tf.distribute.Strategy` the batches are split over.
      actions: flag -> whether it was given (``do_train``, ``do_predict``,
        ``export_dir``, ...); none given: nothing to do.
      positive: integer flags that must be at least 1.
      batch_sizes: batch-size flag -> whether it is used (checked against the
        replicas); ``train_batch_size`` also checks ``--batching``'s shapes.
      need_weights: the flags of ``actions`` that need trained weights when
        the run does not train: a checkpoint in ``output_dir`` or
        ``init_checkpoint`` (random weights would score or serve nonsense).
    """
    if not any(actions.values()):
        names = [f"--{name}" for name in actions]
        raise ValueError(f"nothing to do: give {', '.join(names[:-1])} and/or {names[-1]}")
    for name in positive:
        if getattr(options, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(options, name)}")
    if not 0 <= options.warmup_proportion <= 1:
        raise ValueError(f"--warmup_proportion must be in [0, 1], got "
                         f"{options.warmup_proportion}")
    if options.algorithm not in ALGORITHMS:
        raise ValueError(f"--algorithm={options.algorithm!r} is not one of "
                         f"{', '.join(ALGORITHMS)}")
    if options.batching not in BATCHING:
        raise ValueError(f"--batching={options.batching!r} is not one of "
                         f"{', '.join(BATCHING)}")
    if options.repack_each_epoch and options.batching != "packed":
        raise ValueError(f"--repack_each_epoch packs the sequences anew every pass: it "
                         f"needs --batching=packed, not {options.batching}")
    if options.batching == "bucketed" and options.steps_per_update != 1:
        raise ValueError("--batching=bucketed gives batches of different shapes, which "
                         "cannot be stacked for accumulation: use --steps_per_update=1")
    step_counting(options)  # a valid --step_unit
    if options.max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={options.max_seq_length} exceeds "
                         f"max_position_embeddings {config.max_position_embeddings} of "
                         f"--bert_config_file")
    if not options.vocab_file or not tf.io.gfile.exists(options.vocab_file):
        raise ValueError(f"--vocab_file={options.vocab_file}: no such file")
    _check_not_pretraining_output(options.output_dir)
    for flag in need_weights:
        if actions[flag] and not options.do_train and not options.init_checkpoint \
                and not TrainingCheckpoints.exists(options.output_dir):
            raise ValueError(f"--{flag} without --do_train needs trained weights, but "
                             f"--output_dir={options.output_dir} holds no checkpoint and "
                             f"no --init_checkpoint is given (random weights would "
                             f"{'serve' if flag == 'export_dir' else 'score'} nonsense)")
    if options.export_dir and tf.io.gfile.exists(options.export_dir) \
            and not tf.io.gfile.isdir(options.export_dir):
        raise ValueError(f"--export_dir={options.export_dir} is a file, not a folder")
    for flag, used in batch_sizes.items():
        if used:
            check_global_batch_size(getattr(options, flag), strategy, f"--{flag}")
            if flag == "train_batch_size":
                check_static_shapes(options.batching, strategy)


def _check_not_pretraining_output(output_dir: str) -> None:
    """Refuses an ``--output_dir`` of ``run_pretraining.py``: its checkpoints
    are of another model (the masked-LM head, `BertPretrainingModel`), whose
    weights a fine-tuning run starts from with ``--init_checkpoint``."""
    if "masked_lm_head" not in TrainingCheckpoints.model_parts(output_dir):
        return
    raise ValueError(f"--output_dir={output_dir} holds a pre-training run "
                     f"(run_pretraining.py): start from its weights with "
                     f"--init_checkpoint={output_dir} and give this run an --output_dir "
                     f"of its own")


def check_feature_ids(input_ids, segment_ids, config, describe) -> None:
    """Refuses features with an id the model cannot look up (`IdLimits`: a
    token id of another vocabulary, a segment id beyond ``type_vocab_size``),
    which XLA would clamp silently.

    Args:
      input_ids: [N, K] numpy, the features' token ids (ragged features: one
        row of all their tokens).
      segment_ids: [N, K] numpy, the features' segment ids, laid out as
        ``input_ids``.
      config: the model's `BertConfig`.
      describe: ``(row, column) -> str``, where that id comes from (the file
        and the example).

    Raises:
      ValueError: ``"<describe(row, column)>: <why, with the limit>"``.
    """
    bad = IdLimits.of_config(config).first_out_of_range(
        {"input_ids": input_ids, "segment_ids": segment_ids})
    if bad is not None:
        row, column, why = bad
        raise ValueError(f"{describe(row, column)}: {why}")


def step_counting(options) -> StepCounting:
    """What a step of ``--step_unit`` is, with ``--steps_per_update`` micro-batches."""
    return StepCounting(options.step_unit, options.steps_per_update,
                        options.steps_per_update)


def num_train_steps(num_rows: int, options) -> int:
    """Global steps for ``num_train_epochs`` passes over the rows (packs, or
    examples unpacked): whole updates of ``--steps_per_update`` micro-batches,
    counted in ``--step_unit`` (micro-batches by default)."""
    rows_per_update = options.train_batch_size * options.steps_per_update
    updates = max(1, int(num_rows / rows_per_update * options.num_train_epochs))
    return updates * step_counting(options).global_steps_per_update


def start_fine_tuning(options, make_model, task, context: RunContext,
                      train_packs=None) -> StartedRun:
    """`packed_bert_tf.training.startup.start_run` for a fine-tuning run: the
    steps are ``--num_train_epochs`` over the training rows (``train_packs``:
    anything with ``num_packs`` and ``packing_factor``; None when not
    training), with linear warm-up over ``--warmup_proportion`` of them and
    linear decay, and the optimizer's defaults.

    Args:
      options: a `FineTuningOptions`.
      make_model: ``() -> model``, called under the strategy's scope.
      task: the `packed_bert_tf.training.trainer.TrainingTask` of the model.
      context: the run's `RunContext`.
      train_packs: the training rows, if the run trains.
    """
    steps = step_counting(options)
    total_steps = (num_train_steps(train_packs.num_packs, options)
                   if train_packs is not None else steps.global_steps_per_update)
    if train_packs is not None:
        logging.info("steps: %s", steps.describe(
            num_train_steps=total_steps, train_batch_size=options.train_batch_size,
            sequences_per_row=train_packs.packing_factor))
    spec = RunSpec(make_model, task, steps, num_train_steps=total_steps,
                   num_warmup_steps=int(total_steps * options.warmup_proportion))
    return start_run(spec, options, context)


#: The options that fix a fine-tuning run's trajectory, where a task has them.
_TRAJECTORY_OPTIONS = ("train_batch_size", "steps_per_update", "step_unit",
                       "max_seq_length", "doc_stride", "max_query_length", "batching",
                       "max_sequences_per_pack", "algorithm", "seed", "train_file",
                       "task_name", "data_dir", "vocab_file", "do_lower_case")


def check_resume(options, context: RunContext) -> None:
    """Refuses to resume ``--output_dir`` with other values of what fixes the run's
    trajectory (the options above, the model config, the replicas:
    `packed_bert_tf.training.startup.resume_trajectory`) than it was started
    with; records them on a new run. A fine-tuning run is short: instead of
    going on with other flags, it starts from the weights in another folder."""
    if not options.do_train:
        return
    steps = step_counting(options)
    values = {f"--{name}": getattr(options, name) for name in _TRAJECTORY_OPTIONS
              if hasattr(options, name)}
    for name in ("--train_file", "--data_dir", "--vocab_file"):  # as typed: any cwd
        path = values.get(name)
        if path:
            values[name] = filesystem.absolute_path(path)
    if getattr(options, "repack_each_epoch", False):
        # Recorded only when on: a record without it is of a run packed once.
        values["--repack_each_epoch"] = True
    rows = (options.train_batch_size // context.strategy.num_replicas_in_sync
            * steps.micro_batches_per_update)
    resume_trajectory(context, steps, values, rows_per_update=rows)


def training_rows(options, packs: PackedRows, pack: Callable[[int], PackedRows]
                  ) -> PackedRows | RepackedRows:
    """The rows training reads: ``packs`` on every pass, reshuffled, or with
    ``--repack_each_epoch`` `RepackedRows`, whose pass p > 0 is ``pack(seed
    of pass p)``, the seed drawn from ``--seed`` and p.

    Args:
      options: a `FineTuningOptions`.
      packs: the training rows, packed with the run's seed (pass 0).
      pack: ``seed -> PackedRows``, the task's packing of the same sequences.
    """
    if not options.repack_each_epoch:
        return packs
    seed = options.seed or 0
    return RepackedRows(packs, lambda index: pack(
        int(np.random.SeedSequence((seed, index)).generate_state(1)[0])))


def train_dataset_fn(packs: PackedRows | RepackedRows, *, global_batch_size: int,
                     steps_per_update: int, seed: int | None, skip_steps: int = 0,
                     bucketed: bool = False, bucket_boundaries=None, pool_size: int = 8192):
    """The ``dataset_fn`` of ``strategy.distribute_datasets_from_function``
    over a task's rows (SQuAD's, the classifier's).

    Each pipeline yields per-replica elements [K, b, ...] (K =
    ``steps_per_update``), rows reshuffled every pass, or packed anew
    (`RepackedRows`, from `training_rows`); ``skip_steps``
    updates already done are skipped (a resumed run with the same seed).
    ``bucketed``: length-bucketed batches of an unpacked layout instead
    (`packed_bert_tf.batching.dataset.bucketed_rows_dataset`; their shapes
    vary, so ``steps_per_update`` must be 1).
    """

    def dataset_fn(input_context: tf.distribute.InputContext):
        if not bucketed:  # each replica's own batches, stacked
            return rows_dataset(
                packs, global_batch_size, is_training=True, input_context=input_context,
                seed=seed, skip_batches=skip_steps * steps_per_update,
                micro_batches=steps_per_update)
        replicas_per_pipeline = (input_context.num_replicas_in_sync
                                 // input_context.num_input_pipelines)
        dataset = bucketed_rows_dataset(
            packs, global_batch_size, seed=seed or 0, boundaries=bucket_boundaries,
            pool_size=pool_size, input_context=input_context,
            skip_batches=skip_steps * steps_per_update * replicas_per_pipeline)
        return dataset.batch(steps_per_update, drop_remainder=True).prefetch(
            tf.data.AUTOTUNE)

    return dataset_fn


def train_on_rows(options, run: StartedRun, packs: PackedRows | RepackedRows,
                  output_dir) -> dict:
    """Trains ``run``'s model to ``total_steps`` on the rows of ``packs``
    (`training_rows`; `train_dataset_fn`), resuming after the steps already
    done, and writes the final Google-format checkpoint; returns the training summary."""
    trainer = run.trainer
    dataset_fn = train_dataset_fn(
        packs, global_batch_size=options.train_batch_size,
        steps_per_update=trainer.steps_per_update, seed=options.seed,
        skip_steps=run.start_step // trainer.global_steps_per_update,
        bucketed=options.batching == "bucketed",
        bucket_boundaries=options.bucket_boundaries, pool_size=options.pool_size)
    train = train_and_export(trainer, dataset_fn, options, output_dir=output_dir,
                             num_train_steps=run.total_steps, schedule=run.schedule,
                             checkpoints=run.checkpoints)
    train.update(num_train_steps=run.total_steps, epochs=options.num_train_epochs)
    return train


def export(options, model) -> str:
    """Writes the model to ``--export_dir`` as a SavedModel serving packed rows of
    ``--max_seq_length`` tokens and up to ``--max_sequences_per_pack``
    sequences (`packed_bert_tf.models.export_for_serving`: the model's logits).

    A model trained one example per row (``--batching=padded`` or
    ``bucketed``: ``packed=False``, which ignores ``positions`` and lets every
    token attend to every other) is exported as its packed twin, the same
    weights, so that the SavedModel serves packed rows as documented.

    The folder is locked while it is written (`output_files.output_lock`):
    a run exporting there meanwhile is refused with one line naming this one."""
    if not getattr(model, "packed", True):
        model = _packed_copy(model)
    # One run at a time writes the folder (two would mix their SavedModels).
    tf.io.gfile.makedirs(options.export_dir)
    with output_files.output_lock(options.export_dir, flag="--export_dir"):
        path = export_for_serving(model, options.export_dir,
                                  max_seq_length=options.max_seq_length,
                                  max_sequences_per_pack=options.max_sequences_per_pack)
    logging.info("SavedModel for packed serving: %s", path)
    return path


def _packed_copy(model):
    """The same model (config and weights) with ``packed=True``, plain variables."""
    backbone = type(model.backbone).from_config({**model.backbone.get_config(),
                                                 "packed": True})
    copy = type(model).from_config({**model.get_config(), "backbone": backbone})
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


__all__ = ["FineTuningOptions", "check_fine_tuning_options", "check_resume",
           "export", "num_train_steps", "start_fine_tuning",
           "step_counting", "train_dataset_fn", "train_on_rows", "training_rows"]
