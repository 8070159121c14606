"""Balanced sharding: imbalance figures, exactly once across workers, step shapes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.batching import (
    BatchPlan,
    Bucketing,
    BucketSpec,
    balance_across_workers,
    bucket_batches,
    expected_max_cost,
    padded_batches,
    plan_pool,
)
from packed_bert_tf.data.records.synthetic_records import lengths_from_histogram


def _one_per_batch(lengths):
    """A plan with one example per batch, each padded to its own length."""
    n = len(lengths)
    return BatchPlan(lengths=lengths, row_splits=np.arange(n + 1), example_indices=np.arange(n),
                     batch_rows=np.ones(n, np.int64), padded_lengths=lengths,
                     buckets=np.zeros(n, np.int64), boundaries=(max(lengths),))


def test_imbalance_of_a_hand_made_case():
    # Costs 4 1 3 2 on two workers. Round robin: steps (4, 1) and (3, 2), so the
    # steps take 4 + 3 = 7 against a mean of 2.5 + 2.5 = 5.
    plan = _one_per_batch([4, 1, 3, 2])
    dealt = balance_across_workers(plan, 2, cost="real_tokens", method="round_robin",
                                   same_shape_per_step=False)
    np.testing.assert_array_equal(dealt.batch_indices, [[0, 1], [2, 3]])
    np.testing.assert_array_equal(dealt.costs, [[4, 1], [3, 2]])
    np.testing.assert_allclose(dealt.step_imbalance, [4 / 2.5, 3 / 2.5])
    assert dealt.imbalance == pytest.approx(7 / 5)
    # Balanced: (4, 3) and (2, 1): 4 + 2 = 6 against 3.5 + 1.5 = 5.
    dealt = balance_across_workers(plan, 2, cost="real_tokens", same_shape_per_step=False)
    assert sorted(sorted(dealt.costs[t].tolist()) for t in range(2)) == [[1, 2], [3, 4]]
    assert dealt.imbalance == pytest.approx(6 / 5)
    # Three workers: a step with an idle worker, which costs nothing un-padded.
    dealt = balance_across_workers(plan, 3, cost="real_tokens", method="round_robin",
                                   same_shape_per_step=False)
    np.testing.assert_array_equal(dealt.batch_indices, [[0, 1, 2], [3, -1, -1]])
    assert dealt.imbalance == pytest.approx((4 + 2) / (8 / 3 + 2 / 3))
    # Padded tokens with one shape per step: the idle worker computes an empty
    # batch of the step's shape, and the step pads to its longest.
    dealt = balance_across_workers(plan, 3, method="round_robin")
    np.testing.assert_array_equal(dealt.padded_lengths, [[4, 4, 4], [2, 2, 2]])
    np.testing.assert_array_equal(dealt.costs, [[4, 4, 4], [2, 2, 2]])
    assert dealt.imbalance == 1.0


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 300), workers=st.integers(1, 9), seed=st.integers(0, 1000),
       method=st.sampled_from(["balanced", "round_robin"]), same_shape=st.booleans(),
       cost=st.sampled_from(["padded_tokens", "real_tokens", "attention"]))
def test_every_batch_dealt_exactly_once(size, workers, seed, method, same_shape, cost):
    lengths = np.random.default_rng(seed).integers(1, 65, size)
    plan = bucket_batches(lengths, Bucketing(batch_size=4, pool_size=32,
                                             bucket_boundaries=[16, 32, 64],
                                             pad_to_bucket_boundary=seed % 2 == 0),
                          seed=seed)
    dealt = balance_across_workers(plan, workers, cost=cost, method=method,
                                   same_shape_per_step=same_shape, seed=seed)
    assert dealt.batch_indices.shape == (dealt.num_steps, workers)
    used = dealt.batch_indices[dealt.batch_indices >= 0]
    np.testing.assert_array_equal(np.sort(used), np.arange(len(plan)))
    assert dealt.num_steps == -(-len(plan) // workers) or method == "balanced"
    assert dealt.imbalance >= 1.0 - 1e-12
    if same_shape:
        assert (dealt.padded_lengths == dealt.padded_lengths[:, :1]).all()
        assert (dealt.batch_rows == dealt.batch_rows[:, :1]).all()
    real = dealt.batch_indices >= 0
    # A local batch is never smaller than its plan batch.
    assert (dealt.padded_lengths[real] >= plan.padded_lengths[dealt.batch_indices[real]]).all()
    if method == "balanced" and same_shape:  # steps never mix buckets
        buckets = np.where(real, plan.buckets[np.maximum(dealt.batch_indices, 0)], -1)
        for row in buckets:
            assert len(set(row[row >= 0].tolist())) <= 1


def _imbalance_with_8_workers(lengths, max_len, **options):
    plan = bucket_batches(lengths, Bucketing(
        batch_size=32, pool_size=8192,
        bucket_boundaries=[max_len // 4, max_len // 2, 3 * max_len // 4], **options),
        max_sequence_length=max_len, seed=0)
    return {cost: balance_across_workers(plan, 8, cost=cost).imbalance
            for cost in ("padded_tokens", "real_tokens", "attention")}


def test_imbalance_under_1_05_with_8_workers_on_wikipedia_like_lengths(rng):
    # A quarter at the max length, the rest spread below (always available).
    lengths = np.where(rng.random(200_000) < 0.25, 512, rng.integers(20, 513, 200_000))
    for pad in (True, False):
        for cost, value in _imbalance_with_8_workers(
                lengths, 512, pad_to_bucket_boundary=pad).items():
            assert value < 1.05, (pad, cost, value)
    # Without balancing, random batches of padded-to-longest shape are uneven.
    random_batches = padded_batches(lengths, batch_size=32, pad_to_longest=True)
    dealt = balance_across_workers(random_batches, 8, cost="real_tokens",
                                   method="round_robin", same_shape_per_step=False)
    assert dealt.imbalance > 1.05


def test_imbalance_under_1_05_on_the_real_wikipedia_histogram(wikipedia_512):
    lengths = lengths_from_histogram(wikipedia_512.counts, 200_000, seed=0)
    for cost, value in _imbalance_with_8_workers(lengths, 512,
                                                 pad_to_bucket_boundary=True).items():
        assert value < 1.05, (cost, value)


def test_bad_arguments_are_rejected():
    plan = _one_per_batch([3, 1])
    with pytest.raises(ValueError, match="num_workers must be a positive integer, got 0"):
        balance_across_workers(plan, 0)
    with pytest.raises(ValueError, match="unknown cost 'flops'"):
        balance_across_workers(plan, 2, cost="flops")
    with pytest.raises(ValueError, match="unknown method 'greedy'"):
        balance_across_workers(plan, 2, method="greedy")


def test_a_pool_holds_back_incomplete_steps_until_the_final_flush():
    spec = BucketSpec.make(Bucketing(batch_size=2, pool_size=8, bucket_boundaries=[4, 8],
                                     pad_to_bucket_boundary=True))
    # Short bucket: 3 batches (2 full, 1 partial); long bucket: 2 full batches.
    lengths = [1, 2, 3, 1, 2, 6, 7, 8, 8]
    rng = np.random.default_rng(0)
    held = plan_pool(lengths, spec, num_workers=2, final=False, rng=rng)
    # 4 full batches make 2 steps; the partial short batch waits.
    assert held.rows.size == 4 and held.leftover.tolist() == [2]  # length 3: alone
    np.testing.assert_array_equal(np.sort(np.concatenate([held.order, held.leftover])),
                                  np.arange(9))
    np.testing.assert_array_equal(held.padded_lengths.reshape(-1, 2)[:, 0],
                                  held.padded_lengths.reshape(-1, 2)[:, 1])
    final = plan_pool(lengths, spec, num_workers=2, final=True, rng=rng)
    assert final.leftover.size == 0 and final.rows.size == 6  # one idle batch
    assert (np.diff(final.splits) == 0).sum() == 1
    np.testing.assert_array_equal(np.sort(final.order), np.arange(9))
    # With three workers no bucket has a full step: everything waits.
    none = plan_pool(lengths, spec, num_workers=3, final=False, rng=rng)
    assert none.rows.size == 0 and sorted(none.leftover.tolist()) == list(range(9))


def test_expected_max_cost_matches_a_simulation(rng):
    costs = rng.gamma(2.0, size=500)
    exact = expected_max_cost(costs, [1, 4, 64])
    assert exact[0] == pytest.approx(costs.mean())
    draws = rng.choice(costs, size=(20_000, 64))
    simulated = [draws[:, :w].max(axis=1).mean() for w in (1, 4, 64)]
    np.testing.assert_allclose(exact, simulated, rtol=0.02)
    assert exact[2] <= costs.max()
