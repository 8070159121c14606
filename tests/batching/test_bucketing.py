"""Bucketing plans: exactly once, deterministic, budgets and shapes, bad options."""

import doctest
import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.batching import (
    BatchPlan,
    Bucketing,
    batching_metrics,
    bucket_batches,
    bucket_boundaries,
    bucketing,
    packed_batches,
    padded_batches,
    plan,
    sharding,
)


def _skewed_lengths(rng, size, max_len):
    """Wikipedia-like: a quarter at the max length, the rest spread below."""
    return np.where(rng.random(size) < 0.25, max_len,
                    rng.integers(8, max_len + 1, size)).astype(np.int64)


def _assert_exactly_once(batch_plan, size):
    np.testing.assert_array_equal(np.sort(batch_plan.example_indices), np.arange(size))


def test_hand_made_plan_without_shuffling():
    # Buckets (0, 4] and (4, 8], two per batch, one pool: the short bucket is
    # 1 2 3 (examples 1 3 5), the long one 5 7 8 (examples 0 2 4). The two
    # unfilled batches come from the flush after the last pool.
    got = bucket_batches([5, 1, 7, 2, 8, 3], Bucketing(
        batch_size=2, pool_size=6, bucket_boundaries=[4, 8], pad_to_bucket_boundary=True),
        shuffle=False)
    assert [b.tolist() for b in got] == [[1, 3], [0, 2], [5], [4]]
    np.testing.assert_array_equal(got.padded_lengths, [4, 8, 4, 8])
    np.testing.assert_array_equal(got.batch_rows, [2, 2, 2, 2])
    np.testing.assert_array_equal(got.buckets, [0, 1, 0, 1])
    assert got.boundaries == (4, 8)
    # Without boundaries: sorted, padded to each batch's longest.
    got = bucket_batches([5, 1, 7, 2, 8, 3], Bucketing(batch_size=2, pool_size=6),
                         shuffle=False)
    assert [b.tolist() for b in got] == [[1, 3], [5, 0], [2, 4]]
    np.testing.assert_array_equal(got.padded_lengths, [2, 5, 8])


def test_padded_batches_hand_made():
    got = padded_batches([3, 1, 4, 1, 5], batch_size=2, shuffle=False)
    assert [b.tolist() for b in got] == [[0, 1], [2, 3], [4]]
    assert got.shapes == ((2, 5),)
    got = padded_batches([3, 1, 4, 1, 5], batch_size=2, pad_to_longest=True,
                         max_sequence_length=8, shuffle=False)
    np.testing.assert_array_equal(got.padded_lengths, [3, 4, 5])
    assert got.boundaries == (8,)
    shuffled = padded_batches(np.arange(1, 101), batch_size=7, seed=5)
    _assert_exactly_once(shuffled, 100)
    assert not np.array_equal(shuffled.example_indices, np.arange(100))


def test_unfilled_batches_wait_for_the_next_pool():
    # Pools of 3 in dataset order: the lone long example of pool 1 waits for
    # the long one of pool 2.
    got = bucket_batches([1, 2, 9, 1, 2, 9], Bucketing(
        batch_size=2, pool_size=3, bucket_boundaries=[4, 9]), shuffle=False)
    assert [b.tolist() for b in got] == [[0, 1], [3, 4], [2, 5]]


def test_token_budget_batches_hand_made():
    # Budget 8 without boundaries: as many as fit at the batch's longest.
    # Five of length 1 leave room for a sixth, so they wait for the flush.
    got = bucket_batches([1, 1, 1, 1, 1, 4, 4, 3], Bucketing(token_budget=8, pool_size=8),
                         shuffle=False)
    assert [b.tolist() for b in got] == [[7, 5], [0, 1, 2, 3, 4], [6]]
    np.testing.assert_array_equal(got.batch_rows, [2, 5, 1])
    np.testing.assert_array_equal(got.padded_lengths, [4, 1, 4])
    # With boundaries padded to: budget // boundary rows per bucket.
    got = bucket_batches([1, 1, 1, 1, 1, 4, 4, 3], Bucketing(
        token_budget=8, pool_size=8, bucket_boundaries=[2, 4], pad_to_bucket_boundary=True),
        shuffle=False)
    assert [b.tolist() for b in got] == [[0, 1, 2, 3], [7, 5], [4], [6]]
    assert got.shapes == ((2, 4), (4, 2))


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 400), seed=st.integers(0, 2**31), epoch=st.integers(0, 5),
       batch_size=st.integers(1, 16), pool_factor=st.integers(1, 8),
       use_budget=st.booleans(), pad=st.booleans(),
       boundaries=st.sampled_from([None, (16,), (8, 16, 32), (5, 20, 40, 64)]))
def test_every_example_exactly_once_and_within_its_shape(size, seed, epoch, batch_size,
                                                         pool_factor, use_budget, pad,
                                                         boundaries):
    lengths = np.random.default_rng(seed).integers(1, 65, size)
    pad = pad and boundaries is not None
    options = dict(token_budget=64 * batch_size) if use_budget else dict(
        batch_size=batch_size)
    # A budget's pool must hold a batch of the longest (up to 64 x batch_size rows).
    pool_size = batch_size * pool_factor * (64 if use_budget else 1)
    got = bucket_batches(lengths, Bucketing(pool_size=pool_size, bucket_boundaries=boundaries,
                                            pad_to_bucket_boundary=pad, **options),
                         max_sequence_length=64, seed=seed, epoch=epoch)
    _assert_exactly_once(got, size)  # also checked by BatchPlan itself
    edges = np.asarray(got.boundaries)
    for k, examples in enumerate(got):
        assert examples.size and lengths[examples].max() <= got.padded_lengths[k]
        assert examples.size <= got.batch_rows[k]
        assert lengths[examples].max() <= edges[got.buckets[k]]
        if got.buckets[k]:
            assert lengths[examples].min() > edges[got.buckets[k] - 1]
        if use_budget:
            assert got.batch_rows[k] * got.padded_lengths[k] <= 64 * batch_size
        if pad:
            assert got.padded_lengths[k] == edges[got.buckets[k]]
    if not (use_budget and not pad):  # fixed rows: one partial batch per bucket at most
        partial = got.examples_per_batch < got.batch_rows
        assert np.bincount(got.buckets[partial], minlength=edges.size).max(initial=0) <= 1


def test_same_seed_and_epoch_same_plan_else_different(rng):
    lengths = _skewed_lengths(rng, 2000, 128)

    def plan_of(seed, epoch):
        return bucket_batches(lengths, Bucketing(batch_size=16, pool_size=256,
                                                 bucket_boundaries=[32, 64],
                                                 pad_to_bucket_boundary=True),
                              max_sequence_length=128, seed=seed, epoch=epoch)

    first, again = plan_of(1, 0), plan_of(1, 0)
    for name in ("row_splits", "example_indices", "batch_rows", "padded_lengths"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.example_indices, plan_of(1, 1).example_indices)
    assert not np.array_equal(first.example_indices, plan_of(2, 0).example_indices)


def test_shapes_come_from_the_allowed_set_only(rng):
    lengths = _skewed_lengths(rng, 3000, 128)
    edges = (32, 64, 96, 128)
    fixed = bucket_batches(lengths, Bucketing(batch_size=16, pool_size=512,
                                              bucket_boundaries=edges,
                                              pad_to_bucket_boundary=True))
    assert set(fixed.shapes) <= {(16, e) for e in edges}
    budget = bucket_batches(lengths, Bucketing(token_budget=2048, pool_size=512,
                                               bucket_boundaries=edges,
                                               pad_to_bucket_boundary=True))
    assert set(budget.shapes) <= {(2048 // e, e) for e in edges}
    assert (budget.padded_tokens <= 2048).all()


def test_larger_pools_pad_less(rng):
    lengths = _skewed_lengths(rng, 4000, 128)
    occupancy = [batching_metrics(bucket_batches(
        lengths, Bucketing(batch_size=16, pool_size=pool))).occupancy
        for pool in (16, 256, 4000)]
    assert occupancy[0] < occupancy[1] < occupancy[2]
    padded = batching_metrics(padded_batches(lengths, batch_size=16,
                                             max_sequence_length=128))
    assert padded.occupancy == pytest.approx(lengths.mean() / 128, rel=0.01)
    assert padded.num_shapes == 1


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=32, pool_size=16), "pool_size=16 is smaller than batch_size=32"),
    (dict(token_budget=100, pool_size=64), "token_budget=100 is below the longest "
                                           "sequence's 120 tokens"),
    (dict(token_budget=120, pool_size=64, bucket_boundaries=[64, 128],
          pad_to_bucket_boundary=True), "below the longest sequence's 128 tokens "
                                        r"\(its bucket boundary\)"),
    (dict(token_budget=1280, pool_size=4, bucket_boundaries=[64, 128],
          pad_to_bucket_boundary=True), "pool_size=4 is smaller than one batch of the "
                                        "longest sequences"),
    (dict(batch_size=4, token_budget=64, pool_size=8), "exactly one of batch_size"),
    (dict(pool_size=8), "exactly one of batch_size"),
    (dict(batch_size=4, pool_size=8, bucket_boundaries=[64, 32]), "increasing order"),
    (dict(batch_size=4, pool_size=8, bucket_boundaries=[32, 64]), "length 120 is longer "
                                                                  "than the last boundary"),
    (dict(batch_size=4, pool_size=8, pad_to_bucket_boundary=True),
     "pad_to_bucket_boundary needs bucket boundaries"),
    (dict(batch_size=4, pool_size=8, max_sequence_length=100), "longer than "
                                                               "max_sequence_length"),
    (dict(batch_size=0, pool_size=8), "batch_size must be a positive integer, got 0"),
])
def test_bad_options_are_rejected_with_a_clear_message(options, message):
    options = dict(options)
    max_sequence_length = options.pop("max_sequence_length", None)
    with pytest.raises(ValueError, match=message):
        bucket_batches([5, 120, 30], Bucketing(**options),
                       max_sequence_length=max_sequence_length)


def test_bad_lengths_are_rejected():
    with pytest.raises(ValueError, match="example 1 has length 0"):
        bucket_batches([3, 0], Bucketing(batch_size=1, pool_size=1))
    with pytest.raises(ValueError, match="must be 1-D"):
        bucket_batches([[3]], Bucketing(batch_size=1, pool_size=1))


def test_packed_batches_match_the_packing_plan(rng):
    lengths = _skewed_lengths(rng, 600, 64)
    got = packed_batches(lengths, batch_size=8, max_sequence_length=64)
    _assert_exactly_once(got, lengths.size)
    metrics = batching_metrics(got)
    assert metrics.shapes == ((8, 64),) and got.max_sequences_per_row == 3
    assert (got.real_tokens <= got.padded_tokens).all()
    assert metrics.occupancy > 0.9  # vs ~0.63 padded
    assert metrics.examples_per_batch > 8


def test_batch_plan_rejects_a_broken_plan():
    base = dict(lengths=[3, 2], row_splits=[0, 1, 2], example_indices=[0, 1],
                batch_rows=[1, 1], padded_lengths=[3, 2], buckets=[0, 0], boundaries=(3,))
    BatchPlan(**base)
    with pytest.raises(ValueError, match="exactly once"):
        BatchPlan(**{**base, "example_indices": [0, 0]})
    with pytest.raises(ValueError, match="example 0 of length 3 is in batch 0 padded to 2"):
        BatchPlan(**{**base, "padded_lengths": [2, 2]})
    with pytest.raises(ValueError, match="batch 0 holds 2 examples, more than 1 rows"):
        BatchPlan(**{**base, "row_splits": [0, 2, 2]})


def test_metrics_of_a_hand_made_plan():
    # Batch 0: lengths 3, 2 at [2, 4]; batch 1: length 4 at [2, 4] (one empty row).
    got = BatchPlan(lengths=[3, 2, 4], row_splits=[0, 2, 3], example_indices=[0, 1, 2],
                    batch_rows=[2, 2], padded_lengths=[4, 4], buckets=[0, 0],
                    boundaries=(4,))
    metrics = batching_metrics(got)
    assert (metrics.real_tokens, metrics.padded_tokens) == (9, 16)
    assert metrics.occupancy == 9 / 16 and metrics.padding_fraction == 7 / 16
    assert metrics.examples_per_batch == 1.5 and metrics.real_tokens_per_batch == 4.5
    assert metrics.num_shapes == 1
    np.testing.assert_allclose(plan.batch_costs(got, "attention", hidden_size=1),
                               [3 + 9 / 6 + 2 + 4 / 6, 4 + 16 / 6])


def _padding_of(histogram, edges):
    lengths = np.arange(1, len(histogram) + 1)
    bucket = np.searchsorted(edges, lengths)
    return int((np.asarray(histogram) * np.asarray(edges)[bucket]).sum())


@pytest.mark.parametrize("multiple_of", [1, 3])
def test_bucket_boundaries_are_optimal_on_small_histograms(rng, multiple_of):
    histogram = rng.integers(0, 20, 12)
    for num_buckets in (1, 2, 3):
        got = bucket_boundaries(histogram, num_buckets, multiple_of=multiple_of)
        assert got[-1] == 12 and len(got) <= num_buckets
        assert all(e % multiple_of == 0 for e in got[:-1])
        candidates = sorted({*range(multiple_of, 12, multiple_of)})
        best = min(_padding_of(histogram, (*inner, 12))
                   for k in range(num_buckets)
                   for inner in itertools.combinations(candidates, k))
        assert _padding_of(histogram, got) == best


def test_docstring_examples_run():
    for module in (bucketing, plan, sharding):
        assert doctest.testmod(module).failed == 0


def test_planning_never_imports_tensorflow():
    code = ("import sys, packed_bert_tf.batching; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('tensorflow', 'keras')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=300).stdout
    assert out.strip() == "[]"
