"""TFRecord files of pre-training features: fast batch reading and writing.

Reading (`iter_array_batches`, `read_arrays`) decodes local files with the
package's C reader (`example_reader`) and others with ``tf.io.parse_example``
(`iter_array_batches_with_tensorflow`), whole batches into numpy arrays;
writing serialises whole batches with `example_encoding.encode_examples`.
Files are written under a temporary name and renamed when complete, so a
failed run never leaves a file that looks finished. Errors name the file and,
where one is at fault, the record index.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from packed_bert_tf.data import file_patterns
from packed_bert_tf.data.example_reader import RecordError, iter_array_batches
from packed_bert_tf.data.features import FLOAT_FEATURE_NAMES, RecordFormat
from packed_bert_tf.data.local_tfrecords import AtomicRecordWriter

__all__ = ["RecordError", "iter_array_batches", "iter_array_batches_with_tensorflow",
           "read_arrays", "RecordWriter", "write_arrays", "expand_file_patterns",
           "parse_spec", "first_line", "make_parent_dirs"]


def expand_file_patterns(patterns: str | Sequence[str], *, flag: str = "input_file",
                         skipped: list[str] | None = None) -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted.

    See `file_patterns.expand_file_patterns` (``skipped``: side files a
    wildcard matched). Raises ValueError naming the flag when a pattern
    matches nothing, or matches or names a folder.
    """
    files = file_patterns.expand_file_patterns(patterns, glob=tf.io.gfile.glob, flag=flag,
                                               skipped=skipped)
    folders = [path for path in files if tf.io.gfile.isdir(path)]
    if folders:
        raise ValueError(f"--{flag}: {folders[0]} is a folder (give its files, e.g. "
                         f"'{os.path.join(folders[0], 'part-*')}')")
    return files


def parse_spec(record_format: RecordFormat | Mapping[str, int]
               ) -> dict[str, tf.io.FixedLenFeature]:
    """``tf.io.parse_example`` spec of a format, or of name -> length (int64,
    float32 weights)."""
    lengths = (record_format.feature_lengths() if isinstance(record_format, RecordFormat)
               else record_format)
    return {name: tf.io.FixedLenFeature(
        [length], tf.float32 if name in FLOAT_FEATURE_NAMES else tf.int64)
        for name, length in lengths.items()}


def _describe_bad_record(path, index, serialized, spec) -> str:
    """Why one record does not parse, naming the feature at fault."""
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception:  # noqa: BLE001 - any decode failure is "not an Example"
        return f"{path}: record {index} is not a tf.train.Example"
    features = example.features.feature
    for name, feature_spec in spec.items():
        if name not in features:
            return f"{path}: record {index} has no feature {name!r}"
        values = features[name].float_list.value if feature_spec.dtype == tf.float32 \
            else features[name].int64_list.value
        if len(values) != feature_spec.shape[0]:
            return (f"{path}: record {index} feature {name!r} has {len(values)} "
                    f"values, expected {feature_spec.shape[0]}")
    return f"{path}: record {index} cannot be parsed"


def first_line(message: str) -> str:
    """The useful part of a TensorFlow error message."""
    line = message.splitlines()[0] if message else ""
    # "truncated record at 38769' failed with Read less bytes ..." (sic)
    return line.split("}} ", 1)[-1].split(" [Op:")[0].replace("' failed with ", ": ")


def _first_unreadable_record(path: str) -> int:
    """Index of the first record TensorFlow cannot read from a file."""
    index = 0
    try:
        for _ in tf.data.TFRecordDataset(path):
            index += 1
    except tf.errors.DataLossError:
        pass
    return index


def iter_array_batches_with_tensorflow(path: str, lengths: Mapping[str, int],
                                       batch_size: int = 4096):
    """`iter_array_batches` by ``tf.io.parse_example``, for any file
    `tf.io.gfile` reads: yields (first record, name -> [n, length] arrays) of
    the features `lengths` names. The arrays are TensorFlow's own buffers, not
    copies: read-only. Raises `RecordError` as `iter_array_batches` does.
    """
    spec = parse_spec(lengths)
    # Parsing runs on TensorFlow's threads, a batch or two ahead of the caller.
    dataset = (tf.data.TFRecordDataset(path).batch(batch_size)
               .map(lambda serialized: tf.io.parse_example(serialized, spec),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
               .prefetch(2))
    iterator = iter(dataset)
    start = 0
    while True:
        try:
            parsed = next(iterator)
        except StopIteration:
            return
        except tf.errors.DataLossError as error:
            raise RecordError(f"{path}: record {_first_unreadable_record(path)} is "
                              f"corrupt ({first_line(error.message)})") from None
        except tf.errors.NotFoundError:
            raise RecordError(f"{path}: no such file") from None
        except tf.errors.InvalidArgumentError:
            raise RecordError(_first_unparsable_record(path, start, spec)) from None
        # np.asarray shares the tensors' memory (.numpy() would copy them).
        arrays = {name: np.asarray(parsed[name]) for name in spec}  # the format's order
        yield start, arrays
        start += next(iter(arrays.values())).shape[0]


def _first_unparsable_record(path: str, start: int, spec) -> str:
    """Why the first record from `start` on that does not parse fails."""
    for offset, serialized in enumerate(tf.data.TFRecordDataset(path).skip(start)):
        try:
            tf.io.parse_example(serialized[None], spec)
        except tf.errors.InvalidArgumentError:
            return _describe_bad_record(path, start + offset, serialized.numpy(), spec)
    return f"{path}: a record after record {start} cannot be parsed"


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
        spec = parse_spec(record_format)
        names = features if features is not None else spec
        return {name: np.zeros((0, spec[name].shape[0]), spec[name].dtype.as_numpy_dtype)
                for name in names}
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


class RecordWriter(AtomicRecordWriter):
    """Writes one TFRecord file, atomically, anywhere `tf.io.gfile` writes.

    Records go to ``PATH.tmp-<random>``; `close` renames it to ``PATH``. Used as a
    context manager, an exception deletes the temporary file instead.

    >>> with RecordWriter(path) as writer:            # doctest: +SKIP
    ...     writer.write_arrays({"input_ids": ids, "masked_lm_weights": w})
    """

    def __init__(self, path: str):
        super().__init__(path)
        self._writer = tf.io.TFRecordWriter(self._temporary)

    def write_serialized(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        """Writes records ``buffer[offsets[i]:offsets[i + 1]]``."""
        data = buffer.tobytes()
        bounds = offsets.tolist()
        write = self._writer.write
        for begin, end in zip(bounds[:-1], bounds[1:]):
            write(data[begin:end])
        self.num_records += len(bounds) - 1

    def close(self) -> None:
        self._writer.close()
        tf.io.gfile.rename(self._temporary, self.path, overwrite=True)

    def abort(self) -> None:
        self._writer.close()
        if tf.io.gfile.exists(self._temporary):
            tf.io.gfile.remove(self._temporary)


def write_arrays(path: str, features: Mapping[str, np.ndarray], *,
                 batch_size: int = 1024) -> int:
    """Writes the arrays to one TFRecord file atomically; returns records written."""
    num_records = len(next(iter(features.values())))
    with RecordWriter(path) as writer:
        for start in range(0, num_records, batch_size):
            writer.write_arrays({name: values[start:start + batch_size]
                                 for name, values in features.items()})
    return num_records


def make_parent_dirs(path: str) -> None:
    parent = os.path.dirname(path)
    if parent:
        tf.io.gfile.makedirs(parent)
