"""`packed_bert_tf.data.packed.packed_rows`: the compact form, the layout and
its inverse, for every task's spec."""

import numpy as np
import pytest

from packed_bert_tf.data.packed.packed_rows import (
    PackSpec,
    RowShape,
    compact,
    fingerprints,
    lay_out_packs,
    take,
    unpack_rows,
)
from packed_bert_tf.data.records import synthetic_records
from packed_bert_tf.packing import PackAssignment, pack_assignment

S, D = 32, 3


def _dense(spec, lengths, seed=0):
    """Unpacked examples [N, S] carrying the spec's features."""
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=6, seed=seed)
    rng = np.random.default_rng(seed)
    count = len(lengths)
    dense = {name: arrays[name] for name in spec.input_names if name in arrays}
    for name in spec.sequence:
        dense.setdefault(name, rng.integers(0, 5, (count, 1)))
    for name in spec.offsets:
        dense[name] = rng.integers(0, np.asarray(lengths))
    return dense


@pytest.mark.parametrize("spec", [PackSpec.pretraining(8), PackSpec.squad(),
                                  PackSpec.classifier()], ids=["pretraining", "squad",
                                                               "classifier"])
def test_unpack_rows_gives_back_the_compact_sequences_of_every_spec(rng, spec):
    lengths = rng.integers(5, S + 1, 200)
    sequences, _ = compact(spec, _dense(spec, lengths), 0, S, False)
    packs = pack_assignment(sequences["lengths"], S, D, seed=2)
    rows = lay_out_packs(spec, sequences, packs, RowShape(S, D), {})
    back, row_of_sequence = unpack_rows(spec, rows, first_row=100)
    in_pack_order = take(spec, sequences, packs.sequence_indices)
    assert set(back) == set(in_pack_order) == set(spec.compact_names)
    for name, values in in_pack_order.items():
        np.testing.assert_array_equal(back[name], values, err_msg=name)
    np.testing.assert_array_equal(row_of_sequence, 100 + packs.pack_of_entries)


def test_an_offset_outside_its_sequence_is_named():
    spec = PackSpec.squad()
    sequences, _ = compact(spec, _dense(spec, [8, 9, 10]), 0, S, False)
    rows = lay_out_packs(spec, sequences, PackAssignment(np.array([0, 1, 3]), np.arange(3)),
                         RowShape(S, D), {})
    rows["end_positions"][1, 1] = 9 + 10  # sequence 2 starts at 9 and holds 10 tokens
    with pytest.raises(ValueError, match="^features: record 1: end_positions lies "
                                         "outside its sequence"):
        unpack_rows(spec, rows, source="features")


def test_compact_errors_name_the_source_and_record_or_the_stream_index():
    spec = PackSpec.squad()
    dense = _dense(spec, [8, 9, 10])
    dense["start_positions"][2] = 10
    with pytest.raises(ValueError, match="^example 7 of the stream: start_positions 10 "
                                         "lies outside its 10 tokens"):
        compact(spec, dense, 5, S, False)
    with pytest.raises(ValueError, match="^f.tfrecord: record 7: start_positions 10"):
        compact(spec, dense, 5, S, False, source="f.tfrecord")


def test_take_keeps_each_sequence_whole(rng):
    spec = PackSpec.pretraining(8)
    sequences, _ = compact(spec, _dense(spec, rng.integers(5, S + 1, 50), seed=5), 0, S,
                           False)
    order = rng.permutation(50)[:30]
    taken = take(spec, sequences, order)
    one_by_one = [take(spec, sequences, [i]) for i in order]
    np.testing.assert_array_equal(fingerprints(spec, taken), np.concatenate(
        [fingerprints(spec, part) for part in one_by_one]))
    np.testing.assert_array_equal(taken["lengths"], sequences["lengths"][order])


def test_fingerprints_see_every_value_and_ignore_the_integer_types():
    spec = PackSpec.pretraining(8)
    sequences, _ = compact(spec, _dense(spec, [10, 10]), 0, S, False)
    base = fingerprints(spec, sequences)
    assert base[0] != base[1]
    narrow = {name: values.astype(np.int32) for name, values in sequences.items()}
    np.testing.assert_array_equal(fingerprints(PackSpec.pretraining(20), narrow), base)
    for name in set(spec.compact_names) - {"lengths", "prediction_counts"}:
        values = sequences[name].copy()
        values[0] += 1
        changed = fingerprints(spec, {**sequences, name: values})
        assert changed[0] != base[0] and changed[1] == base[1], name
