"""SQuAD's span head and its per-sequence loss.

Letters: B batch, S sequence length, D max sequences per pack, H hidden.

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

from packed_bert_tf.layers.losses import WeightedSum, weighted_mean
from packed_bert_tf.replicas import cross_replica_sum

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


def squad_loss_normalisers(features, *, global_normaliser: bool = True):
    """The count the SQuAD loss divides by: real sequences of the (global) batch.

    For an XLA per-replica step: compute (and all-reduce) it outside, pass it
    to `squad_span_loss` as ``normalisers``.

    Returns:
      dict: ``sequences``, a float32 scalar.
    """
    count = ops.sum(ops.cast(features["sequence_weights"], "float32"))
    return {"sequences": cross_replica_sum(count) if global_normaliser else count}


def squad_span_loss(features, outputs, *, global_normaliser: bool = True,
                    normalisers=None):
    """The SQuAD fine-tuning loss and metrics of a batch.

    Args:
      features: dict with ``input_mask`` [B, S], ``start_positions``,
        ``end_positions``, ``sequence_weights`` [B, D] (see
        `packed_bert_tf.squad.packing`).
      outputs: the model's dict with ``start_logits``, ``end_logits`` [B, S].
      global_normaliser: divide by the real sequences of the global batch
        inside a ``tf.distribute`` replica context (see `weighted_mean`).
      normalisers: precomputed `squad_loss_normalisers`; None counts here.

    Returns:
      dict of float32 scalars: ``loss`` = (start_loss + end_loss) / 2,
      ``start_loss``, ``end_loss``, ``start_accuracy``, ``end_accuracy``.
      Under ``tf.distribute`` each is this replica's share (sum over the
      replicas for the global value).
    """
    parts = span_losses(outputs["start_logits"], outputs["end_logits"],
                        features["input_mask"], features["start_positions"],
                        features["end_positions"], features["sequence_weights"])
    if normalisers is None:
        means = {name: weighted_mean(part, global_normaliser=global_normaliser)
                 for name, part in parts.items()}
    else:
        means = {name: ops.divide_no_nan(part.total, normalisers["sequences"])
                 for name, part in parts.items()}
    means["loss"] = (means["start_loss"] + means["end_loss"]) / 2.0
    return means


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class SquadSpanHead(keras.layers.Layer):
    """``cls/squad``: one Dense to 2 logits per token, start and end.

    The projection runs in float32 whatever the policy (the n-best search
    ranks sums of logits, which half precision would tie). Packing needs
    nothing here: the logits are per token; the loss and the post-processing
    take each sequence's own tokens (`per_sequence_logits`).

    Args:
      initializer_range: stddev of the truncated-normal kernel.

    Call arguments:
      sequence_output: [B, S, H] encoder output.

    Returns:
      (start_logits [B, S] float32, end_logits [B, S] float32).
    """

    def __init__(self, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range

    def build(self, sequence_output_shape):
        self.dense = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(
                stddev=self.initializer_range),
            dtype="float32", name="output")
        self.dense.build(tuple(sequence_output_shape))
        self.built = True

    def call(self, sequence_output):
        logits = self.dense(ops.cast(sequence_output, "float32"))  # [B, S, 2]
        return logits[..., 0], logits[..., 1]  # [B, S] each

    def get_config(self):
        config = super().get_config()
        config.update(initializer_range=self.initializer_range)
        return config
