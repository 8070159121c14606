"""Fast packing heuristics: none, greedy, and the fit-decreasing family.

Every function here takes a validated histogram (``histogram[i]`` sequences of
length ``i + 1``) and returns ``(strategy, count)`` pairs; `pack_histogram`
turns those into a checked `PackingPlan`.
"""

from __future__ import annotations

import bisect

import numpy as np


def pack_none(histogram: np.ndarray):
    """One sequence per pack: the unpacked baseline."""
    return [((length,), int(count))
            for length, count in enumerate(histogram.tolist(), start=1) if count]


def greedy_pack_ends(lengths: np.ndarray, max_sequence_length: int,
                     max_sequences_per_pack: int) -> np.ndarray:
    """Next-fit over sequences in order: the paper's GREEDY / T5 baseline.

    Concatenates the sequences in the given order and starts a new pack when
    the next one does not fit (or the pack already holds
    `max_sequences_per_pack`).

    Returns the exclusive end index of every pack, so pack ``k`` holds
    ``lengths[ends[k - 1]:ends[k]]`` (with ``ends[-1]`` taken as 0).

    Note:
      For every start position the end of a pack starting there is found at
      once with a binary search on the cumulative lengths (O(n log n), numpy);
      only the chain of pack starts is then walked, one step per pack.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    cumulative = np.concatenate([[0], np.cumsum(lengths)])
    # A pack starting at i holds i..end-1: the longest prefix within the max
    # length, capped in count. Each sequence fits on its own, so end > i.
    end_by_length = np.searchsorted(
        cumulative, cumulative[:-1] + max_sequence_length, side="right") - 1
    end_of_pack_from = np.minimum(end_by_length,
                                  np.arange(n) + max_sequences_per_pack).tolist()
    ends = []
    start = 0
    while start < n:
        start = end_of_pack_from[start]
        ends.append(start)
    return np.asarray(ends, dtype=np.int64)


def pack_greedy(lengths: np.ndarray, max_sequence_length: int,
                max_sequences_per_pack: int):
    """Greedy next-fit packing in dataset order, as (strategy, count) pairs."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return []
    ends = greedy_pack_ends(lengths, max_sequence_length, max_sequences_per_pack)
    starts = np.concatenate([[0], ends[:-1]])
    depths = ends - starts
    max_depth = int(depths.max())
    # Dense [packs, max_depth] table of lengths, 0 = empty slot, each row
    # sorted longest first so equal packs become equal rows.
    pack_of_sequence = np.repeat(np.arange(ends.size), depths)
    slot = np.arange(lengths.size) - np.repeat(starts, depths)
    table = np.zeros((ends.size, max_depth), dtype=np.int32)
    table[pack_of_sequence, slot] = lengths
    table = -np.sort(-table, axis=1)
    rows, counts = _unique_rows(table, base=max_sequence_length + 1)
    return [(tuple(int(x) for x in row if x), int(count))
            for row, count in zip(rows, counts)]


def _unique_rows(table: np.ndarray, base: int):
    """np.unique(table, axis=0, return_counts=True), fast for small entries.

    Rows of entries below `base` are read as numbers in that base, so the
    work is one sort of int64 keys instead of a lexicographic row sort.
    """
    width = table.shape[1]
    if width * np.log2(base) >= 62:
        return np.unique(table, axis=0, return_counts=True)
    powers = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
    keys, counts = np.unique(table.astype(np.int64) @ powers, return_counts=True)
    rows = (keys[:, None] // powers[None, :]) % base
    return rows, counts


def pack_fit_decreasing(histogram: np.ndarray, max_sequence_length: int,
                        max_sequences_per_pack: int, *, fit: str,
                        tie_break: str = "last"):
    """Fit-decreasing bin packing on a histogram: SPFHP, LPFHP and BFD.

    Lengths are taken longest first. Packs are kept in groups of identical
    packs (count, contents) filed under their remaining room, so a whole
    group of sequences of one length is placed in a few steps.

    - ``fit="worst"``: shortest-pack-first histogram packing (SPFHP, Krell et
      al. 2021): each pack of the open group with the most room takes one
      sequence of the current length; sequences that fit nowhere open a pack
      each.
    - ``fit="best"``: best-fit decreasing. The open group with the least room
      that fits takes as many copies of the length as fit in each pack (which
      is what placing them one at a time in the best-fitting pack does), and
      new packs are filled the same way. With ``tie_break="last"`` (among
      groups with the same room, the one filed last) this is Graphcore's
      longest-pack-first histogram packing (LPFHP); with ``"fewest"`` (the
      group whose packs hold the fewest sequences, which keeps packs usable
      under the cap) it is BFD.

    ``tie_break="last"`` reproduces the reference implementations' choices, so
    SPFHP and LPFHP agree with their pack counts exactly.

    Complexity: O((S + P) log G) for S lengths, P placements of a group and
    G groups of packs open at once (their rooms are kept sorted, and the
    group that fits is found by bisection), independent of the number of
    sequences.
    """
    if fit not in ("best", "worst"):
        raise ValueError(f"fit must be 'best' or 'worst', got {fit!r}")
    if tie_break not in ("last", "fewest"):
        raise ValueError(f"tie_break must be 'last' or 'fewest', got {tie_break!r}")
    max_len = max_sequence_length
    cap = max_sequences_per_pack
    open_groups: dict[int, list[list]] = {}  # room left -> stack of [count, pack]
    rooms: list[int] = []  # the keys of open_groups, ascending
    closed: list[tuple[tuple[int, ...], int]] = []

    def file_group(pack, count, room):
        if len(pack) == cap or room == 0:
            closed.append((pack, count))
            return
        stack = open_groups.get(room)
        if stack is None:
            open_groups[room] = stack = []
            bisect.insort(rooms, room)
        stack.append([count, pack])

    for length in range(max_len, 0, -1):
        remaining = int(histogram[length - 1])
        search_open_packs = True
        while remaining > 0:
            if not (search_open_packs and rooms and rooms[-1] >= length):
                # Nothing open fits: new packs of this length alone. Sequences
                # left over after that also go into new packs (as the
                # reference does), not into the ones just made.
                search_open_packs = False
                repeat = 1
                if fit == "best":
                    repeat = min(max_len // length, cap, remaining)
                file_group((length,) * repeat, remaining // repeat,
                           max_len - repeat * length)
                remaining -= (remaining // repeat) * repeat
                continue
            # Best fit: the least room that fits; worst fit: the most room.
            room = rooms[bisect.bisect_left(rooms, length)] if fit == "best" else rooms[-1]
            stack = open_groups[room]
            position = len(stack) - 1
            if tie_break == "fewest":
                position = min(range(len(stack)), key=lambda i: len(stack[i][1]))
            group_count, pack = stack.pop(position)
            repeat = 1
            if fit == "best":
                repeat = min(room // length, cap - len(pack), remaining)
            used = min(group_count, remaining // repeat)
            if group_count > used:
                stack.insert(position, [group_count - used, pack])
            if not stack:
                del open_groups[room]
                del rooms[bisect.bisect_left(rooms, room)]
            remaining -= used * repeat
            file_group(pack + (length,) * repeat, used, room - repeat * length)

    for stack in open_groups.values():
        closed.extend((pack, count) for count, pack in stack)
    return closed
