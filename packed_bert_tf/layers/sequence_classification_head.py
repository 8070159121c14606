"""run_classifier.py's sentence (pair) classifier per packed sequence, and its loss.

Letters: B batch, S sequence length, D max sequences per pack, H hidden,
L labels (1 for regression).

Every sequence of a pack has its own [CLS]; the backbone's pooler and the
classifier run at each of them (``cls_positions``), so a pack of D
sequences gets D predictions (S = 8, D = 2)::

    input_ids    C a1 a2 S  C b1 S  0
    input_mask   1  1  1 1  2  2 2  0
    cls_positions 0 4          label_ids 1 0      sequence_weights 1 1

The loss (`sequence_classification_loss`) is the reference's mean cross
entropy over examples (run_classifier.py's ``create_model``), or the mean
squared error for regression (STS-B: google-research/bert has no regression;
this is transformers' ``BertForSequenceClassification`` with one label),
averaged over the real sequences of the (global) batch in float32.
"""

import keras
from keras import ops

from packed_bert_tf.layers.losses import WeightedSum, weighted_mean
from packed_bert_tf.replicas import cross_replica_sum


def classification_losses(logits, label_ids, sequence_weights, *, is_regression: bool):
    """Per-sequence loss (and accuracy) as `WeightedSum`s over the real sequences.

    Args:
      logits: [B, D, L] float32.
      label_ids: [B, D] int label ids, or float targets for regression (any
        value in an empty slot).
      sequence_weights: [B, D] 1 for a real sequence, 0 for an empty slot.
      is_regression: squared error of ``logits[..., 0]`` instead of cross
        entropy (L must then be 1).

    Returns:
      dict of `WeightedSum` (float32): ``loss``, and ``accuracy`` unless
      ``is_regression``; each count is the number of real sequences.
    """
    logits = ops.cast(logits, "float32")  # [B, D, L]
    weights = ops.cast(sequence_weights, "float32")  # [B, D]
    count = ops.sum(weights)
    if is_regression:
        error = logits[..., 0] - ops.cast(label_ids, "float32")  # [B, D]
        return {"loss": WeightedSum(ops.sum(ops.square(error) * weights), count)}
    labels = ops.cast(label_ids, "int32")  # [B, D]
    loss = ops.sparse_categorical_crossentropy(labels, logits,
                                               from_logits=True)  # [B, D]
    predictions = ops.cast(ops.argmax(logits, axis=-1), "int32")  # [B, D]
    correct = ops.cast(ops.equal(predictions, labels), "float32")  # [B, D]
    return {"loss": WeightedSum(ops.sum(loss * weights), count),
            "accuracy": WeightedSum(ops.sum(correct * weights), count)}


def classification_loss_normalisers(features, *, global_normaliser: bool = True):
    """The count the loss divides by: real sequences of the (global) batch.

    For an XLA per-replica step: compute (and all-reduce) it outside, pass it
    to `sequence_classification_loss` as ``normalisers``.

    Returns:
      dict: ``sequences``, a float32 scalar.
    """
    count = ops.sum(ops.cast(features["sequence_weights"], "float32"))
    return {"sequences": cross_replica_sum(count) if global_normaliser else count}


def sequence_classification_loss(features, outputs, *, is_regression: bool,
                                 global_normaliser: bool = True, normalisers=None):
    """The fine-tuning loss and metrics of a batch.

    Args:
      features: dict with ``label_ids``, ``sequence_weights`` [B, D] (see
        `packed_bert_tf.classification.packing`).
      outputs: the model's dict with ``logits`` [B, D, L].
      is_regression: see `classification_losses`.
      global_normaliser: divide by the real sequences of the global batch
        inside a ``tf.distribute`` replica context (see `weighted_mean`).
      normalisers: precomputed `classification_loss_normalisers`; None counts
        here.

    Returns:
      dict of float32 scalars: ``loss`` and (classification) ``accuracy``.
      Under ``tf.distribute`` each is this replica's share (sum over the
      replicas for the global value).
    """
    parts = classification_losses(outputs["logits"], features["label_ids"],
                                  features["sequence_weights"],
                                  is_regression=is_regression)
    if normalisers is None:
        return {name: weighted_mean(part, global_normaliser=global_normaliser)
                for name, part in parts.items()}
    return {name: ops.divide_no_nan(part.total, normalisers["sequences"])
            for name, part in parts.items()}


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class SequenceClassificationHead(keras.layers.Layer):
    """Dropout and the classifier (L outputs) on each packed sequence's pooled [CLS].

    As run_classifier.py's ``create_model``: the pooled [CLS] output (the
    backbone's, `packed_bert_tf.models.BertBackbone` at ``cls_positions``),
    dropout (training only), ``output_weights`` / ``output_bias``; here for
    every sequence of a pack.

    Args:
      num_labels: L (1 for regression).
      initializer_range: stddev of the truncated-normal kernel.
      dropout_rate: dropout on the pooled output (the reference's 0.1 =
        ``hidden_dropout_prob``).

    Call arguments:
      pooled_output: [B, D, H] the pooler's output at each sequence's [CLS]
        (empty slots hold anything; their weight is 0).
      training: dropout on.

    Returns:
      logits [B, D, L] float32.
    """

    def __init__(self, num_labels: int, initializer_range: float = 0.02,
                 dropout_rate: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.num_labels = num_labels
        self.initializer_range = initializer_range
        self.dropout_rate = dropout_rate

    def build(self, pooled_output_shape):
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.classifier = keras.layers.Dense(
            self.num_labels, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype=self.dtype_policy, name="output")
        self.classifier.build(pooled_output_shape)
        self.built = True

    def call(self, pooled_output, training=False):
        pooled_output = self.dropout(pooled_output, training=training)
        return ops.cast(self.classifier(pooled_output), "float32")  # [B, D, L]

    def get_config(self):
        config = super().get_config()
        config.update(num_labels=self.num_labels,
                      initializer_range=self.initializer_range,
                      dropout_rate=self.dropout_rate)
        return config
