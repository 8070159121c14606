"""The SQuAD task for `packed_bert_tf.training.trainer.Trainer`.

``Trainer(model, optimizer, task=SQUAD_TASK, ...)`` trains a
`BertSquadModel` on the elements of
`packed_bert_tf.training.fine_tuning.train_dataset_fn`;
`packed_bert_tf.squad.dataset.predict_logits` and
`packed_bert_tf.squad.postprocess.postprocess_and_evaluate` do the rest.
"""

from __future__ import annotations

import tensorflow as tf

from packed_bert_tf.layers.losses import sequence_loss_normalisers
from packed_bert_tf.models.bert_squad import squad_span_loss
from packed_bert_tf.training.trainer import TrainingTask, batch_statistics

METRIC_NAMES = ("loss", "start_loss", "end_loss", "start_accuracy", "end_accuracy")


@tf.autograph.experimental.do_not_convert
def squad_loss(features, outputs, normalisers):
    """`squad_span_loss` with the precomputed global count of sequences."""
    return squad_span_loss(features, outputs, normalisers=normalisers)


@tf.autograph.experimental.do_not_convert
def squad_normalisers(features):
    """Real sequences, summed over the replicas."""
    return sequence_loss_normalisers(features, global_normaliser=True)


@tf.autograph.experimental.do_not_convert
def squad_statistics(features):
    """Sequences, real and padded tokens of a batch."""
    return batch_statistics(features["input_mask"], features["sequence_weights"])


#: What `Trainer` needs of SQuAD fine-tuning.
SQUAD_TASK = TrainingTask(metric_names=METRIC_NAMES, loss=squad_loss,
                          normalisers=squad_normalisers, statistics=squad_statistics)
