"""SQuAD features laid out in packs, unpacked back, and the tf.data pipeline."""

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs.rows_dataset import rows_dataset
from packed_bert_tf.packing import PackAssignment
from packed_bert_tf.squad.features import SquadFeatures
from packed_bert_tf.squad.packing import layout_packs, pack_features, unpack_logits
from tests.squad.squad_data import make_features


def test_layout_of_a_small_assignment():
    features = make_features([5, 4, 2], 12)
    features = SquadFeatures(**dict(features.arrays(),
                                    start_position=np.array([3, 1, 0], np.int32),
                                    end_position=np.array([4, 2, 1], np.int32)))
    # Pack 0: features 0 then 2; pack 1: feature 1.
    assignment = PackAssignment(np.array([0, 2, 3]), np.array([0, 2, 1]))
    packs = layout_packs(features, assignment, 2)
    a = packs.arrays
    np.testing.assert_array_equal(a["input_ids"], [
        [100, 101, 102, 103, 104, 300, 301, 0, 0, 0, 0, 0],
        [200, 201, 202, 203, 0, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["input_mask"], [
        [1, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["positions"], [
        [0, 1, 2, 3, 4, 0, 1, 0, 0, 0, 0, 0],
        [0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["segment_ids"], [
        [0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0],
        [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["start_positions"], [[3, 5], [1, 0]])
    np.testing.assert_array_equal(a["end_positions"], [[4, 6], [2, 0]])
    np.testing.assert_array_equal(a["sequence_weights"], [[1, 1], [1, 0]])
    np.testing.assert_array_equal(packs.sequence_pack, [0, 1, 0])
    np.testing.assert_array_equal(packs.sequence_slot, [0, 0, 1])
    np.testing.assert_array_equal(packs.sequence_offset, [0, 0, 5])
    assert packs.packing_factor == 1.5
    assert packs.padding_fraction == pytest.approx(1 - 11 / 24)
    assert all(value.dtype == np.int32 for value in a.values())


def test_layout_refuses_overfull_packs():
    features = make_features([5, 4, 2], 8)
    with pytest.raises(ValueError, match="pack 0 holds 9 tokens, more than max_sequence_length=8"):
        layout_packs(features, PackAssignment(np.array([0, 2, 3]), np.array([0, 1, 2])), 2)
    with pytest.raises(ValueError, match="pack 0 holds 3 sequences, more than "
                                         "max_sequences_per_pack=2"):
        layout_packs(make_features([2, 2, 2], 8),
                     PackAssignment(np.array([0, 3]), np.array([0, 1, 2])), 2)
    with pytest.raises(ValueError, match="not each of the 3 sequences exactly once"):
        layout_packs(features, PackAssignment(np.array([0, 1, 2, 3]),
                                              np.array([0, 0, 2])), 2)


@pytest.mark.parametrize("algorithm", ["optimal", "lpfhp", "none"])
def test_every_feature_lands_once_where_the_mapping_says(algorithm):
    rng = np.random.default_rng(1)
    lengths = rng.integers(3, 40, 60)
    features = make_features(lengths, 40)
    packs = pack_features(features, max_sequences_per_pack=3, algorithm=algorithm,
                          seed=2)
    a = packs.arrays
    assert packs.max_sequences_per_pack == 3 and packs.num_sequences == 60
    if algorithm != "none":
        assert packs.num_packs < 60
    for f, length in enumerate(lengths):
        row, slot, offset = packs.sequence_pack[f], packs.sequence_slot[f], \
            packs.sequence_offset[f]
        span = slice(offset, offset + length)
        np.testing.assert_array_equal(a["input_ids"][row, span],
                                      features.input_ids[f, :length])
        assert (a["input_mask"][row, span] == slot + 1).all()
        np.testing.assert_array_equal(a["positions"][row, span], np.arange(length))
        assert a["start_positions"][row, slot] == offset + features.start_position[f]
        assert a["end_positions"][row, slot] == offset + features.end_position[f]
        assert a["sequence_weights"][row, slot] == 1
    assert a["sequence_weights"].sum() == 60
    assert (a["input_mask"] > 0).sum() == lengths.sum()


def test_unpacked_layout_is_one_feature_per_row_in_order():
    lengths = [5, 9, 3]
    features = make_features(lengths, 10)
    packs = pack_features(features, packed=False)
    assert not packs.packed and packs.max_sequences_per_pack == 1
    np.testing.assert_array_equal(packs.sequence_pack, [0, 1, 2])
    np.testing.assert_array_equal(packs.arrays["input_ids"], features.input_ids)
    np.testing.assert_array_equal(packs.arrays["input_mask"],
                                  np.arange(10)[None] < np.array(lengths)[:, None])
    np.testing.assert_array_equal(packs.arrays["start_positions"][:, 0],
                                  features.start_position)


def test_unpack_logits_recovers_each_feature_whatever_the_row_order():
    lengths = np.random.default_rng(3).integers(2, 20, 25)
    packs = pack_features(make_features(lengths, 24), max_sequences_per_pack=3)
    # Logit = the token id, so each feature's logits must be its token ids.
    rows = np.random.default_rng(4).permutation(packs.num_packs)
    pack_index = np.concatenate([rows, [-1, -1]])
    start = np.concatenate([packs.arrays["input_ids"][rows],
                            np.full((2, 24), 7)]).astype(np.float32)
    logits = unpack_logits(packs, pack_index, start, -start)
    assert len(logits) == 25
    for f, length in enumerate(lengths):
        got_start, got_end = logits[f]
        np.testing.assert_array_equal(got_start, 100 * (f + 1) + np.arange(length))
        np.testing.assert_array_equal(got_end, -got_start)
    with pytest.raises(ValueError, match="1 packs missing, 0 repeated"):
        unpack_logits(packs, rows[1:], start[1:packs.num_packs], start[1:packs.num_packs])
    with pytest.raises(ValueError, match="0 packs missing, 1 repeated"):
        doubled = np.concatenate([rows, rows[:1]])
        unpack_logits(packs, doubled, start[:doubled.size], start[:doubled.size])


@pytest.mark.parametrize("num_packs, batch_size", [(10, 4), (8, 4), (3, 8)])
def test_prediction_dataset_yields_every_row_once_in_static_batches(num_packs,
                                                                    batch_size):
    packs = pack_features(make_features([4] * num_packs, 6), packed=False)
    dataset = rows_dataset(packs, batch_size, is_training=False)
    assert dataset.element_spec["input_ids"].shape == (batch_size, 6)
    assert dataset.element_spec["start_positions"].shape == (batch_size, 1)
    assert dataset.element_spec["pack_index"].shape == (batch_size,)
    seen = np.concatenate([batch["pack_index"].numpy() for batch in dataset])
    assert sorted(seen[seen >= 0].tolist()) == list(range(num_packs))
    assert seen.size % batch_size == 0 and seen.size - num_packs < batch_size


def test_input_context_shards_the_rows_between_pipelines():
    packs = pack_features(make_features([4] * 11, 6), packed=False)
    seen = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2,
                                             input_pipeline_id=pipeline,
                                             num_replicas_in_sync=2)
        dataset = rows_dataset(packs, 4, is_training=False, input_context=context)
        assert dataset.element_spec["input_ids"].shape == (2, 6)
        seen.append(np.concatenate([b["pack_index"].numpy() for b in dataset]))
    assert seen[0].size == seen[1].size  # the same number of steps on each
    both = np.concatenate(seen)
    assert sorted(both[both >= 0].tolist()) == list(range(11))


def test_training_dataset_shuffles_repeats_and_keeps_static_shapes():
    packs = pack_features(make_features(np.arange(3, 13), 16), max_sequences_per_pack=2,
                          algorithm="lpfhp")
    dataset = rows_dataset(packs, 2, is_training=True, seed=0)
    spec = dataset.element_spec
    assert spec["input_ids"].shape == (2, 16) and spec["sequence_weights"].shape == (2, 2)
    # Two epochs (batches may straddle them): every row twice, in a new order.
    seen = np.concatenate([b["pack_index"].numpy() for b in dataset.take(packs.num_packs)])
    assert np.bincount(seen).tolist() == [2] * packs.num_packs
    assert seen[:packs.num_packs].tolist() != list(range(packs.num_packs))
    with pytest.raises(ValueError, match="cannot fill one training batch of 64"):
        rows_dataset(packs, 64, is_training=True)
