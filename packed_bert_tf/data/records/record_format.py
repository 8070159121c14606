"""Feature names and shapes of the two pre-training record formats.

Letters: S sequence length, P masked-LM predictions per unpacked sequence,
M masked-LM slots per pack, D max sequences per pack.

Unpacked (MLPerf / google-research BERT ``create_pretraining_data.py``), int64
on disk unless noted:

    input_ids, input_mask, segment_ids                    [S]
    masked_lm_positions, masked_lm_ids                    [P]
    masked_lm_weights                                     [P] float
    next_sentence_labels                                  [1]

Packed (the MLPerf TensorFlow packed datasets), int64 on disk unless noted:

    input_ids, segment_ids                                [S]
    input_mask   sequence index inside the pack, 1..D, 0 = padding   [S]
    positions    restarting at 0 at each sequence's [CLS]            [S]
    masked_lm_positions, masked_lm_ids                    [M]
    masked_lm_weights  sequence index of the masked token, 0 = empty [M] float
    next_sentence_positions  each sequence's [CLS] offset            [D]
    next_sentence_labels, next_sentence_weights           [D]

A pack of two sequences at S = 8 (a = first, b = second)::

    input_ids   a1 a2 a3 a4 b1 b2 b3  0
    input_mask   1  1  1  1  2  2  2  0
    positions    0  1  2  3  0  1  2  0
    next_sentence_positions  0 4 0

This module is plain Python and numpy: it names things, the readers and
writers use it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

UNPACKED_FEATURE_NAMES = (
    "input_ids", "input_mask", "segment_ids", "masked_lm_positions",
    "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")

PACKED_FEATURE_NAMES = (
    "input_ids", "input_mask", "segment_ids", "positions", "masked_lm_positions",
    "masked_lm_ids", "masked_lm_weights", "next_sentence_positions",
    "next_sentence_labels", "next_sentence_weights")

#: Written beside packed shards by the packing tool; training reads the
#: packing factor from it.
PACKING_STATS_FILE = "packing_stats.json"

#: The only features stored as float32 on disk; all others are int64.
FLOAT_FEATURE_NAMES = frozenset({"masked_lm_weights"})


def default_max_masked_tokens(max_predictions_per_seq: int,
                              max_sequences_per_pack: int) -> int:
    """M = P + D - 1: enough when each sequence masks at most round(0.15 x length).

    Each sequence's count exceeds 0.15 x its length by at most 0.5 after
    rounding, so D sequences of S tokens in all hold at most 0.15 S + D / 2
    masked tokens; with P = round(0.15 S) that is below P + D - 1 for D >= 1.
    """
    return max_predictions_per_seq + max_sequences_per_pack - 1


@dataclasses.dataclass(frozen=True)
class RecordFormat:
    """The shape of every feature of one record format (all fixed length)."""

    is_packed: bool
    max_seq_length: int  # S
    max_masked_tokens: int  # P unpacked, M packed
    max_sequences_per_pack: int = 1  # D; 1 for the unpacked format

    def __post_init__(self):
        for name in ("max_seq_length", "max_masked_tokens",
                     "max_sequences_per_pack"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.is_packed and self.max_sequences_per_pack != 1:
            raise ValueError("the unpacked format has one sequence per record")

    @classmethod
    def unpacked(cls, max_seq_length: int, max_predictions_per_seq: int) -> "RecordFormat":
        """The MLPerf / google-research BERT format: S tokens, P masked-LM slots."""
        return cls(False, max_seq_length, max_predictions_per_seq, 1)

    @classmethod
    def packed(cls, max_seq_length: int, max_masked_tokens: int,
               max_sequences_per_pack: int) -> "RecordFormat":
        """The packed format: S tokens, M masked-LM slots (see
        `default_max_masked_tokens`), up to D sequences per record."""
        return cls(True, max_seq_length, max_masked_tokens, max_sequences_per_pack)

    @property
    def feature_names(self) -> tuple[str, ...]:
        return PACKED_FEATURE_NAMES if self.is_packed else UNPACKED_FEATURE_NAMES

    def feature_lengths(self) -> dict[str, int]:
        """Feature name -> number of values per record."""
        lengths = {"input_ids": self.max_seq_length,
                   "input_mask": self.max_seq_length,
                   "segment_ids": self.max_seq_length,
                   "masked_lm_positions": self.max_masked_tokens,
                   "masked_lm_ids": self.max_masked_tokens,
                   "masked_lm_weights": self.max_masked_tokens}
        if self.is_packed:
            lengths["positions"] = self.max_seq_length
            for name in ("next_sentence_positions", "next_sentence_labels",
                         "next_sentence_weights"):
                lengths[name] = self.max_sequences_per_pack
        else:
            lengths["next_sentence_labels"] = 1
        return {name: lengths[name] for name in self.feature_names}


#: What each id feature indexes, in error lines.
_ID_NAMES = {"input_ids": "token id", "masked_lm_ids": "token id",
             "segment_ids": "segment id", "positions": "position",
             "masked_lm_positions": "masked-LM position"}


@dataclasses.dataclass(frozen=True)
class IdLimits:
    """The ids a model can look up, for checking records before it reads them.

    An embedding lookup or gather with an id out of its table does not fail
    under XLA: it clamps the id and trains on a wrong row, silently. Every id
    feature of a record read for a model is checked against its limit:

    ===================== ==========================
    feature               limit
    ===================== ==========================
    input_ids             vocab_size
    masked_lm_ids         vocab_size
    segment_ids           type_vocab_size
    positions (packed)    max_position_embeddings
    masked_lm_positions   the record length S
    ===================== ==========================

    (Unpacked records' positions are 0..S-1: S itself is checked against
    ``max_position_embeddings`` once, with the flags.)

    Attributes:
      vocab_size, type_vocab_size, max_position_embeddings: the model
        config's (`packed_bert_tf.models.BertConfig`).
    """

    vocab_size: int
    type_vocab_size: int
    max_position_embeddings: int

    @classmethod
    def of_config(cls, config) -> "IdLimits":
        """The limits of a model config (anything with the three fields)."""
        return cls(config.vocab_size, config.type_vocab_size,
                   config.max_position_embeddings)

    def limits(self, feature_names, max_seq_length: int) -> dict[str, int]:
        """Id feature -> its limit, for those of ``feature_names`` that are ids."""
        limits = {"input_ids": self.vocab_size, "masked_lm_ids": self.vocab_size,
                  "segment_ids": self.type_vocab_size,
                  "positions": self.max_position_embeddings,
                  "masked_lm_positions": max_seq_length}
        return {name: limit for name, limit in limits.items() if name in feature_names}

    def first_out_of_range(self, arrays) -> tuple[int, int, str] | None:
        """The first row of ``arrays`` (feature -> [N, K] numpy) with an id out of
        range, the column of its first such id, and what is wrong: ``(290, 5,
        "segment id 2 is out of range for type_vocab_size 2 of
        --bert_config_file")``; None when every id is in range."""
        first = None
        for name, limit in self.limits(arrays, arrays["input_ids"].shape[1]).items():
            values = arrays[name]
            bad = (values < 0) | (values >= limit)  # [N, K]
            rows = np.flatnonzero(bad.any(axis=1))
            if rows.size and (first is None or rows[0] < first[0]):
                row = int(rows[0])
                column = int(np.flatnonzero(bad[row])[0])
                first = (row, column, self.describe(name, int(values[row, column]), limit))
        return first

    def describe(self, name: str, value: int, limit: int) -> str:
        """One id out of range, in words, with the limit and where it comes from."""
        source = {"input_ids": "vocab_size", "masked_lm_ids": "vocab_size",
                  "segment_ids": "type_vocab_size",
                  "positions": "max_position_embeddings"}.get(name)
        where = (f"{source} {limit} of --bert_config_file" if source
                 else f"the sequence length {limit}")
        return f"{_ID_NAMES[name]} {value} is out of range for {where}"
