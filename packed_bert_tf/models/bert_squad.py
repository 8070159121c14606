"""BertSquadModel: BERT with google-research/bert's SQuAD span head, and its loss.

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

The head scores every token as an answer start and end. In a pack, each
sequence's softmax runs over its own tokens only: `per_sequence_logits`
spreads the [B, S] logits to [B, D, S] with -inf off the sequence (S = 6,
D = 2)::

    input_mask        1  1  1  2  2  0
    start_logits     l0 l1 l2 l3 l4 l5
    per sequence 1   l0 l1 l2  -  -  -      (- = -inf)
    per sequence 2    -  -  - l3 l4  -
    start_positions   2  3                  (offsets in the row)

The loss (`squad_span_loss`) is google-research/bert's ``(start + end) / 2``
cross entropy, per sequence, averaged over the real sequences of the
(global) batch, in float32 whatever the policy.
"""

import keras
from keras import ops

from packed_bert_tf.layers.losses import WeightedSum, sequence_means
from packed_bert_tf.layers.squad_span_head import SquadSpanHead
from packed_bert_tf.models.packed_model import PackedModel

# Off-sequence logits in the loss: finite, so that a cross entropy written
# as one-hot x log-probabilities (JAX's) has no 0 x -inf, and low enough
# that exp() of it underflows to exactly 0, as exp(-inf) does.
OFF_SEQUENCE_LOGIT = -1e9


def per_sequence_logits(logits, input_mask, max_sequences_per_pack: int):
    """Each sequence's logits over the whole row, -inf off the sequence.

    Args:
      logits: [B, S] per-token logits.
      input_mask: [B, S] int sequence index of each token (1..D), 0 = padding.
      max_sequences_per_pack: D.

    Returns:
      [B, D, S] float32: ``out[b, d, s] = logits[b, s]`` where
      ``input_mask[b, s] == d + 1``, else -inf. A slot with no tokens (an
      empty slot of a pack) gets the row's logits unmasked instead, so that
      its softmax stays finite; give it weight 0.
    """
    return _spread_per_sequence(logits, input_mask, max_sequences_per_pack,
                                float("-inf"))


def _spread_per_sequence(logits, input_mask, max_sequences_per_pack: int, off_sequence):
    """`per_sequence_logits` with ``off_sequence`` in place of -inf."""
    logits = ops.cast(logits, "float32")  # [B, S]
    sequence_index = ops.cast(input_mask, "int32")  # [B, S]
    slots = ops.arange(1, max_sequences_per_pack + 1, dtype="int32")  # [D]
    member = ops.equal(ops.expand_dims(sequence_index, 1),
                       slots[None, :, None])  # [B, D, S]
    empty = ops.logical_not(ops.any(member, axis=-1, keepdims=True))  # [B, D, 1]
    keep = ops.logical_or(member, empty)  # [B, D, S]
    return ops.where(keep, ops.expand_dims(logits, 1), off_sequence)  # [B, D, S]


def _span_cross_entropy(logits, input_mask, positions):
    """[B, D] cross entropy of each sequence's softmax over its own tokens."""
    sequence_logits = _spread_per_sequence(logits, input_mask, positions.shape[1],
                                           OFF_SEQUENCE_LOGIT)  # [B, D, S]
    return ops.sparse_categorical_crossentropy(
        ops.cast(positions, "int32"), sequence_logits, from_logits=True)  # [B, D]


def _span_accuracy(logits, input_mask, positions, weights):
    """(weighted count of each sequence's argmax == its position, sum of weights)."""
    sequence_logits = _spread_per_sequence(logits, input_mask, positions.shape[1],
                                           OFF_SEQUENCE_LOGIT)  # [B, D, S]
    predictions = ops.cast(ops.argmax(sequence_logits, axis=-1), "int32")  # [B, D]
    correct = ops.cast(ops.equal(predictions, ops.cast(positions, "int32")), "float32")
    return WeightedSum(ops.sum(correct * weights), ops.sum(weights))


def span_losses(start_logits, end_logits, input_mask, start_positions, end_positions,
                sequence_weights):
    """Start and end cross entropy and accuracy as `WeightedSum`s over sequences.

    Args:
      start_logits: [B, S] per-token logits of the answer start.
      end_logits: [B, S] per-token logits of the answer end.
      input_mask: [B, S] int sequence index (1..D), 0 = padding.
      start_positions: [B, D] int offsets in the row of each sequence's answer
        start (they must lie in the sequence; any valid offset for an empty
        slot).
      end_positions: [B, D] int offsets in the row of each sequence's answer
        end (the same rule).
      sequence_weights: [B, D] 1 for a real sequence, 0 for an empty slot.

    Returns:
      dict of `WeightedSum` (float32): ``start_loss``, ``end_loss``,
      ``start_accuracy``, ``end_accuracy``; each count is the number of real
      sequences.
    """
    weights = ops.cast(sequence_weights, "float32")  # [B, D]
    count = ops.sum(weights)
    parts = {}
    for name, logits, positions in (("start", start_logits, start_positions),
                                    ("end", end_logits, end_positions)):
        loss = _span_cross_entropy(logits, input_mask, positions)  # [B, D]
        # where, not a product: an empty slot's label may lie off its tokens.
        parts[f"{name}_loss"] = WeightedSum(
            ops.sum(ops.where(weights > 0, loss * weights, 0.0)), count)
        parts[f"{name}_accuracy"] = _span_accuracy(logits, input_mask, positions, weights)
    return parts


def squad_span_loss(features, outputs, *, global_normaliser: bool = True,
                    normalisers=None):
    """The SQuAD fine-tuning loss and metrics of a batch.

    Args:
      features: dict with ``input_mask`` [B, S], ``start_positions``,
        ``end_positions``, ``sequence_weights`` [B, D] (see
        `packed_bert_tf.squad.packing`).
      outputs: the model's dict with ``start_logits``, ``end_logits`` [B, S].
      global_normaliser: see `packed_bert_tf.layers.losses.sequence_means`.
      normalisers: see `packed_bert_tf.layers.losses.sequence_means`.

    Returns:
      dict of float32 scalars: ``loss`` = (start_loss + end_loss) / 2,
      ``start_loss``, ``end_loss``, ``start_accuracy``, ``end_accuracy``.
      Under ``tf.distribute`` each is this replica's share (sum over the
      replicas for the global value).
    """
    parts = span_losses(outputs["start_logits"], outputs["end_logits"],
                        features["input_mask"], features["start_positions"],
                        features["end_positions"], features["sequence_weights"])
    means = sequence_means(parts, global_normaliser=global_normaliser,
                           normalisers=normalisers)
    means["loss"] = (means["start_loss"] + means["end_loss"]) / 2.0
    return means


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertSquadModel(PackedModel):
    """BERT for SQuAD on packed (or unpacked) batches.

    ``BertSquadModel(backbone)``, or ``BertSquadModel.from_bert_config(config,
    packed=...)`` on a new backbone without a pooler (see `PackedModel`).

    Args:
      backbone: a `BertBackbone`; its ``packed`` says whether positions are
        gathered by ``positions`` under the block-diagonal attention mask
        (also correct for unpacked D = 1 data) or are standard BERT's
        (``positions`` ignored). No pooler (``pooler=False``).
      **kwargs: `keras.Model`'s (``name``, ``dtype``).

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
    HEADS = ("span_head",)
    POOLER = False

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        self.span_head = SquadSpanHead(self.bert_config.initializer_range,
                                       dtype=self.dtype_policy, name="span_head")

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
