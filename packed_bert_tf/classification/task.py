"""The sentence-classification task for `packed_bert_tf.training.trainer.Trainer`.

``Trainer(model, optimizer, task=classification_task(is_regression), ...)``
trains a `BertClassifierModel` on the elements of
`packed_bert_tf.training.fine_tuning.train_dataset_fn`;
`packed_bert_tf.classification.dataset.predict_logits` does the rest.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from packed_bert_tf.layers.losses import sequence_loss_normalisers
from packed_bert_tf.models.bert_classifier import sequence_classification_loss
from packed_bert_tf.training.trainer import TrainingTask, batch_statistics

CLASSIFICATION_METRIC_NAMES = ("loss", "accuracy")
REGRESSION_METRIC_NAMES = ("loss",)


@tf.autograph.experimental.do_not_convert
def classifier_loss(features, outputs, normalisers, *, is_regression: bool):
    """`sequence_classification_loss` with the precomputed global count of sequences."""
    return sequence_classification_loss(features, outputs, is_regression=is_regression,
                                        normalisers=normalisers)


@tf.autograph.experimental.do_not_convert
def classifier_normalisers(features):
    """Real sequences, summed over the replicas."""
    return sequence_loss_normalisers(features, global_normaliser=True)


@tf.autograph.experimental.do_not_convert
def classifier_statistics(features):
    """Sequences, real and padded tokens of a batch."""
    return batch_statistics(features["input_mask"], features["sequence_weights"])


def classification_task(is_regression: bool) -> TrainingTask:
    """What `Trainer` needs of GLUE fine-tuning: cross entropy and accuracy, or
    (``is_regression``) the squared error alone."""
    return TrainingTask(
        metric_names=REGRESSION_METRIC_NAMES if is_regression
        else CLASSIFICATION_METRIC_NAMES,
        loss=functools.partial(classifier_loss, is_regression=is_regression),
        normalisers=classifier_normalisers, statistics=classifier_statistics)


__all__ = ["classification_task", "classifier_loss", "classifier_normalisers",
           "classifier_statistics"]
