import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import PackingPlan
from packed_bert_tf.packing.plan import _merged_strategy_counts, strategy_counts_of_rows


def _plan(**overrides):
    # Max length 8: lengths 5, 5, 3, 3, 6.
    fields = dict(algorithm="hand", max_sequence_length=8, max_sequences_per_pack=2,
                  histogram=(0, 0, 2, 0, 2, 1, 0, 0),
                  strategies=((5, 3), (6,)), counts=(2, 1))
    fields.update(overrides)
    return PackingPlan(**fields)


def test_reports_of_a_hand_made_plan():
    plan = _plan(lp_lower_bound=2.5, solve_time_seconds=0.25)
    assert plan.num_packs == 3
    assert plan.num_sequences == 5
    assert plan.real_tokens == 22
    assert plan.total_tokens == 24
    assert plan.padding_tokens == 2
    assert plan.efficiency == pytest.approx(22 / 24)
    assert plan.packing_factor == pytest.approx(5 / 3)
    assert plan.theoretical_speedup == pytest.approx(5 * 8 / 22)
    assert plan.token_lower_bound == 3  # ceil(22 / 8)
    assert plan.lp_lower_bound_packs == 3
    assert plan.max_depth_used == 2
    np.testing.assert_array_equal(plan.packed_histogram(), plan.histogram)
    assert plan.summary()["padding_tokens"] == 2


def test_from_strategy_counts_canonicalises():
    plan = PackingPlan.from_strategy_counts(
        [((3, 5), 1), ((6,), 1), ((5, 3), 1), ((2,), 0)], algorithm="x",
        histogram=[0, 0, 2, 0, 2, 1, 0, 0], max_sequence_length=8,
        max_sequences_per_pack=2)
    assert plan.strategies == ((5, 3), (6,))
    assert plan.counts == (2, 1)
    assert plan.lp_lower_bound is None
    # Pairs from a generator, counts as numpy integers and floats: the same plan.
    assert plan == PackingPlan.from_strategy_counts(
        (pair for pair in [((5, 3), np.int64(2)), ((6,), 1.0), ((4,), 0)]), algorithm="x",
        histogram=[0, 0, 2, 0, 2, 1, 0, 0], max_sequence_length=8, max_sequences_per_pack=2)


@pytest.mark.parametrize("overrides, message", [
    (dict(counts=(1, 1)), "does not pack every sequence exactly once"),
    (dict(counts=(3, 1)), "length 3: packed 3, histogram 2"),
    (dict(strategies=((5, 3), (6, 3)), counts=(2, 1)), "holds 9 tokens"),
    (dict(max_sequences_per_pack=1), "holds 2 sequences, more than"),
    (dict(counts=(-1, 1)), "negative count"),
    (dict(histogram=(0, 2, 0)), "histogram has 3 bins"),
    (dict(counts=(2,)), "2 strategies but 1 counts"),
    (dict(strategies=((5, 3), ())), "strategy 1 is empty"),
    (dict(strategies=((5, 3, 0), (6,))), r"strategy \(5, 3, 0\) holds a non-positive"),
])
def test_inexact_plans_cannot_be_built(overrides, message):
    with pytest.raises(ValueError, match=message):
        _plan(**overrides)


def test_json_round_trip(tmp_path):
    plan = _plan(lp_lower_bound=2.75, solve_time_seconds=1.5)
    path = tmp_path / "plan.json"
    text = plan.to_json(path, indent=1)
    assert path.read_text() == text
    assert json.loads(text)["summary"]["num_packs"] == 3
    assert PackingPlan.from_json(str(path)) == plan
    assert PackingPlan.from_json(text) == plan


def test_json_that_was_edited_into_an_inexact_plan_is_rejected():
    document = json.loads(_plan().to_json())
    document["counts"] = [2, 2]
    with pytest.raises(ValueError, match="exactly once"):
        PackingPlan.from_json(json.dumps(document))
    document["format"] = "something else"
    with pytest.raises(ValueError, match="not a packing plan"):
        PackingPlan.from_json(json.dumps(document))


def _merged_by_dict(strategy_counts):
    merged = {}
    for strategy, count in strategy_counts:
        key = tuple(sorted((int(length) for length in strategy), reverse=True))
        merged[key] = merged.get(key, 0) + count
    return sorted(merged.items())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(-1, 9), min_size=0, max_size=4),
                          st.integers(-3, 5)), max_size=30))
def test_merging_strategies_matches_sorting_them_one_by_one(strategy_counts):
    assert _merged_strategy_counts(strategy_counts) == _merged_by_dict(strategy_counts)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 17), st.sampled_from([4, 1 << 16, 1 << 20]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_pairs_of_rows_are_the_rows_merged_one_by_one(num_rows, width, longest,
                                                       weighted, seed):
    # Widths around the 4 lengths a key holds; lengths short and past 16 bits.
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, longest + 1, (num_rows, width), dtype=np.int32)
    rows[rng.random(rows.shape) < 0.4] = 0  # 0 anywhere in a row: no sequence
    counts = rng.integers(1, 4, num_rows) if weighted else np.ones(num_rows, int)
    pairs = strategy_counts_of_rows(rows, counts if weighted else None)
    one_by_one = _merged_by_dict(
        (tuple(row[row > 0].tolist()), int(count)) for row, count in zip(rows, counts))
    assert pairs == one_by_one
    assert {type(length) for strategy, _ in pairs for length in strategy} <= {int}


def test_pairs_made_from_rows_give_the_plan_that_merging_gives_and_are_still_checked():
    rows = np.random.default_rng(0).integers(0, 5, (500, 3))
    rows[:, 0] += 1  # every row holds a sequence
    histogram = np.bincount(rows[rows > 0] - 1, minlength=16)
    pairs = strategy_counts_of_rows(rows)
    fields = dict(algorithm="hand", histogram=histogram, max_sequence_length=16,
                  max_sequences_per_pack=3)
    plan = PackingPlan.from_strategy_counts(pairs, **fields)
    # The same packs as a plain list, one pair a row in another order.
    one_by_one = [(tuple(row[row > 0]), 1) for row in rows[::-1]]
    assert plan == PackingPlan.from_strategy_counts(one_by_one, **fields)
    assert plan.num_packs == 500
    with pytest.raises(ValueError, match="exactly once"):
        PackingPlan.from_strategy_counts(strategy_counts_of_rows(rows[1:]), **fields)
    with pytest.raises(ValueError, match="more than max_sequence_length=8"):
        PackingPlan.from_strategy_counts(pairs, **dict(fields, max_sequence_length=8,
                                                       histogram=histogram[:8]))


def test_merging_leaves_canonical_pairs_as_they_are_and_makes_tuples_of_ints():
    canonical = [((3, 2), 1), ((3, 2, 1), 2), ((4,), 5)]
    assert _merged_strategy_counts(canonical) is canonical
    merged = _merged_strategy_counts([([2, 3], 1), ((np.int64(4),), 2), ((3, 2), 1)])
    assert merged == [((3, 2), 2), ((4,), 2)]
    assert {type(length) for strategy, _ in merged for length in strategy} == {int}
    assert {type(strategy) for strategy, _ in merged} == {tuple}
    # In order as tuples, but a strategy not longest first.
    assert _merged_strategy_counts([((2, 3), 1), ((4,), 1)]) == [((3, 2), 1), ((4,), 1)]
