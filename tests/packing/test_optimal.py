"""The optimal packer's parts against brute force, and long contexts."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import histograms, optimal, pack_histogram


def _all_patterns(lengths, capacity, max_items):
    """Every multiset of at most `max_items` item indices within capacity."""
    found = []
    for size in range(1, max_items + 1):
        for pattern in itertools.combinations_with_replacement(range(len(lengths)), size):
            if sum(lengths[i] for i in pattern) <= capacity:
                found.append(pattern)
    return found


def _is_maximal(pattern, lengths, capacity, max_items):
    total = sum(lengths[i] for i in pattern)
    if len(pattern) < max_items and total + lengths[0] <= capacity:
        return False  # an item could be added
    for position, item in enumerate(pattern):
        if item + 1 < len(lengths) and total - lengths[item] + lengths[item + 1] <= capacity:
            return False  # this item could be lengthened
    return True


_item_sets = st.integers(4, 40).flatmap(lambda capacity: st.tuples(
    st.just(capacity),
    st.lists(st.integers(1, capacity), min_size=1, max_size=12, unique=True).map(sorted),
    st.integers(1, 3)))


@settings(max_examples=150, deadline=None)
@given(case=_item_sets)
def test_maximal_patterns_are_exactly_the_maximal_ones(case):
    capacity, lengths, max_items = case
    table = optimal.maximal_patterns(np.array(lengths), capacity, max_items)
    found = [tuple(int(i) for i in row if i < len(lengths)) for row in table]
    assert len(found) == len(set(found))  # each once
    expected = {p for p in _all_patterns(lengths, capacity, max_items)
                if _is_maximal(p, lengths, capacity, max_items)}
    assert set(found) == expected


@settings(max_examples=100, deadline=None)
@given(case=_item_sets, seed=st.integers(0, 1000))
def test_the_best_pattern_is_maximal_for_increasing_values(case, seed):
    # Why pricing may look only at the table: with non-decreasing values,
    # no pattern beats the best maximal one.
    capacity, lengths, max_items = case
    values = np.sort(np.random.default_rng(seed).random(len(lengths)))
    table = optimal.maximal_patterns(np.array(lengths), capacity, max_items)
    best = max(sum(values[i] for i in p)
               for p in _all_patterns(lengths, capacity, max_items))
    assert optimal.pattern_values(table, values).max() == pytest.approx(best)


@settings(max_examples=150, deadline=None)
@given(case=_item_sets, extra_items=st.integers(0, 3), seed=st.integers(0, 1000),
       table=st.booleans())
def test_pricing_finds_the_best_value_and_maximal_improving_patterns(
        case, extra_items, seed, table):
    # Non-decreasing values with runs of equal ones (as the master's duals
    # have), scaled so that the best pattern is worth more than 1: the best
    # value is exact (a bound needs it), and every pattern offered fits, is
    # worth more than 1 and has no room for one more item.
    capacity, lengths, max_items = case
    max_items += extra_items
    rng = np.random.default_rng(seed)
    values = np.sort(np.round(rng.random(len(lengths)) * 4) / 4)
    patterns = _all_patterns(lengths, capacity, max_items)
    best = max(sum(values[i] for i in p) for p in patterns)
    if best == 0:
        return
    values = values / (0.9 * best)
    with pytest.MonkeyPatch.context() as patch:
        if not table:
            patch.setattr(optimal, "TABLE_ITEMS", 0)  # the dynamic program
        pricer = optimal._Pricer(np.array(lengths), capacity, max_items)
        value, found = pricer.price(values, 50)
    assert value == pytest.approx(1 / 0.9)
    assert len(found)
    for row in found:
        pattern = [int(i) for i in row if i < len(lengths)]
        total = sum(lengths[i] for i in pattern)
        assert 1 <= len(pattern) <= max_items and total <= capacity
        assert sum(values[i] for i in pattern) > 1
        assert len(pattern) == max_items or total + lengths[0] > capacity


@settings(max_examples=200, deadline=None)
@given(demand=st.lists(st.integers(0, 5), min_size=1, max_size=10),
       slots=st.lists(st.integers(0, 5), min_size=10, max_size=10))
def test_unplaced_is_longest_first_into_any_slot_at_least_as_long(demand, slots):
    demand = np.array(demand)
    slots = np.array(slots[:demand.size])
    free, left = 0, demand.copy()
    for item in range(demand.size - 1, -1, -1):  # one item at a time
        free += slots[item]
        placed = min(free, demand[item])
        free -= placed
        left[item] -= placed
    np.testing.assert_array_equal(optimal._unplaced(demand, slots), left)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_filled_packs_hold_the_demand_each_within_a_copy_of_its_pattern(seed):
    rng = np.random.default_rng(seed)
    num_items, width, groups = rng.integers(1, 10), rng.integers(1, 5), rng.integers(1, 7)
    item_lengths = np.sort(rng.choice(np.arange(1, 30), num_items, replace=False))
    patterns = np.sort(rng.integers(0, num_items + 1, (groups, width)), axis=1)
    counts = rng.integers(1, 6, groups)
    slots = np.zeros(num_items + 1, dtype=np.int64)
    np.add.at(slots, patterns, counts[:, None])
    # A demand the slots can hold, longest first, each into a slot at least as long.
    demand, free = np.zeros(num_items, dtype=np.int64), 0
    for item in range(num_items - 1, -1, -1):
        free += slots[item]
        demand[item] = rng.integers(0, free + 1)
        free -= demand[item]
    pairs = optimal._fill_packs(patterns, counts, item_lengths, demand)
    packed = np.zeros(num_items, dtype=np.int64)
    for strategy, count in pairs:
        np.add.at(packed, np.searchsorted(item_lengths, strategy), count)
    np.testing.assert_array_equal(packed, demand)
    assert sum(count for _, count in pairs) <= counts.sum()
    # Every pack fits in a copy of a pattern: its i-th longest sequence is no
    # longer than that pattern's i-th longest slot.
    slot_lengths = -np.sort(-np.where(patterns < num_items,
                                      item_lengths[np.minimum(patterns, num_items - 1)], 0))
    for strategy, _ in pairs:
        row = np.zeros(width, dtype=np.int64)
        row[:len(strategy)] = sorted(strategy, reverse=True)
        assert (row <= slot_lengths).all(axis=1).any(), strategy
    # A demand of exactly the slots gives back the patterns.
    exact = optimal._fill_packs(patterns, counts, item_lengths, slots[:num_items])
    expected = {}
    for pattern, count in zip(patterns, counts):
        key = tuple(sorted((int(item_lengths[i]) for i in pattern if i < num_items),
                           reverse=True))
        if key:
            expected[key] = expected.get(key, 0) + int(count)
    assert dict(exact) == expected


def test_a_residual_pack_a_half_used_pattern_cannot_fill_is_not_dived_into():
    # Two items; the LP uses (0, 0) half a time for the one sequence of item
    # 0 and (0, 1) less: diving must take the pack both sequences fill.
    patterns = np.array([[0, 0], [0, 1]])
    picked = optimal._dive_patterns(patterns, np.array([0.5, 0.4]), np.array([1, 1]), 1)
    assert picked.tolist() == [1]


@pytest.mark.parametrize("max_sequence_length, cap", [(2048, 3), (4096, 2), (1024, 4)])
def test_long_contexts_pack_exactly_near_the_bound(max_sequence_length, cap):
    documents = histograms.load_histogram("builtin_corpus_documents")
    counts = histograms.split_documents(documents.counts, max_sequence_length,
                                        num_documents=20_000, seed=1)
    plan = pack_histogram(counts, max_sequence_length, cap, "optimal")
    # PackingPlan has checked that every sequence is packed exactly once.
    assert plan.num_sequences == counts.sum()
    assert plan.lp_lower_bound <= plan.num_packs <= plan.lp_lower_bound * 1.0005 + 1


def test_the_8192_token_case_is_planned_within_the_gap_of_its_bound():
    # Long-context documents at 8192 tokens, 4 per pack: column generation
    # over levels of length classes, each certified by the duals it proves
    # for the real lengths.
    documents = histograms.load_histogram("builtin_corpus_documents")
    counts = histograms.split_documents(documents.counts, 8192, num_documents=50_000,
                                        seed=0)
    plan = pack_histogram(counts, 8192, 4)
    assert not plan.time_limit_reached
    assert plan.num_sequences == counts.sum()
    assert plan.lp_lower_bound <= plan.num_packs <= plan.lp_lower_bound * (1 + 5e-4)


def test_a_small_histogram_with_a_loose_cap_is_packed_at_its_bound():
    # 256 sentences of 4 to 15 tokens, rows of 32, up to 16 a row: the last
    # residual's LP is solved to the end, so that its patterns let the
    # integer master reach ceil(bound) = 79 (an LP stopped once its bound
    # rounded up could not move gave 80).
    counts = np.zeros(32, dtype=np.int64)
    counts[3:15] = [6, 16, 23, 21, 32, 25, 26, 18, 24, 32, 25, 8]
    plan = pack_histogram(counts, 32, 16)
    assert plan.lp_lower_bound_packs == 79
    assert plan.num_packs == 79 and plan.proven_optimal


def test_the_paper_histograms_are_packed_at_their_bound():
    wikipedia = histograms.load_histogram("wikipedia_512").counts
    for cap, packs in ((3, 8_143_829), (4, 8_135_727)):
        plan = pack_histogram(wikipedia, 512, cap)
        assert (plan.num_packs, plan.proven_optimal) == (packs, True)


def test_a_level_stopped_before_its_first_solve_falls_back_to_the_coarser_one(
        monkeypatch):
    # HiGHS measures its time limit on its own clock, which can stop the
    # first solve of a finer level before the deadline reads as passed here:
    # the plan then comes from the coarser level's LP, not from nothing.
    rng = np.random.default_rng(3)
    max_len = 2048
    histogram = np.bincount(rng.integers(256, 1025, 20_000), minlength=max_len + 1)[1:]
    lengths = np.count_nonzero(histogram)
    assert optimal._class_widths(np.flatnonzero(histogram) + 1, max_len)  # levels first
    solve = optimal._Master.solve

    def out_of_time_on_the_real_lengths(master, deadline=optimal.NO_DEADLINE):
        return None if master.num_items == lengths else solve(master, deadline)

    monkeypatch.setattr(optimal._Master, "solve", out_of_time_on_the_real_lengths)
    solution = optimal.pack_optimal(histogram, max_len, 4)
    assert solution.stopped and solution.pairs is not None
    packed = np.zeros(max_len, np.int64)
    for strategy, count in solution.pairs:
        assert len(strategy) <= 4 and sum(strategy) <= max_len
        np.add.at(packed, np.asarray(strategy) - 1, count)
    np.testing.assert_array_equal(packed, histogram)
    packs = sum(count for _, count in solution.pairs)
    assert packs <= solution.lp_lower_bound * 1.01
