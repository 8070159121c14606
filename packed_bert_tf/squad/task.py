"""The SQuAD task for `packed_bert_tf.training.trainer.Trainer`.

``Trainer(model, optimizer, task=SQUAD_TASK, ...)`` trains a
`BertSquadModel` on the elements of `train_dataset_fn`; `packed_bert_tf.squad.dataset.predict_logits`
and `packed_bert_tf.squad.postprocess.postprocess_and_evaluate` do the rest.
"""

from __future__ import annotations

import tensorflow as tf

from packed_bert_tf.layers.squad_span_head import squad_loss_normalisers, squad_span_loss
from packed_bert_tf.squad.dataset import bucketed_squad_dataset, squad_dataset
from packed_bert_tf.squad.packing import SquadPacks
from packed_bert_tf.training.trainer import (TrainingTask, batch_statistics,
                                             stack_micro_batches)

METRIC_NAMES = ("loss", "start_loss", "end_loss", "start_accuracy", "end_accuracy")


def squad_loss(features, outputs, normalisers):
    """`squad_span_loss` with the precomputed global count of sequences."""
    return squad_span_loss(features, outputs, normalisers=normalisers)


def squad_normalisers(features):
    """Real sequences, summed over the replicas."""
    return squad_loss_normalisers(features, global_normaliser=True)


def squad_statistics(features):
    """Sequences, real and padded tokens of a batch."""
    return batch_statistics(features["input_mask"], features["sequence_weights"])


#: What `Trainer` needs of SQuAD fine-tuning.
SQUAD_TASK = TrainingTask(metric_names=METRIC_NAMES, loss=squad_loss,
                          normalisers=squad_normalisers, statistics=squad_statistics)


def train_dataset_fn(packs: SquadPacks, *, global_batch_size: int, steps_per_update: int,
                     seed: int | None, skip_steps: int = 0, bucketed: bool = False,
                     bucket_boundaries=None, pool_size: int = 8192):
    """The ``dataset_fn`` of ``strategy.distribute_datasets_from_function``.

    Each pipeline yields per-replica elements [K, b, ...] (K =
    ``steps_per_update``), rows reshuffled every pass; ``skip_steps``
    updates already done are skipped (a resumed run with the same seed).
    ``bucketed``: length-bucketed batches of an unpacked layout instead
    (`bucketed_squad_dataset`; their shapes vary, so ``steps_per_update``
    must be 1).
    """

    def dataset_fn(input_context: tf.distribute.InputContext):
        if not bucketed:  # each replica's own batches, stacked
            return squad_dataset(
                packs, global_batch_size, is_training=True, input_context=input_context,
                seed=seed, skip_batches=skip_steps * steps_per_update,
                micro_batches=steps_per_update)
        replicas_per_pipeline = (input_context.num_replicas_in_sync
                                 // input_context.num_input_pipelines)
        dataset = bucketed_squad_dataset(
            packs, global_batch_size, seed=seed or 0, boundaries=bucket_boundaries,
            pool_size=pool_size, input_context=input_context,
            skip_batches=skip_steps * steps_per_update * replicas_per_pipeline)
        return stack_micro_batches(dataset, steps_per_update)

    return dataset_fn
