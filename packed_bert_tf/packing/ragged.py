"""Ragged arrays in numpy: rows of a flat array delimited by row splits.

Row ``k`` of a ragged array is ``values[row_splits[k]:row_splits[k + 1]]``
(the layout of ``tf.RaggedTensor.from_row_splits``). Packs of sequences,
tokens of sequences and examples of batches are all such rows; these are the
few vectorised operations on them that the project needs, each O(elements).
"""

from __future__ import annotations

import numpy as np


def row_splits_from_lengths(row_lengths) -> np.ndarray:
    """[R + 1] int64 row splits of rows of the given lengths."""
    row_lengths = np.asarray(row_lengths)
    splits = np.zeros(row_lengths.size + 1, dtype=np.int64)
    np.cumsum(row_lengths, out=splits[1:])
    return splits


def row_of_elements(row_lengths) -> np.ndarray:
    """[sum(row_lengths)] int64: the row each element belongs to."""
    row_lengths = np.asarray(row_lengths)
    return np.repeat(np.arange(row_lengths.size, dtype=np.int64), row_lengths)


def position_in_row(row_lengths) -> np.ndarray:
    """[sum(row_lengths)] int64: each element's index inside its row.

    >>> position_in_row([2, 0, 3]).tolist()
    [0, 1, 0, 1, 2]
    """
    row_lengths = np.asarray(row_lengths)
    splits = row_splits_from_lengths(row_lengths)
    return np.arange(splits[-1]) - np.repeat(splits[:-1], row_lengths)


def sum_over_rows(values, row_splits) -> np.ndarray:
    """[R] sums of each row of ``values`` (empty rows sum to 0).

    >>> sum_over_rows(np.array([1, 2, 3, 4]), np.array([0, 1, 1, 4])).tolist()
    [1, 0, 9]
    """
    totals = np.concatenate([[0], np.cumsum(values)])
    return totals[row_splits[1:]] - totals[row_splits[:-1]]


def exclusive_sum_in_row(values, row_lengths) -> np.ndarray:
    """[N] for each element, the sum of the values before it in its row
    (a sequence's offset in its pack, from the sequences' lengths).

    >>> exclusive_sum_in_row(np.array([3, 2, 4, 1]), [2, 2]).tolist()
    [0, 3, 0, 4]
    """
    values = np.asarray(values)
    running = np.cumsum(values) - values
    starts = row_splits_from_lengths(row_lengths)[:-1]
    return running - np.repeat(running[np.minimum(starts, max(running.size - 1, 0))]
                               if running.size else starts, row_lengths)


def take_rows_index(row_splits, row_lengths, rows):
    """Where rows ``rows`` of a ragged array lie in its flat values, concatenated,
    and their lengths: ``values[index]`` is the ragged array of those rows."""
    row_lengths = np.asarray(row_lengths)
    taken = row_lengths[rows]
    starts = np.asarray(row_splits)[:-1][rows]
    # index = start of the element's row + its position in the row
    shift = starts - (np.cumsum(taken) - taken)
    return np.repeat(shift, taken) + np.arange(int(taken.sum())), taken
