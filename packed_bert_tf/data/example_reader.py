"""TFRecord files of pre-training features read into numpy arrays in batches.

Local files are decoded by this package's C reader (``_example_reader.c``):
it frames the records, checks both CRCs of each as TensorFlow's reader does,
and decodes the ``tf.train.Example`` wire format straight into the arrays,
with no TensorFlow import (about 4 s of CPU per process) and several times
faster than ``tf.io.parse_example``. Files elsewhere (``gs://`` ...), or an
install built without a C compiler, go through TensorFlow instead
(`tfrecords.iter_array_batches_with_tensorflow`); both give the same arrays
and name the file and record of a bad one the same way (tested).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from packed_bert_tf.data.features import FLOAT_FEATURE_NAMES, RecordFormat
from packed_bert_tf.output_files import is_local

try:
    from packed_bert_tf.data import _example_reader
except ImportError:  # built without a C compiler: TensorFlow reads instead
    _example_reader = None


class RecordError(ValueError):
    """A record file that cannot be read as the expected format."""


def has_fast_reader() -> bool:
    """Whether the C reader was built (``pip install`` compiles it)."""
    return _example_reader is not None


def iter_array_batches(path: str, record_format: RecordFormat, *,
                       batch_size: int = 4096, features=None, int_dtype=np.int64,
                       reuse_buffers: bool = False):
    """Yields (index of the batch's first record, name -> [n, length] arrays).

    Integer features come back as `int_dtype` (int64, or int32: a value
    outside its range is an error), the weights as float32, in the format's
    feature order. With `features` (names), only those are read. Batch by
    batch, so that a large file never has to fit in memory as int64 arrays.
    With `reuse_buffers`, the C reader decodes every batch into the same
    arrays (no page faults on fresh memory, about a second per million
    records): a batch is then valid only until the next one is asked for.

    Raises
    ------
    RecordError
        Naming the file and record index of a corrupt or truncated record, a
        missing feature, one of the wrong type or one of the wrong length.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    int_dtype = np.dtype(int_dtype)
    if int_dtype not in (np.int64, np.int32):
        raise ValueError(f"int_dtype must be int64 or int32, got {int_dtype}")
    lengths = record_format.feature_lengths()
    if features is not None:
        lengths = {name: lengths[name] for name in features}
    if is_local(path) and _example_reader is not None:
        return _iter_local_array_batches(path, lengths, batch_size, int_dtype,
                                         reuse_buffers)
    from packed_bert_tf.data import tfrecords  # TensorFlow: only when needed

    batches = tfrecords.iter_array_batches_with_tensorflow(path, lengths, batch_size)
    if int_dtype == np.int64:
        return batches
    return (_narrowed(path, start, arrays) for start, arrays in batches)


def _narrowed(path: str, start: int, arrays: dict) -> dict:
    """int64 features as int32, refusing a value outside its range: the first
    record with one, as the C reader does."""
    first_bad = {}
    for name, values in arrays.items():
        if values.dtype == np.int64:
            bad = np.flatnonzero(((values < -2**31) | (values >= 2**31)).any(axis=1))
            if bad.size:
                first_bad[name] = int(bad[0])
    if first_bad:
        name = min(first_bad, key=first_bad.get)  # ties: the first feature
        raise RecordError(_describe_failure(path, start + first_bad[name], {name: 0},
                                            "out_of_range", 0, 0))
    return {name: values.astype(np.int32) if values.dtype == np.int64 else values
            for name, values in arrays.items()}


def _iter_local_array_batches(path: str, lengths: dict[str, int], batch_size: int,
                              int_dtype: np.dtype, reuse_buffers: bool):
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
                records, offset, failure = _example_reader.decode_records(
                    data, offset, batch_size, names, outputs, True)
                if failure is not None:
                    raise RecordError(_describe_failure(path, start + records, lengths,
                                                        *failure))
                yield start, {name: values[:records]
                              for name, values in zip(lengths, outputs)}
                start += records


_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux
_LIST_NAMES = {1: "a bytes_list", 2: "a float_list", 3: "an int64_list"}


def _describe_failure(path: str, record: int, lengths: dict[str, int], kind: str,
                      feature: int, count: int) -> str:
    """The C reader's failure as one line naming the file, record and feature."""
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
