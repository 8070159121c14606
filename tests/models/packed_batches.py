"""Random sequences laid out as packed and as unpacked batches, for the model tests."""

import dataclasses

import numpy as np
from keras import ops

from packed_bert_tf.models import BertConfig

TINY_CONFIG = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                         max_position_embeddings=64, type_vocab_size=2,
                         initializer_range=0.02)


def twin_models(model_class, config, *, seed=0):
    """(the packed model, the standard unpacked BERT with the same weights) of
    ``model_class.from_bert_config``, built."""
    import tensorflow as tf  # here: the other backends' checks import this module

    tf.random.set_seed(seed)
    packed = model_class.from_bert_config(config, packed=True)
    packed.build()
    reference = model_class.from_bert_config(config, packed=False)
    reference.build()
    reference.set_weights(packed.get_weights())
    return packed, reference


@dataclasses.dataclass
class Sequence:
    input_ids: np.ndarray      # [L]
    segment_ids: np.ndarray    # [L]
    masked_offsets: np.ndarray  # [K] offsets in the sequence
    masked_ids: np.ndarray     # [K]
    next_sentence_label: int


@dataclasses.dataclass
class Placement:
    """Where a sequence landed: its row, first offset, length, slot d and MLM slots."""
    row: int
    offset: int
    length: int
    slot: int
    mlm_slots: np.ndarray


def random_sequence(rng, length, *, vocab_size=100, max_masked=3, min_masked=1):
    input_ids = rng.integers(1, vocab_size, length).astype(np.int32)
    split = rng.integers(1, length) if length > 1 else 1
    segment_ids = (np.arange(length) >= split).astype(np.int32)
    num_masked = rng.integers(min_masked, min(max_masked, length) + 1)
    masked_offsets = np.sort(rng.choice(length, num_masked, replace=False)).astype(np.int32)
    masked_ids = rng.integers(1, vocab_size, num_masked).astype(np.int32)
    return Sequence(input_ids, segment_ids, masked_offsets, masked_ids,
                    int(rng.integers(0, 2)))


def random_packs(rng, sequences_per_pack, *, num_packs, sequence_length, **kwargs):
    """``num_packs`` groups of random lengths whose sum fits ``sequence_length``."""
    packs = []
    for _ in range(num_packs):
        lengths = rng.integers(2, sequence_length // sequences_per_pack + 1,
                               sequences_per_pack)
        packs.append([random_sequence(rng, int(n), **kwargs) for n in lengths])
    return packs


def layout(packs, *, sequence_length, max_sequences_per_pack, max_masked):
    """The feature dict of ``packs`` (a list of rows, each a list of Sequence).

    Returns (features as tensors of the Keras backend, list of Placement in
    input order).
    """
    B, S, D, M = len(packs), sequence_length, max_sequences_per_pack, max_masked
    arrays = {name: np.zeros(shape, np.int32) for name, shape in [
        ("input_ids", (B, S)), ("input_mask", (B, S)), ("segment_ids", (B, S)),
        ("positions", (B, S)), ("masked_lm_positions", (B, M)), ("masked_lm_ids", (B, M)),
        ("next_sentence_positions", (B, D)), ("next_sentence_labels", (B, D)),
        ("next_sentence_weights", (B, D))]}
    arrays["masked_lm_weights"] = np.zeros((B, M), np.float32)
    placements = []
    for row, pack in enumerate(packs):
        assert len(pack) <= D
        offset, slot_start = 0, 0
        for slot, sequence in enumerate(pack):
            length = len(sequence.input_ids)
            span = slice(offset, offset + length)
            arrays["input_ids"][row, span] = sequence.input_ids
            arrays["input_mask"][row, span] = slot + 1
            arrays["segment_ids"][row, span] = sequence.segment_ids
            arrays["positions"][row, span] = np.arange(length)
            num_masked = len(sequence.masked_offsets)
            mlm_slots = np.arange(slot_start, slot_start + num_masked)
            arrays["masked_lm_positions"][row, mlm_slots] = offset + sequence.masked_offsets
            arrays["masked_lm_ids"][row, mlm_slots] = sequence.masked_ids
            arrays["masked_lm_weights"][row, mlm_slots] = slot + 1
            arrays["next_sentence_positions"][row, slot] = offset
            arrays["next_sentence_labels"][row, slot] = sequence.next_sentence_label
            arrays["next_sentence_weights"][row, slot] = 1
            placements.append(Placement(row, offset, length, slot, mlm_slots))
            offset += length
            slot_start += num_masked
        assert offset <= S and slot_start <= M
    features = {name: ops.convert_to_tensor(value) for name, value in arrays.items()}
    return features, placements


def packed_and_unpacked(packs, *, sequence_length, max_sequences_per_pack, max_masked):
    """The same sequences as a packed batch and as an unpacked one (one per row, D = 1)."""
    packed = layout(packs, sequence_length=sequence_length,
                    max_sequences_per_pack=max_sequences_per_pack, max_masked=max_masked)
    unpacked = layout([[sequence] for pack in packs for sequence in pack],
                      sequence_length=sequence_length, max_sequences_per_pack=1,
                      max_masked=max_masked)
    return packed, unpacked


def per_sequence_outputs(outputs, placements):
    """Each sequence's (hidden states [L, H], MLM logits [K, V], NSP logits [2])."""
    result = []
    for p in placements:
        result.append((
            np.asarray(outputs["sequence_output"][p.row, p.offset:p.offset + p.length]),
            ops.convert_to_numpy(outputs["mlm_logits"][p.row])[p.mlm_slots],
            np.asarray(outputs["nsp_logits"][p.row, p.slot])))
    return result


def relative_error(got, want):
    """Max |got - want| over max |want|, in float64."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / np.abs(want).max())


def gradient_errors(got, want):
    """Per variable: max |got - want| over max |want|.

    The denominator is floored at 1e-3 of the largest gradient entry of all
    variables. Some gradients are zero in exact arithmetic, because softmax
    ignores a constant added to all its logits: the attention key bias (a
    constant per query), and under a span loss the span head's bias and the
    last layer norm's beta (a constant per position). Their float32 values
    are rounding noise, below 1e-6 of the largest entry: such a variable is
    compared on the scale of that largest entry.
    """
    got = [ops.convert_to_numpy(g).astype(np.float64) for g in got]
    want = [ops.convert_to_numpy(w).astype(np.float64) for w in want]
    largest = max(np.abs(w).max() for w in want)
    errors = []
    for g, w in zip(got, want):
        scale = np.abs(w).max()
        scale = largest if scale <= 1e-6 * largest else max(scale, 1e-3 * largest)
        errors.append(float(np.abs(g - w).max() / scale))
    return errors
