"""`packed_bert_tf.data.packed.pretraining_records`: pre-training records and
the compact form, both ways."""

import numpy as np
import pytest

from packed_bert_tf.data.packed.packed_rows import PackSpec, fingerprints, take
from packed_bert_tf.data.packed.pretraining_records import (
    compact_records,
    pack_records,
    unpack_records,
)
from packed_bert_tf.data.records import synthetic_records
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.packing import (
    PackAssignment,
    assign_sequences,
    pack_lengths,
    replan_overflowing_packs,
)

S, P, D = 32, 6, 3
PACKED = RecordFormat.packed(S, P + D - 1, D)
SPEC = PackSpec.pretraining(PACKED.max_masked_tokens)


def _sequences(lengths, seed=0):
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, vocab_size=3000,
                                               seed=seed)
    return arrays, compact_records(arrays)


def test_worked_example_layout():
    arrays, sequences = _sequences([6, 5, 12])
    packs = PackAssignment(np.array([0, 2, 3]), np.array([1, 0, 2]))
    out = pack_records(sequences, packs, PACKED)
    assert tuple(out) == PACKED.feature_names
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
    _, sequences = _sequences(lengths, seed=1)
    packs = assign_sequences(sequences["lengths"], pack_lengths(sequences["lengths"], S, D),
                             seed=3)
    back, records = unpack_records(pack_records(sequences, packs, PACKED))
    assert back["lengths"].size == 400
    np.testing.assert_array_equal(np.sort(fingerprints(SPEC, back)),
                                  np.sort(fingerprints(SPEC, sequences)))
    # In pack order, exactly the assigned sequences, whole.
    in_pack_order = take(SPEC, sequences, packs.sequence_indices)
    for name, values in in_pack_order.items():
        np.testing.assert_array_equal(back[name], values, err_msg=name)
    np.testing.assert_array_equal(records, np.repeat(np.arange(len(packs)),
                                                     np.diff(packs.row_splits)))


def _pack_one_by_one(sequences, packs, record_format):
    """pack_records written the obvious way: a Python loop over packs."""
    out = {name: np.zeros((len(packs), length), np.int64)
           for name, length in record_format.feature_lengths().items()}
    token_splits = np.concatenate([[0], np.cumsum(sequences["lengths"])])
    masked_splits = np.concatenate([[0], np.cumsum(sequences["prediction_counts"])])
    for pack in range(len(packs)):
        column = masked_slot = 0
        members = packs.sequence_indices[packs.row_splits[pack]:packs.row_splits[pack + 1]]
        for depth, sequence in enumerate(members):
            tokens = slice(token_splits[sequence], token_splits[sequence + 1])
            length = sequences["lengths"][sequence]
            span = slice(column, column + length)
            out["input_ids"][pack, span] = sequences["input_ids"][tokens]
            out["segment_ids"][pack, span] = sequences["segment_ids"][tokens]
            out["input_mask"][pack, span] = depth + 1
            out["positions"][pack, span] = np.arange(length)
            masked = slice(masked_splits[sequence], masked_splits[sequence + 1])
            count = sequences["prediction_counts"][sequence]
            slots = slice(masked_slot, masked_slot + count)
            out["masked_lm_positions"][pack, slots] = \
                sequences["masked_lm_positions"][masked] + column
            out["masked_lm_ids"][pack, slots] = sequences["masked_lm_ids"][masked]
            out["masked_lm_weights"][pack, slots] = depth + 1
            out["next_sentence_positions"][pack, depth] = column
            out["next_sentence_labels"][pack, depth] = \
                sequences["next_sentence_labels"][sequence]
            out["next_sentence_weights"][pack, depth] = 1
            column += length
            masked_slot += count
    return out


@pytest.mark.parametrize("max_depth", [1, 2, 3, 5])
def test_layout_equals_packing_one_pack_at_a_time(rng, max_depth):
    lengths = rng.integers(5, S + 1, 300)
    _, sequences = _sequences(lengths, seed=2)
    lengths = sequences["lengths"]
    packs = assign_sequences(lengths, pack_lengths(lengths, S, max_depth), seed=4)
    record_format = RecordFormat.packed(S, P + max_depth - 1, max_depth)
    packs, _ = replan_overflowing_packs(packs, lengths, sequences["prediction_counts"],
                                        limit=record_format.max_masked_tokens,
                                        max_sequence_length=S,
                                        max_sequences_per_pack=max_depth)
    out = pack_records(sequences, packs, record_format)
    expected = _pack_one_by_one(sequences, packs, record_format)
    assert set(out) == set(expected)
    for name in expected:
        np.testing.assert_array_equal(out[name], expected[name], err_msg=name)
        assert out[name].dtype == (np.float32 if name == "masked_lm_weights" else np.int32)


@pytest.mark.parametrize("max_depth, vocab", [(3, 3000), (5, 30522), (3, 70_000)])
def test_narrow_layout_is_the_same_records(rng, max_depth, vocab):
    from packed_bert_tf.data.records import record_codec
    from packed_bert_tf.data.records.record_codec import encode_examples
    from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES

    lengths = rng.integers(5, S + 1, 300)
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, vocab_size=vocab, seed=6)
    sequences = compact_records(arrays)
    assert sequences["input_ids"].dtype == (np.uint16 if vocab < 1 << 16 else np.int32)
    packs = assign_sequences(sequences["lengths"],
                             pack_lengths(sequences["lengths"], S, max_depth), seed=4)
    record_format = RecordFormat.packed(S, P * max_depth, max_depth)
    wide = pack_records(sequences, packs, record_format)
    narrow = pack_records(sequences, packs, record_format, narrow=True)
    assert narrow["input_mask"].dtype == np.uint8
    assert narrow["positions"].dtype == np.int16
    for name in wide:
        np.testing.assert_array_equal(narrow[name], wide[name], err_msg=name)
    if not record_codec.available():
        pytest.skip("the C codec was not built: its encoding of both layouts is untested")
    encoded = [encode_examples(out, float_features=FLOAT_FEATURE_NAMES)
               for out in (wide, narrow)]
    for ours, reference in zip(*encoded):
        assert ours.tobytes() == reference.tobytes()


@pytest.mark.parametrize("padding", [0, 70_000, -3])
def test_token_ids_compacted_whatever_the_padding_holds(padding):
    arrays, sequences = _sequences([6, 5, 12])
    assert {name: values.dtype.name for name, values in sequences.items()} == {
        "lengths": "int64", "input_ids": "uint16", "segment_ids": "int8",
        "next_sentence_labels": "int8", "prediction_counts": "int64",
        "masked_lm_positions": "int16", "masked_lm_ids": "int32"}
    arrays = dict(arrays)
    ids = arrays["input_ids"].astype(np.int64)
    ids[arrays["input_mask"] == 0] = padding  # ignored: only real tokens are kept
    arrays["input_ids"] = ids
    again = compact_records(arrays)
    assert again["input_ids"].dtype == np.uint16
    np.testing.assert_array_equal(again["input_ids"], sequences["input_ids"])
    np.testing.assert_array_equal(again["segment_ids"], sequences["segment_ids"])


def test_compact_sequences_share_no_memory_with_the_records():
    # The offline packer reads batch after batch into the same buffers.
    arrays, _ = _sequences([6, 5, 12])
    arrays = {name: values.astype(np.int32) if values.dtype == np.int64 else values
              for name, values in arrays.items()}
    sequences = compact_records(arrays)
    for values in sequences.values():
        assert not any(np.shares_memory(values, source) for source in arrays.values())


@pytest.mark.parametrize("edit, rule", [
    (lambda a: a["input_mask"].__setitem__((0, 2), 2),
     "input_mask does not number the sequences"),
    (lambda a: a["positions"].__setitem__((0, 7), 0), "positions do not restart"),
    (lambda a: a["input_ids"].__setitem__((0, S - 1), 7), "input_ids is not 0 on padding"),
    (lambda a: a["next_sentence_positions"].__setitem__((0, 1), 3),
     "next_sentence_positions are not the sequences' first tokens"),
    (lambda a: a["next_sentence_weights"].__setitem__((0, 1), 0),
     "next_sentence_weights are not 1 for each sequence"),
    (lambda a: a["next_sentence_labels"].__setitem__((0, 2), 1),
     "next_sentence_labels set for an empty slot"),
    (lambda a: a["masked_lm_weights"].__setitem__((0, 0), 2.0),
     "a masked_lm_weights value is not the sequence index of the token it points at"),
    (lambda a: a["masked_lm_ids"].__setitem__((0, PACKED.max_masked_tokens - 1), 5),
     "masked_lm_ids is not 0 in an empty prediction slot"),
    (lambda a: a["masked_lm_weights"].__setitem__((0, 0), 0.5),
     "masked_lm_weights are not sequence indices"),
    (lambda a: a["masked_lm_weights"].__setitem__((0, PACKED.max_masked_tokens - 1), 3.0),
     "prediction slots are not filled first-to-last"),
])
def test_broken_packed_records_are_caught(edit, rule):
    _, sequences = _sequences([8, 9, 10])
    out = pack_records(sequences, PackAssignment(np.array([0, 2, 3]), np.arange(3)), PACKED)
    edit(out)
    with pytest.raises(ValueError, match=f"^shard-7: record 0: {rule}"):
        unpack_records(out, source="shard-7")


def test_packs_over_the_format_are_refused():
    _, sequences = _sequences([20, 20])
    with pytest.raises(ValueError, match="pack 0 holds 40 tokens, more than max_sequence_length=32"):
        pack_records(sequences, PackAssignment(np.array([0, 2]), np.arange(2)), PACKED)


def test_unpacked_records_that_break_the_format_are_named():
    arrays, _ = _sequences([8, 9])
    arrays["input_mask"][1, 2] = 0
    with pytest.raises(ValueError, match="^f.tfrecord: record 11: input_mask is not a "
                                         "non-empty run of nonzero values followed by 0s"):
        compact_records(arrays, source="f.tfrecord", first_record=10)
    arrays, _ = _sequences([8, 9])
    arrays["masked_lm_positions"][0, 0] = 20
    with pytest.raises(ValueError, match=r"^records: record 0: its real predictions "
                                         r"\(masked_lm_weights > 0\) are not first, or a "
                                         r"position lies outside the sequence"):
        compact_records(arrays)
