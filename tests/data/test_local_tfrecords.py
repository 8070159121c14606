"""TFRecord files written without TensorFlow: TensorFlow's bytes, atomically."""

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data import local_tfrecords, synthetic, tfrecords
from packed_bert_tf.output_files import is_local


def test_masked_crc32c_of_known_values():
    # CRC-32C check value of "123456789" is 0xe3069283 (RFC 3720 B.4), masked.
    crc = 0xE3069283
    assert local_tfrecords.masked_crc32c(b"123456789") == (
        (((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_bytes_are_tensorflows(tmp_path):
    arrays = synthetic.unpacked_arrays(np.array([5, 64, 7, 33, 64]), max_seq_length=64,
                                       max_predictions_per_seq=10, seed=0)
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "theirs.tfrecord")
    with local_tfrecords.RecordWriter(ours) as writer:
        writer.write_arrays(arrays)
        writer.write_serialized(np.frombuffer(b"", np.uint8), np.zeros(1, np.int64))
        writer.write_serialized(np.frombuffer(b"abc", np.uint8), np.array([0, 0, 3]))
    with tfrecords.RecordWriter(theirs) as writer:
        writer.write_arrays(arrays)
        writer.write_serialized(np.frombuffer(b"abc", np.uint8), np.array([0, 0, 3]))
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert [record.numpy() for record in tf.data.TFRecordDataset(ours)][-2:] == [b"", b"abc"]


def test_a_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "out.tfrecord"
    with pytest.raises(RuntimeError):
        with local_tfrecords.RecordWriter(str(path)) as writer:
            writer.write_serialized(np.frombuffer(b"abc", np.uint8), np.array([0, 3]))
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
    assert is_local(str(path)) and not is_local("gs://b/x")
