"""BertPretrainingModel: BERT with the masked-LM and next-sentence heads.

Letters: B batch, S sequence length, D max sequences per pack, M masked-LM
slots, H hidden, V vocab.

The model consumes the packed feature dict (int32 except
``masked_lm_weights``, float32). A packed row (S = 6, D = 2)::

    input_ids   a1 a2 a3 b1 b2 0
    input_mask   1  1  1  2  2 0
    segment_ids  0  0  1  0  1 0
    positions    0  1  2  0  1 0
    next_sentence_positions 0 3

* input_ids [B, S]: token ids, 0 = padding.
* input_mask [B, S]: sequence index of each token in the pack (1..D), 0 = padding.
* segment_ids [B, S]: BERT token types.
* positions [B, S]: position ids restarting at 0 at each sequence's [CLS].
* masked_lm_positions [B, M]: offsets of the masked tokens in the row.
* masked_lm_ids [B, M], masked_lm_weights [B, M] (float: sequence index, 0 = empty).
* next_sentence_positions [B, D]: the [CLS] offset of each sequence.
* next_sentence_labels [B, D], next_sentence_weights [B, D] (1 real, 0 empty).

An unpacked batch is the same layout with D = 1.
"""

import keras

from packed_bert_tf.layers.losses import pretraining_losses
from packed_bert_tf.layers.masked_lm_head import MaskedLMHead
from packed_bert_tf.layers.next_sentence_head import NextSentenceHead
from packed_bert_tf.models.backbone import LAYER_NORM_EPSILON, BertBackbone
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.packed_model import PackedModel


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertPretrainingModel(PackedModel):
    """BERT pre-training model on packed (or unpacked) batches.

    Args:
      bert_config: a `BertConfig` (or its dict).
      packed: True: position embeddings gathered by ``positions`` and the
        block-diagonal [B, S, S] attention mask built from ``input_mask``
        (the paper's changes; also correct for unpacked D = 1 data).
        False: standard BERT, positions 0..S-1 sliced from the table and the
        [B, 1, S] padding mask; ``positions`` is ignored, and packed data
        would be cross-contaminated. Same weights either way.
      per_sequence_masked_lm_loss: the masked-LM normalisation of
        `compute_loss` (see `packed_bert_tf.layers.masked_lm_loss`).

    Call arguments:
      features: the feature dict above. ``training`` turns dropout on.

    Returns:
      dict: ``mlm_logits`` [B, M, V] float32, ``nsp_logits`` [B, D, 2]
      float32, ``sequence_output`` [B, S, H] and ``pooled_output``
      [B, D, H] in the compute dtype.
    """

    INPUT_FEATURES = {"input_ids": "S", "input_mask": "S", "segment_ids": "S",
                      "positions": "S", "masked_lm_positions": "M",
                      "next_sentence_positions": "D"}
    SERVING_OUTPUTS = ("mlm_logits", "nsp_logits")

    def __init__(self, bert_config, *, packed: bool = True,
                 per_sequence_masked_lm_loss: bool = False, **kwargs):
        super().__init__(**kwargs)
        if isinstance(bert_config, dict):
            bert_config = BertConfig(**bert_config)
        self.bert_config = bert_config
        self.packed = packed
        self.per_sequence_masked_lm_loss = per_sequence_masked_lm_loss
        config = bert_config
        self.backbone = BertBackbone(config, packed=packed, dtype=self.dtype_policy,
                                     name="backbone")
        self.masked_lm_head = MaskedLMHead(
            config.vocab_size, config.hidden_act, config.initializer_range,
            LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="masked_lm_head")
        self.next_sentence_head = NextSentenceHead(
            config.initializer_range, dtype=self.dtype_policy, name="next_sentence_head")

    def build(self, input_shape=None):
        """Creates every weight; none depends on B, S, M or D."""
        if self.built:
            return
        hidden_size = self.bert_config.hidden_size
        self.backbone.build()
        self.masked_lm_head.build((None, None, hidden_size))
        self.next_sentence_head.build((None, None, hidden_size))
        self.built = True

    def call(self, features, training=False):
        encoded = self.backbone(features, features["next_sentence_positions"],
                                training=training)
        sequence_output = encoded["sequence_output"]  # [B, S, H]
        pooled_output = encoded["pooled_output"]  # [B, D, H]
        mlm_logits = self.masked_lm_head(
            sequence_output, features["masked_lm_positions"],
            self.backbone.token_embeddings)  # [B, M, V]
        nsp_logits = self.next_sentence_head(pooled_output)  # [B, D, 2]
        return {"mlm_logits": mlm_logits, "nsp_logits": nsp_logits,
                "sequence_output": sequence_output, "pooled_output": pooled_output}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                     training=True):
        """The pre-training loss for ``fit``: ``x`` is the feature dict, no ``y``.

        Under ``tf.distribute`` the normalisers are global, so each replica
        returns its share of the global loss and the summed gradients are
        those of the global batch (Keras scales only compiled losses by the
        replica count, not an overridden ``compute_loss``).
        """
        del y, sample_weight, training
        return pretraining_losses(
            x, y_pred, per_sequence=self.per_sequence_masked_lm_loss)["loss"]

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(), packed=self.packed,
                      per_sequence_masked_lm_loss=self.per_sequence_masked_lm_loss)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
