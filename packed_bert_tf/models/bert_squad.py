"""BertSquadModel: BERT with google-research/bert's SQuAD span head.

Letters: B batch, S sequence length, D max sequences per pack, H hidden.

The model consumes the packed SQuAD feature dict (int32; see
`packed_bert_tf.squad.packing`). A pack of two features (S = 8, D = 2)::

    input_ids   a1 a2 a3 a4 b1 b2 b3 0
    input_mask   1  1  1  1  2  2  2 0
    segment_ids  0  0  1  1  0  0  1 0
    positions    0  1  2  3  0  1  2 0
    start_positions 2 6    end_positions 3 6    sequence_weights 1 1

* input_ids, segment_ids [B, S]; input_mask [B, S] (sequence index 1..D,
  0 = padding); positions [B, S] (restarting at each feature's [CLS]).
* For the loss: start_positions, end_positions, sequence_weights [B, D].

An unpacked batch is the same layout with D = 1.
"""

import keras

from packed_bert_tf.layers.squad_span_head import SquadSpanHead, squad_span_loss
from packed_bert_tf.models.backbone import BertBackbone
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.packed_model import PackedModel


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertSquadModel(PackedModel):
    """BERT for SQuAD on packed (or unpacked) batches.

    Args:
      bert_config: a `BertConfig` (or its dict).
      packed: True: position embeddings gathered by ``positions`` and the
        block-diagonal attention mask from ``input_mask`` (also correct for
        unpacked D = 1 data). False: standard BERT (positions 0..S-1, padding
        mask; ``positions`` ignored). Same weights either way.

    Call arguments:
      features: the feature dict above (labels, if present, are ignored).
        ``training`` turns dropout on.

    Returns:
      dict: ``start_logits``, ``end_logits`` [B, S] float32 (per token; each
      sequence's softmax is taken over its own tokens by the loss and the
      post-processing), ``sequence_output`` [B, S, H] in the compute dtype.

    Weights: the embeddings and encoder load from an original BERT
    checkpoint (`packed_bert_tf.models.load_google_checkpoint`; the head is
    ``cls/squad/output_weights`` [2, H] and ``cls/squad/output_bias`` [2]),
    or from a `BertPretrainingModel` with `copy_encoder_weights`.
    """

    INPUT_FEATURES = {"input_ids": "S", "input_mask": "S", "segment_ids": "S",
                      "positions": "S"}
    SERVING_OUTPUTS = ("start_logits", "end_logits")

    def __init__(self, bert_config, *, packed: bool = True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(bert_config, dict):
            bert_config = BertConfig(**bert_config)
        self.bert_config = bert_config
        self.packed = packed
        config = bert_config
        self.backbone = BertBackbone(config, packed=packed, pooler=False,
                                     dtype=self.dtype_policy, name="backbone")
        self.span_head = SquadSpanHead(config.initializer_range, dtype=self.dtype_policy,
                                       name="span_head")

    def build(self, input_shape=None):
        """Creates every weight; none depends on B, S or D."""
        if self.built:
            return
        hidden_size = self.bert_config.hidden_size
        self.backbone.build()
        self.span_head.build((None, None, hidden_size))
        self.built = True

    def call(self, features, training=False):
        sequence_output = self.backbone(features, training=training)[
            "sequence_output"]  # [B, S, H]
        start_logits, end_logits = self.span_head(sequence_output)  # [B, S] each
        return {"start_logits": start_logits, "end_logits": end_logits,
                "sequence_output": sequence_output}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                     training=True):
        """The SQuAD loss for ``fit``: ``x`` is the feature dict, no ``y``.

        Normalised by the real sequences of the global batch under
        ``tf.distribute`` (see `squad_span_loss`).
        """
        del y, sample_weight, training
        return squad_span_loss(x, y_pred)["loss"]

    def google_checkpoint_heads(self) -> dict:
        """Original-BERT name -> (variable, transposed) of the head's weights."""
        if not self.built:
            self.build()
        dense = self.span_head.dense
        return {"cls/squad/output_weights": (dense.kernel, True),
                "cls/squad/output_bias": (dense.bias, False)}

    def copy_encoder_weights(self, source) -> None:
        """Copies the embeddings and encoder of another model (e.g. a trained
        `BertPretrainingModel`) of the same config; the head is left as is."""
        self.backbone.copy_weights_from(source.backbone)

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(), packed=self.packed)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
