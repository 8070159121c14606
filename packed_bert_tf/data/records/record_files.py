"""TFRecord files of pre-training features: arrays in, arrays out, in batches.

The one interface for reading (`iter_array_batches`, `read_arrays`) and
writing (`RecordWriter`, `write_arrays`) record files. Local files go through
the C codec (`record_codec`), others (``gs://`` ...) or an install built
without a C compiler through TensorFlow (`tensorflow_records`, imported only
then); `uses_record_codec` decides. Both give the same arrays, write the
same bytes and name a bad record the same way (tested). Files are written
under a temporary name and renamed when complete (`filesystem.PendingFile`),
so a failed run never leaves a file that looks finished.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from packed_bert_tf import filesystem
from packed_bert_tf.data.records import record_codec
from packed_bert_tf.data.records.record_codec import RecordError
from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES, RecordFormat

__all__ = ["RecordError", "RecordWriter", "iter_array_batches", "read_arrays",
           "uses_record_codec", "write_arrays"]


def uses_record_codec(path: str) -> bool:
    """Whether the records of `path` are read and written by the C codec (a
    local path, and the codec built); otherwise TensorFlow does it."""
    return filesystem.is_local(path) and record_codec.available()


def _tensorflow_records():
    from packed_bert_tf.data.records import tensorflow_records  # TensorFlow: only when needed

    return tensorflow_records


def iter_array_batches(path: str, record_format: RecordFormat, *,
                       batch_size: int = 4096, features=None, int_dtype=np.int64,
                       reuse_buffers: bool = False):
    """Yields (index of the batch's first record, name -> [n, length] arrays).

    Integer features come back as `int_dtype` (int64, or int32: a value
    outside its range is an error), the weights as float32, in the format's
    feature order. With `features` (names), only those are read. Batch by
    batch, so that a large file never has to fit in memory as int64 arrays.
    With `reuse_buffers`, the C codec decodes every batch into the same
    arrays (no page faults on fresh memory, about a second per million
    records): a batch is then valid only until the next one is asked for.
    Through TensorFlow the arrays are its own buffers: read-only.

    Raises:
      RecordError: naming the file and record index of a corrupt or truncated
        record, a missing feature, one of the wrong type or one of the wrong
        length.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    int_dtype = np.dtype(int_dtype)
    if int_dtype not in (np.int64, np.int32):
        raise ValueError(f"int_dtype must be int64 or int32, got {int_dtype}")
    lengths = record_format.feature_lengths()
    if features is not None:
        lengths = {name: lengths[name] for name in features}
    if uses_record_codec(path):
        return record_codec.iter_file_batches(path, lengths, batch_size, int_dtype,
                                              reuse_buffers)
    batches = _tensorflow_records().iter_array_batches_with_tensorflow(path, lengths,
                                                                       batch_size)
    if int_dtype == np.int64:
        return batches
    return ((start, record_codec.narrowed_to_int32(path, start, arrays))
            for start, arrays in batches)


def read_arrays(path: str, record_format: RecordFormat, *,
                batch_size: int = 4096, features=None) -> dict[str, np.ndarray]:
    """All records of one TFRecord file as arrays: name -> [N, length].

    See `iter_array_batches` for the types, `features` and the errors.
    """
    parts: dict[str, list[np.ndarray]] = {}
    for _, arrays in iter_array_batches(path, record_format, batch_size=batch_size,
                                        features=features):
        for name, values in arrays.items():
            parts.setdefault(name, []).append(values)
    if not parts:
        lengths = record_format.feature_lengths()
        names = features if features is not None else lengths
        return {name: np.zeros((0, lengths[name]),
                               np.float32 if name in FLOAT_FEATURE_NAMES else np.int64)
                for name in names}
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


class RecordWriter:
    """Writes one TFRecord file, atomically, anywhere `filesystem` reaches.

    Records go to ``PATH.tmp-<random>`` (a `filesystem.PendingFile`); `close`
    renames it to ``PATH``. Used as a context manager, an exception deletes
    the temporary file instead. A failure to write (a full disk, a folder
    gone, a remote error) is an OSError.

    >>> with RecordWriter(path) as writer:            # doctest: +SKIP
    ...     writer.write_arrays({"input_ids": ids, "masked_lm_weights": w})
    """

    def __init__(self, path: str):
        self.path = path
        self.num_records = 0
        self._pending = filesystem.PendingFile(path)
        self._local = uses_record_codec(path)
        if self._local:
            self._file = open(self._pending.temporary, "wb")
        else:
            self._file = _tensorflow_records().TensorFlowRecordFile(
                self._pending.temporary)

    def write_arrays(self, features: Mapping[str, np.ndarray]) -> None:
        """Writes one record per row of the [N, K] arrays (weights as float)."""
        floats = FLOAT_FEATURE_NAMES & set(features)
        if record_codec.available():
            encoded = record_codec.encode_examples(features, floats)
        else:
            encoded = _tensorflow_records().encode_examples_with_tensorflow(features,
                                                                            floats)
        self.write_serialized(*encoded)

    def write_serialized(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        """Writes records ``buffer[offsets[i]:offsets[i + 1]]``."""
        if self._local:
            self._file.write(record_codec.frame_records(buffer, offsets))
        else:
            self._file.write_records(buffer, offsets)
        self.num_records += len(offsets) - 1

    def close(self) -> None:
        self._file.close()
        self._pending.commit()

    def abort(self) -> None:
        self._file.close()
        self._pending.discard()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_arrays(path: str, features: Mapping[str, np.ndarray], *,
                 batch_size: int = 1024) -> int:
    """Writes the arrays to one TFRecord file atomically; returns records written."""
    num_records = len(next(iter(features.values())))
    with RecordWriter(path) as writer:
        for start in range(0, num_records, batch_size):
            writer.write_arrays({name: values[start:start + batch_size]
                                 for name, values in features.items()})
    return num_records
