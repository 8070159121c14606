"""The pre-training task: its `TrainingTask`, datasets, evaluation and input checks.

``Trainer(model, optimizer, task=PRETRAINING_TASK, ...)`` trains a
`BertPretrainingModel` on the elements of `train_dataset_fn` (or
`bucketed_train_dataset_fn`); `Trainer.evaluate` with `eval_sums` over
`eval_dataset_fn` gives the sums `eval_results` turns into metrics. Every
function takes explicit arguments: the options object stays in
`packed_bert_tf.pretraining.run`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np
import tensorflow as tf

from packed_bert_tf.batching.bucketing import Bucketing
from packed_bert_tf.data.inputs import pretraining_dataset
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import (
    IdLimits,
    RecordFormat,
    default_max_masked_tokens,
)
from packed_bert_tf.models.bert_pretraining import (
    loss_normalisers,
    masked_lm_accuracy,
    masked_lm_loss,
    next_sentence_accuracy,
    next_sentence_loss,
    pretraining_losses,
)
from packed_bert_tf.packing.streaming_packer import pack_stream
from packed_bert_tf.training.trainer import TrainingTask, batch_statistics, stack_micro_batches

METRIC_NAMES = ("loss", "masked_lm_loss", "next_sentence_loss", "masked_lm_accuracy",
                "next_sentence_accuracy")


@tf.autograph.experimental.do_not_convert
def pretraining_loss(features, outputs, normalisers):
    """`pretraining_losses` with the precomputed global counts."""
    return pretraining_losses(features, outputs, normalisers=normalisers)


@tf.autograph.experimental.do_not_convert
def pretraining_normalisers(features):
    """The loss counts (masked tokens, sequences), summed over the replicas."""
    return loss_normalisers(features, global_normaliser=True)


@tf.autograph.experimental.do_not_convert
def pretraining_statistics(features):
    """Sequences, real and padded tokens of a batch."""
    return batch_statistics(features["input_mask"], features["next_sentence_weights"])


#: What `Trainer` needs of pre-training.
PRETRAINING_TASK = TrainingTask(metric_names=METRIC_NAMES, loss=pretraining_loss,
                                normalisers=pretraining_normalisers,
                                statistics=pretraining_statistics)


@tf.autograph.experimental.do_not_convert
def masked_lm_loss_alone(features, outputs, normalisers):
    """`pretraining_loss` whose ``loss`` is the masked-LM loss alone (the
    next-sentence loss still reported): the objective of sequences without
    sentence pairs (RoBERTa's full sentences)."""
    losses = pretraining_loss(features, outputs, normalisers)
    return {**losses, "loss": losses["masked_lm_loss"]}


#: `PRETRAINING_TASK` with masked LM alone.
MASKED_LM_TASK = dataclasses.replace(PRETRAINING_TASK, loss=masked_lm_loss_alone)


@tf.autograph.experimental.do_not_convert
def eval_sums(features, outputs):
    """Totals and counts of the evaluation metrics of one batch (see `Trainer.evaluate`)."""
    mlm = (outputs["mlm_logits"], features["masked_lm_ids"], features["masked_lm_weights"])
    nsp = (outputs["nsp_logits"], features["next_sentence_labels"],
           features["next_sentence_weights"])
    parts = {"masked_lm_accuracy": masked_lm_accuracy(*mlm),
             "next_sentence_accuracy": next_sentence_accuracy(*nsp),
             "masked_lm_loss": masked_lm_loss(*mlm),
             "next_sentence_loss": next_sentence_loss(*nsp)}
    sums = {name: {"total": part.total, "count": part.count} for name, part in parts.items()}
    sums["sequences"] = {"total": tf.reduce_sum(tf.cast(features["next_sentence_weights"],
                                                        tf.float32)),
                         "count": tf.constant(1.0)}
    return sums


def eval_results(sums: dict) -> dict:
    """Metric values from summed totals and counts (``sequences``: how many were read)."""
    results = {name: part["total"] / part["count"] if part["count"] else 0.0
               for name, part in sums.items() if name != "sequences"}
    results["loss"] = results["masked_lm_loss"] + results["next_sentence_loss"]
    results["sequences"] = sums["sequences"]["total"]
    return results


def expected_record_format(files: Sequence[str], *, max_seq_length: int,
                           max_predictions_per_seq: int, max_sequences_per_pack: int,
                           packed_input: bool | None = None) -> RecordFormat:
    """The records' format, checked against the flags; a clear error when they differ.

    Packed records must have S = ``max_seq_length``, D = ``max_sequences_per_pack``
    and M = P + D - 1 masked-LM slots; unpacked ones S and P.
    """
    from packed_bert_tf.data.records.packing_verification import infer_record_format

    found = infer_record_format(files[0])
    if packed_input is not None and found.is_packed != packed_input:
        raise ValueError(f"{files[0]} holds {'packed' if found.is_packed else 'unpacked'} "
                         f"records but --packed_input={packed_input}")
    if found.is_packed:
        expected = RecordFormat.packed(
            max_seq_length, default_max_masked_tokens(max_predictions_per_seq,
                                                      max_sequences_per_pack),
            max_sequences_per_pack)
        sizes = ("max_seq_length", "max_sequences_per_pack", "max_masked_tokens")
        flags_of = {"max_seq_length": "--max_seq_length",
                    "max_masked_tokens": "--max_predictions_per_seq + "
                                         "--max_sequences_per_pack - 1",
                    "max_sequences_per_pack": "--max_sequences_per_pack"}
    else:
        expected = RecordFormat.unpacked(max_seq_length, max_predictions_per_seq)
        sizes = ("max_seq_length", "max_masked_tokens")
        flags_of = {"max_seq_length": "--max_seq_length",
                    "max_masked_tokens": "--max_predictions_per_seq"}
    for size in sizes:
        if getattr(found, size) != getattr(expected, size):
            raise ValueError(
                f"{files[0]}: {'packed' if found.is_packed else 'unpacked'} records have "
                f"{size} {getattr(found, size)} but the flags give "
                f"{getattr(expected, size)} ({flags_of[size]})")
    return found


def find_bad_record(files: Sequence[str], record_format: RecordFormat,
                    id_limits: IdLimits, *, records_per_file: int | None = None
                    ) -> str | None:
    """The first record that would stop training, described; None when all are good.

    Reads the files on the host, in order: a truncated or corrupt record, a
    missing feature or one of the wrong length (`record_files.RecordError`), or
    an id out of range for the model (`IdLimits`: token, segment and position
    ids).

    Args:
      files: the TFRecord files.
      record_format: their format.
      id_limits: the model's.
      records_per_file: read only this many records of each file (a quick
        check before training); None: every record (after the input
        pipeline failed, to say where).

    Returns:
      ``"PATH record N: why"``, or None.
    """
    batch_size = min(records_per_file or 4096, 4096)
    for path in files:
        try:
            for start, arrays in record_files.iter_array_batches(path, record_format,
                                                              batch_size=batch_size):
                bad = id_limits.first_out_of_range(arrays)
                if bad is not None:
                    row, _, why = bad
                    return f"{path} record {start + row}: {why}"
                if records_per_file is not None and start + batch_size >= records_per_file:
                    break
        except record_files.RecordError as error:
            return str(error)
    return None


def train_dataset_fn(files: Sequence[str], *, global_batch_size: int,
                     steps_per_update: int, record_format: RecordFormat,
                     shuffling: pretraining_dataset.Shuffling, skip_rows: int = 0,
                     id_limits: IdLimits | None = None,
                     pack_on_the_fly: PackOnTheFly | None = None):
    """The ``dataset_fn`` of ``strategy.distribute_datasets_from_function``.

    Each pipeline yields per-replica elements [K, b, ...] (K =
    ``steps_per_update``), its records in the order of ``shuffling``; each
    replica first skips ``skip_rows`` rows (a resumed run: those it had read,
    `trajectory.rows_read`). ``id_limits``: every id is checked against them
    (`pretraining_dataset.parse_records`). ``pack_on_the_fly``: unpacked records are
    packed as they are read.
    """
    batches = pretraining_dataset.ReplicaBatches(skip_rows=skip_rows,
                                                 micro_batches=steps_per_update,
                                                 pack_on_the_fly=pack_on_the_fly)

    def dataset_fn(input_context: tf.distribute.InputContext):
        # Each replica's batches are stacked before the pipeline hands them
        # out in turn (`pretraining_dataset.pretraining_dataset`).
        return pretraining_dataset.pretraining_dataset(
            files, global_batch_size, record_format=record_format, is_training=True,
            input_context=input_context, shuffling=shuffling, batches=batches,
            id_limits=id_limits)

    return dataset_fn


def streaming_packing_factor(files: Sequence[str], record_format: RecordFormat,
                             packing: PackOnTheFly, *, max_records: int = 50_000) -> float:
    """Sequences per pack that packing on the fly will give, estimated by
    running the packer over the lengths of the first `max_records` records
    (in file order; the flush of the last buffer counts, so a small sample
    is slightly pessimistic)."""
    batches = (arrays["input_mask"].sum(axis=1) for path in files
               for _, arrays in record_files.iter_array_batches(path, record_format,
                                                             batch_size=4096))
    return lengths_packing_factor(batches, record_format.max_seq_length, packing,
                                  max_records=max_records)


def lengths_packing_factor(batches, max_seq_length: int, packing: PackOnTheFly, *,
                           max_records: int = 50_000) -> float:
    """`streaming_packing_factor` of sequence lengths (an iterable of arrays,
    read lazily up to ``max_records`` of them)."""
    lengths, read = [], 0
    for batch in batches:  # lazily: only the files needed are read
        lengths.append(np.asarray(batch))
        read += lengths[-1].size
        if read >= max_records:
            break
    lengths = np.concatenate(lengths)[:max_records]
    result = pack_stream(lengths, max_seq_length,
                         packing.max_sequences_per_pack, buffer_size=packing.buffer_size,
                         max_wait=packing.max_wait)
    return lengths.size / result.num_packs


def text_train_dataset_fn(text, *, global_batch_size: int, steps_per_update: int,
                          shuffling: pretraining_dataset.Shuffling, skip_rows: int = 0,
                          pack_on_the_fly: PackOnTheFly | None = None):
    """`train_dataset_fn` for text (`packed_bert_tf.data.inputs.text_dataset.TextInput`):
    sequences cut, masked and packed as they are read."""
    from packed_bert_tf.data.inputs.text_dataset import text_pretraining_dataset

    batches = pretraining_dataset.ReplicaBatches(skip_rows=skip_rows,
                                                 micro_batches=steps_per_update,
                                                 pack_on_the_fly=pack_on_the_fly)

    def dataset_fn(input_context: tf.distribute.InputContext):
        return text_pretraining_dataset(text, global_batch_size,
                                        input_context=input_context, shuffling=shuffling,
                                        batches=batches)

    return dataset_fn


def bucketed_train_dataset_fn(files: Sequence[str], *, record_format: RecordFormat,
                              bucketing: Bucketing, shuffling: pretraining_dataset.Shuffling,
                              skip_steps: int = 0, id_limits: IdLimits | None = None):
    """``dataset_fn`` of length-bucketed batches (`packed_bert_tf.batching`).

    ``bucketing`` holds the global sizes (a batch size, or a token budget:
    rows x length per step), split between the replicas. Batches have their
    bucket's shape (padded to its boundary, with ``pad_to_bucket_boundary``);
    each step's batches (one per replica of a pipeline) share a shape and
    have comparable cost. Elements are [1, rows, length] (one micro-batch
    per update); a resumed run skips ``skip_steps`` steps first.
    """
    from packed_bert_tf.batching.dataset import bucketed_pretraining_dataset

    def dataset_fn(input_context: tf.distribute.InputContext):
        replicas_per_pipeline = (input_context.num_replicas_in_sync
                                 // input_context.num_input_pipelines)
        dataset = bucketed_pretraining_dataset(
            files, record_format=record_format, bucketing=bucketing, shuffling=shuffling,
            input_context=input_context, id_limits=id_limits)
        if skip_steps:
            dataset = dataset.skip(skip_steps * replicas_per_pipeline)
        return stack_micro_batches(dataset, 1)

    return dataset_fn


def eval_dataset_fn(files: Sequence[str], *, global_batch_size: int,
                    record_format: RecordFormat, id_limits: IdLimits | None = None):
    """Evaluation ``dataset_fn``: every record once, then empty batches."""
    return functools.partial(_eval_dataset, files, global_batch_size, record_format,
                             id_limits)


def _eval_dataset(files, global_batch_size, record_format, id_limits, input_context):
    return pretraining_dataset.pretraining_dataset(
        files, global_batch_size, record_format=record_format, is_training=False,
        input_context=input_context,
        batches=pretraining_dataset.ReplicaBatches(pad_with_empty_batches=True),
        id_limits=id_limits)


def evaluation_steps(files: Sequence[str], *, global_batch_size: int,
                     strategy: tf.distribute.Strategy, max_eval_steps: int | None = None) -> int:
    """Steps that read every evaluation record once on every replica (one batch
    per replica and step; the records are shared between replicas)."""
    context = tf.distribute.InputContext(num_replicas_in_sync=strategy.num_replicas_in_sync)
    steps = pretraining_dataset.pipeline_batches(pretraining_dataset.count_records(files),
                                                 global_batch_size, context)
    return min(steps, max_eval_steps) if max_eval_steps else steps
