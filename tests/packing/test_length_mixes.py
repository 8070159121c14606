"""The optimal plan on length mixes drawn at random: the plan, the bound and
the time limit.

Mixes come from the families of the benchmark's 'mixes' section (log-normal
of several medians and spreads, short and long, uniform, Zipf-like, spikes
at S), at S from 512 to 32,768 and caps from 2 to 16, a few hundred
sequences each so that the tests stay fast; the million-sequence cases and
their times against best-fit decreasing are in BENCHMARKS.md
(``benchmarks/packing_benchmark.py --sections=mixes``). Time is counted, not
measured: `TickClock` replaces the search's clock, each reading one tick
later, so a time limit is a number of checks and every run is the same on a
busy machine as on an idle one.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import heuristics, optimal, pack_histogram

FAMILIES = ("lognormal", "short-long", "uniform", "zipf", "spikes")
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


def draw_lengths(family: str, max_len: int, num_sequences: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Lengths of one mix of `family`, its parameters drawn too, cut to 1..S."""
    if family == "lognormal":
        median = max_len * rng.choice([1 / 32, 1 / 12, 1 / 6, 1 / 3])
        lengths = rng.lognormal(np.log(median), rng.choice([0.5, 1.0, 1.5]), num_sequences)
    elif family == "short-long":
        short = rng.binomial(num_sequences, rng.uniform(0.5, 0.9))
        lengths = np.concatenate([rng.lognormal(np.log(max_len / 40), 0.8, short),
                                  rng.lognormal(np.log(max_len / 2), 0.5,
                                                num_sequences - short)])
    elif family == "uniform":
        low = rng.integers(1, max_len // 4 + 1)
        lengths = rng.uniform(low, rng.integers(max_len // 4, max_len + 1), num_sequences)
    elif family == "zipf":
        lengths = (rng.zipf(rng.choice([1.2, 1.5, 2.0]), num_sequences)
                   * rng.choice([1, max(1, max_len // 512), max(1, max_len // 64)]))
    else:  # spikes at S
        spikes = rng.binomial(num_sequences, rng.uniform(0.05, 0.5))
        lengths = np.concatenate([np.full(spikes, max_len),
                                  rng.lognormal(np.log(max_len / 8), 1.0,
                                                num_sequences - spikes)])
    return np.clip(np.rint(lengths), 1, max_len).astype(np.int64)


def mix_histogram(family, max_len, num_sequences, seed):
    lengths = draw_lengths(family, max_len, num_sequences, np.random.default_rng(seed))
    return np.bincount(lengths - 1, minlength=max_len)


class TickClock:
    """A clock that reads one tick (a 'second') later each time it is read."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def trivial_bound(histogram, max_len, cap):
    """max(total tokens / S, sequences / D): the bound no duals are needed for."""
    tokens = histogram @ np.arange(1, max_len + 1) / max_len
    return max(tokens, histogram.sum() / cap)


_mixes = st.tuples(st.sampled_from(FAMILIES), st.sampled_from(LENGTHS),
                   st.integers(2, 16), st.integers(20, 400), st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None)
@given(mix=_mixes)
def test_any_mix_gets_an_exact_plan_near_a_valid_bound(mix):
    family, max_len, cap, num_sequences, seed = mix
    histogram = mix_histogram(family, max_len, num_sequences, seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optimal, "clock", TickClock())
        # 400 checks: a few hundred rounds of column generation at most.
        plan = pack_histogram(histogram, max_len, cap, time_limit=400)
    # The plan: PackingPlan checked every sequence is packed once, within S
    # and the cap; never worse than its best-fit decreasing seed.
    assert plan.num_sequences == num_sequences
    seed_packs = sum(count for _, count in heuristics.pack_fit_decreasing(
        histogram, max_len, cap, fit="best"))
    assert plan.num_packs <= seed_packs
    # The bound: at least the token and count bounds, at most the plan.
    assert trivial_bound(histogram, max_len, cap) - 1e-6 <= plan.lp_lower_bound
    assert plan.lp_lower_bound_packs <= plan.num_packs
    assert plan.certified_gap == plan.num_packs / plan.lp_lower_bound_packs - 1
    assert plan.proven_optimal == (plan.num_packs == plan.lp_lower_bound_packs)
    if not plan.time_limit_reached:
        # Within 0.05 % of the bound, or (a few hundred sequences: a pack is
        # several per cent) within 2 packs of it rounded up.
        assert plan.num_packs <= max(plan.lp_lower_bound * (1 + 5e-4),
                                     plan.lp_lower_bound_packs + 2)


_small_mixes = st.tuples(st.sampled_from(FAMILIES), st.sampled_from([64, 128, 256, 512]),
                         st.integers(2, 6), st.integers(10, 150),
                         st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None)
@given(mix=_small_mixes)
def test_the_bound_never_exceeds_the_lp_optimum(mix):
    family, max_len, cap, num_sequences, seed = mix
    histogram = mix_histogram(family, max_len, num_sequences, seed)
    plan = pack_histogram(histogram, max_len, cap)
    lengths = np.flatnonzero(histogram) + 1
    width = int(min(cap, max_len // lengths[0]))
    if width == 1:
        lp_optimum = histogram.sum()
    else:
        # Column generation to convergence (no tolerance): the LP optimum.
        problem = optimal._Problem(lengths, histogram[lengths - 1], max_len, width)
        lp_optimum = optimal._column_generation(
            problem, np.zeros((0, width), np.int32), optimal._Search(),
            tolerance=None, phase="LP").bound
    assert plan.lp_lower_bound <= lp_optimum + 1e-6


@settings(max_examples=40, deadline=None)
@given(mix=_small_mixes)
def test_the_class_bound_never_exceeds_the_lp_optimum(mix):
    family, max_len, cap, num_sequences, seed = mix
    histogram = mix_histogram(family, max_len, num_sequences, seed)
    lengths = np.flatnonzero(histogram) + 1
    width = int(min(cap, max_len // lengths[0]))
    bound = optimal.class_bound(histogram, max_len, cap)
    assert bound >= trivial_bound(histogram, max_len, cap) - 1e-6
    if width > 1:
        problem = optimal._Problem(lengths, histogram[lengths - 1], max_len, width)
        lp_optimum = optimal._column_generation(
            problem, np.zeros((0, width), np.int32), optimal._Search(),
            tolerance=None, phase="LP").bound
        assert bound <= lp_optimum + 1e-6


def test_the_class_bound_counts_the_shortest_sequences():
    # Zipf-like lengths, 16 per pack: most sequences are shorter than the
    # first class's longest length, so duals from classes at their longest
    # give them nothing, and that bound falls to the token bound (66,739
    # packs); classes at their shortest keep their count.
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.zipf(1.5, 1_000_000), 1, 512)
    histogram = np.bincount(lengths - 1, minlength=512)
    tokens = histogram @ np.arange(1, 513) / 512
    assert optimal.class_bound(histogram, 512, 16) > 1.15 * tokens


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=2, max_size=10, unique=True).map(sorted),
       class_width=st.sampled_from([2, 4, 8]), cap=st.integers(2, 4),
       seed=st.integers(0, 2**32 - 1))
def test_duals_of_classes_below_a_length_are_dual_feasible(lengths, class_width, cap, seed):
    # Any pattern of real lengths is worth at most 1 with each length at the
    # dual of the longest class no longer than it: checked on every pattern.
    capacity = 40
    rng = np.random.default_rng(seed)
    problem = optimal._Problem(np.array(lengths), rng.integers(1, 20, len(lengths)),
                               capacity, cap)
    classes, _ = optimal._classes(problem, class_width)
    lp = optimal._column_generation(classes, np.zeros((0, cap), np.int32),
                                    optimal._Search(), tolerance=0.0, phase="test")
    duals = optimal._duals_below(classes, lp, problem.lengths)
    every = optimal.enumerate_patterns(problem.lengths, capacity, cap, 10**6)
    assert optimal.pattern_values(every, duals).max() <= 1 + 1e-9
    assert problem.demand @ duals <= lp.objective + 1e-6


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=10, unique=True).map(sorted),
       cap=st.integers(2, 5), seed=st.integers(0, 2**32 - 1))
def test_the_quick_duals_are_dual_feasible(lengths, cap, seed):
    # Every pattern of the lengths is worth at most 1, so demand @ duals is
    # a bound; and it is at least the token and count bounds.
    capacity = 40
    rng = np.random.default_rng(seed)
    problem = optimal._Problem(np.array(lengths), rng.integers(1, 20, len(lengths)),
                               capacity, cap)
    duals, bound = optimal._quick_duals(problem)
    every = optimal.enumerate_patterns(problem.lengths, capacity, cap, 10**6)
    assert optimal.pattern_values(every, duals).max() <= 1 + 1e-9
    assert np.all(np.diff(duals) >= 0)
    assert bound == pytest.approx(problem.demand @ duals)
    histogram = np.bincount(problem.lengths - 1, weights=problem.demand, minlength=capacity)
    assert bound >= trivial_bound(histogram, capacity, cap) - 1e-9


def test_the_quick_bound_counts_the_rows_long_sequences_waste():
    # Ten sequences of 95 tokens and only two of 5 to go with them: eight
    # rows keep 5 tokens empty whatever the plan. The token bound (19.6)
    # misses it; the quick bound, with k = 6, counts each 95 as a row.
    histogram = np.zeros(100, np.int64)
    histogram[[94, 4, 49]] = 10, 2, 20
    assert trivial_bound(histogram, 100, 4) == pytest.approx(19.6)
    assert optimal.long_sequence_bound(histogram, 100) == (pytest.approx(20.0), 6)
    assert optimal.simple_bound(histogram, 100, 4) == pytest.approx(20.0)
    plan = pack_histogram(histogram, 100, 4)
    assert plan.num_packs == 20 and plan.proven_optimal


def test_a_plan_of_classes_is_refined_into_real_sequences():
    # Classes at their longest length: (5, 7) holds a 4 and a 6, say.
    item_lengths = np.array([3, 4, 5, 6, 7])
    demand = np.array([1, 1, 1, 2, 1])
    class_lengths, class_of = np.array([5, 7]), np.array([0, 0, 0, 1, 1])
    pairs = optimal._refine([((7, 5), 2), ((7,), 1), ((5,), 1)], class_of, item_lengths,
                            demand, class_lengths)
    packed = sorted(length for strategy, count in pairs for length in strategy * count)
    assert packed == [3, 4, 5, 6, 6, 7]
    assert all(sum(strategy) <= 12 for strategy, _ in pairs)


@pytest.mark.parametrize("family, max_len, cap", [
    ("lognormal", 8192, 4), ("zipf", 2048, 16), ("spikes", 512, 2), ("uniform", 32768, 8)])
def test_a_time_limit_of_zero_returns_the_seed_and_the_trivial_bound(family, max_len, cap):
    histogram = mix_histogram(family, max_len, 3000, seed=1)
    plan = pack_histogram(histogram, max_len, cap, time_limit=0)
    seed = pack_histogram(histogram, max_len, cap, "lpfhp")
    assert plan.time_limit_reached
    assert (plan.strategies, plan.counts) == (seed.strategies, seed.counts)
    assert plan.lp_lower_bound == pytest.approx(trivial_bound(histogram, max_len, cap))
    assert plan.certified_gap == seed.num_packs / plan.lp_lower_bound_packs - 1


@pytest.mark.parametrize("limit", [3, 10, 30, 100])
def test_no_search_starts_after_the_time_limit(monkeypatch, limit):
    # Counted time: every LP solve and every round of pricing starts before
    # the deadline, but for at most one round already under way; the plan
    # is exact and never worse than its seed.
    ticks = TickClock()
    monkeypatch.setattr(optimal, "clock", ticks)
    started = []  # (what, tick) of each solve that ran and each pricing
    solve, price = optimal._Master.solve, optimal._Pricer.price

    def recording_solve(self, deadline=optimal.NO_DEADLINE):
        result = solve(self, deadline)
        if result is not None:
            started.append(("solve", ticks.now))
        return result

    def recording_price(self, values, limit):
        started.append(("price", ticks.now))
        return price(self, values, limit)

    monkeypatch.setattr(optimal._Master, "solve", recording_solve)
    monkeypatch.setattr(optimal._Pricer, "price", recording_price)
    histogram = mix_histogram("lognormal", 2048, 2000, seed=3)
    plan = pack_histogram(histogram, 2048, 8, time_limit=limit)
    deadline = 1 + limit  # the first reading is tick 1
    late = [what for what, tick in started if tick > deadline + 1]
    assert late.count("solve") == 0 and late.count("price") <= 1
    assert plan.time_limit_reached
    seed = pack_histogram(histogram, 2048, 8, "lpfhp")
    assert plan.num_packs <= seed.num_packs
    assert plan.lp_lower_bound <= plan.num_packs


def test_without_a_time_limit_the_search_runs_to_the_end(monkeypatch):
    monkeypatch.setattr(optimal, "clock", TickClock())
    histogram = mix_histogram("lognormal", 2048, 2000, seed=3)
    plan = pack_histogram(histogram, 2048, 8, time_limit=None)
    assert not plan.time_limit_reached
    assert plan.num_packs <= max(plan.lp_lower_bound * (1 + 5e-4),
                                 plan.lp_lower_bound_packs + 2)


def test_progress_reports_phases_and_valid_bounds():
    histogram = mix_histogram("lognormal", 4096, 20_000, seed=5)
    reports = []
    plan = pack_histogram(histogram, 4096, 4,
                          progress=lambda *report: reports.append(report))
    phases = [phase for phase, _, _ in reports]
    assert phases[0] == "best-fit decreasing"
    assert any(phase.startswith("LP") for phase in phases)
    bounds = [bound for _, _, bound in reports if bound is not None]
    assert bounds and max(bounds) <= plan.num_packs
    assert max(bounds) == pytest.approx(plan.lp_lower_bound)
    # Every estimate of the packs is a fractional plan: at least the bound.
    assert all(packs >= bound - 1e-6 for _, packs, bound in reports
               if packs is not None and bound is not None)


@pytest.mark.parametrize("option, value, message", [
    ("time_limit", -1, "time_limit must be a number of seconds >= 0 or None"),
    ("time_limit", "soon", "time_limit must be a number of seconds >= 0 or None"),
    ("progress", 3, "progress must be callable or None"),
])
def test_bad_time_limits_and_progress_fail_clearly(option, value, message):
    with pytest.raises(ValueError, match=message):
        pack_histogram([1, 2, 3], 4, 2, **{option: value})


def test_the_count_bound_regime_is_solved_in_few_rounds():
    # The mix (log-normal, median S / 6, sigma 1, 4 per pack), at a
    # hundredth of its size: column generation over levels of classes, not
    # hundreds of rounds from the seed (counted: rounds reported).
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(np.log(4096 / 6), 1.0, 10_000)), 1, 4096)
    histogram = np.bincount(lengths.astype(np.int64) - 1, minlength=4096)
    rounds = []
    plan = pack_histogram(histogram, 4096, 4,
                          progress=lambda phase, *_: rounds.append(phase))
    lp_rounds = sum(phase.startswith("LP") for phase in rounds)
    assert lp_rounds <= 60
    assert plan.num_packs <= math.ceil(plan.lp_lower_bound * (1 + 5e-4)) + 2
