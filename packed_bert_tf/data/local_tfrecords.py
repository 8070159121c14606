"""TFRecord files on the local disk, written without TensorFlow.

Importing TensorFlow costs seconds of CPU (about 3 to 4 s here), more than a
tool that writes a few thousand records spends on them. A TFRecord file is a
simple framing of each record::

    uint64 length            little-endian
    uint32 masked_crc32c(the 8 length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod
2**32) of the CRC-32C (Castagnoli). `RecordWriter` writes that with Python's
files and the framing of this package's C reader (``_example_reader.c``,
whole batches at once: 0.7 us a 0.8 kB record, 2.8 us a 2.6 kB one; `crcmod`'s C CRC, a
dependency of ``apache-beam[tfrecord]``, where it was not built: about 5 us):
the bytes of ``tf.io.TFRecordWriter`` (tested). It has the
interface of `tfrecords.RecordWriter`: atomic (a temporary name renamed on
`close`), batches of arrays encoded by `example_encoding.encode_examples`.
"""

from __future__ import annotations

import os
import struct
from typing import Mapping

import numpy as np
from crcmod.predefined import mkPredefinedCrcFun

from packed_bert_tf.data.example_encoding import encode_examples
from packed_bert_tf.data.features import FLOAT_FEATURE_NAMES
from packed_bert_tf.output_files import temporary_name

try:
    from packed_bert_tf.data._example_reader import frame_records
except ImportError:  # built without a C compiler
    frame_records = None

_crc32c = mkPredefinedCrcFun("crc-32c")
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


class AtomicRecordWriter:
    """What every TFRecord writer here shares: records go to
    ``PATH.tmp-<random>``, `close` renames it to ``PATH``; used as a context
    manager, an exception deletes the temporary file instead. Subclasses
    write (`write_serialized`), `close` and `abort`."""

    def __init__(self, path: str):
        self.path = path
        self._temporary = temporary_name(path)
        self.num_records = 0

    def write_serialized(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def write_arrays(self, features: Mapping[str, np.ndarray]) -> None:
        """Writes one record per row of the [N, K] arrays (weights as float)."""
        self.write_serialized(*encode_examples(
            features, float_features=FLOAT_FEATURE_NAMES & set(features)))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


class RecordWriter(AtomicRecordWriter):
    """Writes one TFRecord file on the local disk, atomically, without TensorFlow."""

    def __init__(self, path: str):
        super().__init__(path)
        self._file = open(self._temporary, "wb")
        self._headers: dict[int, bytes] = {}

    def write_serialized(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        """Writes records ``buffer[offsets[i]:offsets[i + 1]]``."""
        if frame_records is not None:
            self._file.write(frame_records(np.ascontiguousarray(buffer),
                                           np.ascontiguousarray(offsets, np.int64)))
            self.num_records += len(offsets) - 1
            return
        data = buffer.tobytes()
        bounds = offsets.tolist()
        pack_crc = struct.Struct("<I").pack
        headers = self._headers
        parts = []
        for begin, end in zip(bounds[:-1], bounds[1:]):
            header = headers.get(end - begin)
            if header is None:  # length and its CRC, the same for every equal length
                length = struct.pack("<Q", end - begin)
                header = headers[end - begin] = length + pack_crc(masked_crc32c(length))
            record = data[begin:end]
            parts += (header, record, pack_crc(masked_crc32c(record)))
        self._file.write(b"".join(parts))
        self.num_records += len(bounds) - 1

    def close(self) -> None:
        self._file.close()
        os.replace(self._temporary, self.path)

    def abort(self) -> None:
        self._file.close()
        if os.path.exists(self._temporary):
            os.remove(self._temporary)
