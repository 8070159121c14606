"""pack_histogram: literal cases, exactness properties, references, errors."""

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import ALGORITHMS, pack_histogram, pack_lengths

# Max length 8, lengths 6 5 4 3 3 2 2 1 (26 tokens: at least 4 packs).
SMALL_HISTOGRAM = [1, 2, 2, 1, 1, 1, 0, 0]


def _contents(plan):
    return dict(zip(plan.strategies, plan.counts))


@pytest.mark.parametrize("algorithm, expected", [
    ("none", {(1,): 1, (2,): 2, (3,): 2, (4,): 1, (5,): 1, (6,): 1}),
    # Best fit, ties to the pack holding fewest: 3 -> (5), 3 -> (4), 2 -> (6),
    # the second 2 opens a pack, 1 -> (4, 3) (room 1).
    ("bfd", {(6, 2): 1, (5, 3): 1, (4, 3, 1): 1, (2,): 1}),
    # Worst fit: 3 -> (4) then (5); 2 -> (6); the other 2 opens a pack that
    # takes the 1 (room 6 beats room 1).
    ("spfhp", {(6, 2): 1, (5, 3): 1, (4, 3): 1, (2, 1): 1}),
    ("lpfhp", {(6, 2): 1, (5, 3): 1, (4, 3, 1): 1, (2,): 1}),
])
def test_small_histogram_literal_plans(algorithm, expected):
    plan = pack_histogram(SMALL_HISTOGRAM, 8, 3, algorithm)
    assert _contents(plan) == expected
    assert plan.algorithm == algorithm


def test_greedy_packs_in_dataset_order():
    # Next fit, cap 3: [6] [5] [4 3] [3 2 2] [1].
    plan = pack_lengths([6, 5, 4, 3, 3, 2, 2, 1], 8, 3, "greedy")
    assert _contents(plan) == {(6,): 1, (5,): 1, (4, 3): 1, (3, 2, 2): 1, (1,): 1}
    # Same sequences, another order: [1 2 2] [3 3] [4] [5] [6].
    plan = pack_lengths([1, 2, 2, 3, 3, 4, 5, 6], 8, 3, "greedy")
    assert _contents(plan) == {(2, 2, 1): 1, (3, 3): 1, (4,): 1, (5,): 1, (6,): 1}


def test_optimal_reaches_the_bound_and_reports_it():
    plan = pack_histogram(SMALL_HISTOGRAM, 8, 3)
    assert plan.algorithm == "optimal"
    assert plan.num_packs == 4
    assert plan.token_lower_bound == 4
    # The LP optimum is 3.25; the bound is computed from the duals (h.y over
    # the best pattern's value), which may round a hair below it.
    assert plan.lp_lower_bound == pytest.approx(3.25, abs=1e-9)
    assert plan.lp_lower_bound_packs == 4


def test_nnlshp_strips_padding_sequences():
    # Two sequences of length 4 fill a row of 8 exactly; a single 3 needs a
    # pack of its own. No plan may list lengths the data does not have.
    plan = pack_histogram([0, 0, 1, 2, 0, 0, 0, 0], 8, 3, "nnlshp")
    assert _contents(plan) == {(4, 4): 1, (3,): 1}


# ---------------------------------------------------------------- properties
def _histograms(max_length=24, max_count=6):
    return st.integers(1, max_length).flatmap(lambda length: st.tuples(
        st.just(length),
        st.lists(st.integers(0, max_count) | st.just(0), min_size=length,
                 max_size=length)))


@settings(max_examples=60, deadline=None)
@given(case=_histograms(), cap=st.integers(1, 5), algorithm=st.sampled_from(ALGORITHMS))
def test_every_algorithm_packs_every_sequence_exactly_once(case, cap, algorithm):
    max_len, histogram = case
    if algorithm == "nnlshp":
        cap = min(cap, 3)
    plan = pack_histogram(histogram, max_len, cap, algorithm)
    # PackingPlan checks this on construction; check it here independently.
    packed = np.zeros(max_len, dtype=np.int64)
    for strategy, count in zip(plan.strategies, plan.counts):
        assert count > 0
        assert 1 <= len(strategy) <= cap
        assert sum(strategy) <= max_len
        for length in strategy:
            packed[length - 1] += count
    np.testing.assert_array_equal(packed, histogram)
    assert plan.num_sequences == sum(histogram)
    assert plan.num_packs >= plan.token_lower_bound
    if algorithm == "none":
        assert plan.num_packs == sum(histogram)


def _best_fit_decreasing_one_by_one(histogram, max_len, cap):
    """Textbook BFD over single sequences; ties go to the pack holding fewest."""
    packs = []  # [room, sequences]
    for length in np.repeat(np.arange(1, max_len + 1), histogram)[::-1]:
        fitting = [p for p in packs if p[0] >= length and p[1] < cap]
        if fitting:
            best = min(fitting, key=lambda p: (p[0], p[1]))
            best[0] -= length
            best[1] += 1
        else:
            packs.append([max_len - length, 1])
    return len(packs)


@settings(max_examples=80, deadline=None)
@given(case=_histograms(max_length=40, max_count=8), cap=st.integers(1, 6))
def test_bfd_is_best_fit_decreasing(case, cap):
    max_len, histogram = case
    plan = pack_histogram(histogram, max_len, cap, "bfd")
    assert plan.num_packs == _best_fit_decreasing_one_by_one(histogram, max_len, cap)
    # Without a cap, LPFHP is the same algorithm (its ties cannot matter).
    assert pack_histogram(histogram, max_len, None, "lpfhp").num_packs == \
        _best_fit_decreasing_one_by_one(histogram, max_len, max_len)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 16), max_size=60), cap=st.integers(1, 4))
def test_greedy_is_next_fit_in_order(lengths, cap):
    expected, room, depth = 0, 0, cap
    for length in lengths:
        if length > room or depth == cap:
            expected, room, depth = expected + 1, 16, 0
        room, depth = room - length, depth + 1
    assert pack_lengths(lengths, 16, cap, "greedy").num_packs == expected


def _exact_optimum(histogram, max_len, cap):
    """Fewest packs, by an integer program over every possible pack."""
    items = [length for length in range(1, max_len + 1) if histogram[length - 1]]
    patterns = []

    def extend(first, room, depth, pattern):
        for i in range(first, len(items)):
            if items[i] <= room:
                patterns.append(pattern + [items[i]])
                if depth + 1 < cap:
                    extend(i, room - items[i], depth + 1, pattern + [items[i]])

    extend(0, max_len, 0, [])
    matrix = np.array([[p.count(length) for p in patterns] for length in items])
    demand = [histogram[length - 1] for length in items]
    result = scipy.optimize.milp(
        np.ones(len(patterns)), integrality=np.ones(len(patterns)),
        constraints=scipy.optimize.LinearConstraint(matrix, lb=demand))
    return round(result.fun)


@settings(max_examples=60, deadline=None)
@given(case=_histograms(max_length=14, max_count=6), cap=st.integers(1, 4))
def test_optimal_is_optimal_on_small_histograms(case, cap):
    max_len, histogram = case
    if sum(histogram) == 0:
        return
    plan = pack_histogram(histogram, max_len, cap, "optimal")
    optimum = _exact_optimum(histogram, max_len, cap)
    assert plan.lp_lower_bound <= optimum + 1e-6  # the bound is a bound
    assert plan.num_packs == optimum


@settings(max_examples=30, deadline=None)
@given(case=_histograms(max_length=64, max_count=40), cap=st.integers(2, 4))
def test_optimal_beats_the_heuristics(case, cap):
    max_len, histogram = case
    optimal = pack_histogram(histogram, max_len, cap, "optimal")
    assert optimal.lp_lower_bound_packs <= optimal.num_packs
    assert optimal.num_packs <= optimal.lp_lower_bound_packs + 1
    for algorithm in ("bfd", "spfhp", "lpfhp", "nnlshp"):
        if algorithm == "nnlshp" and cap > 3:
            continue
        assert optimal.num_packs <= pack_histogram(histogram, max_len, cap,
                                                   algorithm).num_packs


def test_empty_histogram_gives_an_empty_plan():
    for algorithm in ALGORITHMS:
        plan = pack_histogram([0, 0, 0], 3, 2, algorithm)
        assert plan.num_packs == 0 and plan.strategies == ()


def test_a_shorter_histogram_is_padded_with_empty_bins():
    plan = pack_histogram([0, 2], 8, 2, "lpfhp")
    assert plan.histogram == (0, 2, 0, 0, 0, 0, 0, 0)
    assert plan.strategies == ((2, 2),)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, message", [
    (dict(histogram=[1, -2, 0]), "negative count -2 for length 2"),
    (dict(histogram=[1, 0, 0, 5]), "5 sequences longer than max_sequence_length=3"),
    (dict(histogram=[1.5, 0, 0]), "whole numbers"),
    (dict(histogram=[[1, 0, 0]]), "must be 1-D"),
    (dict(max_sequences_per_pack=0), "max_sequences_per_pack must be an integer >= 1"),
    (dict(max_sequence_length=0), "max_sequence_length must be a positive integer"),
    (dict(algorithm="first_fit"), "unknown packing algorithm 'first_fit'"),
    (dict(algorithm="spfhp", seed=3), "takes no option"),
    (dict(algorithm="optimal", lengths=[1]), "takes certified_gap, integer_node_limit, max_iterations"),
])
def test_bad_input_is_rejected_with_a_clear_message(kwargs, message):
    args = dict(histogram=[1, 1, 1], max_sequence_length=3,
                max_sequences_per_pack=2, algorithm="spfhp")
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        pack_histogram(**args)


def test_greedy_rejects_lengths_that_do_not_match_the_histogram():
    with pytest.raises(ValueError, match="histogram of `lengths` differs"):
        pack_histogram([1, 1, 1], 3, 2, "greedy", lengths=[1, 2, 2])
    with pytest.raises(ValueError, match="sequence 1 has length 9"):
        pack_lengths([1, 9, 2], 3, 2, "greedy")


def test_nnlshp_refuses_caps_it_cannot_enumerate():
    with pytest.raises(ValueError, match="nnlshp enumerates every exact-fill strategy"):
        pack_histogram(np.ones(512, dtype=int), 512, 6, "nnlshp")
