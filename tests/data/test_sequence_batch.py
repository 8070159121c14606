import dataclasses

import numpy as np
import pytest

from packed_bert_tf.data.packed.sequence_batch import (
    SequenceBatch,
    masked_overflow_fix,
    pack_sequences,
    unpack_records,
)
from packed_bert_tf.data.records import synthetic_records
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.packing import PackAssignment, assign_sequences, pack_lengths

S, P, D = 32, 6, 3
PACKED = RecordFormat.packed(S, P + D - 1, D)


def _batch(lengths, seed=0):
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, vocab_size=3000,
                                               seed=seed)
    return arrays, SequenceBatch.from_unpacked_arrays(arrays)


def test_worked_example_layout():
    arrays, batch = _batch([6, 5, 12])
    packs = PackAssignment(np.array([0, 2, 3]), np.array([1, 0, 2]))
    out = pack_sequences(batch, packs, PACKED)
    assert out["input_mask"][0, :12].tolist() == [1] * 5 + [2] * 6 + [0]
    assert out["positions"][0, :12].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 0]
    assert out["input_ids"][0, :11].tolist() == (arrays["input_ids"][1, :5].tolist()
                                                 + arrays["input_ids"][0, :6].tolist())
    assert out["next_sentence_positions"][0].tolist() == [0, 5, 0]
    assert out["next_sentence_weights"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert out["next_sentence_labels"][0, :2].tolist() == [
        arrays["next_sentence_labels"][1, 0], arrays["next_sentence_labels"][0, 0]]
    # Sequence 1 (5 tokens) masks 1 token, sequence 0 (6 tokens) masks 1.
    first = arrays["masked_lm_positions"][1, 0]
    second = arrays["masked_lm_positions"][0, 0] + 5
    assert out["masked_lm_positions"][0, :3].tolist() == [first, second, 0]
    assert out["masked_lm_weights"][0, :3].tolist() == [1.0, 2.0, 0.0]
    assert out["input_ids"].dtype == np.int32
    assert out["masked_lm_weights"].dtype == np.float32


def test_pack_then_unpack_gives_back_every_sequence(rng):
    lengths = rng.integers(5, S + 1, 400)
    _, batch = _batch(lengths, seed=1)
    plan = pack_lengths(batch.lengths, S, D)
    packs = assign_sequences(batch.lengths, plan, seed=3)
    out = pack_sequences(batch, packs, PACKED)
    back, records = unpack_records(out)
    assert len(back) == len(batch)
    np.testing.assert_array_equal(np.sort(back.fingerprints()), np.sort(batch.fingerprints()))
    # In pack order, exactly the assigned sequences.
    np.testing.assert_array_equal(back.fingerprints(),
                                  batch.take(packs.sequence_indices).fingerprints())
    np.testing.assert_array_equal(records, np.repeat(np.arange(len(packs)),
                                                     np.diff(packs.row_splits)))


def _pack_one_by_one(batch, packs, record_format):
    """pack_sequences written the obvious way: a Python loop over packs."""
    out = {name: np.zeros((len(packs), length), np.int64)
           for name, length in record_format.feature_lengths().items()}
    token_splits = np.concatenate([[0], np.cumsum(batch.lengths)])
    masked_splits = np.concatenate([[0], np.cumsum(batch.masked_counts)])
    for pack in range(len(packs)):
        column = masked_slot = 0
        members = packs.sequence_indices[packs.row_splits[pack]:packs.row_splits[pack + 1]]
        for depth, sequence in enumerate(members):
            tokens = slice(token_splits[sequence], token_splits[sequence + 1])
            length = batch.lengths[sequence]
            span = slice(column, column + length)
            out["input_ids"][pack, span] = batch.token_ids[tokens]
            out["segment_ids"][pack, span] = batch.segment_ids[tokens]
            out["input_mask"][pack, span] = depth + 1
            out["positions"][pack, span] = np.arange(length)
            masked = slice(masked_splits[sequence], masked_splits[sequence + 1])
            count = batch.masked_counts[sequence]
            slots = slice(masked_slot, masked_slot + count)
            out["masked_lm_positions"][pack, slots] = batch.masked_positions[masked] + column
            out["masked_lm_ids"][pack, slots] = batch.masked_ids[masked]
            out["masked_lm_weights"][pack, slots] = depth + 1
            out["next_sentence_positions"][pack, depth] = column
            out["next_sentence_labels"][pack, depth] = batch.next_sentence_labels[sequence]
            out["next_sentence_weights"][pack, depth] = 1
            column += length
            masked_slot += count
    return out


@pytest.mark.parametrize("max_depth", [1, 2, 3, 5])
def test_layout_equals_packing_one_pack_at_a_time(rng, max_depth):
    lengths = rng.integers(5, S + 1, 300)
    _, batch = _batch(lengths, seed=2)
    packs = assign_sequences(batch.lengths, pack_lengths(batch.lengths, S, max_depth),
                             seed=4)
    record_format = RecordFormat.packed(S, P + max_depth - 1, max_depth)
    packs, _ = masked_overflow_fix(batch.lengths, batch.masked_counts, packs,
                                   max_masked_tokens=record_format.max_masked_tokens,
                                   max_sequence_length=S, max_sequences_per_pack=max_depth)
    out = pack_sequences(batch, packs, record_format)
    expected = _pack_one_by_one(batch, packs, record_format)
    assert set(out) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(out[name], expected[name], err_msg=name)
        assert out[name].dtype == (np.float32 if name == "masked_lm_weights" else np.int32)


@pytest.mark.parametrize("max_depth, vocab", [(3, 3000), (5, 30522), (3, 70_000)])
def test_compact_layout_is_the_same_records(rng, max_depth, vocab):
    from packed_bert_tf.data.records.record_codec import encode_examples
    from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES

    lengths = rng.integers(5, S + 1, 300)
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, vocab_size=vocab, seed=6)
    batch = SequenceBatch.from_unpacked_arrays(arrays)
    assert batch.token_ids.dtype == (np.uint16 if vocab < 1 << 16 else np.int32)
    packs = assign_sequences(batch.lengths, pack_lengths(batch.lengths, S, max_depth),
                             seed=4)
    record_format = RecordFormat.packed(S, P * max_depth, max_depth)
    wide = pack_sequences(batch, packs, record_format)
    compact = pack_sequences(batch, packs, record_format, compact=True)
    assert compact["input_mask"].dtype == np.uint8
    assert compact["positions"].dtype == np.int16
    for name in wide:
        np.testing.assert_array_equal(compact[name], wide[name], err_msg=name)
    encoded = [encode_examples(out, float_features=FLOAT_FEATURE_NAMES)
               for out in (wide, compact)]
    for ours, reference in zip(*encoded):
        assert ours.tobytes() == reference.tobytes()


@pytest.mark.parametrize("padding", [0, 70_000, -3])
def test_token_ids_compacted_whatever_the_padding_holds(padding):
    arrays, batch = _batch([6, 5, 12])
    arrays = dict(arrays)
    ids = arrays["input_ids"].astype(np.int64)
    ids[arrays["input_mask"] == 0] = padding  # ignored: only real tokens are kept
    arrays["input_ids"] = ids
    again = SequenceBatch.from_unpacked_arrays(arrays)
    assert again.token_ids.dtype == np.uint16
    np.testing.assert_array_equal(again.token_ids, batch.token_ids)
    np.testing.assert_array_equal(again.segment_ids, batch.segment_ids)


def test_take_keeps_each_sequence_whole(rng):
    lengths = rng.integers(5, S + 1, 50)
    _, batch = _batch(lengths, seed=5)
    order = rng.permutation(50)[:30]
    taken = batch.take(order)
    parts = [batch.take([i]) for i in order]  # one sequence at a time
    np.testing.assert_array_equal(taken.fingerprints(),
                                  np.concatenate([p.fingerprints() for p in parts]))
    np.testing.assert_array_equal(taken.token_splits,
                                  np.concatenate([[0], np.cumsum(batch.lengths[order])]))


def test_fingerprints_see_every_field():
    _, batch = _batch([10, 10])
    base = batch.fingerprints()
    assert base[0] != base[1]
    for field in ("token_ids", "segment_ids", "masked_positions", "masked_ids",
                  "next_sentence_labels"):
        values = getattr(batch, field).copy()
        values[0] = values[0] + 1
        changed = dataclasses.replace(batch, **{field: values})
        assert changed.fingerprints()[0] != base[0], field


@pytest.mark.parametrize("edit, rule", [
    (lambda a: a["input_mask"].__setitem__((0, 2), 2), "does not number the sequences"),
    (lambda a: a["positions"].__setitem__((0, 7), 0), "positions do not restart"),
    (lambda a: a["input_ids"].__setitem__((0, S - 1), 7), "input_ids is not 0 on padding"),
    (lambda a: a["next_sentence_positions"].__setitem__((0, 1), 3),
     "next_sentence_positions are not"),
    (lambda a: a["next_sentence_weights"].__setitem__((0, 1), 0), "next_sentence_weights"),
    (lambda a: a["masked_lm_weights"].__setitem__((0, 0), 2.0), "not the sequence index"),
    (lambda a: a["masked_lm_ids"].__setitem__((0, PACKED.max_masked_tokens - 1), 5),
     "empty masked-LM slot holds"),
    (lambda a: a["masked_lm_weights"].__setitem__((0, 0), 0.5), "not sequence indices"),
])
def test_broken_packed_records_are_caught(edit, rule):
    _, batch = _batch([8, 9, 10])
    out = pack_sequences(batch, PackAssignment(np.array([0, 3]), np.arange(3)), PACKED)
    edit(out)
    with pytest.raises(ValueError, match=f"shard-7: record 0: .*{rule}"):
        unpack_records(out, source="shard-7")


def test_packs_over_the_format_are_refused():
    _, batch = _batch([20, 20])
    with pytest.raises(ValueError, match="pack 0 holds 40 tokens, more than max_sequence_length=32"):
        pack_sequences(batch, PackAssignment(np.array([0, 2]), np.arange(2)), PACKED)


def test_masked_overflow_is_replanned_not_truncated():
    # Sequences of 10 tokens, 6 masked each (more than 0.15 x 10): three fit
    # in 32 tokens but not in M = 8 masked slots.
    lengths = np.full(9, 10)
    masked = np.full(9, 6)
    plan = pack_lengths(lengths, S, D)
    packs = assign_sequences(lengths, plan, seed=0)
    assert np.diff(packs.row_splits).max() == 3
    fixed, replanned = masked_overflow_fix(lengths, masked, packs, max_masked_tokens=8,
                                           max_sequence_length=S, max_sequences_per_pack=D)
    assert replanned == 9
    np.testing.assert_array_equal(np.sort(fixed.sequence_indices), np.arange(9))
    per_pack = np.add.reduceat(masked[fixed.sequence_indices], fixed.row_splits[:-1])
    assert per_pack.max() <= 8 and len(fixed) == 9
    with pytest.raises(ValueError, match="holds 9 masked tokens, more than max_masked_tokens=8"):
        masked_overflow_fix(lengths, np.full(9, 9), packs, max_masked_tokens=8,
                            max_sequence_length=S, max_sequences_per_pack=D)


def test_unpacked_records_that_break_the_format_are_named():
    arrays, _ = _batch([8, 9])
    arrays["input_mask"][1, 2] = 0
    with pytest.raises(ValueError, match="f.tfrecord: record 11: input_mask is not"):
        SequenceBatch.from_unpacked_arrays(arrays, source="f.tfrecord", first_record=10)
    arrays, _ = _batch([8, 9])
    arrays["masked_lm_positions"][0, 0] = 20
    with pytest.raises(ValueError, match="record 0: a masked-LM position lies outside"):
        SequenceBatch.from_unpacked_arrays(arrays)
