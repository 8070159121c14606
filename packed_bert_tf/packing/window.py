"""Greedy streaming baselines: Grain's first-fit and best-fit packing windows.

Google's Grain library packs a stream of sequences with
``grain.experimental.FirstFitPackIterDataset`` and
``grain.experimental.BestFitPackIterDataset``
(grain/_src/python/dataset/transformations/packing.py and
packing_packed_batch.py). Both keep a window (Grain: a "batch") of
``num_packing_bins`` bins and put each sequence, in stream order, into a bin
where it fits; when it fits in none, the whole window is emitted and a new one
is started with that sequence in bin 0. The functions here make the same packs
from the lengths alone, so that other streaming packers can be compared with
them on the same streams.

numpy only: this package never imports TensorFlow.
"""

from __future__ import annotations

import heapq

import numpy as np

from packed_bert_tf.packing import ragged
from packed_bert_tf.packing.assign import PackAssignment
from packed_bert_tf.packing.stream import StreamPacking


def first_fit_window(lengths, max_sequence_length: int,
                     max_sequences_per_pack: int | None,
                     num_bins: int) -> StreamPacking:
    """First-fit packing in a window of bins: Grain's ``FirstFitPackIterDataset``.

    Parameters
    ----------
    lengths : [N] int
        Length of every sequence, in stream order; each in
        ``1..max_sequence_length``.
    max_sequence_length : int
        Capacity of a pack in tokens.
    max_sequences_per_pack : int or None
        Most sequences a pack may hold (Grain's ``max_sequences_per_bin``);
        None for no limit.
    num_bins : int
        Bins in the window (Grain's ``num_packing_bins``).

    Returns
    -------
    StreamPacking
        Packs in the order they are emitted: window after window, the bins of
        a window in bin order (Grain with ``shuffle_bins=False``). A pack
        lists its stream indices in the order they were placed into the bin,
        which is stream order. ``read_at_emission`` is ``j + 1`` for the
        packs of a window emitted because sequence ``j`` fitted in none of
        its bins (sequence ``j`` has been read; it starts the next window),
        and ``N`` for the packs of the last window, emitted at the end of the
        stream.

    Raises
    ------
    ValueError
        If a length is below 1 or above `max_sequence_length` (the message
        names the first such sequence's stream index), or an argument is out
        of range.

    Notes
    -----
    Algorithm (Grain, ``FirstFitPackedBatch.try_add_to_batch`` and
    ``PackingDatasetIterator.__next__``): each sequence goes into the
    lowest-index bin whose used length plus its own is at most
    `max_sequence_length` and which holds fewer than
    `max_sequences_per_pack` sequences. An empty bin always fits, so a
    sequence fits nowhere only when all `num_bins` bins hold sequences: then
    all of them are emitted, in bin order, and the sequence goes into bin 0
    of an empty window. At the end of the stream the bins that hold
    sequences (always bins ``0..k-1``) are emitted in bin order. Grain checks
    the length of a sequence when it reaches it; here all lengths are
    checked first, so nothing is returned for a stream with a bad length.

    Implementation: bins that can still take a sequence are filed by free
    room ``r`` (an integer in ``1..S`` for ``S = max_sequence_length``), each
    room value holding a heap of bin indices. The bin first-fit picks for a
    sequence of length ``L`` is the smallest heap head over room values
    ``L..S``: one vectorised ``min`` over an array of those heads, then a heap
    pop and push. O(N (S + log B)) time with the O(S) part in numpy,
    independent of the number of bins B in practice; O(N + S + B) memory.
    Grain scans all B bins per sequence (O(N B)).

    Examples
    --------
    Sequence 4 fits in neither bin: the window is emitted once it is read,
    and the last window at the end of the stream (6 read).

    >>> packs = first_fit_window([3, 2, 2, 1, 4, 1], 4, None, num_bins=2)
    >>> [p.tolist() for p in packs.assignment]
    [[0, 3], [1, 2], [4], [5]]
    >>> packs.read_at_emission.tolist()
    [5, 5, 5, 5, 6, 6]
    """
    return _window_pack(lengths, max_sequence_length, max_sequences_per_pack,
                        num_bins, best_fit=False)


def best_fit_window(lengths, max_sequence_length: int,
                    max_sequences_per_pack: int | None,
                    num_bins: int) -> StreamPacking:
    """Best-fit packing in a window of bins: Grain's ``BestFitPackIterDataset``.

    Parameters, Returns and Raises as for `first_fit_window`.

    Notes
    -----
    Algorithm (Grain, ``BestFitPackedBatch.try_add_to_batch``): as
    `first_fit_window`, except that each sequence goes into the bin that it
    fits and that leaves the least room after it (Grain: the highest used
    length among the bins that fit), the lowest-index such bin on a tie.
    An empty bin is therefore taken only when no bin holding sequences fits,
    and bins are opened in index order as with first-fit.

    Implementation: bins that can still take a sequence are filed by free
    room, each room value holding a heap of bin indices, and the room values
    that hold bins are the set bits of one integer. The smallest room
    ``r >= L`` holding a bin is the lowest set bit of that integer shifted
    right by ``L``; its bin is the head of room ``r``'s heap.
    O(N (log B + S / 64)) time, where the S / 64 word operations of the
    bit search are negligible for S in the hundreds; O(N + S + B) memory.
    Grain scans all B bins per sequence (O(N B)).

    Examples
    --------
    >>> packs = best_fit_window([3, 2, 2, 1, 4], 4, None, num_bins=2)
    >>> [p.tolist() for p in packs.assignment]
    [[0, 3], [1, 2], [4]]
    >>> packs = best_fit_window([2, 3, 1, 3], 4, None, num_bins=2)
    >>> [p.tolist() for p in packs.assignment]  # 1 goes where it fills the bin
    [[0], [1, 2], [3]]
    >>> packs.read_at_emission.tolist()
    [4, 4, 4, 4]
    """
    return _window_pack(lengths, max_sequence_length, max_sequences_per_pack,
                        num_bins, best_fit=True)


def _validated_lengths(lengths, max_sequence_length, max_sequences_per_pack,
                       num_bins) -> np.ndarray:
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be one-dimensional, got shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
    if max_sequence_length < 1:
        raise ValueError(f"max_sequence_length must be >= 1, got {max_sequence_length}")
    if max_sequences_per_pack is not None and max_sequences_per_pack < 1:
        raise ValueError("max_sequences_per_pack must be >= 1 or None, got "
                         f"{max_sequences_per_pack}")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    too_long = np.flatnonzero(lengths > max_sequence_length)
    if too_long.size:
        index = int(too_long[0])
        raise ValueError(
            f"sequence {index} of the stream has length {int(lengths[index])}, "
            f"more than max_sequence_length={max_sequence_length}")
    too_short = np.flatnonzero(lengths < 1)
    if too_short.size:
        index = int(too_short[0])
        raise ValueError(f"sequence {index} of the stream has length "
                         f"{int(lengths[index])}; lengths must be >= 1")
    return lengths.astype(np.int64)


def _window_pack(lengths, max_sequence_length, max_sequences_per_pack, num_bins,
                 best_fit: bool) -> StreamPacking:
    lengths = _validated_lengths(lengths, max_sequence_length,
                                 max_sequences_per_pack, num_bins)
    size = max_sequence_length
    num_bins = int(num_bins)
    # A bin never holds more than `size` sequences of length >= 1.
    cap = size if max_sequences_per_pack is None else min(int(max_sequences_per_pack), size)
    place = _place_best_fit if best_fit else _place_first_fit
    bin_of, window_starts = place(lengths.tolist(), size, cap, num_bins)

    n = lengths.size
    bin_of = np.asarray(bin_of, dtype=np.int64)
    # window_starts: stream index of the sequence that opened each window
    # after the first; the window before it was emitted once it was read.
    window_starts = np.asarray(window_starts, dtype=np.int64)
    window_of = np.searchsorted(window_starts, np.arange(n), side="right")
    read_at_window_end = np.append(window_starts + 1, n)
    # Packs in emission order: by window, then bin; a stable sort keeps each
    # pack's sequences in stream (= placement) order.
    key = window_of * num_bins + bin_of
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    first_of_pack = np.flatnonzero(np.diff(sorted_key, prepend=-1)) if n else \
        np.zeros(0, dtype=np.int64)
    sequences_per_pack = np.diff(np.append(first_of_pack, n))
    assignment = PackAssignment(ragged.row_splits_from_lengths(sequences_per_pack),
                                order.astype(np.int64))
    return StreamPacking(assignment=assignment,
                         read_at_emission=read_at_window_end[window_of].astype(np.int64))


def _empty_window(buckets: list, room: list, size: int, num_bins: int):
    """Empties the buckets of the bins' rooms `room` and puts every bin, not
    opened yet, in bucket `size` (sorted: a heap); returns the new rooms and
    sequence counts."""
    for r in set(room):
        buckets[r].clear()
    buckets[size] = list(range(num_bins))
    return [size] * num_bins, [0] * num_bins


def _place_first_fit(lengths: list, size: int, cap: int, num_bins: int):
    """Bin of every sequence in its window, and where the windows start.

    ``buckets[r]`` is a heap of the bins with room ``r`` that can still take
    a sequence (fewer than `cap` in them); ``head[r]`` its smallest bin, or
    `num_bins` when empty. Room ``size`` holds the bins not opened yet.
    """
    none = num_bins
    head = np.full(size + 1, none, dtype=np.int64)
    head_list = [none] * (size + 1)   # the same, for cheap scalar reads
    buckets = [[] for _ in range(size + 1)]
    room, count = _empty_window(buckets, [], size, num_bins)
    head[size] = head_list[size] = 0
    bin_of = []
    window_starts = []
    heappop, heappush = heapq.heappop, heapq.heappush

    for index, length in enumerate(lengths):
        b = int(head[length:].min())
        if b == none:
            # Fits nowhere: all bins hold sequences. Emit the window; the
            # sequence opens bin 0 of a fresh one.
            window_starts.append(index)
            room, count = _empty_window(buckets, room, size, num_bins)
            head.fill(none)
            head_list = [none] * (size + 1)
            head[size] = head_list[size] = 0
            b = 0
        r = room[b]
        bucket = buckets[r]
        heappop(bucket)  # b is the smallest bin over rooms >= length
        new_head = bucket[0] if bucket else none
        head[r] = head_list[r] = new_head
        r -= length
        room[b] = r
        count[b] += 1
        if r and count[b] < cap:
            heappush(buckets[r], b)
            if b < head_list[r]:
                head[r] = head_list[r] = b
        bin_of.append(b)
    return bin_of, window_starts


def _place_best_fit(lengths: list, size: int, cap: int, num_bins: int):
    """As `_place_first_fit`, finding the smallest room that fits with the
    bit set ``nonempty`` (bit ``r`` set when ``buckets[r]`` holds a bin)."""
    buckets = [[] for _ in range(size + 1)]
    room, count = _empty_window(buckets, [], size, num_bins)
    nonempty = 1 << size
    bin_of = []
    window_starts = []
    heappop, heappush = heapq.heappop, heapq.heappush

    for index, length in enumerate(lengths):
        fitting = nonempty >> length
        if not fitting:
            window_starts.append(index)
            room, count = _empty_window(buckets, room, size, num_bins)
            nonempty = 1 << size
            fitting = nonempty >> length
        r = length + (fitting & -fitting).bit_length() - 1
        bucket = buckets[r]
        b = heappop(bucket)
        if not bucket:
            nonempty ^= 1 << r
        r -= length
        room[b] = r
        count[b] += 1
        if r and count[b] < cap:
            bucket = buckets[r]
            if not bucket:
                nonempty |= 1 << r
            heappush(bucket, b)
        bin_of.append(b)
    return bin_of, window_starts
