"""BertPretrainingModel: BERT with the masked-LM and next-sentence heads, and their losses.

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

An unpacked batch is the same layout with D = 1 (``masked_lm_weights`` and
``next_sentence_weights`` 0/1).

The losses and accuracies unpack per sequence. Each is a `WeightedSum` of
this replica's batch (see `packed_bert_tf.layers.losses` for the
cross-replica normalisation), everything in `keras.ops`. Default
normalisation is the unpacked MLPerf reference's:

* masked-LM loss: sum over real masked tokens / number of real masked tokens
  in the (global) batch;
* next-sentence loss: mean over real sequences in the (global) batch.

``per_sequence=True`` averages each sequence's masked-LM loss first, then
over the sequences that have masked tokens (Graphcore's packed weighting).

An all-reduce does not compile inside an XLA per-replica step; the counts
depend only on the features, so `loss_normalisers` computes (and all-reduces)
them outside it, and `pretraining_losses(..., normalisers=...)` uses them.
"""

import keras
from keras import ops

from packed_bert_tf.layers.losses import WeightedSum, weighted_mean
from packed_bert_tf.layers.masked_lm_head import MaskedLMHead
from packed_bert_tf.layers.next_sentence_head import NextSentenceHead
from packed_bert_tf.models.backbone import LAYER_NORM_EPSILON
from packed_bert_tf.models.packed_model import PackedModel
from packed_bert_tf.replicas import cross_replica_sum


def _token_cross_entropy(logits, labels):
    """[B, X] softmax cross entropy in float32 of [B, X, C] logits, int labels."""
    return ops.sparse_categorical_crossentropy(
        ops.cast(labels, "int32"), ops.cast(logits, "float32"), from_logits=True)


def masked_lm_loss(mlm_logits, masked_lm_ids, masked_lm_weights, *,
                   per_sequence: bool = False, max_sequences_per_pack: int | None = None):
    """Masked-LM cross entropy, (sum, count).

    Args:
      mlm_logits: [B, M, V] logits.
      masked_lm_ids: [B, M] int original token ids.
      masked_lm_weights: [B, M] sequence index of each masked token (1..D),
        0 for an empty slot.
      per_sequence: False: total = sum of the real tokens' losses, count =
        number of real tokens. True: total = sum over sequences of each
        sequence's mean token loss, count = number of sequences with at least
        one masked token.
      max_sequences_per_pack: D, needed only when ``per_sequence``.

    Returns:
      `WeightedSum` of float32 scalars.
    """
    token_loss = _token_cross_entropy(mlm_logits, masked_lm_ids)  # [B, M]
    sequence_index = ops.cast(masked_lm_weights, "int32")  # [B, M]
    if not per_sequence:
        is_real = ops.cast(sequence_index > 0, "float32")  # [B, M]
        return WeightedSum(ops.sum(token_loss * is_real), ops.sum(is_real))
    if max_sequences_per_pack is None:
        raise ValueError("per_sequence=True needs max_sequences_per_pack (D)")
    # One-hot over the sequence index; column 0 (empty slots) is dropped.
    membership = ops.one_hot(sequence_index, max_sequences_per_pack + 1,
                             dtype="float32")[:, :, 1:]  # [B, M, D]
    sequence_total = ops.einsum("bm,bmd->bd", token_loss, membership)  # [B, D]
    sequence_count = ops.sum(membership, axis=1)  # [B, D]
    sequence_mean = ops.divide_no_nan(sequence_total, sequence_count)  # [B, D]
    has_tokens = ops.cast(sequence_count > 0, "float32")  # [B, D]
    return WeightedSum(ops.sum(sequence_mean * has_tokens), ops.sum(has_tokens))


def _weighted_accuracy(logits, labels, weights):
    """(weighted count of argmax == label, sum of weights); weights float32 [B, X]."""
    predictions = ops.cast(ops.argmax(logits, axis=-1), "int32")  # [B, X]
    correct = ops.cast(ops.equal(predictions, ops.cast(labels, "int32")), "float32")
    return WeightedSum(ops.sum(correct * weights), ops.sum(weights))


def masked_lm_accuracy(mlm_logits, masked_lm_ids, masked_lm_weights):
    """Masked-LM accuracy, (correct real tokens, real tokens).

    Args: as `masked_lm_loss`.

    Returns:
      `WeightedSum` of float32 scalars.
    """
    is_real = ops.cast(ops.cast(masked_lm_weights, "int32") > 0, "float32")  # [B, M]
    return _weighted_accuracy(mlm_logits, masked_lm_ids, is_real)


def next_sentence_loss(nsp_logits, next_sentence_labels, next_sentence_weights):
    """Next-sentence cross entropy per sequence, (sum, number of real sequences).

    Args:
      nsp_logits: [B, D, 2] logits.
      next_sentence_labels: [B, D] int 0/1.
      next_sentence_weights: [B, D] 1 for a real sequence, 0 for an empty slot.

    Returns:
      `WeightedSum` of float32 scalars.
    """
    sequence_loss = _token_cross_entropy(nsp_logits, next_sentence_labels)  # [B, D]
    weights = ops.cast(next_sentence_weights, "float32")  # [B, D]
    return WeightedSum(ops.sum(sequence_loss * weights), ops.sum(weights))


def next_sentence_accuracy(nsp_logits, next_sentence_labels, next_sentence_weights):
    """Next-sentence accuracy per sequence, (correct, real sequences).

    Args: as `next_sentence_loss`.

    Returns:
      `WeightedSum` of float32 scalars.
    """
    return _weighted_accuracy(nsp_logits, next_sentence_labels,
                              ops.cast(next_sentence_weights, "float32"))


def loss_normalisers(features, *, global_normaliser: bool = True):
    """The counts the losses divide by, from the features alone.

    They do not depend on the model, so under ``tf.distribute`` with XLA they
    can be computed and all-reduced outside the compiled per-replica step
    (an all-reduce does not compile inside it) and passed to
    `pretraining_losses` as ``normalisers``.

    Args:
      features: the feature dict (``masked_lm_weights`` [B, M],
        ``next_sentence_weights`` [B, D]).
      global_normaliser: sum the counts over the replicas of the current
        replica context.

    Returns:
      dict of float32 scalars: ``masked_lm_tokens`` (real masked tokens),
      ``masked_lm_sequences`` (sequences with at least one masked token),
      ``sequences`` (real sequences).
    """
    sequence_index = ops.cast(features["masked_lm_weights"], "int32")  # [B, M]
    next_sentence_weights = ops.cast(features["next_sentence_weights"], "float32")
    max_sequences_per_pack = next_sentence_weights.shape[1]
    membership = ops.one_hot(sequence_index, max_sequences_per_pack + 1,
                             dtype="float32")[:, :, 1:]  # [B, M, D]
    counts = {
        "masked_lm_tokens": ops.sum(ops.cast(sequence_index > 0, "float32")),
        "masked_lm_sequences": ops.sum(ops.max(membership, axis=1)),
        "sequences": ops.sum(next_sentence_weights),
    }
    if global_normaliser:
        counts = {name: cross_replica_sum(count) for name, count in counts.items()}
    return counts


def pretraining_losses(features, outputs, *, per_sequence: bool = False,
                       global_normaliser: bool = True, normalisers=None):
    """The pre-training objective and metrics for a batch.

    Args:
      features: the packed feature dict (``masked_lm_ids``,
        ``masked_lm_weights``, ``next_sentence_labels``,
        ``next_sentence_weights``; see `BertPretrainingModel`).
      outputs: the model's outputs (``mlm_logits`` [B, M, V], ``nsp_logits``
        [B, D, 2]).
      per_sequence: masked-LM normalisation, see `masked_lm_loss`.
      global_normaliser: see `weighted_mean`; ignored with ``normalisers``.
      normalisers: precomputed counts from `loss_normalisers` (for an XLA
        per-replica step); None counts here.

    Returns:
      dict of float32 scalars: ``loss`` (masked-LM + next-sentence),
      ``masked_lm_loss``, ``next_sentence_loss``, ``masked_lm_accuracy``,
      ``next_sentence_accuracy``. Under ``tf.distribute`` each is this
      replica's share: sum them over replicas for the global value.
    """
    mlm_logits, nsp_logits = outputs["mlm_logits"], outputs["nsp_logits"]
    mlm_args = (mlm_logits, features["masked_lm_ids"], features["masked_lm_weights"])
    nsp_args = (nsp_logits, features["next_sentence_labels"],
                features["next_sentence_weights"])
    parts = {
        "masked_lm_loss": masked_lm_loss(*mlm_args, per_sequence=per_sequence,
                                         max_sequences_per_pack=nsp_logits.shape[1]),
        "next_sentence_loss": next_sentence_loss(*nsp_args),
        "masked_lm_accuracy": masked_lm_accuracy(*mlm_args),
        "next_sentence_accuracy": next_sentence_accuracy(*nsp_args),
    }
    if normalisers is None:
        means = {name: weighted_mean(part, global_normaliser=global_normaliser)
                 for name, part in parts.items()}
    else:
        count_of = {
            "masked_lm_loss": ("masked_lm_sequences" if per_sequence
                               else "masked_lm_tokens"),
            "next_sentence_loss": "sequences",
            "masked_lm_accuracy": "masked_lm_tokens",
            "next_sentence_accuracy": "sequences",
        }
        means = {name: ops.divide_no_nan(part.total, normalisers[count_of[name]])
                 for name, part in parts.items()}
    means["loss"] = means["masked_lm_loss"] + means["next_sentence_loss"]
    return means


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class BertPretrainingModel(PackedModel):
    """BERT pre-training model on packed (or unpacked) batches.

    ``BertPretrainingModel(backbone)``, or
    ``BertPretrainingModel.from_bert_config(config, packed=...)`` on a new
    backbone (see `PackedModel`).

    Args:
      backbone: a `BertBackbone` with a pooler. Its ``packed``: True,
        position embeddings gathered by ``positions`` and the block-diagonal
        [B, S, S] attention mask built from ``input_mask`` (the paper's
        changes; also correct for unpacked D = 1 data); False, standard
        BERT, positions 0..S-1 sliced from the table and the [B, 1, S]
        padding mask, ``positions`` ignored (packed data would be
        cross-contaminated). Same weights either way.
      per_sequence_masked_lm_loss: the masked-LM normalisation of
        `compute_loss` (see `masked_lm_loss`).
      **kwargs: `keras.Model`'s (``name``, ``dtype``).

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
    HEADS = ("masked_lm_head", "next_sentence_head")
    ARGUMENTS = ("per_sequence_masked_lm_loss",)

    def __init__(self, backbone, *, per_sequence_masked_lm_loss: bool = False, **kwargs):
        super().__init__(backbone, **kwargs)
        self.per_sequence_masked_lm_loss = per_sequence_masked_lm_loss
        config = self.bert_config
        self.masked_lm_head = MaskedLMHead(
            config.vocab_size, config.hidden_act, config.initializer_range,
            LAYER_NORM_EPSILON, dtype=self.dtype_policy, name="masked_lm_head")
        self.next_sentence_head = NextSentenceHead(
            config.initializer_range, dtype=self.dtype_policy, name="next_sentence_head")

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
