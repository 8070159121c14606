"""Exact-fill matching: every row full, every sequence once, and the
certified shortcut of `optimal`."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import exact_fill, histograms, load_histogram, optimal, pack_histogram


def _long_context(max_len, num_documents):
    documents = load_histogram("builtin_corpus_documents")
    return np.asarray(histograms.split_documents(documents.counts, max_len,
                                                 num_documents=num_documents, seed=0))


def _token_bound(histogram, max_len):
    return float(histogram @ np.arange(1, max_len + 1)) / max_len


@pytest.mark.parametrize("room", [1, 2, 3, 4, 7, 12, 31])
def test_balanced_triples_are_every_triple_most_balanced_first(room):
    triples = exact_fill._balanced_triples(room)
    expected = {t for t in itertools.combinations_with_replacement(range(1, room + 1), 3)
                if sum(t) == room}
    assert {tuple(int(v) for v in t) for t in triples} == expected
    assert len(triples) == len(expected)
    spread = triples[:, 2] - triples[:, 0]
    assert (np.diff(spread) >= 0).all()


@pytest.mark.parametrize("room", [5, 23, 40])
@pytest.mark.parametrize("max_spread", [0, 1, 4, 16])
def test_a_spread_window_keeps_exactly_the_triples_within_it(room, max_spread):
    every = exact_fill._balanced_triples(room)
    within = exact_fill._balanced_triples(room, max_spread)
    expected = every[every[:, 2] - every[:, 0] <= max_spread]
    assert sorted(map(tuple, within.tolist())) == sorted(map(tuple, expected.tolist()))
    assert (np.diff(within[:, 2] - within[:, 0]) >= 0).all()


def test_balanced_pairs_are_every_pair_most_balanced_first():
    assert exact_fill._balanced_pairs(7).tolist() == [[3, 4], [2, 5], [1, 6]]
    assert exact_fill._balanced_pairs(6).tolist() == [[3, 3], [2, 4], [1, 5]]


def test_available_counts_repeated_lengths_once_per_use():
    counts = np.array([0, 7, 2, 5])
    combinations = np.array([[1, 1, 1], [1, 2, 3], [2, 2, 3], [1, 1, 3], [3, 3, 3]])
    assert exact_fill._available(counts, combinations).tolist() == [2, 2, 1, 3, 1]


@settings(max_examples=60, deadline=None)
@given(sums=st.lists(st.integers(1, 15), min_size=0, max_size=60), seed=st.integers(0, 99))
def test_match_halves_pairs_complements_as_often_as_the_counts_allow(sums, seed):
    max_len = 16
    sums = np.array(sums, dtype=np.int64)
    matched, unmatched = exact_fill._match_halves(sums, max_len, np.random.default_rng(seed))
    assert (sums[matched[:, 0]] + sums[matched[:, 1]] == max_len).all()
    assert sorted(matched.ravel().tolist() + unmatched.tolist()) == list(range(sums.size))
    per_sum = np.bincount(sums, minlength=max_len + 1)
    expected = sum(min(per_sum[p], per_sum[max_len - p]) for p in range(1, max_len // 2))
    assert len(matched) == expected + per_sum[max_len // 2] // 2


def test_hold_single_share_keeps_rows_within_the_share():
    is_single = np.array([True, True, True, True, False, False, False, False])
    rows = np.array([[0, 4], [1, 5], [2, 3], [6, 7]])  # 1, 1, 2, 0 singles
    kept, returned = exact_fill._hold_single_share(rows, is_single, 0.25,
                                                   np.random.default_rng(0))
    # At most 0.25 * 2 * 4 = 2 single halves; the all-pair row always stays.
    assert [6, 7] in kept.tolist()
    assert is_single[kept].sum() <= 2
    assert sorted(kept.ravel().tolist() + returned.tolist()) == list(range(8))


_histograms = st.integers(16, 96).flatmap(lambda max_len: st.tuples(
    st.just(max_len),
    st.lists(st.integers(0, 30), min_size=max_len, max_size=max_len)))


@settings(max_examples=40, deadline=None)
@given(case=_histograms, matching=st.sampled_from(exact_fill.MATCHINGS))
def test_rows_are_full_and_hold_every_sequence_once(case, matching):
    max_len, histogram = case
    histogram = np.array(histogram, dtype=np.int64)
    candidates = next(exact_fill.match_exact_fills(histogram, max_len,
                                                   matchings=(matching,)))
    sizes = [exact_fill._residual_size(c.residual) for c in candidates]
    assert sizes == sorted(sizes)
    for candidate in candidates:
        rows = candidate.rows
        assert rows.shape[1] == 4
        assert (rows.sum(axis=1) == max_len).all()
        assert ((rows > 0).sum(axis=1) >= 1).all()
        placed = np.bincount(rows.ravel(), minlength=max_len + 1)[1:]
        np.testing.assert_array_equal(placed + candidate.residual, histogram)
        assert sum(c for _, c in candidate.strategy_counts()) == len(rows)


def test_matching_is_deterministic_for_a_seed():
    histogram = _long_context(512, 20_000)
    matching = exact_fill.MATCHINGS[1]
    first = next(exact_fill.match_exact_fills(histogram, 512, matchings=(matching,),
                                              seed=3))[0]
    again = next(exact_fill.match_exact_fills(histogram, 512, matchings=(matching,),
                                              seed=3))[0]
    np.testing.assert_array_equal(first.rows, again.rows)
    np.testing.assert_array_equal(first.residual, again.residual)


def test_strategy_counts_merge_equal_rows_longest_first():
    rows = np.array([[5, 3, 0, 0], [3, 5, 0, 0], [4, 2, 1, 1], [8, 0, 0, 0]])
    fill = exact_fill.ExactFill(rows=rows, residual=np.zeros(8, np.int64),
                                complement_limit=0)
    assert sorted(fill.strategy_counts()) == [((4, 2, 1, 1), 1), ((5, 3), 2), ((8,), 1)]


def test_eligible_needs_four_per_pack_many_lengths_and_no_other_binding_bound():
    histogram = _long_context(2048, 50_000)
    assert np.count_nonzero(histogram) >= exact_fill.MIN_LENGTHS
    assert exact_fill.eligible(histogram, 2048, 4)
    assert not exact_fill.eligible(histogram, 2048, 3)
    assert not exact_fill.eligible(histogram[:1000], 1000, 4)  # too few lengths
    # At 4096 the count bound (N / 4 packs) is above the token bound.
    long_documents = _long_context(4096, 50_000)
    assert long_documents.sum() / 4 > _token_bound(long_documents, 4096)
    assert not exact_fill.eligible(long_documents, 4096, 4)
    # More than one sequence over S / 2 for each pack the tokens need.
    halves = np.zeros(2048, np.int64)
    halves[1100:2100 - 48] = 1
    assert not exact_fill.eligible(halves, 2048, 4)


@pytest.fixture
def few_lengths_suffice(monkeypatch):
    # Small histograms (fast column generation) take the exact-fill path too.
    monkeypatch.setattr(exact_fill, "MIN_LENGTHS", 1)


def test_optimal_returns_a_certified_exact_fill_plan(few_lengths_suffice):
    histogram = _long_context(256, 50_000)
    plan = pack_histogram(histogram, 256, 4)
    token_bound = _token_bound(histogram, 256)
    # Certified by the quick bound, which counts the rows that sequences of
    # almost 256 tokens waste: here a little above the token bound.
    quick_bound = optimal.simple_bound(histogram, 256, 4)
    assert plan.lp_lower_bound == pytest.approx(quick_bound, abs=1e-9)
    assert quick_bound > token_bound
    assert plan.num_packs <= quick_bound * (1 + 5e-4)
    # Column generation would have found fewer packs here: the shortcut is a
    # different plan, within the gap. (Column generation's bound is at least
    # the token bound; it stops within 0.01 % of the LP, here at that bound.)
    slow = pack_histogram(histogram, 256, 4, certified_gap=None)
    assert slow.lp_lower_bound >= token_bound
    assert slow.num_packs < plan.num_packs
    assert plan.num_packs <= slow.lp_lower_bound * (1 + 5e-4)


def test_a_gap_of_zero_takes_only_a_plan_proven_optimal(few_lengths_suffice):
    # Here the rows come within the gap but not to the bound: column
    # generation's plan is returned, unchanged.
    histogram = _long_context(256, 20_000)
    loose = pack_histogram(histogram, 256, 4)
    assert loose.num_packs > math.ceil(_token_bound(histogram, 256))
    strict = pack_histogram(histogram, 256, 4, certified_gap=0)
    slow = pack_histogram(histogram, 256, 4, certified_gap=None)
    assert (strict.strategies, strict.counts) == (slow.strategies, slow.counts)
    assert strict.lp_lower_bound == slow.lp_lower_bound
    # Here they reach it, and are taken.
    histogram = _long_context(512, 20_000)
    optimal_rows = pack_histogram(histogram, 512, 4, certified_gap=0)
    quick_bound = optimal.simple_bound(histogram, 512, 4)
    assert optimal_rows.num_packs == math.ceil(_token_bound(histogram, 512))
    assert optimal_rows.num_packs == math.ceil(quick_bound)
    assert optimal_rows.lp_lower_bound == quick_bound


@pytest.mark.parametrize("gap", [-0.1, "0.01", float("nan")])
def test_a_bad_certified_gap_is_named(gap):
    with pytest.raises(ValueError, match=r"certified_gap must be a number >= 0 or None"):
        pack_histogram([1, 2, 3, 4], 4, 4, certified_gap=gap)


def test_certified_gap_is_an_option_of_optimal_only():
    with pytest.raises(ValueError, match="takes no option"):
        pack_histogram([1, 2, 3, 4], 4, 4, algorithm="spfhp", certified_gap=0.1)


def test_matching_gives_up_where_rows_cannot_be_filled(few_lengths_suffice):
    # Lengths 0.4 S to 0.45 S: two fill at most 0.9 S, three overflow, so no
    # row can be full; the shortcut gives up and column generation packs.
    histogram = np.zeros(1000, np.int64)
    histogram[399:449] = 20
    assert list(exact_fill.match_exact_fills(histogram, 1000)) == [[], []]
    plan = pack_histogram(histogram, 1000, 4)
    slow = pack_histogram(histogram, 1000, 4, certified_gap=None)
    assert (plan.strategies, plan.counts, plan.lp_lower_bound) == (
        slow.strategies, slow.counts, slow.lp_lower_bound)


def test_the_long_context_case_is_exact_fill_rows_within_the_gap():
    # The long-context benchmark's case at a tenth of its size: column
    # generation takes about a minute here, exact-fill rows well under a
    # second.
    histogram = _long_context(2048, 100_000)
    plan = pack_histogram(histogram, 2048, 4)
    quick_bound = optimal.simple_bound(histogram, 2048, 4)
    assert quick_bound >= _token_bound(histogram, 2048)
    assert plan.lp_lower_bound == quick_bound  # certified against it
    assert plan.num_packs <= quick_bound * (1 + 5e-4)
    assert plan.num_sequences == histogram.sum()
