"""The part every BERT model here shares: embeddings and encoder, packed or not.

Letters: B batch, S sequence length, H hidden.
"""

from packed_bert_tf.layers.bert_embeddings import BertEmbeddings
from packed_bert_tf.layers.block_diagonal_attention_mask import (
    block_diagonal_attention_mask, padding_attention_mask)
from packed_bert_tf.layers.transformer_encoder import BertEncoder

#: google-research/bert's LayerNorm epsilon.
LAYER_NORM_EPSILON = 1e-12


def backbone_layers(config, dtype_policy):
    """The embeddings and encoder layers of a `BertConfig` (named as in checkpoints)."""
    embeddings = BertEmbeddings(
        config.vocab_size, config.hidden_size, config.max_position_embeddings,
        config.type_vocab_size, config.hidden_dropout_prob, config.initializer_range,
        LAYER_NORM_EPSILON, dtype=dtype_policy, name="embeddings")
    encoder = BertEncoder(
        config.num_hidden_layers, config.num_attention_heads,
        config.intermediate_size, config.hidden_act, config.hidden_dropout_prob,
        config.attention_probs_dropout_prob, config.initializer_range,
        LAYER_NORM_EPSILON, dtype=dtype_policy, name="encoder")
    return embeddings, encoder


def encode(embeddings, encoder, features, *, packed: bool, training: bool):
    """The sequence output [B, S, H] of a feature dict.

    ``packed``: position embeddings gathered by ``positions`` and the
    block-diagonal [B, S, S] mask from ``input_mask`` (the sequence index);
    otherwise standard BERT: positions 0..S-1 and the [B, 1, S] padding mask.
    """
    input_mask = features["input_mask"]  # [B, S]
    if packed:
        positions = features["positions"]  # [B, S]
        attention_mask = block_diagonal_attention_mask(input_mask)  # [B, S, S]
    else:
        positions = None
        attention_mask = padding_attention_mask(input_mask)  # [B, 1, S]
    hidden = embeddings(features["input_ids"], features["segment_ids"],
                        positions=positions, training=training)
    return encoder(hidden, attention_mask, training=training)  # [B, S, H]


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
