import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import (
    PackAssignment,
    assign_sequences,
    histogram_from_lengths,
    pack_assignment,
    pack_histogram,
    pack_lengths,
    replan_overflowing_packs,
)


def _plan_for(lengths, max_len, cap, algorithm="optimal"):
    return pack_histogram(histogram_from_lengths(lengths, max_len), max_len, cap,
                          algorithm)


def test_hand_made_assignment():
    # Lengths 3 1 2 2 at max length 4, two per pack: (3, 1) and (2, 2).
    packs = assign_sequences([3, 1, 2, 2], _plan_for([3, 1, 2, 2], 4, 2), seed=0)
    assert len(packs) == 2
    assert sorted(sorted(p.tolist()) for p in packs) == [[0, 1], [2, 3]]
    np.testing.assert_array_equal(packs.sequences_per_pack, [2, 2])
    dense = packs.to_dense(max_sequences_per_pack=3)
    assert dense.shape == (2, 3) and (dense[:, 2] == -1).all()


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 32), min_size=1, max_size=300),
       cap=st.integers(1, 4), seed=st.integers(0, 2**31),
       algorithm=st.sampled_from(["optimal", "lpfhp", "spfhp", "nnlshp"]))
def test_every_example_lands_in_exactly_one_pack_of_the_plan(lengths, cap, seed,
                                                              algorithm):
    lengths = np.asarray(lengths)
    cap = min(cap, 3) if algorithm == "nnlshp" else cap
    plan = _plan_for(lengths, 32, cap, algorithm)
    packs = assign_sequences(lengths, plan, seed=seed)
    assert len(packs) == plan.num_packs
    np.testing.assert_array_equal(np.sort(packs.sequence_indices),
                                  np.arange(lengths.size))
    # Each pack holds the lengths of one of the plan's strategies, as often
    # as the plan says.
    made = {}
    for pack in packs:
        key = tuple(sorted(lengths[pack].tolist(), reverse=True))
        made[key] = made.get(key, 0) + 1
        assert lengths[pack].sum() <= 32 and len(pack) <= cap
    assert made == dict(zip(plan.strategies, plan.counts))


def test_deterministic_for_a_seed_and_shuffled_across_seeds(rng):
    lengths = rng.integers(1, 129, size=5000)
    plan = _plan_for(lengths, 128, 3)
    first = assign_sequences(lengths, plan, seed=7)
    again = assign_sequences(lengths, plan, seed=7)
    other = assign_sequences(lengths, plan, seed=8)
    np.testing.assert_array_equal(first.row_splits, again.row_splits)
    np.testing.assert_array_equal(first.sequence_indices, again.sequence_indices)
    assert not np.array_equal(first.sequence_indices, other.sequence_indices)


def test_packs_come_in_mixed_order(rng):
    # Strategies are listed sorted; the packs must not be: the longest
    # sequence of each pack should go up and down along the output.
    lengths = rng.integers(1, 129, size=4000)
    packs = assign_sequences(lengths, _plan_for(lengths, 128, 3), seed=0)
    longest = np.array([lengths[p].max() for p in packs])
    changes = np.sign(np.diff(longest))
    assert (changes > 0).sum() > len(longest) // 4
    assert (changes < 0).sum() > len(longest) // 4


def test_lengths_that_do_not_match_the_plan_are_rejected():
    plan = _plan_for([3, 1, 2, 2], 4, 2)
    with pytest.raises(ValueError, match="2 sequences of length 1, the plan packs 1"):
        assign_sequences([3, 1, 1, 2], plan)
    with pytest.raises(ValueError, match="sequence 0 has length 5"):
        assign_sequences([5, 1, 2, 2], plan)


def test_indexing_and_dense_width_errors():
    packs = PackAssignment(row_splits=np.array([0, 2, 3]),
                           sequence_indices=np.array([4, 1, 0]))
    np.testing.assert_array_equal(packs[-1], [0])
    with pytest.raises(IndexError, match="pack 2 out of range for 2 packs"):
        packs[2]
    with pytest.raises(ValueError, match="holds 2 sequences, more than the 1"):
        packs.to_dense(max_sequences_per_pack=1)


def test_pack_assignment_per_entry_and_per_pack_quantities():
    # Packs [4, 0], [], [2, 1, 3]; lengths of sequences 0..4 are 5, 1, 2, 3, 6.
    packs = PackAssignment.from_sequences_per_pack([2, 0, 3], [4, 0, 2, 1, 3])
    np.testing.assert_array_equal(packs.row_splits, [0, 2, 2, 5])
    np.testing.assert_array_equal(packs.pack_of_entries, [0, 0, 2, 2, 2])
    np.testing.assert_array_equal(packs.slot_of_entries, [0, 1, 0, 1, 2])
    lengths = np.array([5, 1, 2, 3, 6])[packs.sequence_indices]  # [6, 5, 2, 1, 3]
    np.testing.assert_array_equal(packs.offset_in_pack(lengths), [0, 6, 0, 2, 3])
    np.testing.assert_array_equal(packs.sum_per_pack(lengths), [11, 0, 6])
    taken = packs.take([2, 0])
    np.testing.assert_array_equal(taken.row_splits, [0, 3, 5])
    np.testing.assert_array_equal(taken.sequence_indices, [2, 1, 3, 4, 0])
    empty = packs.take([1])
    assert len(empty) == 1 and empty.sequence_indices.size == 0
    np.testing.assert_array_equal(packs.to_dense(3), [[4, 0, -1], [-1, -1, -1],
                                                      [2, 1, 3]])


def test_ragged_helpers_on_empty_rows():
    from packed_bert_tf.packing import ragged

    np.testing.assert_array_equal(ragged.position_in_row([2, 0, 3]), [0, 1, 0, 1, 2])
    np.testing.assert_array_equal(ragged.row_of_elements([0, 2, 1]), [1, 1, 2])
    np.testing.assert_array_equal(ragged.exclusive_sum_in_row([3, 2, 4, 1], [2, 0, 2]),
                                  [0, 3, 0, 4])
    np.testing.assert_array_equal(ragged.exclusive_sum_in_row([7], [1, 0, 0]), [0])
    np.testing.assert_array_equal(ragged.sum_over_rows(np.array([1, 2, 3]),
                                                       np.array([0, 0, 3, 3])), [0, 6, 0])
    index, taken = ragged.take_rows_index(np.array([0, 2, 2, 5]), np.array([2, 0, 3]),
                                          np.array([2, 1, 0]))
    np.testing.assert_array_equal(index, [2, 3, 4, 0, 1])
    np.testing.assert_array_equal(taken, [3, 0, 2])


def test_assignments_concatenate_pack_after_pack():
    first = PackAssignment.from_sequences_per_pack([2, 1], [4, 0, 3])
    second = PackAssignment.from_sequences_per_pack([3], [1, 2, 5])
    joined = PackAssignment.concatenate([first, second])
    assert [pack.tolist() for pack in joined] == [[4, 0], [3], [1, 2, 5]]
    empty = PackAssignment.concatenate([])
    assert len(empty) == 0 and empty.row_splits.tolist() == [0]
    assert PackAssignment.concatenate([empty, second]).row_splits.tolist() == [0, 3]


def test_pack_assignment_packs_each_example_once_or_lays_them_out_unpacked():
    lengths = np.array([5, 3, 2, 6, 1, 4, 2])
    packed = pack_assignment(lengths, 8, 3, seed=1)
    assert sorted(packed.sequence_indices.tolist()) == list(range(lengths.size))
    assert all(lengths[pack].sum() <= 8 and len(pack) <= 3 for pack in packed)
    assert len(packed) == 3  # 23 tokens in 3 rows of 8: (6, 2), (5, 3), (4, 2, 1)
    unpacked = pack_assignment(lengths, 8, 3, packed=False)
    assert [pack.tolist() for pack in unpacked] == [[i] for i in range(lengths.size)]
    for packed_or_not in (True, False):
        assert len(pack_assignment(np.zeros(0, np.int64), 8, 3, packed=packed_or_not)) == 0


def test_overflowing_packs_are_replanned_not_truncated():
    # Sequences of 10 tokens, 6 predictions each: three fit in 32 tokens but
    # not in 8 prediction slots.
    lengths, counts = np.full(9, 10), np.full(9, 6)
    packs = assign_sequences(lengths, pack_lengths(lengths, 32, 3), seed=0)
    assert packs.sequences_per_pack.max() == 3
    fixed, replanned = replan_overflowing_packs(packs, lengths, counts, limit=8,
                                                max_sequence_length=32,
                                                max_sequences_per_pack=3)
    assert replanned == 9 and len(fixed) == 9  # re-planned, then one per pack
    np.testing.assert_array_equal(np.sort(fixed.sequence_indices), np.arange(9))
    with pytest.raises(ValueError, match="sequence 0 holds 9 on its own, more than the "
                                         "8 a pack may hold"):
        replan_overflowing_packs(packs, lengths, np.full(9, 9), limit=8,
                                 max_sequence_length=32, max_sequences_per_pack=3)


def test_replanning_keeps_the_packs_that_fit_and_packs_the_rest_again():
    # Pairs of 16-token sequences: (heavy, light) packs overflow 12 slots,
    # (light, light) ones fit.
    lengths = np.full(8, 16)
    counts = np.array([10, 3, 10, 3, 3, 3, 10, 10])
    packs = PackAssignment.from_sequences_per_pack([2, 2, 2, 2], np.arange(8))
    unchanged, none = replan_overflowing_packs(packs, lengths, np.ones(8, np.int64),
                                               limit=12, max_sequence_length=32,
                                               max_sequences_per_pack=2)
    assert none == 0
    np.testing.assert_array_equal(unchanged.row_splits, packs.row_splits)
    np.testing.assert_array_equal(unchanged.sequence_indices, packs.sequence_indices)
    fixed, replanned = replan_overflowing_packs(packs, lengths, counts, limit=12,
                                                max_sequence_length=32,
                                                max_sequences_per_pack=2, seed=6)
    assert replanned == 6
    # The pack that fit first; the re-plan (seed 6) pairs the two released
    # lights; the heavy ones, which overflow whatever their partner, go alone.
    # Splitting the three overflowing packs would give 7 packs.
    assert [pack.tolist() for pack in fixed] == [[4, 5], [3, 1], [2], [7], [0], [6]]
