"""Keras 3 layers of packed BERT, one per module, and the pure functions under them.

Letters used in every docstring and shape comment: B batch, S sequence length,
D max sequences per pack, M masked-LM slots, H hidden, N heads, E head size,
I intermediate size, V vocab, P max positions.

A packed row (S = 6, D = 2)::

    input_ids   a1 a2 a3 b1 b2 0
    input_mask   1  1  1  2  2 0
    positions    0  1  2  0  1 0
    next_sentence_positions 0 3
"""

from packed_bert_tf.layers.bert_embeddings import BertEmbeddings
from packed_bert_tf.layers.bert_encoder import BertEncoder
from packed_bert_tf.layers.block_diagonal_attention_mask import (
    BlockDiagonalAttentionMask,
    attention_mask_from_offsets,
    block_diagonal_attention_mask,
    padding_attention_mask,
)
from packed_bert_tf.layers.losses import (
    WeightedSum,
    cross_replica_sum,
    sequence_loss_normalisers,
    sequence_means,
    weighted_mean,
)
from packed_bert_tf.layers.masked_lm_head import MaskedLMHead
from packed_bert_tf.layers.multi_head_self_attention import MultiHeadSelfAttention, masked_softmax
from packed_bert_tf.layers.next_sentence_head import NextSentenceHead
from packed_bert_tf.layers.ops import gather_positions, gelu, get_activation
from packed_bert_tf.layers.pooler import make_pooler_dense, pool
from packed_bert_tf.layers.position_embedding import PositionEmbedding
from packed_bert_tf.layers.sequence_classification_head import SequenceClassificationHead
from packed_bert_tf.layers.squad_span_head import SquadSpanHead
from packed_bert_tf.layers.transformer_block import BertTransformerBlock

__all__ = [
    "BertEmbeddings", "BertEncoder", "BertTransformerBlock",
    "BlockDiagonalAttentionMask", "MaskedLMHead", "MultiHeadSelfAttention",
    "NextSentenceHead", "PositionEmbedding", "SequenceClassificationHead",
    "SquadSpanHead", "WeightedSum", "attention_mask_from_offsets",
    "block_diagonal_attention_mask", "cross_replica_sum", "gather_positions", "gelu",
    "get_activation", "make_pooler_dense", "masked_softmax", "padding_attention_mask",
    "pool", "sequence_loss_normalisers", "sequence_means", "weighted_mean",
]
