"""What the fine-tuning front ends share (run_squad.py, run_classifier.py).

Their option dataclasses (`packed_bert_tf.squad.run.SquadOptions`,
`packed_bert_tf.classification.run.ClassifierOptions`) have the same names
for the same things (``batching``, ``algorithm``, ``steps_per_update``,
``step_unit``, ``max_seq_length``, ``vocab_file``, ``export_dir``, ...);
the functions here read those and leave the task's own options (SQuAD's
files and strides, GLUE's task and data folder) to the task's run module.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import tensorflow as tf
from absl import logging

from packed_bert_tf.data.tokenization import WordPieceTokenizer
from packed_bert_tf.models.export import export_for_serving
from packed_bert_tf.packing import ALGORITHMS
from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.distribution import check_global_batch_size, check_static_shapes
from packed_bert_tf.training.steps import StepCounting

#: --batching: several sequences per row; one per row at --max_seq_length; one
#: per row in length-bucketed batches.
BATCHING = ("packed", "bucketed", "padded")


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


def make_tokenizer(options, config) -> WordPieceTokenizer:
    """The ``--vocab_file`` tokenizer; refused if it has more ids than the model."""
    tokenizer = WordPieceTokenizer(options.vocab_file, do_lower_case=options.do_lower_case)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"--vocab_file={options.vocab_file} has {tokenizer.vocab_size} "
                         f"tokens but vocab_size in --bert_config_file is "
                         f"{config.vocab_size}")
    return tokenizer


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


def export(options, model) -> str:
    """Writes the model to ``--export_dir`` as a SavedModel serving packed rows of
    ``--max_seq_length`` tokens and up to ``--max_sequences_per_pack``
    sequences (`packed_bert_tf.models.export_for_serving`: the model's logits)."""
    path = export_for_serving(model, options.export_dir,
                              max_seq_length=options.max_seq_length,
                              max_sequences_per_pack=options.max_sequences_per_pack)
    logging.info("SavedModel for packed serving: %s", path)
    return path


__all__ = ["BATCHING", "check_fine_tuning_options", "export", "make_tokenizer",
           "num_train_steps", "step_counting"]
