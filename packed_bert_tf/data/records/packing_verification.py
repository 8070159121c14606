"""Proof that a packed dataset holds exactly the sequences of an unpacked one.

Every packed record is checked against the packed format's invariants
(`packed_bert_tf.data.packed.pretraining_records.unpack_records`), cut into
sequences, and each sequence reduced to a 64-bit fingerprint
(`packed_bert_tf.data.packed.packed_rows.fingerprints`) of its tokens, segment
ids, masked-LM positions (relative to its own start) and ids, and
next-sentence label. The packed set is correct
when its fingerprints are, as a multiset, those of the unpacked set: every
sequence exactly once, nothing added. Only fingerprints are kept in memory.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from packed_bert_tf.data.packed.packed_rows import PackSpec, fingerprints
from packed_bert_tf.data.packed.pretraining_records import compact_records, unpack_records
from packed_bert_tf.data.records import record_files, tensorflow_records
from packed_bert_tf.data.records.record_format import PACKED_FEATURE_NAMES, RecordFormat


class VerificationError(ValueError):
    """The packed set does not match the unpacked one (message: first mismatch)."""


def infer_record_format(path: str) -> RecordFormat:
    """The format of a TFRecord file, read off its first record."""
    try:
        first = [serialized.numpy() for serialized in tf.data.TFRecordDataset(path).take(1)]
    except tf.errors.DataLossError:
        raise record_files.RecordError(f"{path}: not a TFRecord file (or record 0 is "
                                    f"corrupt)") from None
    except tf.errors.OpError as error:
        raise record_files.RecordError(f"{path}: cannot read it "
                                    f"({tensorflow_records.first_line(error.message)})") from None
    if not first:
        raise record_files.RecordError(f"{path}: the file holds no records")
    try:
        features = tf.train.Example.FromString(first[0]).features.feature
    except Exception:  # noqa: BLE001 - any decode failure is "not an Example"
        raise record_files.RecordError(f"{path}: record 0 is not a tf.train.Example") from None

    def length(name):
        if name not in features:
            raise record_files.RecordError(f"{path}: record 0 has no feature {name!r}")
        feature = features[name]
        return len(feature.int64_list.value) or len(feature.float_list.value)

    if "positions" in features:
        missing = [n for n in PACKED_FEATURE_NAMES if n not in features]
        if missing:
            raise record_files.RecordError(f"{path}: record 0 has no feature {missing[0]!r}")
        return RecordFormat.packed(length("input_ids"), length("masked_lm_ids"),
                                          length("next_sentence_positions"))
    return RecordFormat.unpacked(length("input_ids"), length("masked_lm_ids"))


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    unpacked_files: int
    packed_files: int
    unpacked_sequences: int
    packed_sequences: int
    packed_records: int
    real_tokens: int
    padding_tokens: int

    @property
    def efficiency(self) -> float:
        total = self.real_tokens + self.padding_tokens
        return self.real_tokens / total if total else 1.0


def _fingerprints(files, packed: bool, file_read=None):
    """Fingerprints of every sequence, and where each came from; ``file_read(path)``
    after each file."""
    prints, file_index, record_index = [], [], []
    records = tokens = padding = 0
    for number, path in enumerate(files):
        record_format = infer_record_format(path)
        if record_format.is_packed != packed:
            kind = "packed" if packed else "unpacked"
            raise record_files.RecordError(f"{path}: not in the {kind} format")
        arrays = record_files.read_arrays(path, record_format)
        if packed:
            sequences, records_of = unpack_records(arrays, source=path)
            records += arrays["input_ids"].shape[0]
            padding += int((arrays["input_mask"] == 0).sum())
        else:
            sequences = compact_records(arrays, source=path)
            records_of = np.arange(sequences["lengths"].size)
        tokens += sequences["input_ids"].size
        prints.append(fingerprints(PackSpec.pretraining(record_format.max_masked_tokens),
                                   sequences))
        file_index.append(np.full(records_of.size, number, dtype=np.int32))
        record_index.append(records_of)
        if file_read is not None:
            file_read(path)
    return (np.concatenate(prints), np.concatenate(file_index),
            np.concatenate(record_index), records, tokens, padding)


def _first_unmatched(ours: np.ndarray, theirs: np.ndarray) -> int | None:
    """Index into `ours` of a fingerprint `theirs` holds fewer times, if any."""
    order = np.argsort(ours, kind="stable")
    values, first, counts = np.unique(ours[order], return_index=True, return_counts=True)
    other_values, other_counts = np.unique(theirs, return_counts=True)
    position = np.searchsorted(other_values, values)
    found = (position < other_values.size) & (
        other_values[np.minimum(position, other_values.size - 1)] == values)
    available = np.where(found, other_counts[np.minimum(position, other_values.size - 1)], 0)
    short = np.flatnonzero(available < counts)
    if not short.size:
        return None
    # The earliest such sequence in file order.
    candidates = order[first[short] + available[short]]
    return int(candidates.min())


def verify_packing(unpacked_files, packed_files, *,
                   file_read: Callable[[str], None] | None = None) -> VerificationReport:
    """Checks that the packed files hold every unpacked sequence exactly once.

    ``file_read(path)`` is called after each file is read (a tool's progress).

    Raises:
      VerificationError: naming the first unpacked sequence (file, record)
        missing from the packed set, or the first packed sequence (file,
        record) that is not in the unpacked set (or is there once too often).
      RecordError: for a packed record that breaks the format (positions not
        restarting, inconsistent indices, ...), naming the file and record.
      ValueError: as `RecordError`.
    """
    unpacked_files, packed_files = list(unpacked_files), list(packed_files)
    source, source_file, source_record, *_ = _fingerprints(
        unpacked_files, packed=False, file_read=file_read)
    packed, packed_file, packed_record, records, packed_tokens, padding = _fingerprints(
        packed_files, packed=True, file_read=file_read)
    missing = _first_unmatched(source, packed)
    if missing is not None:
        raise VerificationError(
            f"{unpacked_files[source_file[missing]]}: record {source_record[missing]} "
            f"is not in the packed set ({len(source):,} sequences unpacked, "
            f"{len(packed):,} packed)")
    extra = _first_unmatched(packed, source)
    if extra is not None:
        raise VerificationError(
            f"{packed_files[packed_file[extra]]}: record {packed_record[extra]} holds a "
            f"sequence that is not in the unpacked set (or is there once too often)")
    return VerificationReport(
        unpacked_files=len(unpacked_files), packed_files=len(packed_files),
        unpacked_sequences=int(len(source)), packed_sequences=int(len(packed)),
        packed_records=records, real_tokens=packed_tokens, padding_tokens=padding)
