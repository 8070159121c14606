"""BertBackbone: the embeddings, encoder and pooler every BERT model here wraps.

Letters: B batch, S sequence length, D max sequences per pack, H hidden.
"""

import keras
from keras import ops

from packed_bert_tf.layers.bert_embeddings import BertEmbeddings
from packed_bert_tf.layers.bert_encoder import BertEncoder
from packed_bert_tf.layers.block_diagonal_attention_mask import (
    block_diagonal_attention_mask,
    padding_attention_mask,
)
from packed_bert_tf.layers.pooler import make_pooler_dense, pool
from packed_bert_tf.models.config import BertConfig

#: google-research/bert's LayerNorm epsilon.
LAYER_NORM_EPSILON = 1e-12


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertBackbone(keras.Model):
    """BERT without heads, on packed (or unpacked) rows: keras-hub's
    ``BertBackbone`` for packed data.

    A packed row (S = 6, D = 2)::

        input_ids    a1 a2 a3 b1 b2 0
        segment_ids   0  0  1  0  1 0
        input_mask    1  1  1  2  2 0     sequence index, 0 = padding
        positions     0  1  2  0  1 0     restarting in every sequence
        cls_positions 0 3                 the caller's [B, D] offsets

    Args:
      bert_config: a `BertConfig` (or its dict).
      packed: True: position embeddings gathered by ``positions`` and the
        block-diagonal [B, S, S] attention mask from ``input_mask`` (the
        paper's changes; also correct for unpacked D = 1 data). False:
        standard BERT, positions 0..S-1 and the [B, 1, S] padding mask;
        ``positions`` is ignored. Same weights either way.
      pooler: whether to hold BERT's pooler (``bert/pooler/dense``, Dense +
        tanh at each sequence's [CLS]); SQuAD's model has none.
      name: ``backbone``, the name a task model's weight paths hold
        (``<model>/backbone/...``; run checkpoints are matched by them).

    Call arguments:
      features: dict of int [B, S] ``input_ids``, ``segment_ids``,
        ``input_mask`` and (packed) ``positions``; other entries are ignored.
      cls_positions: [B, D] int offset of each sequence's [CLS] in its row,
        where the pooler runs; default: the row's first token ([B, 1]).
      training: dropout on.

    Returns:
      dict: ``sequence_output`` [B, S, H] and, with the pooler,
      ``pooled_output`` [B, D, H], both in the compute dtype.

    Sub-layers (their names are those of the weights in saved models):
    ``embeddings`` (`BertEmbeddings`), ``encoder`` (`BertEncoder`) and
    ``pooler_dense``. The task models (`BertPretrainingModel`,
    `BertSquadModel`, `BertClassifierModel`) each take one as ``backbone``
    (see `packed_bert_tf.models.PackedModel`).
    """

    def __init__(self, bert_config, *, packed: bool = True, pooler: bool = True,
                 name: str = "backbone", **kwargs):
        super().__init__(name=name, **kwargs)
        if isinstance(bert_config, dict):
            bert_config = BertConfig(**bert_config)
        self.bert_config = config = bert_config
        self.packed = packed
        self.pooler = pooler
        self.embeddings = BertEmbeddings(
            config.vocab_size, config.hidden_size, config.max_position_embeddings,
            config.type_vocab_size, config.hidden_dropout_prob, config.initializer_range,
            LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="embeddings")
        self.encoder = BertEncoder(
            config.num_hidden_layers, config.num_attention_heads,
            config.intermediate_size, config.hidden_act, config.hidden_dropout_prob,
            config.attention_probs_dropout_prob, config.initializer_range,
            LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="encoder")
        self.pooler_dense = None
        if pooler:
            self.pooler_dense = make_pooler_dense(
                config.hidden_size,
                keras.initializers.TruncatedNormal(stddev=config.initializer_range),
                self.dtype_policy)

    def build(self, input_shape=None):
        """Creates every weight; none depends on B, S or D."""
        if self.built:
            return
        hidden_size = self.bert_config.hidden_size
        self.embeddings.build((None, None))
        self.encoder.build((None, None, hidden_size))
        if self.pooler_dense is not None:
            self.pooler_dense.build((None, None, hidden_size))
        self.built = True

    @property
    def token_embeddings(self):
        """The [V, H] word-embedding table (the masked-LM head's output weights)."""
        return self.embeddings.word_embeddings.embeddings

    def call(self, features, cls_positions=None, training=False):
        input_mask = features["input_mask"]  # [B, S]
        if self.packed:
            positions = features["positions"]  # [B, S]
            attention_mask = block_diagonal_attention_mask(input_mask)  # [B, S, S]
        else:
            positions = None
            attention_mask = padding_attention_mask(input_mask)  # [B, 1, S]
        hidden = self.embeddings(features["input_ids"], features["segment_ids"],
                                 positions=positions, training=training)
        sequence_output = self.encoder(hidden, attention_mask,
                                       training=training)  # [B, S, H]
        outputs = {"sequence_output": sequence_output}
        if self.pooler_dense is not None:
            if cls_positions is None:
                cls_positions = ops.zeros_like(input_mask[:, :1])  # [B, 1]
            outputs["pooled_output"] = pool(self.pooler_dense, sequence_output,
                                            cls_positions)  # [B, D, H]
        return outputs

    def copy_weights_from(self, source: "BertBackbone") -> None:
        """Assigns another backbone's embeddings and encoder, and its pooler when
        both have one (one clear error on a count or shape mismatch first)."""
        for layer in (self, source):
            if not layer.built:
                layer.build()
        copy_layer_weights(self.embeddings, source.embeddings)
        copy_layer_weights(self.encoder, source.encoder)
        if self.pooler_dense is not None and source.pooler_dense is not None:
            copy_layer_weights(self.pooler_dense, source.pooler_dense)

    def get_config(self):
        config = super().get_config()
        config.update(bert_config=self.bert_config.to_dict(), packed=self.packed,
                      pooler=self.pooler)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def copy_layer_weights(target, source) -> None:
    """Assigns ``source``'s weights to ``target`` (layers of the same structure),
    one clear error on a count or shape mismatch before anything differs."""
    if len(target.weights) != len(source.weights):
        raise ValueError(f"{source.name}: {len(source.weights)} weights, "
                         f"{target.name} has {len(target.weights)}")
    for mine, theirs in zip(target.weights, source.weights):
        if tuple(mine.shape) != tuple(theirs.shape):
            raise ValueError(f"{theirs.path}: shape {tuple(theirs.shape)}, "
                             f"{mine.path} is {tuple(mine.shape)}")
    for mine, theirs in zip(target.weights, source.weights):
        mine.assign(theirs)
