"""The record codec: ``tf.train.Example`` records <-> arrays, and TFRecord framing.

The package's C extension (``_record_codec.c``, compiled by ``pip install``)
does the work, whole batches at a time, without importing TensorFlow (about
4 s of CPU per process):

* decoding: frames the records of a file, checks both masked CRC-32C of each
  as TensorFlow's reader does, and parses the Example wire format straight
  into [n, length] arrays, several times faster than ``tf.io.parse_example``;
* encoding: the bytes of ``SerializeToString(deterministic=True)`` (features
  in sorted key order) for every row of [N, K] arrays, two passes over the
  values (sizes, then bytes);
* framing: each record's length, the length's masked CRC-32C, the bytes and
  their masked CRC-32C, the bytes of ``tf.io.TFRecordWriter``.

Where the extension was not built, or for files that are not local
(``gs://`` ...), TensorFlow does the same (`packed_bert_tf.data.records.tensorflow_records`);
`packed_bert_tf.data.records.record_files` says which (`uses_record_codec`)
and is the interface over both. Both give the same arrays and bytes, and name
a bad record in the same words (`failure_message`; tested).
"""

from __future__ import annotations

import mmap
import os
from typing import Mapping

import numpy as np

from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES

try:
    from packed_bert_tf.data.records import _record_codec
except ImportError:  # built without a C compiler: TensorFlow reads and writes
    _record_codec = None


class RecordError(ValueError):
    """A record file that cannot be read as the expected format."""


def available() -> bool:
    """Whether the C codec was built (``pip install`` compiles it)."""
    return _record_codec is not None


# ------------------------------------------------------------------ decoding
def iter_file_batches(path: str, lengths: Mapping[str, int], batch_size: int,
                      int_dtype: np.dtype, reuse_buffers: bool):
    """Yields (first record, name -> [n, length] arrays) of a local file.

    See `packed_bert_tf.data.records.record_files.iter_array_batches` for the arguments.

    Raises:
      RecordError: naming the file and the record (`failure_message`).
    """
    names = tuple(name.encode() for name in lengths)
    dtypes = [np.float32 if name in FLOAT_FEATURE_NAMES else int_dtype for name in lengths]

    def buffers():
        return tuple(np.empty((batch_size, length), dtype)
                     for length, dtype in zip(lengths.values(), dtypes))

    try:
        file = open(path, "rb")
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    with file:
        size = os.fstat(file.fileno()).st_size
        if not size:
            return
        # Mapped, not read: the pages come from the page cache, populated in
        # one go rather than one fault per page.
        with mmap.mmap(file.fileno(), 0, flags=mmap.MAP_SHARED | _MAP_POPULATE,
                       prot=mmap.PROT_READ) as data:
            outputs = buffers()
            offset = start = 0
            while offset < size:
                if not reuse_buffers and start:
                    outputs = buffers()
                records, offset, failure = _record_codec.decode_records(
                    data, offset, batch_size, names, outputs, True)
                if failure is not None:
                    raise RecordError(failure_message(path, start + records, lengths,
                                                      *failure))
                yield start, {name: values[:records]
                              for name, values in zip(lengths, outputs)}
                start += records


_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux
_LIST_NAMES = {1: "a bytes_list", 2: "a float_list", 3: "an int64_list"}


def failure_message(path: str, record: int, lengths: Mapping[str, int], kind: str,
                    feature: int = 0, count: int = 0) -> str:
    """One line naming the file, the record and (where one is at fault) the
    feature, whichever reader found the failure.

    Args:
      path: the file.
      record: the record's index in the file.
      lengths: feature name -> values per record, in the reader's order.
      kind: ``truncated``, ``length_checksum``, ``data_checksum``,
        ``not_example``, ``missing``, ``wrong_type`` (``count``: the list
        kind found, 1 bytes, 2 float, 3 int64), ``wrong_count`` (``count``:
        the values found) or ``out_of_range`` (an int32 output).
      feature: index of the feature at fault in `lengths`.
      count: what ``kind`` says it is (else unused).
    """
    if kind == "truncated":
        return f"{path}: record {record} is corrupt (the file ends inside it)"
    if kind == "length_checksum":
        return f"{path}: record {record} is corrupt (its length fails its checksum)"
    if kind == "data_checksum":
        return f"{path}: record {record} is corrupt (its bytes fail their checksum)"
    if kind == "not_example":
        return f"{path}: record {record} is not a tf.train.Example"
    name = list(lengths)[feature]
    if kind == "missing":
        return f"{path}: record {record} has no feature {name!r}"
    if kind == "wrong_type":
        expected = _LIST_NAMES[2 if name in FLOAT_FEATURE_NAMES else 3]
        return (f"{path}: record {record} feature {name!r} is {_LIST_NAMES[count]}, "
                f"expected {expected}")
    if kind == "wrong_count":
        return (f"{path}: record {record} feature {name!r} has {count} values, "
                f"expected {lengths[name]}")
    if kind == "out_of_range":
        return f"{path}: record {record} feature {name!r} has a value outside int32"
    raise AssertionError(f"unknown failure {kind!r}")


def narrowed_to_int32(path: str, start: int, arrays: dict) -> dict:
    """int64 features as int32, refusing a value outside its range: the first
    record with one, as the C decoder does."""
    first_bad = {}
    for name, values in arrays.items():
        if values.dtype == np.int64:
            bad = np.flatnonzero(((values < -2**31) | (values >= 2**31)).any(axis=1))
            if bad.size:
                first_bad[name] = int(bad[0])
    if first_bad:
        name = min(first_bad, key=first_bad.get)  # ties: the first feature
        raise RecordError(failure_message(path, start + first_bad[name], {name: 0},
                                          "out_of_range"))
    return {name: values.astype(np.int32) if values.dtype == np.int64 else values
            for name, values in arrays.items()}


# ------------------------------------------------------------------ encoding
def example_columns(features: Mapping[str, np.ndarray], float_features=frozenset()
                    ) -> tuple[tuple, tuple, int]:
    """Checks the arrays of a batch of records and puts them in encoding order.

    Returns (names in sorted order, [N, K] C-contiguous native-order arrays,
    floats as float32, N).

    Raises:
      ValueError: no feature, a feature not [N, K], of another N, or of
        neither integers nor (in `float_features`) floats.
    """
    names = tuple(sorted(features))
    if not names:
        raise ValueError("no features to encode")
    num_records = None
    columns = []
    for name in names:
        values = np.asarray(features[name])
        if values.ndim == 1:
            values = values[:, None]
        if values.ndim != 2:
            raise ValueError(f"feature {name!r} must be [N, K], got shape {values.shape}")
        if num_records is None:
            num_records = values.shape[0]
        elif values.shape[0] != num_records:
            raise ValueError(f"feature {name!r} has {values.shape[0]} records, "
                             f"expected {num_records}")
        if name in float_features:
            values = values.astype(np.float32, copy=False)
        elif not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"feature {name!r} must hold integers, got {values.dtype}")
        # Native byte order for the C encoder (a big-endian array is converted).
        columns.append(np.ascontiguousarray(values, values.dtype.newbyteorder("=")))
    return names, tuple(columns), num_records


def encode_examples(features: Mapping[str, np.ndarray], float_features=frozenset()
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Serialises N ``tf.train.Example`` records at once, with the C codec.

    Args:
      features: name -> [N, K] array. Integer features become
        ``int64_list``; those named in `float_features` ``float_list``
        (float32).
      float_features: set of names.

    Returns:
      ``(buffer, offsets)``: all records one after the other ([bytes] uint8)
      and where each starts ([N + 1] int64; record i is
      ``buffer[offsets[i]:offsets[i + 1]]``). The bytes of
      ``SerializeToString(deterministic=True)``. Cost O(N x K).

    Raises:
      ValueError: see `example_columns`.
    """
    names, columns, num_records = example_columns(features, float_features)
    if not num_records:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    offsets = np.empty(num_records + 1, np.int64)
    buffer = _record_codec.encode_examples(tuple(name.encode() for name in names),
                                           columns, offsets)
    return np.frombuffer(buffer, np.uint8), offsets


def frame_records(buffer: np.ndarray, offsets: np.ndarray) -> bytes:
    """TFRecord framing of records ``buffer[offsets[i]:offsets[i + 1]]``."""
    return _record_codec.frame_records(np.ascontiguousarray(buffer),
                                       np.ascontiguousarray(offsets, np.int64))


def masked_crc32c(data: bytes, use_tables: bool = False) -> int:
    """TFRecord's masked CRC-32C of `data` (``use_tables``: by the
    slicing-by-8 tables even where the CPU has a crc32 instruction)."""
    return _record_codec.masked_crc32c(data, use_tables)
