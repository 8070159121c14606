import numpy as np
import pytest

from packed_bert_tf.data.records import record_codec, record_files
from packed_bert_tf.data.records.record_format import RecordFormat

FORMAT = RecordFormat.unpacked(16, 4)


@pytest.fixture(autouse=True, params=["c", "tensorflow"])
def reader(request, monkeypatch):
    """Every test with the C codec (local files, where it was built) and
    with TensorFlow (other filesystems, or no C compiler)."""
    if request.param == "c" and not record_codec.available():
        pytest.skip("the C codec was not built")
    if request.param == "tensorflow":
        monkeypatch.setattr(record_codec, "_record_codec", None)
    return request.param


def _arrays(num, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {name: rng.integers(0, 100, (num, length))
              for name, length in FORMAT.feature_lengths().items()}
    arrays["masked_lm_weights"] = rng.random((num, 4)).astype(np.float32)
    return arrays


def test_round_trip_in_batches(tmp_path):
    arrays = _arrays(10)
    path = str(tmp_path / "a.tfrecord")
    assert record_files.write_arrays(path, arrays, batch_size=3) == 10
    back = record_files.read_arrays(path, FORMAT, batch_size=4)
    assert set(back) == set(arrays)
    for name in arrays:
        np.testing.assert_array_equal(back[name], arrays[name])
    assert back["input_ids"].dtype == np.int64
    assert back["masked_lm_weights"].dtype == np.float32


def test_batches_stay_valid_after_the_iteration_moves_on(tmp_path, reader):
    arrays = _arrays(10, seed=1)
    path = str(tmp_path / "a.tfrecord")
    record_files.write_arrays(path, arrays)
    batches = list(record_files.iter_array_batches(path, FORMAT, batch_size=3))
    assert [start for start, _ in batches] == [0, 3, 6, 9]
    for name in arrays:
        np.testing.assert_array_equal(np.concatenate([b[name] for _, b in batches]),
                                      arrays[name])
    # TensorFlow's own buffer, read-only; the C reader's are fresh arrays.
    assert batches[0][1]["input_ids"].flags.writeable == (reader == "c")


def test_a_failed_write_leaves_nothing(tmp_path):
    path = tmp_path / "a.tfrecord"
    with pytest.raises(RuntimeError):
        with record_files.RecordWriter(str(path)) as writer:
            writer.write_arrays(_arrays(2))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_wrong_length_and_missing_feature_name_the_record(tmp_path):
    good, short = _arrays(3), _arrays(1)
    short["input_ids"] = short["input_ids"][:, :15]
    path = str(tmp_path / "mixed.tfrecord")
    with record_files.RecordWriter(path) as writer:
        writer.write_arrays(good)
        writer.write_arrays(short)
    with pytest.raises(record_files.RecordError,
                       match=r"mixed.tfrecord: record 3 feature 'input_ids' has 15 "
                             r"values, expected 16"):
        record_files.read_arrays(path, FORMAT, batch_size=2)
    missing = _arrays(2)
    del missing["segment_ids"]
    path = str(tmp_path / "missing.tfrecord")
    record_files.write_arrays(path, missing)
    with pytest.raises(record_files.RecordError, match="record 0 has no feature 'segment_ids'"):
        record_files.read_arrays(path, FORMAT)


def test_corrupt_record_is_located(tmp_path):
    path = tmp_path / "c.tfrecord"
    record_files.write_arrays(str(path), _arrays(5))
    data = bytearray(path.read_bytes())
    record = len(data) // 5
    data[3 * record + 20] ^= 0xFF  # inside the fourth record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(record_files.RecordError, match=r"c.tfrecord: record 3 is corrupt"):
        record_files.read_arrays(str(path), FORMAT)


def test_the_bytes_are_tensorflows(tmp_path, reader):
    """Whichever writes, the file holds ``tf.io.TFRecordWriter``'s bytes of
    protobuf's records (features in sorted key order)."""
    import tensorflow as tf

    from packed_bert_tf.data.records import synthetic_records

    arrays = synthetic_records.unpacked_arrays(np.array([5, 64, 7, 33, 64]), max_seq_length=64,
                                               max_predictions_per_seq=10, seed=0)
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "theirs.tfrecord")
    with record_files.RecordWriter(ours) as writer:
        writer.write_arrays(arrays)
        writer.write_serialized(np.frombuffer(b"", np.uint8), np.zeros(1, np.int64))
        writer.write_serialized(np.frombuffer(b"abc", np.uint8), np.array([0, 0, 3]))
    with tf.io.TFRecordWriter(theirs) as writer:
        for row in range(5):
            example = tf.train.Example()
            for name, values in arrays.items():
                feature = example.features.feature[name]
                if name == "masked_lm_weights":
                    feature.float_list.value.extend(values[row].tolist())
                else:
                    feature.int64_list.value.extend(values[row].tolist())
            writer.write(example.SerializeToString(deterministic=True))
        writer.write(b"")
        writer.write(b"abc")
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert [record.numpy() for record in tf.data.TFRecordDataset(ours)][-2:] == [b"", b"abc"]


def test_int32_batches_hold_the_same_values(tmp_path):
    arrays = _arrays(7, seed=2)
    path = str(tmp_path / "a.tfrecord")
    record_files.write_arrays(path, arrays)
    batches = list(record_files.iter_array_batches(path, FORMAT, batch_size=3,
                                                   int_dtype=np.int32))
    assert [start for start, _ in batches] == [0, 3, 6]
    for name in arrays:
        joined = np.concatenate([batch[name] for _, batch in batches])
        assert joined.dtype == (np.float32 if name == "masked_lm_weights" else np.int32)
        np.testing.assert_array_equal(joined, arrays[name])
