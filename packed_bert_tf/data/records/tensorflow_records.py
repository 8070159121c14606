"""TensorFlow's side of record files: parse specs, and the reader, writer and
encoder that `packed_bert_tf.data.records.record_files` falls back to for files
that are not local, or where the C codec was not built.

Errors name the file and, where one is at fault, the record index, in the
words of the C codec (`record_codec.failure_message`).
"""

from __future__ import annotations

import contextlib
from typing import Mapping

import numpy as np
import tensorflow as tf

from packed_bert_tf.data.records.record_codec import RecordError, example_columns, failure_message
from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES, RecordFormat

__all__ = ["TensorFlowRecordFile", "encode_examples_with_tensorflow", "first_line",
           "iter_array_batches_with_tensorflow", "parse_spec"]


def parse_spec(record_format: RecordFormat | Mapping[str, int]
               ) -> dict[str, tf.io.FixedLenFeature]:
    """``tf.io.parse_example`` spec of a format, or of name -> length (int64,
    float32 weights)."""
    lengths = (record_format.feature_lengths() if isinstance(record_format, RecordFormat)
               else record_format)
    return {name: tf.io.FixedLenFeature(
        [length], tf.float32 if name in FLOAT_FEATURE_NAMES else tf.int64)
        for name, length in lengths.items()}


def _describe_bad_record(path, index, serialized, lengths) -> str:
    """Why one record does not parse, naming the feature at fault."""
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception:  # noqa: BLE001 - any decode failure is "not an Example"
        return failure_message(path, index, lengths, "not_example")
    features = example.features.feature
    for position, (name, length) in enumerate(lengths.items()):
        if name not in features:
            return failure_message(path, index, lengths, "missing", position)
        kind = features[name].WhichOneof("kind")  # None: an empty Feature
        expected = "float_list" if name in FLOAT_FEATURE_NAMES else "int64_list"
        if kind not in (None, expected):
            found = {"bytes_list": 1, "float_list": 2, "int64_list": 3}.get(kind, 1)
            return failure_message(path, index, lengths, "wrong_type", position, found)
        values = getattr(features[name], expected).value
        if len(values) != length:
            return failure_message(path, index, lengths, "wrong_count", position,
                                   len(values))
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
    lengths = dict(lengths)
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
                              f"corrupt ({_data_loss_reason(error.message)})") from None
        except tf.errors.NotFoundError:
            raise RecordError(f"{path}: no such file") from None
        except tf.errors.InvalidArgumentError:
            raise RecordError(_first_unparsable_record(path, start, lengths)) from None
        # np.asarray shares the tensors' memory (.numpy() would copy them).
        arrays = {name: np.asarray(parsed[name]) for name in spec}  # the format's order
        yield start, arrays
        start += next(iter(arrays.values())).shape[0]


def _data_loss_reason(message: str) -> str:
    """A DataLossError's reason, in the C codec's words where they say the same."""
    line = first_line(message)
    return "the file ends inside it" if line.startswith("truncated record at") else line


def _first_unparsable_record(path: str, start: int, lengths: dict) -> str:
    """Why the first record from `start` on that does not parse fails."""
    spec = parse_spec(lengths)
    for offset, serialized in enumerate(tf.data.TFRecordDataset(path).skip(start)):
        try:
            tf.io.parse_example(serialized[None], spec)
        except tf.errors.InvalidArgumentError:
            return _describe_bad_record(path, start + offset, serialized.numpy(), lengths)
    return f"{path}: a record after record {start} cannot be parsed"


def encode_examples_with_tensorflow(features: Mapping[str, np.ndarray],
                                    float_features=frozenset()
                                    ) -> tuple[np.ndarray, np.ndarray]:
    """`record_codec.encode_examples` by protobuf, record by record (about
    150 us a 512-token record): the same bytes, for an install without the
    C codec."""
    names, columns, num_records = example_columns(features, float_features)
    records = []
    for row in range(num_records or 0):
        feature = {}
        for name, values in zip(names, columns):
            if name in float_features:
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(
                    value=values[row].tolist()))
            else:
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(
                    value=values[row].astype(np.int64).tolist()))
        records.append(tf.train.Example(features=tf.train.Features(
            feature=feature)).SerializeToString(deterministic=True))
    offsets = np.zeros(len(records) + 1, np.int64)
    np.cumsum([len(record) for record in records], out=offsets[1:])
    return np.frombuffer(b"".join(records), np.uint8), offsets


class TensorFlowRecordFile:
    """A TFRecord file written by ``tf.io.TFRecordWriter``, anywhere
    `tf.io.gfile` writes; its errors come as OSError."""

    def __init__(self, path: str):
        self.path = path
        with _as_os_error():
            self._writer = tf.io.TFRecordWriter(path)

    def write_records(self, buffer: np.ndarray, offsets: np.ndarray) -> None:
        """Writes records ``buffer[offsets[i]:offsets[i + 1]]``."""
        data = buffer.tobytes()
        bounds = offsets.tolist()
        with _as_os_error():
            for begin, end in zip(bounds[:-1], bounds[1:]):
                self._writer.write(data[begin:end])

    def close(self) -> None:
        with _as_os_error():
            self._writer.close()


@contextlib.contextmanager
def _as_os_error():
    """Turns TensorFlow's file errors into OSError (one kind for callers);
    TensorFlow's message names the file."""
    try:
        yield
    except tf.errors.OpError as error:
        raise OSError(first_line(error.message)) from None
