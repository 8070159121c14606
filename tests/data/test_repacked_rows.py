"""Training rows packed anew every pass (`RepackedRows`): each pass holds every
sequence once, in other company than the pass before, the same on every run."""

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs.rows_dataset import RepackedRows, rows_dataset
from packed_bert_tf.squad.packing import pack_features
from packed_bert_tf.training.fine_tuning import FineTuningOptions, training_rows
from tests.squad.squad_data import make_features

# 36 features of 12 lengths, 3 of each: many ways to fill the same plan.
FEATURES = make_features(np.repeat(np.arange(4, 16), 3), 24)


def _pack(seed):
    return pack_features(FEATURES, max_sequences_per_pack=3, seed=seed)


def _rows(repack=True, seed=7):
    options = FineTuningOptions(repack_each_epoch=repack, seed=seed)
    return training_rows(options, _pack(seed), _pack)


def _groups(batch) -> list[frozenset]:
    """The features of each row (token ids are 100 (f + 1) + position)."""
    ids, positions = batch["input_ids"], batch["positions"]
    mask = batch["input_mask"]
    return [frozenset((ids[row][(positions[row] == 0) & (mask[row] > 0)] // 100 - 1).tolist())
            for row in range(ids.shape[0])]


def _passes(dataset, count):
    return [{name: value.numpy() for name, value in batch.items()}
            for batch in dataset.take(count)]


def test_repacking_is_off_by_default_and_only_then_the_rows_are_packed_once():
    packs = _pack(7)
    assert training_rows(FineTuningOptions(seed=7), packs, _pack) is packs
    rows = _rows()
    assert isinstance(rows, RepackedRows) and rows.rows_of_pass(0) is rows.first
    assert rows.num_packs == rows.first.num_packs
    assert rows.packing_factor == rows.first.packing_factor


def test_every_pass_holds_each_feature_once_in_new_company():
    rows = _rows()
    num_packs = rows.num_packs
    # One batch is one pass: the packing keeps the plan, so every pass has the
    # same number of rows.
    passes = _passes(rows_dataset(rows, num_packs, is_training=True), 4)
    groups = [_groups(batch) for batch in passes]
    for pass_groups in groups:
        features = sorted(f for group in pass_groups for f in group)
        assert features == list(range(36))
    assert groups[0] == _groups(rows.first.arrays)  # pass 0: the run's own packing
    assert len({frozenset(g) for g in groups}) == 4  # then a packing per pass
    np.testing.assert_array_equal(passes[0]["pack_index"], np.arange(num_packs))
    # The same rows on every run (a resumed run reads what it would have read).
    again = _passes(rows_dataset(_rows(), num_packs, is_training=True), 4)
    for first, second in zip(passes, again):
        for name in first:
            np.testing.assert_array_equal(first[name], second[name])
    other_seed = _passes(rows_dataset(_rows(seed=8), num_packs, is_training=True), 2)
    assert _groups(other_seed[1]) != groups[1]


def test_the_replicas_of_a_pipeline_share_each_pass():
    rows = _rows()
    num_packs = rows.num_packs - rows.num_packs % 2
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    dataset = rows_dataset(rows, num_packs, is_training=True, input_context=context)
    batches = _passes(dataset, 2)  # replica 0's half of pass 0, then replica 1's
    assert [b["input_ids"].shape[0] for b in batches] == [num_packs // 2] * 2
    shares = [b["pack_index"] for b in batches]
    np.testing.assert_array_equal(np.sort(np.concatenate(shares)), np.arange(num_packs))
    assert shares[0].tolist() == list(range(0, num_packs, 2))


def test_micro_batches_and_skipped_batches_come_from_the_same_passes():
    rows = _rows()
    fresh = _passes(rows_dataset(rows, 4, is_training=True, micro_batches=2), 12)
    resumed = _passes(rows_dataset(rows, 4, is_training=True, micro_batches=2,
                                   skip_batches=10), 7)
    assert fresh[0]["input_ids"].shape == (2, 4, 24)
    for expected, got in zip(fresh[5:], resumed):
        np.testing.assert_array_equal(expected["input_ids"], got["input_ids"])


def test_repacked_rows_are_for_training_only():
    with pytest.raises(ValueError, match="rows packed anew every pass are for training "
                                         "only"):
        rows_dataset(_rows(), 4, is_training=False)
    with pytest.raises(ValueError, match="cannot fill one training batch of 64"):
        rows_dataset(_rows(), 64, is_training=True)


def test_the_seed_of_each_pass_is_drawn_from_the_run_seed_and_the_pass():
    seeds = []
    rows = training_rows(FineTuningOptions(repack_each_epoch=True, seed=7), _pack(7),
                         lambda seed: seeds.append(seed) or _pack(seed))
    for index in (1, 2, 1):
        rows.rows_of_pass(index)
    assert seeds[0] == seeds[2] != seeds[1]
    assert len(set(seeds) | {7}) == 3
    unseeded = training_rows(FineTuningOptions(repack_each_epoch=True), _pack(0),
                             lambda seed: seeds.append(seed) or _pack(seed))
    unseeded.rows_of_pass(1)
    assert seeds[-1] != seeds[0]
