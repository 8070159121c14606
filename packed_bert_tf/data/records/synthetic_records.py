"""Synthetic unpacked pre-training records with chosen lengths (tests, benchmarks).

The records follow the MLPerf format and the reference tool's conventions
([CLS] A [SEP] B [SEP], masked-LM count min(P, max(1, round(0.15 x length))),
never on [CLS]/[SEP]), with random token ids: realistic in shape and size,
meaningless in content.
"""

from __future__ import annotations

import numpy as np

from packed_bert_tf.data.records.record_format import RecordFormat

CLS_ID, SEP_ID, FIRST_WORD_ID = 101, 102, 1000


def lengths_from_histogram(histogram, num_sequences: int, seed: int = 0) -> np.ndarray:
    """Draws sequence lengths (1-based bins) in proportion to a histogram."""
    histogram = np.asarray(histogram, dtype=np.float64)
    rng = np.random.default_rng(seed)
    return rng.choice(np.arange(1, histogram.size + 1), size=num_sequences,
                      p=histogram / histogram.sum())


def unpacked_arrays(lengths, *, max_seq_length: int, max_predictions_per_seq: int,
                    vocab_size: int = 30522, masked_lm_prob: float = 0.15,
                    seed: int = 0) -> dict[str, np.ndarray]:
    """Unpacked records of the given lengths (each at least 5 tokens)."""
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 5)
    record_format = RecordFormat.unpacked(max_seq_length, max_predictions_per_seq)
    if lengths.max(initial=0) > max_seq_length:
        raise ValueError("a length exceeds max_seq_length")
    rng = np.random.default_rng(seed)
    num = lengths.size
    column = np.arange(max_seq_length)[None, :]
    real = column < lengths[:, None]
    # [CLS] A [SEP] B [SEP]: A takes 1 .. length - 4 tokens.
    length_a = 1 + (rng.random(num) * (lengths - 4)).astype(np.int64)
    first_sep = 1 + length_a
    input_ids = np.where(real, rng.integers(FIRST_WORD_ID, vocab_size,
                                            (num, max_seq_length)), 0)
    input_ids[:, 0] = CLS_ID
    input_ids[np.arange(num), first_sep] = SEP_ID
    input_ids[np.arange(num), lengths - 1] = SEP_ID
    segment_ids = ((column > first_sep[:, None]) & real).astype(np.int64)

    masked_count = np.minimum(max_predictions_per_seq, np.maximum(
        1, np.rint(lengths * masked_lm_prob).astype(np.int64)))
    # Random distinct word positions: smallest random keys, sorted.
    keys = rng.random((num, max_seq_length))
    special = (column == 0) | (column == first_sep[:, None]) | (column == lengths[:, None] - 1)
    keys[special | ~real] = np.inf
    chosen = np.sort(np.argsort(keys, axis=1)[:, :max_predictions_per_seq], axis=1)
    slot = np.arange(max_predictions_per_seq)[None, :]
    # Keep the first masked_count positions in position order.
    keep_keys = np.where(slot < masked_count[:, None],
                         np.take_along_axis(keys, chosen, axis=1), np.inf)
    picked = np.take_along_axis(chosen, np.argsort(keep_keys, axis=1), axis=1)
    used = slot < masked_count[:, None]
    positions = np.where(used, np.sort(np.where(used, picked, max_seq_length), axis=1), 0)
    arrays = {
        "input_ids": input_ids,
        "input_mask": real.astype(np.int64),
        "segment_ids": segment_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": np.where(used, np.take_along_axis(input_ids, positions, axis=1), 0),
        "masked_lm_weights": used.astype(np.float32),
        "next_sentence_labels": rng.integers(0, 2, (num, 1)),
    }
    assert set(arrays) == set(record_format.feature_names)
    return arrays
