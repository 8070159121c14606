"""Pre-training sequences in compact form, and packing them into records.

numpy only. `SequenceBatch` holds unpacked sequences as ragged arrays (only
real tokens, no padding), which is what travels between the stages of the
packing pipeline. `pack_sequences` lays a batch out in the packed record
format (see `record_format`) with the project's one layout (`packed_rows`),
`unpack_records` does the inverse and checks every invariant of a packed
record on the way.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping, Sequence

import numpy as np

from packed_bert_tf.data.packed.packed_rows import PackSpec, check_fits, lay_out
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.packing import PackAssignment, assign_sequences, pack_lengths
from packed_bert_tf.packing.ragged import position_in_row, row_splits_from_lengths, take_rows_index


@dataclasses.dataclass(frozen=True, eq=False)
class SequenceBatch:
    """N unpacked pre-training sequences without padding (ragged arrays).

    `token_splits` and `masked_splits` (where each sequence starts in the
    flat arrays) are computed once, on first use; build changed copies with
    ``dataclasses.replace``.

    Attributes:
      lengths: [N] int32, real tokens per sequence.
      token_ids: [sum(lengths)] uint16 or int32, all sequences' tokens.
      segment_ids: [sum(lengths)] int8, the segment ids of all sequences' tokens.
      masked_counts: [N] int32, masked-LM predictions per sequence.
      masked_positions: [sum(masked_counts)] int16, positions relative to the
        sequence's first token ([CLS]), in record order.
      masked_ids: [sum(masked_counts)] int32, in record order.
      next_sentence_labels: [N] int8.
    """

    lengths: np.ndarray
    token_ids: np.ndarray
    segment_ids: np.ndarray
    masked_counts: np.ndarray
    masked_positions: np.ndarray
    masked_ids: np.ndarray
    next_sentence_labels: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.size)

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.size)

    @classmethod
    def from_unpacked_arrays(cls, arrays: Mapping[str, np.ndarray], *,
                             source: str = "records", first_record: int = 0
                             ) -> "SequenceBatch":
        """Compacts unpacked records (the MLPerf feature arrays).

        Raises ValueError naming `source` and the record index when a record
        breaks the format: input_mask not a run of 1s then 0s, or a real
        masked-LM prediction (weight > 0) outside the sequence.
        """
        input_mask = np.asarray(arrays["input_mask"])
        num_records, max_len = input_mask.shape
        lengths = input_mask.sum(axis=1).astype(np.int32)
        prefix = np.arange(max_len)[None, :] < lengths[:, None]
        bad = np.flatnonzero((input_mask != prefix).any(axis=1) | (lengths == 0))
        if bad.size:
            raise ValueError(f"{source}: record {first_record + bad[0]}: input_mask is "
                             "not a non-empty run of 1s followed by 0s")
        real_masked = np.asarray(arrays["masked_lm_weights"]) > 0
        positions = np.asarray(arrays["masked_lm_positions"])
        outside = real_masked & ((positions < 0) | (positions >= lengths[:, None]))
        bad = np.flatnonzero(outside.any(axis=1))
        if bad.size:
            raise ValueError(f"{source}: record {first_record + bad[0]}: a masked-LM "
                             "position lies outside the sequence")
        input_ids = np.asarray(arrays["input_ids"])
        # Compact: BERT vocabularies fit 16 bits (this batch may travel).
        # Narrowed before the selection when every value fits (selecting
        # 2-byte values is faster than 8-byte ones; the same result).
        if input_ids.size and 0 <= input_ids.min() and input_ids.max() < 1 << 16:
            token_ids = input_ids.astype(np.uint16)[prefix]
        else:
            token_ids = input_ids[prefix]
            narrow = token_ids.size and 0 <= token_ids.min() and token_ids.max() < 1 << 16
            token_ids = token_ids.astype(np.uint16 if narrow else np.int32)
        return cls(
            lengths=lengths,
            token_ids=token_ids,
            segment_ids=np.asarray(arrays["segment_ids"]).astype(np.int8)[prefix],
            masked_counts=real_masked.sum(axis=1).astype(np.int32),
            masked_positions=positions[real_masked].astype(np.int16),
            masked_ids=np.asarray(arrays["masked_lm_ids"])[real_masked].astype(np.int32),
            next_sentence_labels=np.asarray(
                arrays["next_sentence_labels"]).reshape(-1).astype(np.int8))

    @functools.cached_property
    def token_splits(self) -> np.ndarray:
        """[N + 1] where each sequence's tokens start in `token_ids`."""
        return row_splits_from_lengths(self.lengths)

    @functools.cached_property
    def masked_splits(self) -> np.ndarray:
        """[N + 1] where each sequence's predictions start in `masked_ids`."""
        return row_splits_from_lengths(self.masked_counts)

    def take(self, indices: np.ndarray) -> "SequenceBatch":
        """The sequences at `indices`, in that order."""
        indices = np.asarray(indices, dtype=np.int64)
        tokens, lengths = take_rows_index(self.token_splits, self.lengths, indices)
        masked, masked_counts = take_rows_index(self.masked_splits,
                                                   self.masked_counts, indices)
        return SequenceBatch(lengths, self.token_ids[tokens], self.segment_ids[tokens],
                             masked_counts, self.masked_positions[masked],
                             self.masked_ids[masked], self.next_sentence_labels[indices])

    @classmethod
    def concatenate(cls, batches: Sequence["SequenceBatch"]) -> "SequenceBatch":
        fields = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: np.concatenate([getattr(b, name) for b in batches])
                      for name in fields})

    def fingerprints(self) -> np.ndarray:
        """[N] uint64 hash of everything in each sequence.

        Equal sequences have equal fingerprints; different ones collide with
        probability about 2**-64 per pair. Used to prove that packing kept
        every sequence exactly once.
        """
        tokens = _ragged_hash(self.token_ids.astype(np.uint64) * np.uint64(4)
                              + self.segment_ids.astype(np.uint64), self.lengths)
        masked = _ragged_hash(self.masked_positions.astype(np.uint64) << np.uint64(32)
                              | self.masked_ids.astype(np.uint64), self.masked_counts)
        with np.errstate(over="ignore"):
            return (tokens * np.uint64(0x9E3779B97F4A7C15)
                    ^ masked * np.uint64(0xC2B2AE3D27D4EB4F)
                    ^ (self.lengths.astype(np.uint64) << np.uint64(40))
                    ^ self.next_sentence_labels.astype(np.uint64))


def _ragged_hash(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Polynomial hash modulo 2**64 of each row of a ragged uint64 array."""
    base = np.uint64(0x100000001B3)
    max_len = int(lengths.max(initial=0))
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max(max_len, 1), base, dtype=np.uint64))
        mixed = (values ^ np.uint64(0x5851F42D4C957F2D)) * powers[position_in_row(lengths)]
    hashes = np.zeros(lengths.size, dtype=np.uint64)
    np.add.at(hashes, np.repeat(np.arange(lengths.size), lengths), mixed)
    return hashes


# --------------------------------------------------------------- packing
def masked_overflow_fix(lengths: np.ndarray, masked_counts: np.ndarray,
                        packs: PackAssignment, *, max_masked_tokens: int,
                        max_sequence_length: int, max_sequences_per_pack: int,
                        algorithm: str = "optimal", seed: int = 0
                        ) -> tuple[PackAssignment, int]:
    """Re-plans packs whose sequences hold more than M masked tokens in all.

    The sequences of such packs are packed again on their own (same
    algorithm); whatever still overflows goes one sequence per pack, which
    always fits since no sequence holds more than M. Nothing is truncated or
    dropped.

    Returns the new assignment and the number of sequences re-planned.
    """
    if masked_counts.size and masked_counts.max() > max_masked_tokens:
        worst = int(np.argmax(masked_counts))
        raise ValueError(f"sequence {worst} holds {masked_counts[worst]} masked tokens, "
                         f"more than max_masked_tokens={max_masked_tokens}")
    final: list[tuple[np.ndarray, np.ndarray]] = []  # (depths, sequence indices)
    pending, replanned = packs, 0
    for replan in (True, False):
        depths = pending.sequences_per_pack
        fits = pending.sum_per_pack(masked_counts[pending.sequence_indices]) \
            <= max_masked_tokens
        keep = np.repeat(fits, depths)
        final.append((depths[fits], pending.sequence_indices[keep]))
        released = pending.sequence_indices[~keep]
        pending = None
        if not released.size:
            break
        if replan:
            replanned = int(released.size)
            plan = pack_lengths(lengths[released], max_sequence_length,
                                max_sequences_per_pack, algorithm)
            local = assign_sequences(lengths[released], plan, seed=seed)
            pending = PackAssignment(local.row_splits, released[local.sequence_indices])
        else:
            pending = PackAssignment.from_sequences_per_pack(np.ones_like(released),
                                                             released)
    if pending is not None:
        final.append((pending.sequences_per_pack, pending.sequence_indices))
    return PackAssignment.from_sequences_per_pack(
        np.concatenate([d for d, _ in final]),
        np.concatenate([i for _, i in final])), replanned


def pack_sequences(batch: SequenceBatch, packs: PackAssignment,
                   record_format: RecordFormat, *, compact: bool = False
                   ) -> dict[str, np.ndarray]:
    """Lays sequences out as packed records: name -> [num_packs, length] int32
    (masked_lm_weights float32).

    With ``compact``, the four [num_packs, S] token features come in narrower
    integer types that hold their values (input_ids in the batch's token
    type, segment_ids int8, input_mask uint8, positions int16): the same
    values, a quarter to half the memory for the encoder to read.

    Pack k holds ``batch.take(packs[k])`` in that order, laid out by
    `packed_bert_tf.data.packed.packed_rows.lay_out` under
    ``PackSpec.pretraining(M)``. Cost O(tokens + packs x (S + D + M)).

    Raises ValueError if a pack holds more than S tokens, D sequences or M
    masked tokens (run `masked_overflow_fix` first).
    """
    max_len = record_format.max_seq_length
    max_depth = record_format.max_sequences_per_pack
    spec = PackSpec.pretraining(record_format.max_masked_tokens)
    taken = batch.take(packs.sequence_indices)  # pack order
    arrays = {"lengths": taken.lengths, "input_ids": taken.token_ids,
              "segment_ids": taken.segment_ids,
              "next_sentence_labels": taken.next_sentence_labels,
              "prediction_counts": taken.masked_counts,
              "masked_lm_positions": taken.masked_positions,
              "masked_lm_ids": taken.masked_ids}
    depths = packs.sequences_per_pack
    check_fits(spec, arrays, depths, max_len, max_depth)
    dtypes = {"masked_lm_weights": np.float32}
    if compact:
        dtypes.update(input_ids=batch.token_ids.dtype, segment_ids=batch.segment_ids.dtype,
                      input_mask=np.uint8 if max_depth <= 0xFF else np.int32,
                      positions=np.int16 if max_len <= 1 << 15 else np.int32)
    out = lay_out(spec, arrays, depths, max_len, max_depth, dtypes)
    return {name: out[name] for name in record_format.feature_lengths()}


def unpack_records(arrays: Mapping[str, np.ndarray], *, source: str = "records",
                   first_record: int = 0) -> tuple[SequenceBatch, np.ndarray]:
    """Splits packed records back into sequences, checking every invariant.

    Returns the sequences (record by record, in pack order) and, for each,
    its record index. Raises ValueError naming `source`, the record and the
    broken rule: input_mask not 1..k in contiguous runs then 0s, positions not
    restarting at 0 in each sequence, next-sentence positions/weights not
    matching the sequences, masked-LM slots not filled in order, a masked
    weight that is not the sequence index of the token it points at, values
    outside padding that should be 0.
    """
    input_mask = np.asarray(arrays["input_mask"]).astype(np.int64)
    num_records, max_len = input_mask.shape

    def fail(rows, rule):
        rows = np.flatnonzero(rows)
        if rows.size:
            raise ValueError(f"{source}: record {first_record + rows[0]}: {rule}")

    # input_mask: 1 1 1 2 2 0 0 -> non-decreasing by steps of 0/1 from 1, then 0s.
    lengths_total = (input_mask > 0).sum(axis=1)
    in_prefix = np.arange(max_len)[None, :] < lengths_total[:, None]
    fail((input_mask > 0) != in_prefix, "input_mask has padding before real tokens")
    fail(lengths_total == 0, "the record holds no tokens")
    steps = np.diff(input_mask, axis=1)
    fail(((steps != 0) & (steps != 1) & in_prefix[:, 1:]).any(axis=1)
         | (input_mask[:, 0] != 1),
         "input_mask does not number the sequences 1, 2, ... in order")
    starts_matrix = in_prefix & np.concatenate(
        [np.ones((num_records, 1), bool), steps == 1], axis=1)
    depths = starts_matrix.sum(axis=1)

    positions = np.asarray(arrays["positions"]).astype(np.int64)
    sequence_start_column = np.maximum.accumulate(
        np.where(starts_matrix, np.arange(max_len)[None, :], 0), axis=1)
    expected_positions = np.where(in_prefix,
                                  np.arange(max_len)[None, :] - sequence_start_column, 0)
    fail((positions != expected_positions).any(axis=1),
         "positions do not restart at 0 in each sequence (or are not 0 on padding)")
    for name in ("input_ids", "segment_ids"):
        fail(((np.asarray(arrays[name]) != 0) & ~in_prefix).any(axis=1),
             f"{name} is not 0 on padding")

    max_depth = np.asarray(arrays["next_sentence_positions"]).shape[1]
    fail(depths > max_depth, f"more than {max_depth} sequences")
    record_of_sequence, start_column = np.nonzero(starts_matrix)
    slot = position_in_row(depths)
    ns_positions = np.asarray(arrays["next_sentence_positions"]).astype(np.int64)
    ns_weights = np.asarray(arrays["next_sentence_weights"]).astype(np.int64)
    ns_labels = np.asarray(arrays["next_sentence_labels"]).astype(np.int64)
    used_slot = np.arange(max_depth)[None, :] < depths[:, None]
    expected_ns = np.zeros_like(ns_positions)
    expected_ns[record_of_sequence, slot] = start_column
    fail((ns_positions != expected_ns).any(axis=1),
         "next_sentence_positions are not the sequences' first tokens")
    fail((ns_weights != used_slot).any(axis=1),
         "next_sentence_weights are not 1 for each sequence and 0 after")
    fail(((ns_labels != 0) & ~used_slot).any(axis=1), "next_sentence_labels set "
         "for an empty slot")

    weights = np.asarray(arrays["masked_lm_weights"])
    masked_positions = np.asarray(arrays["masked_lm_positions"]).astype(np.int64)
    masked_ids = np.asarray(arrays["masked_lm_ids"]).astype(np.int64)
    fail((weights != np.rint(weights)).any(axis=1) | (weights < 0).any(axis=1),
         "masked_lm_weights are not sequence indices")
    weights = np.rint(weights).astype(np.int64)
    real = weights > 0
    masked_counts_total = real.sum(axis=1)
    fail((real != (np.arange(real.shape[1])[None, :] < masked_counts_total[:, None]))
         .any(axis=1), "masked-LM slots are not filled first-to-last")
    fail((((masked_positions != 0) | (masked_ids != 0)) & ~real).any(axis=1),
         "an empty masked-LM slot holds a position or id")
    clipped = np.clip(masked_positions, 0, max_len - 1)
    token_sequence = np.take_along_axis(input_mask, clipped, axis=1)
    fail((real & ((masked_positions < 0) | (masked_positions >= max_len)
                  | (token_sequence != weights))).any(axis=1),
         "a masked-LM weight is not the sequence index of its token")
    fail((real[:, 1:] & (weights[:, 1:] < weights[:, :-1])).any(axis=1),
         "masked-LM slots are not grouped by sequence in order")

    # The checks passed: cut the records into sequences.
    ends = np.empty_like(start_column)
    last_of_record = np.cumsum(depths) - 1
    ends[:-1] = start_column[1:]
    ends[last_of_record] = lengths_total[record_of_sequence[last_of_record]]
    sequence_lengths = (ends - start_column).astype(np.int32)
    masked_record, masked_slot = np.nonzero(real)
    sequence_of_masked = (np.cumsum(depths) - depths)[masked_record] + \
        weights[masked_record, masked_slot] - 1
    masked_counts = np.bincount(sequence_of_masked, minlength=start_column.size)
    masked_start = start_column[sequence_of_masked]
    batch = SequenceBatch(
        lengths=sequence_lengths,
        token_ids=np.asarray(arrays["input_ids"])[in_prefix].astype(np.int32),
        segment_ids=np.asarray(arrays["segment_ids"])[in_prefix].astype(np.int8),
        masked_counts=masked_counts.astype(np.int32),
        masked_positions=(masked_positions[real] - masked_start).astype(np.int32),
        masked_ids=masked_ids[real].astype(np.int32),
        next_sentence_labels=ns_labels[record_of_sequence, slot].astype(np.int8))
    return batch, first_record + record_of_sequence
