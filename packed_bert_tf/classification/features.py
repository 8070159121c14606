"""GLUE examples -> unpadded BERT inputs, as google-research/bert's run_classifier.py.

Letters: F features (one per example), T tokens of all features together.

`convert_examples_to_features` does what the reference's
``convert_single_example`` does to each example, without the padding::

    tokens       [CLS] a1 a2 a3 [SEP] b1 b2 [SEP]
    segment_ids    0    0  0  0    0   1  1    1

* a pair is cut to ``max_seq_length - 3`` word pieces by
  ``_truncate_seq_pair`` (one token at a time off the end of the longer
  text, of ``text_b`` when they are as long);
* a single text (``text_b`` None, or without word pieces as the
  reference's ``if tokens_b``) is cut to ``max_seq_length - 2`` pieces.

The result is ragged (flat token arrays and row splits), made with numpy
over all examples at once. numpy only (and the tokenizer).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing import ragged


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierFeatures:
    """Every example's tokens, unpadded, in example order.

    Feature f's tokens are ``input_ids[row_splits[f]:row_splits[f + 1]]``
    ([CLS] first, [SEP] last).

    Attributes:
      input_ids, segment_ids: [T] int32.
      row_splits: [F + 1] int64.
      label_ids: [F] int32 label ids, or float32 targets for regression
        (0 for an example without a label: a test set).
      max_seq_length: S, the most tokens any feature may have.
    """
    input_ids: np.ndarray
    segment_ids: np.ndarray
    row_splits: np.ndarray
    label_ids: np.ndarray
    max_seq_length: int

    def __post_init__(self):
        if self.row_splits.size != self.label_ids.size + 1:
            raise ValueError(f"{self.row_splits.size} row splits for "
                             f"{self.label_ids.size} labels")
        if self.length.size and self.length.max() > self.max_seq_length:
            raise ValueError(f"a feature has {self.length.max()} tokens, more than "
                             f"max_seq_length={self.max_seq_length}")

    def __len__(self) -> int:
        return int(self.label_ids.size)

    @property
    def length(self) -> np.ndarray:
        """[F] int64 tokens of each feature."""
        return np.diff(self.row_splits)

    def padded(self, name: str = "input_ids") -> np.ndarray:
        """[F, S] int32: ``input_ids`` or ``segment_ids`` padded with 0 (the
        reference's layout)."""
        values = getattr(self, name)
        lengths = self.length
        out = np.zeros((len(self), self.max_seq_length), np.int32)
        out[ragged.row_of_elements(lengths), ragged.position_in_row(lengths)] = values
        return out


def truncated_pair_lengths(length_a, length_b, max_length: int):
    """What ``_truncate_seq_pair`` keeps of each text, in closed form.

    The reference pops the last token of the longer text (``text_b`` on a
    tie) until the pair fits ``max_length``. The shorter text is untouched
    while the longer, cut to ``max_length - shorter``, is still at least as
    long; otherwise both end at half, ``text_a`` keeping the odd token.

    Args:
      length_a: [F] int word pieces of ``text_a``.
      length_b: [F] int word pieces of ``text_b`` (0 for no text_b is not
        meant here: single texts are cut to their own limit).
      max_length: ``max_seq_length - 3``.

    Returns:
      (kept_a, kept_b): [F] int64 each.
    """
    length_a = np.asarray(length_a, np.int64)
    length_b = np.asarray(length_b, np.int64)
    fits = length_a + length_b <= max_length
    shorter = np.minimum(length_a, length_b)
    one_cut = max_length - shorter >= shorter  # only the longer text loses tokens
    a_longer = length_a > length_b
    half_a, half_b = (max_length + 1) // 2, max_length // 2
    kept_a = np.where(fits, length_a, np.where(
        one_cut, np.where(a_longer, max_length - shorter, length_a), half_a))
    kept_b = np.where(fits, length_b, np.where(
        one_cut, np.where(a_longer, length_b, max_length - shorter), half_b))
    return kept_a, kept_b


def _flatten(id_lists) -> tuple[np.ndarray, np.ndarray]:
    """Lists of ids -> (flat [T] int32, lengths [F] int64)."""
    lengths = np.fromiter((len(ids) for ids in id_lists), np.int64, len(id_lists))
    flat = (np.fromiter((i for ids in id_lists for i in ids), np.int32, int(lengths.sum()))
            if len(id_lists) else np.zeros(0, np.int32))
    return flat, lengths


def _kept(flat, lengths, kept):
    """Per-row prefixes: (the kept ids [K], their row [K], position [K])."""
    row = ragged.row_of_elements(lengths)
    position = ragged.position_in_row(lengths)
    keep = position < kept[row]
    return flat[keep], row[keep], position[keep]


def convert_examples_to_features(examples, task, tokenizer, max_seq_length: int
                                 ) -> ClassifierFeatures:
    """Tokenises and truncates the examples as the reference does (unpadded).

    Args:
      examples: `packed_bert_tf.classification.glue.InputExample` list.
      task: the `GlueTask` (labels -> ids; an example whose label is None
        gets 0).
      tokenizer: `packed_bert_tf.data.tokenization.WordPieceTokenizer`.
      max_seq_length: S.

    Returns:
      `ClassifierFeatures`.

    Raises:
      ValueError: ``max_seq_length`` too small for [CLS] and two [SEP], or
        a label the task does not know (from ``task.label_id``).
    """
    if max_seq_length < 4:
        raise ValueError(f"--max_seq_length={max_seq_length} leaves no room for text "
                         f"after [CLS] and two [SEP]")
    ids_a, length_a = _flatten(tokenizer.encode_batch([e.text_a for e in examples]))
    ids_b, length_b = _flatten(tokenizer.encode_batch([e.text_b or "" for e in examples]))
    # As the reference's ``if tokens_b``: a text_b without word pieces (None,
    # empty) makes a single-text example.
    has_b = length_b > 0
    pair_a, pair_b = truncated_pair_lengths(length_a, length_b, max_seq_length - 3)
    kept_a = np.where(has_b, pair_a, np.minimum(length_a, max_seq_length - 2))
    kept_b = np.where(has_b, pair_b, 0)
    special = np.where(has_b, 3, 2)

    # [CLS] a [SEP] (b [SEP]): where each piece goes in the flat output.
    lengths = kept_a + kept_b + special
    row_splits = ragged.row_splits_from_lengths(lengths)
    start = row_splits[:-1]
    input_ids = np.zeros(int(lengths.sum()), np.int32)
    segment_ids = np.zeros_like(input_ids)
    input_ids[start] = tokenizer.cls_id
    input_ids[start + kept_a + 1] = tokenizer.sep_id
    values, row, position = _kept(ids_a, length_a, kept_a)
    input_ids[start[row] + 1 + position] = values
    values, row, position = _kept(ids_b, length_b, kept_b)
    input_ids[start[row] + kept_a[row] + 2 + position] = values
    input_ids[row_splits[1:][has_b] - 1] = tokenizer.sep_id
    # Segment 1: text_b and its [SEP], the tokens after [CLS] a [SEP] of a pair.
    second = ragged.position_in_row(lengths) >= np.repeat(kept_a + 2, lengths)
    segment_ids[second] = 1
    return ClassifierFeatures(input_ids, segment_ids, row_splits,
                              label_ids(examples, task), max_seq_length)


def label_ids(examples, task) -> np.ndarray:
    """[F] the examples' label ids (float32 targets for regression); None -> 0."""
    dtype = np.float32 if task.is_regression else np.int32
    return np.array([0 if e.label is None else task.label_id(e.label) for e in examples],
                    dtype)
