import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.packing import window
from packed_bert_tf.packing.window import best_fit_window, first_fit_window

PACKERS = {"first_fit": first_fit_window, "best_fit": best_fit_window}


def _packs(result):
    return [pack.tolist() for pack in result.assignment]


def _reference(lengths, max_len, cap, num_bins, best_fit):
    """Grain's packing loop transcribed literally: every bin checked for every
    sequence. Returns (packs in emission order, read_at_emission per sequence)."""
    packs, read_at_emission = [], [None] * len(lengths)
    contents = [[] for _ in range(num_bins)]
    used = [0] * num_bins

    def emit(read):
        for pack in contents:
            if pack:
                packs.append(pack)
                for index in pack:
                    read_at_emission[index] = read

    for index, length in enumerate(lengths):
        fits = [b for b in range(num_bins) if used[b] + length <= max_len
                and (cap is None or len(contents[b]) < cap)]
        if not fits:
            emit(index + 1)
            contents = [[] for _ in range(num_bins)]
            used = [0] * num_bins
            fits = list(range(num_bins))
        # Best fit: the most used bin (least room left), lowest index on a tie.
        b = max(fits, key=lambda b: (used[b], -b)) if best_fit else fits[0]
        contents[b].append(index)
        used[b] += length
    emit(len(lengths))
    return packs, read_at_emission


# Hand-worked streams, max length 10.
#   first fit, 2 bins: 5 -> bin 0 (room 5); 6 -> bin 1 (room 4); 4 -> bin 0
#   (room 1); 5 fits neither: bins [0, 2] and [1] are emitted with 4 read, 5
#   opens bin 0 of a new window; 5 -> bin 0 (room 0); end: [3, 4] with 5 read.
#   best fit, 2 bins: 4 -> bin 1 (room 4 -> 0, tighter than bin 0's 5);
#   5 -> bin 0 (room 0); the last 5 fits neither: [0, 3] and [1, 2] emitted
#   with 5 read; end: [4] with 5 read.
def test_first_fit_hand_worked_with_a_flush():
    result = first_fit_window([5, 6, 4, 5, 5], 10, None, num_bins=2)
    assert _packs(result) == [[0, 2], [1], [3, 4]]
    assert result.read_at_emission.tolist() == [4, 4, 4, 5, 5]
    assert result.waits.tolist() == [3, 2, 1, 1, 0]
    assert result.read_at_emission.dtype == np.int64


def test_best_fit_hand_worked_with_a_flush():
    result = best_fit_window([5, 6, 4, 5, 5], 10, None, num_bins=2)
    assert _packs(result) == [[0, 3], [1, 2], [4]]
    assert result.read_at_emission.tolist() == [5, 5, 5, 5, 5]


def test_three_bins_no_flush_end_of_stream_emission():
    # With 3 bins nothing is flushed; everything is emitted at the end (5 read).
    ff = first_fit_window([5, 6, 4, 5, 5], 10, None, num_bins=3)
    assert _packs(ff) == [[0, 2], [1], [3, 4]]
    assert ff.read_at_emission.tolist() == [5] * 5
    bf = best_fit_window([5, 6, 4, 5, 5], 10, None, num_bins=3)
    assert _packs(bf) == [[0, 3], [1, 2], [4]]
    assert bf.read_at_emission.tolist() == [5] * 5


def test_two_flushes_and_a_partial_last_window():
    # 6 and 5 never share a bin of 10; one bin: every sequence that does not
    # fit flushes; the last window holds only bin 0 of 3.
    result = first_fit_window([6, 5, 6, 4, 3], 10, None, num_bins=1)
    assert _packs(result) == [[0], [1], [2, 3], [4]]
    assert result.read_at_emission.tolist() == [2, 3, 5, 5, 5]
    result = first_fit_window([6, 5, 6, 4], 10, None, num_bins=3)
    assert _packs(result) == [[0, 3], [1], [2]]


@pytest.mark.parametrize("name", sorted(PACKERS))
def test_cap_on_sequences_per_bin(name):
    # Cap 2: bins 0 and 1 take two 1s each; the fifth 1 finds both full, the
    # window is emitted with 5 read and the 1 opens a new window.
    result = PACKERS[name]([1, 1, 1, 1, 1, 1], 10, 2, num_bins=2)
    assert _packs(result) == [[0, 1], [2, 3], [4, 5]]
    assert result.read_at_emission.tolist() == [5, 5, 5, 5, 6, 6]
    uncapped = PACKERS[name]([1, 1, 1, 1, 1, 1], 10, None, num_bins=2)
    assert _packs(uncapped) == [[0, 1, 2, 3, 4, 5]]


def test_best_fit_skips_the_tightest_bin_when_it_is_full():
    # 4 -> bin 0 (room 6); 4 -> bin 0 (room 2, now holding the cap of 2);
    # 1 would fit tightest in bin 0 but goes to bin 1.
    assert _packs(best_fit_window([4, 4, 1, 1], 10, 2, num_bins=2)) == [[0, 1], [2, 3]]
    assert _packs(best_fit_window([4, 4, 1, 1], 10, None, num_bins=2)) == [[0, 1, 2, 3]]


@pytest.mark.parametrize("name", sorted(PACKERS))
def test_empty_stream(name):
    result = PACKERS[name]([], 8, 3, num_bins=4)
    assert result.num_packs == 0
    assert result.assignment.row_splits.tolist() == [0]
    assert result.assignment.sequence_indices.size == 0
    assert result.read_at_emission.size == 0


@pytest.mark.parametrize("name", sorted(PACKERS))
def test_too_long_or_empty_sequence_is_an_error_naming_its_index(name):
    with pytest.raises(ValueError, match=r"sequence 2 of the stream has length 11, "
                                         r"more than max_sequence_length=10"):
        PACKERS[name]([3, 10, 11, 12], 10, None, num_bins=2)
    with pytest.raises(ValueError, match=r"sequence 1 of the stream has length 0"):
        PACKERS[name]([3, 0, 2], 10, None, num_bins=2)
    with pytest.raises(ValueError, match="num_bins"):
        PACKERS[name]([3], 10, None, num_bins=0)
    with pytest.raises(ValueError, match="max_sequences_per_pack"):
        PACKERS[name]([3], 10, 0, num_bins=1)


_streams = dict(
    lengths=st.lists(st.integers(1, 16), max_size=120),
    max_len=st.integers(16, 24),
    cap=st.one_of(st.none(), st.integers(1, 4)),
    num_bins=st.integers(1, 6),
    name=st.sampled_from(sorted(PACKERS)),
)


@settings(max_examples=60, deadline=None)
@given(**_streams)
def test_every_sequence_exactly_once_and_no_pack_over_the_limits(lengths, max_len, cap,
                                                                 num_bins, name):
    result = PACKERS[name](lengths, max_len, cap, num_bins)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    assignment = result.assignment
    np.testing.assert_array_equal(np.sort(assignment.sequence_indices), np.arange(n))
    tokens = assignment.sum_per_pack(lengths[assignment.sequence_indices])
    assert (tokens <= max_len).all()
    depth = assignment.sequences_per_pack
    assert (depth >= 1).all()
    if cap is not None:
        assert (depth <= cap).all()
    for pack in assignment:  # placed in stream order
        assert (np.diff(pack) > 0).all()
    # A sequence is emitted after it is read and by the end of the stream; packs
    # come out in the order they were emitted.
    read = result.read_at_emission
    assert (read >= np.arange(1, n + 1)).all() and (read <= n).all()
    assert (np.diff(read[assignment.sequence_indices]) >= 0).all()
    # A window is emitted whole: all its bins when a sequence fits in none of
    # them (all hold sequences then), at most all of them at the end (when the
    # last sequence flushed a window, it makes one pack of its own, also read=n).
    if n:
        emitted, packs_per_emission = np.unique(
            read[assignment.sequence_indices[assignment.row_splits[:-1]]],
            return_counts=True)
        assert (packs_per_emission[emitted < n] == num_bins).all()
        assert (packs_per_emission[emitted == n] <= num_bins + 1).all()
    if n:
        assert result.efficiency(lengths, max_len) == pytest.approx(
            lengths.sum() / (len(assignment) * max_len))


@settings(max_examples=80, deadline=None)
@given(**_streams)
def test_equal_to_the_literal_grain_loop(lengths, max_len, cap, num_bins, name):
    result = PACKERS[name](lengths, max_len, cap, num_bins)
    packs, read = _reference(lengths, max_len, cap, num_bins, best_fit=name == "best_fit")
    assert _packs(result) == packs
    assert result.read_at_emission.tolist() == read


@pytest.mark.parametrize("name", sorted(PACKERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_equal_to_the_literal_grain_loop_on_a_longer_stream(name, seed):
    # Many windows over many bins, lengths spread over the whole range so
    # bins fill to every room value.
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 65, size=1500).tolist()
    for cap, num_bins in ((3, 20), (None, 7)):
        result = PACKERS[name](lengths, 64, cap, num_bins)
        packs, read = _reference(lengths, 64, cap, num_bins,
                                 best_fit=name == "best_fit")
        assert _packs(result) == packs
        assert result.read_at_emission.tolist() == read
        assert len({r for r in read}) > 5  # several flushes happened


def test_docstring_examples():
    failures, tried = doctest.testmod(window)
    assert tried >= 6 and failures == 0
