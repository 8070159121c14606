"""BertClassifierModel: BERT with google-research/bert's run_classifier head.

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
"""

import keras

from packed_bert_tf.layers.sequence_classification_head import (
    SequenceClassificationHead,
    sequence_classification_loss,
)
from packed_bert_tf.models.backbone import BertBackbone
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.packed_model import PackedModel


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertClassifierModel(PackedModel):
    """BERT for sentence (pair) classification on packed (or unpacked) batches.

    Args:
      bert_config: a `BertConfig` (or its dict).
      num_labels: L; 1 means regression (squared-error loss, as STS-B).
      packed: True: position embeddings gathered by ``positions`` and the
        block-diagonal attention mask from ``input_mask`` (also correct for
        unpacked D = 1 data). False: standard BERT (positions 0..S-1, padding
        mask; ``positions`` ignored; D must be 1). Same weights either way.

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
    `BertPretrainingModel` with `copy_encoder_weights`.
    """

    INPUT_FEATURES = {"input_ids": "S", "input_mask": "S", "segment_ids": "S",
                      "positions": "S", "cls_positions": "D"}
    SERVING_OUTPUTS = ("logits",)

    def __init__(self, bert_config, num_labels: int, *, packed: bool = True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(bert_config, dict):
            bert_config = BertConfig(**bert_config)
        self.bert_config = bert_config
        self.num_labels = num_labels
        self.packed = packed
        config = bert_config
        self.backbone = BertBackbone(config, packed=packed, dtype=self.dtype_policy,
                                     name="backbone")
        self.classifier_head = SequenceClassificationHead(
            num_labels, config.initializer_range, config.hidden_dropout_prob,
            dtype=self.dtype_policy, name="classifier_head")

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def build(self, input_shape=None):
        """Creates every weight; none depends on B, S or D."""
        if self.built:
            return
        hidden_size = self.bert_config.hidden_size
        self.backbone.build()
        self.classifier_head.build((None, None, hidden_size))
        self.built = True

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

    def copy_encoder_weights(self, source) -> None:
        """Copies the embeddings and encoder of another model of the same config
        (e.g. a trained `BertPretrainingModel` or `BertSquadModel`), and its
        pooler when it has one (a pre-training model's next-sentence head), as
        an original pre-training checkpoint would; the classifier is left as is."""
        self.backbone.copy_weights_from(source.backbone)

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(), num_labels=self.num_labels,
                      packed=self.packed)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
