"""Coarse planning: column generation over length classes, certified by an
exact relaxation.

At S = 8192 with 4 sequences per pack, column generation over the 8,101
lengths of a long-context histogram takes 35 s, 25 of them pricing: the
table of maximal 3-patterns has 5.6 M rows, priced 184 times (10 s), and
the dynamic program for 4-patterns, O(D S n) (0.7 s a call at all 8,101
lengths), is called 118 times (15 s). Where rows are not filled to the last
token (there the count of sequences per pack binds, not the tokens),
lengths can be grouped into classes of ``g = S / 1024`` tokens at almost no cost:

- **The plan** (`round_up`, `refine`): every length is rounded up to its
  class, ``ceil(l / g)``, and the histogram of classes is planned by column
  generation with capacity ``S / g`` (1,024 lengths at most). A pack of
  classes is a pack of real sequences (each sequence is no longer than its
  class's ``g k`` tokens), so each slot of class ``k`` takes a sequence of
  class ``k`` (`refine`), exactly as many as there are.
- **The bound** (`relaxation`): every length is rounded down,
  ``floor(l / g)``, with capacity ``S / g``. Any pack of real sequences is a
  pack of rounded-down ones (sum of floors <= floor of the sum), so the LP
  of the rounded-down histogram is a lower bound on the real LP. Rounded
  lengths may be 0; the equivalent problem with lengths ``M l' + 1`` and
  capacity ``M S / g + D`` (``M = D + 1``) has none: a pack of at most D of
  them fits exactly when its rounded-down lengths do.

The plan is kept when its packs are within the caller's gap of that bound;
else classes half as wide are tried (`class_widths`: a closer plan and a
tighter bound, about 8 s more at 8192 tokens), and then column generation
plans the real lengths. On 1 M lengths of short and long documents (the
benchmark's 'unseen' section) with 4 per pack, 1,024 classes leave the plan
0.07 % above the bound, 2,048 classes 0.03 %: 9 s instead of column
generation's 41. On the long-context
histograms at S = 8192 (1 M documents): with 4 per pack, 254,300 packs
(column generation: 254,285), 0.011 % above the bound, in 2.2 s instead of
35; with 3, 337,614 (337,608), 0.005 %, 0.6 s instead of 8.7. At 4096 the
classes are 4 tokens and the gap 0.05 % to 0.1 %: too coarse, and column
generation takes a few seconds there anyway (`eligible`).

Cost: two column-generation runs at 1,024 lengths (and two at 2,048 when
the first classes are not certified), and O(N) to refine.
"""

from __future__ import annotations

import numpy as np

from packed_bert_tf.packing.plan import strategy_counts_of_rows

# Length classes planned: column generation at 1,024 lengths takes a second
# or two.
CLASSES = 1024

# Narrower classes (S < 8192) round too much for the gap: at S = 4096 the
# plan is 0.05 % to 0.1 % above the bound.
MIN_CLASS_WIDTH = 8


def class_width(max_sequence_length: int) -> int:
    """Tokens per length class, g."""
    return max_sequence_length // CLASSES


def class_widths(max_sequence_length: int) -> tuple[int, ...]:
    """The class widths tried in turn: `class_width`, then half of it (twice the
    classes: a tighter bound and a closer plan, for about 8 s more at 8192)."""
    width = class_width(max_sequence_length)
    return (width, width // 2) if width % 2 == 0 else (width,)


def eligible(histogram: np.ndarray, max_sequence_length: int) -> bool:
    """Whether classes of `class_width` tokens are wide enough to be worth
    planning (at least `MIN_CLASS_WIDTH`) and S is a whole number of them,
    and the histogram has more lengths than classes."""
    width = class_width(max_sequence_length)
    return (width >= MIN_CLASS_WIDTH and max_sequence_length % width == 0
            and np.count_nonzero(histogram) > CLASSES)


def round_up(histogram: np.ndarray, width: int) -> np.ndarray:
    """Histogram of classes ``ceil(l / width)``: [S / width]."""
    histogram = np.asarray(histogram, dtype=np.int64)
    classes = -(-np.arange(1, histogram.size + 1) // width)
    return np.bincount(classes, weights=histogram,
                       minlength=histogram.size // width + 1)[1:].astype(np.int64)


def relaxation(histogram: np.ndarray, width: int,
               max_sequences_per_pack: int) -> tuple[np.ndarray, int]:
    """The rounded-down relaxation as a histogram of positive lengths
    ``M floor(l / width) + 1`` and its capacity ``M S / width + D``."""
    histogram = np.asarray(histogram, dtype=np.int64)
    scale = max_sequences_per_pack + 1
    capacity = scale * (histogram.size // width) + max_sequences_per_pack
    lengths = scale * (np.arange(1, histogram.size + 1) // width) + 1
    return (np.bincount(lengths, weights=histogram,
                        minlength=capacity + 1)[1:].astype(np.int64), capacity)


def refine(class_pairs, histogram: np.ndarray, width: int) -> list[tuple[tuple[int, ...], int]]:
    """Real (strategy, count) pairs from a plan of classes: each slot of
    class k, in plan order, takes the next sequence of class k, shortest
    first. The plan must hold exactly the histogram's sequences per class."""
    histogram = np.asarray(histogram, dtype=np.int64)
    if not class_pairs:
        return []
    depth = max(len(strategy) for strategy, _ in class_pairs)
    strategies = np.zeros((len(class_pairs), depth), dtype=np.int64)
    for row, (strategy, _) in enumerate(class_pairs):
        strategies[row, :len(strategy)] = strategy
    packs = np.repeat(strategies, [count for _, count in class_pairs], axis=0)
    slots = packs.ravel()
    filled = np.flatnonzero(slots)
    # Slots sorted by class, sequences sorted by length (so by class): the
    # i-th of each meet.
    order = filled[np.argsort(slots[filled], kind="stable")]
    lengths = np.repeat(np.arange(1, histogram.size + 1), histogram)
    if lengths.size != order.size or (-(-lengths // width) != slots[order]).any():
        raise ValueError("the plan of classes does not hold the histogram's sequences")
    rows = np.zeros(slots.size, dtype=np.int64)
    rows[order] = lengths
    return strategy_counts_of_rows(rows.reshape(packs.shape))
