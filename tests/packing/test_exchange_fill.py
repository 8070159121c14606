"""Exchange fill: every sequence once, rows within S and the cap, kept rows
full through every exchange, and the certified path of `optimal`."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import (
    api,
    exact_fill,
    exchange_fill,
    heuristics,
    optimal,
    pack_histogram,
)


def _lognormal(max_len, num_sequences, median_fraction=1 / 6, sigma=1.0, seed=0):
    lengths = np.random.default_rng(seed).lognormal(np.log(max_len * median_fraction),
                                                    sigma, num_sequences)
    lengths = np.clip(np.rint(lengths), 1, max_len).astype(np.int64)
    return np.bincount(lengths - 1, minlength=max_len)


def _token_bound(histogram, max_len):
    return float(histogram @ np.arange(1, max_len + 1)) / max_len


def _bfd_packs(histogram, max_len, cap):
    return sum(c for _, c in heuristics.pack_fit_decreasing(histogram, max_len, cap,
                                                            fit="best"))


def _assert_valid(rows, histogram, max_len, cap):
    rows = np.asarray(rows)
    assert rows.shape[1] == cap
    assert (rows.sum(axis=1) <= max_len).all()
    assert (rows.sum(axis=1) > 0).all()
    np.testing.assert_array_equal(
        np.bincount(rows[rows > 0], minlength=max_len + 1)[1:], histogram)


def test_match_equal_pairs_equal_values_as_often_as_both_have_them():
    left = np.array([5, 3, 5, 9, 3, 5])
    right = np.array([3, 5, 5, 7, 3, 3])
    i, j = exchange_fill._match_equal(left, right)
    np.testing.assert_array_equal(left[i], right[j])
    # 3: two on the left, three on the right; 5: three and two; 7 and 9: none.
    assert sorted(left[i].tolist()) == [3, 3, 5, 5]
    assert len(set(i.tolist())) == len(i) and len(set(j.tolist())) == len(j)
    # The first of each value, in index order, are the ones matched.
    assert sorted(i.tolist()) == [0, 1, 2, 4] and sorted(j.tolist()) == [0, 1, 2, 4]


@pytest.mark.parametrize("give,take,directed", [
    (2, 1, False), (3, 1, False), (1, 2, False), (2, 2, False), (4, 2, False),
    (3, 3, False), (1, 2, True), (2, 3, True)])
def test_an_exchange_keeps_every_row_full_within_the_cap_and_every_sequence(
        give, take, directed):
    max_len, cap = 64, 6
    rng = np.random.default_rng(give * 10 + take)
    # Full rows of 2 to 4 sequences, and a pool of short sequences.
    kept = []
    while len(kept) < 300:
        parts = np.sort(rng.choice(np.arange(1, max_len), rng.integers(1, 4),
                                   replace=False))
        row = np.diff(np.concatenate([[0], parts, [max_len]]))
        kept.append(np.pad(np.sort(row)[::-1], (0, cap - row.size)))
    kept = np.array(kept, dtype=np.int32)
    pool = rng.integers(1, 24, 400).astype(np.int32)
    before = np.bincount(np.concatenate([kept[kept > 0], pool]), minlength=max_len + 1)
    rows_before = kept.copy()
    held = np.count_nonzero(kept, axis=1)
    # Directed: the first sequence taken from a row has a wanted length.
    wanted = np.isin(np.arange(max_len + 1), [7, 11, 19]) if directed else None
    new_pool = exchange_fill._exchange(kept, held, pool, give, take, rng, wanted)
    np.testing.assert_array_equal(held, np.count_nonzero(kept, axis=1))
    assert (kept.sum(axis=1) == max_len).all()
    assert ((kept > 0).sum(axis=1) <= cap).all()
    # Longest first, padding last.
    assert (np.diff(kept, axis=1) <= 0).all()
    np.testing.assert_array_equal(
        np.bincount(np.concatenate([kept[kept > 0], new_pool]), minlength=max_len + 1),
        before)
    changed = (kept != rows_before).any(axis=1)
    assert changed.any()
    # A changed row gained `give` sequences and lost `take`.
    np.testing.assert_array_equal((kept[changed] > 0).sum(axis=1),
                                  (rows_before[changed] > 0).sum(axis=1) + give - take)
    assert new_pool.size == pool.size + changed.sum() * (take - give)
    if directed:
        # Each changed row gave up a sequence of a wanted length.
        lost = [np.bincount(before_row[before_row > 0], minlength=max_len + 1)
                - np.bincount(after_row[after_row > 0], minlength=max_len + 1)
                for before_row, after_row in zip(rows_before[changed], kept[changed])]
        assert all((np.maximum(row_lost, 0)[wanted] > 0).any() for row_lost in lost)


def test_exchange_fill_repairs_best_fit_decreasing_to_the_token_bound():
    # Log-normal lengths (median S / 6) at 8 per pack: best-fit decreasing ends
    # with rows of 8 short sequences, 7 % above the token bound. (On a few
    # thousand sequences the last rounds' pools are too small to match, and
    # exchange fill stalls a few packs above it.)
    max_len, cap = 256, 8
    histogram = _lognormal(max_len, 100_000)
    token_bound = _token_bound(histogram, max_len)
    bfd = _bfd_packs(histogram, max_len, cap)
    assert bfd > 1.05 * token_bound
    target = math.floor(token_bound * (1 + 5e-4))
    fill = exchange_fill.exchange_fill(histogram, max_len, cap, target_packs=target)
    _assert_valid(fill.rows, histogram, max_len, cap)
    assert fill.num_packs <= target
    assert fill.rounds <= 10
    assert sum(c for _, c in fill.strategy_counts()) == fill.num_packs


def test_the_callers_best_fit_plan_is_the_first_round():
    histogram = _lognormal(256, 20_000)
    first_plan = heuristics.pack_fit_decreasing(histogram, 256, 8, fit="best")
    given = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0,
                                        first_plan=first_plan)
    made = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0)
    np.testing.assert_array_equal(given.rows, made.rows)
    # A different first plan (worst fit) is taken as it is: the first round differs.
    worst = heuristics.pack_fit_decreasing(histogram, 256, 8, fit="worst")
    reported = []
    exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0, first_plan=worst,
                                report=reported.append)
    assert reported[0] == sum(c for _, c in worst)


def test_exchange_fill_is_deterministic_for_a_seed():
    histogram = _lognormal(256, 5_000)
    runs = [exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0, seed=seed)
            for seed in (3, 3, 4)]
    np.testing.assert_array_equal(runs[0].rows, runs[1].rows)
    assert runs[0].rounds == runs[1].rounds


def test_a_passed_deadline_stops_after_the_first_round():
    histogram = _lognormal(256, 5_000)
    passed = optimal.Deadline(at=-1.0)
    assert passed.passed()
    reported = []
    fill = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0,
                                       deadline=passed, report=reported.append)
    assert fill.rounds == 1 and fill.stopped
    assert reported == [fill.num_packs] == [_bfd_packs(histogram, 256, 8)]


def _fill_counting_exchanges(monkeypatch, histogram, deadline):
    """Exchange fill of `histogram` (S = 256, cap 8) under `deadline`, and the
    (give, take) of each exchange it made."""
    exchanges = []
    original = exchange_fill._exchange
    monkeypatch.setattr(exchange_fill, "_exchange",
                        lambda *args: exchanges.append(args[3:5]) or original(*args))
    fill = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0, deadline=deadline)
    return fill, exchanges


def test_a_deadline_that_passes_within_a_round_stops_before_the_next_exchange(
        monkeypatch):
    class PassesAtThirdReading:
        readings = 0

        def passed(self):
            self.readings += 1
            return self.readings >= 3

        def left(self):
            return math.inf

    histogram = _lognormal(256, 5_000)
    fill, exchanges = _fill_counting_exchanges(monkeypatch, histogram,
                                               PassesAtThirdReading())
    # Read after the first round's best-fit decreasing, then before each
    # exchange: one exchange ran.
    assert fill.rounds == 1 and len(exchanges) == 1 and fill.stopped
    assert fill.num_packs == _bfd_packs(histogram, 256, 8)
    _assert_valid(fill.rows, histogram, 256, 8)


def test_no_exchange_starts_that_would_end_past_the_deadline(monkeypatch):
    class NeverPassedNoTimeLeft:
        def passed(self):
            return False

        def left(self):
            return 0.0

    histogram = _lognormal(256, 5_000)
    fill, exchanges = _fill_counting_exchanges(monkeypatch, histogram,
                                               NeverPassedNoTimeLeft())
    # The first exchange has no time of a last one to go by; after it, no
    # time left is less than the time it took.
    assert fill.rounds == 1 and len(exchanges) == 1 and fill.stopped
    _assert_valid(fill.rows, histogram, 256, 8)
    unhurried = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0)
    assert not unhurried.stopped and unhurried.rounds > 1


def test_stalled_exchanges_stop_after_patience_rounds():
    # Lengths 0.4 S to 0.45 S: no row can be full, so no round improves on the
    # first (nothing is ever kept, and nothing can be exchanged).
    histogram = np.zeros(1000, np.int64)
    histogram[399:449] = 20
    fill = exchange_fill.exchange_fill(histogram, 1000, 4, target_packs=0)
    assert fill.rounds == 1 + exchange_fill.PATIENCE
    assert fill.num_packs == _bfd_packs(histogram, 1000, 4)


def test_slow_progress_counts_as_a_stall(monkeypatch):
    # With the bar at 'every round at most a millionth of the excess', the
    # rounds after the first stall, however much they improve.
    histogram = _lognormal(256, 100_000)
    monkeypatch.setattr(exchange_fill, "PROGRESS", 1e-6)
    fill = exchange_fill.exchange_fill(histogram, 256, 8, target_packs=0)
    assert fill.rounds == 1 + exchange_fill.PATIENCE
    assert fill.num_packs < _bfd_packs(histogram, 256, 8)


@settings(max_examples=30, deadline=None)
@given(max_len=st.sampled_from([32, 100, 512]), cap=st.integers(2, 16),
       num_sequences=st.integers(1, 3000), median=st.sampled_from([1 / 32, 1 / 6, 1 / 3]),
       seed=st.integers(0, 2**32 - 1))
def test_any_histogram_gets_a_plan_of_every_sequence_no_worse_than_bfd(
        max_len, cap, num_sequences, median, seed):
    histogram = _lognormal(max_len, num_sequences, median, seed=seed)
    fill = exchange_fill.exchange_fill(histogram, max_len, cap, target_packs=0, seed=seed)
    _assert_valid(fill.rows, histogram, max_len, cap)
    assert fill.num_packs <= _bfd_packs(histogram, max_len, cap)
    assert fill.num_packs >= math.ceil(_token_bound(histogram, max_len) - 1e-9)


@pytest.fixture
def few_lengths_suffice(monkeypatch):
    # Histograms of a few hundred lengths (fast column generation) take the
    # certified shortcuts too.
    monkeypatch.setattr(exact_fill, "MIN_LENGTHS", 1)


def test_optimal_returns_the_certified_exchange_fill_plan(few_lengths_suffice):
    max_len, cap = 512, 8
    histogram = _lognormal(max_len, 200_000)
    token_bound = _token_bound(histogram, max_len)
    phases = []
    plan = pack_histogram(histogram, max_len, cap,
                          progress=lambda phase, packs, bound: phases.append(phase))
    quick_bound = optimal.simple_bound(histogram, max_len, cap)
    assert quick_bound >= token_bound
    assert plan.lp_lower_bound == quick_bound  # certified against it
    assert plan.num_packs <= quick_bound * (1 + 5e-4)
    assert plan.num_sequences == histogram.sum()
    assert "exchange fill" in phases
    assert not any(phase.startswith(("LP", "rounding", "integer master")) for phase in phases)
    # Without the certificate, column generation packs it (not worse than the gap).
    slow = pack_histogram(histogram, max_len, cap, certified_gap=None)
    assert slow.lp_lower_bound >= token_bound - 1e-6
    assert plan.num_packs <= slow.lp_lower_bound * (1 + 5e-4)


def test_where_the_count_bound_binds_column_generation_packs(few_lengths_suffice):
    # Log-normal lengths of median S / 32 at 4 per pack: the count bound
    # (N / 4) is far above the token bound, and the class bound, no higher,
    # leaves it in reach. Rows filled to the last token are not: the
    # shortcuts are skipped, and column generation packs.
    histogram = _lognormal(512, 20_000, median_fraction=1 / 32, sigma=1.5)
    fill_bound, _ = optimal.long_sequence_bound(histogram, 512)
    assert optimal.class_bound(histogram, 512, 4) == 5_000 > 2 * fill_bound
    phases = []
    plan = pack_histogram(histogram, 512, 4,
                          progress=lambda phase, packs, bound: phases.append(phase))
    assert "exchange fill" not in phases
    assert any(phase.startswith("LP") for phase in phases)
    assert plan.num_packs <= plan.lp_lower_bound_packs + 2


def test_few_lengths_go_to_column_generation():
    # The same histogram with its 512 lengths: column generation, no shortcut.
    histogram = _lognormal(512, 200_000)
    assert np.count_nonzero(histogram) < exact_fill.MIN_LENGTHS
    phases = []
    pack_histogram(histogram, 512, 8, time_limit=5,
                   progress=lambda phase, packs, bound: phases.append(phase))
    assert "exchange fill" not in phases
    assert any(phase.startswith("LP") for phase in phases)


def test_rows_of_about_two_sequences_skip_exchange_fill(few_lengths_suffice, monkeypatch):
    # Median 0.4 S: full rows would hold 2.4 sequences on average, which
    # column generation packs in a few rounds.
    histogram = _lognormal(512, 20_000, median_fraction=0.4, sigma=0.3)
    assert histogram.sum() <= api.EXCHANGE_FILL_SEQUENCES_PER_ROW * _token_bound(histogram, 512)

    def phases():
        seen = []
        pack_histogram(histogram, 512, 4, progress=lambda phase, packs, bound: seen.append(phase))
        return seen

    assert "exchange fill" not in phases()
    # The token bound is within reach here: with a lower bar, exchange fill runs.
    monkeypatch.setattr(api, "EXCHANGE_FILL_SEQUENCES_PER_ROW", 2.0)
    assert "exchange fill" in phases()


def test_a_best_fit_plan_within_the_gap_is_returned_as_it_is(few_lengths_suffice):
    # Two lengths that fill a row exactly, 4 per pack: best-fit decreasing is
    # already at the token bound, and nothing else runs.
    histogram = np.zeros(100, np.int64)
    histogram[[24, 49]] = [400, 200]  # lengths 25 and 50: 50 + 25 + 25 = 100
    phases = []
    plan = pack_histogram(histogram, 100, 4,
                          progress=lambda phase, packs, bound: phases.append(phase))
    assert plan.num_packs == 200 == math.ceil(_token_bound(histogram, 100))
    assert plan.lp_lower_bound == pytest.approx(200.0)
    assert plan.proven_optimal
    assert phases == ["best-fit decreasing"]


def test_rows_of_sequences_near_s_are_closed_with_the_short_ones_first(monkeypatch):
    # Log-normal lengths of median S / 3: sequences within a few tokens of S
    # outnumber those short enough to complete them, so the long-sequence
    # bound is above the token bound. Its plans give the short sequences to
    # the long ones' rows and fill every other row exactly.
    max_len, cap = 512, 4
    histogram = _lognormal(max_len, 100_000, median_fraction=1 / 3, sigma=0.5)
    bound, threshold = optimal.long_sequence_bound(histogram, max_len)
    assert bound > _token_bound(histogram, max_len) + 10 and threshold > 1
    target = math.floor(bound * (1 + 5e-4))
    fill = exchange_fill.exchange_fill(histogram, max_len, cap, target_packs=target)
    _assert_valid(fill.rows, histogram, max_len, cap)
    assert fill.num_packs <= target
    longest = fill.rows.max(axis=1)
    shortest = np.where(fill.rows > 0, fill.rows, max_len).min(axis=1)
    near_s = longest > max_len - threshold
    # Every sequence shorter than the threshold is in such a row.
    assert not ((shortest < threshold) & ~near_s).any()
    # Without closing those rows first, best-fit decreasing gives the short
    # sequences to other rows' last gaps, and the exchanges stall above it.
    monkeypatch.setattr(exchange_fill, "_close_longest",
                        lambda pool, *_: (np.zeros((0, cap), np.int32), pool))
    unclosed = exchange_fill.exchange_fill(histogram, max_len, cap, target_packs=target)
    assert unclosed.num_packs > target
