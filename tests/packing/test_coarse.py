"""Coarse planning: length classes planned and refined, certified by the
rounded-down relaxation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import api, coarse, histograms, load_histogram, pack_histogram


def test_round_up_counts_each_class():
    histogram = np.zeros(16, np.int64)
    histogram[[0, 3, 4, 15]] = [2, 3, 5, 7]  # lengths 1, 4, 5, 16
    np.testing.assert_array_equal(coarse.round_up(histogram, 4), [5, 5, 0, 7])


@settings(max_examples=300, deadline=None)
@given(width=st.sampled_from([1, 2, 4, 8]), cap=st.integers(1, 5),
       lengths=st.lists(st.integers(1, 64), min_size=1, max_size=5))
def test_the_relaxation_holds_exactly_the_rounded_down_packs(width, cap, lengths):
    max_len = 64
    lengths = lengths[:cap]
    histogram = np.bincount(np.array(lengths) - 1, minlength=max_len)
    relaxed, capacity = coarse.relaxation(histogram, width, cap)
    relaxed_lengths = np.repeat(np.arange(1, capacity + 1), relaxed)
    assert sorted(relaxed_lengths) == sorted((cap + 1) * (l // width) + 1 for l in lengths)
    fits_rounded_down = sum(l // width for l in lengths) <= max_len // width
    assert (relaxed_lengths.sum() <= capacity) == fits_rounded_down
    if sum(lengths) <= max_len:  # a real pack is a relaxed one
        assert relaxed_lengths.sum() <= capacity


def test_refine_gives_each_slot_a_sequence_of_its_class():
    width = 4
    histogram = np.zeros(16, np.int64)
    histogram[[0, 2, 3, 6, 13]] = [1, 1, 2, 2, 1]  # lengths 1, 3, 4, 4, 7, 7, 14
    class_pairs = [((4,), 1), ((2, 1, 1), 2)]  # classes 4, 2 x 2, 1 x 4
    pairs = coarse.refine(class_pairs, histogram, width)
    assert sum(count for _, count in pairs) == 3
    packed = sorted(length for strategy, count in pairs for length in strategy * count)
    assert packed == [1, 3, 4, 4, 7, 7, 14]
    assert all(sum(strategy) <= 16 for strategy, _ in pairs)
    with pytest.raises(ValueError, match="does not hold the histogram's sequences"):
        coarse.refine([((4, 1), 1)], histogram, width)


def test_eligible_needs_wide_classes_and_many_lengths():
    dense = np.ones(8192, np.int64)
    assert coarse.eligible(dense, 8192)
    assert not coarse.eligible(np.ones(4096, np.int64), 4096)  # classes of 4 tokens
    sparse = np.zeros(8192, np.int64)
    sparse[:1000] = 1
    assert not coarse.eligible(sparse, 8192)  # fewer lengths than classes
    assert not coarse.eligible(np.ones(8195, np.int64), 8195)  # not whole classes


@pytest.fixture
def small_classes(monkeypatch):
    monkeypatch.setattr(coarse, "CLASSES", 32)
    monkeypatch.setattr(coarse, "MIN_CLASS_WIDTH", 2)


def test_optimal_returns_the_refined_class_plan_when_certified(small_classes):
    # Any 4 sequences fit, rounded up or not (120 + 3 x 40 <= 256): the
    # count per pack binds, and classes of 8 tokens cost nothing.
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(1, 41, 3000), rng.integers(41, 121, 300)])
    histogram = np.bincount(lengths - 1, minlength=256)
    assert coarse.eligible(histogram, 256)
    # (Rounding the classes' LP to whole packs costs one: 826 packs, a gap
    # of 0.12 % on so small a plan.)
    plan = pack_histogram(histogram, 256, 4, certified_gap=0.01)
    relaxed, capacity = coarse.relaxation(histogram, 8, 4)
    bound = pack_histogram(relaxed, capacity, 4, certified_gap=None).lp_lower_bound
    assert bound == histogram.sum() / 4
    assert plan.lp_lower_bound == bound
    assert plan.num_packs <= bound * 1.01
    slow = pack_histogram(histogram, 256, 4, certified_gap=None)
    assert bound <= slow.lp_lower_bound + 1e-6  # a relaxation's LP
    assert plan.num_sequences == histogram.sum()


def test_an_uncertified_class_plan_falls_back_to_column_generation(small_classes):
    # Rows filled to the last token: rounding up costs packs.
    documents = load_histogram("builtin_corpus_documents")
    histogram = histograms.split_documents(documents.counts, 128, num_documents=3000,
                                           seed=0)
    plan = pack_histogram(histogram, 128, 4)
    slow = pack_histogram(histogram, 128, 4, certified_gap=None)
    assert (plan.strategies, plan.counts, plan.lp_lower_bound) == (
        slow.strategies, slow.counts, slow.lp_lower_bound)


def recorded_column_generation(monkeypatch):
    """Records the plan's column-generation runs (seconds each) instead of
    running them again: `solution` gives the one run on given inputs, which
    the caller computes itself, and column generation is deterministic."""
    solved = []
    pack_optimal = api._pack_optimal

    def recording(histogram, args, options):
        result = pack_optimal(histogram, args, options)
        solved.append((np.array(histogram), tuple(args), result))
        return result

    monkeypatch.setattr(api, "_pack_optimal", recording)

    def solution(histogram, args):
        """(pairs, LP bound) of the one column-generation run on these inputs."""
        matches = [result for solved_histogram, solved_args, result in solved
                   if solved_args == args and np.array_equal(solved_histogram, histogram)]
        assert len(matches) == 1, args
        return matches[0]

    return solution


def test_the_8192_token_case_is_planned_by_classes(monkeypatch):
    documents = load_histogram("builtin_corpus_documents")
    histogram = histograms.split_documents(documents.counts, 8192, num_documents=50_000,
                                           seed=0)
    assert coarse.eligible(histogram, 8192)
    solution = recorded_column_generation(monkeypatch)
    plan = pack_histogram(histogram, 8192, 4)
    relaxed, capacity = coarse.relaxation(histogram, 8, 4)
    # pack_histogram(relaxed, capacity, 4, certified_gap=None) runs just this.
    assert plan.lp_lower_bound == solution(relaxed, (capacity, 4))[1]
    assert plan.num_packs <= plan.lp_lower_bound * (1 + 5e-4)


def test_classes_half_as_wide_certify_what_the_first_classes_cannot(monkeypatch):
    # Short and long documents, 4 per pack, at 4096 tokens in 512 classes of
    # 8 tokens (the width at 8192 tokens; column generation costs seconds per
    # thousand classes): the plan of the 512 classes is 0.2 % above its
    # relaxation's bound; with 1,024 classes, 0.07 %, within a gap of 0.1 %.
    monkeypatch.setattr(coarse, "CLASSES", 512)
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.lognormal(5.0 - np.log(2), 0.8, 35_000),
                              rng.lognormal(8.3 - np.log(2), 0.5, 15_000)])
    histogram = np.bincount(np.clip(np.round(lengths), 1, 4096).astype(int) - 1,
                            minlength=4096)
    assert coarse.eligible(histogram, 4096)
    assert coarse.class_widths(4096) == (8, 4)
    solution = recorded_column_generation(monkeypatch)
    gap = 1e-3
    plan = pack_histogram(histogram, 4096, 4, certified_gap=gap)

    bounds = {}
    for width in (8, 4):
        relaxed, capacity = coarse.relaxation(histogram, width, 4)
        bounds[width] = solution(relaxed, (capacity, 4))[1]
    first_classes, _ = solution(coarse.round_up(histogram, 8), (512, 4))
    first_packs = sum(count for _, count in first_classes)
    assert first_packs > bounds[8] * (1 + gap)  # not certified
    assert plan.lp_lower_bound == bounds[4] > bounds[8]
    assert plan.num_packs <= bounds[4] * (1 + gap)
    assert plan.num_sequences == histogram.sum()
