"""BertClassifierModel: BERT with google-research/bert's run_classifier head, and its loss.

Letters: B batch, S sequence length, D max sequences per pack, H hidden,
L labels (1 for regression).

The model consumes the packed classification feature dict (see
`packed_bert_tf.classification.packing`). A pack of two sentence pairs
(S = 10, D = 2; C = [CLS], S = [SEP])::

    input_ids     C a1 S a2 S  C b1 S b2 S
    input_mask    1  1 1  1 1  2  2 2  2 2
    segment_ids   0  0 0  1 1  0  0 0  1 1
    positions     0  1 2  3 4  0  1 2  3 4
    cls_positions 0 5    label_ids 2 0    sequence_weights 1 1

* input_ids, segment_ids [B, S]; input_mask [B, S] (sequence index 1..D,
  0 = padding); positions [B, S] (restarting at each sequence's [CLS]);
  cls_positions [B, D] (each sequence's first token).
* For the loss: label_ids (int; float for regression), sequence_weights [B, D].

An unpacked batch is the same layout with D = 1 (cls_positions all 0).

The loss (`sequence_classification_loss`) is the reference's mean cross
entropy over examples (run_classifier.py's ``create_model``), or the mean
squared error for regression (STS-B: google-research/bert has no regression;
this is transformers' ``BertForSequenceClassification`` with one label),
averaged over the real sequences of the (global) batch in float32.
"""

import keras
from keras import ops

from packed_bert_tf.layers.losses import WeightedSum, sequence_means
from packed_bert_tf.layers.sequence_classification_head import SequenceClassificationHead
from packed_bert_tf.models.packed_model import PackedModel


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


def sequence_classification_loss(features, outputs, *, is_regression: bool,
                                 global_normaliser: bool = True, normalisers=None):
    """The fine-tuning loss and metrics of a batch.

    Args:
      features: dict with ``label_ids``, ``sequence_weights`` [B, D] (see
        `packed_bert_tf.classification.packing`).
      outputs: the model's dict with ``logits`` [B, D, L].
      is_regression: see `classification_losses`.
      global_normaliser: see `packed_bert_tf.layers.losses.sequence_means`.
      normalisers: see `packed_bert_tf.layers.losses.sequence_means`.

    Returns:
      dict of float32 scalars: ``loss`` and (classification) ``accuracy``.
      Under ``tf.distribute`` each is this replica's share (sum over the
      replicas for the global value).
    """
    parts = classification_losses(outputs["logits"], features["label_ids"],
                                  features["sequence_weights"],
                                  is_regression=is_regression)
    return sequence_means(parts, global_normaliser=global_normaliser,
                          normalisers=normalisers)


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertClassifierModel(PackedModel):
    """BERT for sentence (pair) classification on packed (or unpacked) batches.

    ``BertClassifierModel(backbone, num_labels)``, or
    ``BertClassifierModel.from_bert_config(config, num_labels, packed=...)``
    on a new backbone (see `PackedModel`).

    Args:
      backbone: a `BertBackbone` with a pooler; its ``packed`` says whether
        positions are gathered by ``positions`` under the block-diagonal
        attention mask (also correct for unpacked D = 1 data) or are
        standard BERT's (``positions`` ignored; D must be 1).
      num_labels: L; 1 means regression (squared-error loss, as STS-B).
      **kwargs: `keras.Model`'s (``name``, ``dtype``).

    Call arguments:
      features: the feature dict above (labels, if present, are ignored).
        ``training`` turns dropout on.

    Returns:
      dict: ``logits`` [B, D, L] float32 (one row per sequence slot; empty
      slots hold garbage, weight 0), ``sequence_output`` [B, S, H] in the
      compute dtype.

    Weights: the embeddings, encoder and pooler load from an original BERT
    checkpoint (`packed_bert_tf.models.load_google_checkpoint`; the
    classifier is the reference's top-level ``output_weights`` [L, H] and
    ``output_bias`` [L], absent from a pre-training checkpoint), or from a
    `BertPretrainingModel` with `copy_encoder_weights` (the pooler too).
    """

    INPUT_FEATURES = {"input_ids": "S", "input_mask": "S", "segment_ids": "S",
                      "positions": "S", "cls_positions": "D"}
    SERVING_OUTPUTS = ("logits",)
    HEADS = ("classifier_head",)
    ARGUMENTS = ("num_labels",)

    def __init__(self, backbone, num_labels: int, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_labels = num_labels
        config = self.bert_config
        self.classifier_head = SequenceClassificationHead(
            num_labels, config.initializer_range, config.hidden_dropout_prob,
            dtype=self.dtype_policy, name="classifier_head")

    @property
    def is_regression(self) -> bool:
        """Whether the model regresses one value (``num_labels == 1``)."""
        return self.num_labels == 1

    def call(self, features, training=False):
        encoded = self.backbone(features, features["cls_positions"], training=training)
        logits = self.classifier_head(encoded["pooled_output"],
                                      training=training)  # [B, D, L]
        return {"logits": logits, "sequence_output": encoded["sequence_output"]}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                     training=True):
        """The loss for ``fit``: ``x`` is the feature dict, no ``y``.

        Normalised by the real sequences of the global batch under
        ``tf.distribute`` (see `sequence_classification_loss`).
        """
        del y, sample_weight, training
        return sequence_classification_loss(x, y_pred,
                                            is_regression=self.is_regression)["loss"]

    def google_checkpoint_heads(self) -> dict:
        """Original-BERT name -> (variable, transposed) of the head's weights."""
        if not self.built:
            self.build()
        classifier = self.classifier_head.classifier
        return {"output_weights": (classifier.kernel, True),
                "output_bias": (classifier.bias, False)}
