"""The C codec (``_record_codec.c``) against TensorFlow and protobuf."""

import struct

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.data.records import record_codec, record_files, tensorflow_records
from packed_bert_tf.data.records.record_format import RecordFormat

pytestmark = pytest.mark.slow

_record_codec = pytest.importorskip("packed_bert_tf.data.records._record_codec")

FORMAT = RecordFormat.unpacked(16, 4)
LENGTHS = FORMAT.feature_lengths()


def _arrays(num, rng, low=0, high=100):
    arrays = {name: rng.integers(low, high, (num, length), dtype=np.int64)
              for name, length in LENGTHS.items()}
    arrays["masked_lm_weights"] = rng.random((num, LENGTHS["masked_lm_weights"])
                                             ).astype(np.float32)
    return arrays


def _read(path, reader, **kwargs):
    """All batches of a file by one reader, concatenated."""
    if reader == "tensorflow":
        batches = tensorflow_records.iter_array_batches_with_tensorflow(path, LENGTHS,
                                                                        kwargs.get("batch_size", 7))
    else:
        batches = record_files.iter_array_batches(path, FORMAT, **kwargs)
    parts = {}
    for _, arrays in batches:
        for name, values in arrays.items():
            parts.setdefault(name, []).append(values.copy())
    return {name: np.concatenate(values) for name, values in parts.items()}


def _frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", record_codec.masked_crc32c(length)) + record
            + struct.pack("<I", record_codec.masked_crc32c(record)))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num=st.integers(1, 40),
       batch_size=st.integers(1, 16), extremes=st.booleans())
def test_same_arrays_as_tensorflow(tmp_path_factory, seed, num, batch_size, extremes):
    rng = np.random.default_rng(seed)
    arrays = (_arrays(num, rng, -2**63, 2**63 - 1) if extremes else _arrays(num, rng))
    if extremes:
        arrays["masked_lm_weights"].reshape(-1)[:3] = [np.nan, np.inf, -0.0][:num * 4]
    path = str(tmp_path_factory.mktemp("records") / "a.tfrecord")
    with record_files.RecordWriter(path) as writer:  # TensorFlow's writer
        writer.write_arrays(arrays)
    ours = _read(path, "c", batch_size=batch_size)
    theirs = _read(path, "tensorflow")
    for name in LENGTHS:
        assert ours[name].dtype == theirs[name].dtype
        assert ours[name].tobytes() == theirs[name].tobytes(), name  # NaN too
        assert ours[name].tobytes() == arrays[name].tobytes(), name


def test_int32_output_and_reused_buffers(tmp_path):
    arrays = _arrays(10, np.random.default_rng(0))
    path = str(tmp_path / "a.tfrecord")
    record_files.write_arrays(path, arrays)
    batches = list(record_files.iter_array_batches(path, FORMAT, batch_size=4,
                                                     int_dtype=np.int32,
                                                     reuse_buffers=True))
    assert [start for start, _ in batches] == [0, 4, 8]
    assert [len(b["input_ids"]) for _, b in batches] == [4, 4, 2]
    assert batches[0][1]["input_ids"].dtype == np.int32
    # One buffer for every batch: the last batch's values are in the first's.
    assert np.shares_memory(batches[0][1]["input_ids"], batches[2][1]["input_ids"])
    np.testing.assert_array_equal(batches[0][1]["input_ids"][:2], arrays["input_ids"][8:])
    fresh = _read(path, "c", batch_size=4, int_dtype=np.int32)
    for name in LENGTHS:
        np.testing.assert_array_equal(fresh[name], arrays[name])


@pytest.mark.parametrize("reader", ["c", "tensorflow"])
def test_a_value_outside_int32_is_named(tmp_path, monkeypatch, reader):
    if reader == "tensorflow":
        monkeypatch.setattr(record_codec, "_record_codec", None)
    arrays = _arrays(5, np.random.default_rng(0))
    arrays["masked_lm_ids"][3, 2] = 2**31
    arrays["input_ids"][4, 0] = -2**31 - 1  # a later record, an earlier feature
    path = str(tmp_path / "a.tfrecord")
    record_files.write_arrays(path, arrays)
    with pytest.raises(record_files.RecordError,
                       match=r"^.*a.tfrecord: record 3 feature 'masked_lm_ids' has a value "
                             r"outside int32$"):
        _read(path, "c", int_dtype=np.int32)
    assert _read(path, "c")["masked_lm_ids"][3, 2] == 2**31  # int64 holds it


# ------------------------------------------------------------ the wire format
def _varint(value: int) -> bytes:
    value = int(value) & ((1 << 64) - 1)
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _field(number: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(key: str, feature: bytes) -> bytes:
    return _field(1, _field(1, key.encode()) + _field(2, feature))


def _ints(values, *, packed=True) -> bytes:
    """A Feature holding an Int64List, packed or one field per value."""
    body = (_field(1, b"".join(map(_varint, values))) if packed
            else b"".join(_varint(1 << 3) + _varint(v) for v in values))
    return _field(3, body)


def _floats(values, *, packed=True) -> bytes:
    raw = [struct.pack("<f", v) for v in values]
    body = _field(1, b"".join(raw)) if packed else b"".join(b"\x0d" + r for r in raw)
    return _field(2, body)


UNKNOWN_FIELDS = (_varint(7 << 3) + _varint(300) + _varint(9 << 3 | 1) + b"\x00" * 8
                  + _varint(10 << 3 | 5) + b"\x00" * 4 + _field(11, b"skip me"))
SMALL = {"input_ids": 3, "masked_lm_weights": 2}


def _decode(record: bytes, lengths=SMALL):
    """The C reader on one record: (arrays, failure)."""
    outputs = tuple(np.zeros((1, n), np.float32 if name == "masked_lm_weights"
                             else np.int64) for name, n in lengths.items())
    records, _, failure = _record_codec.decode_records(
        _frame(record), 0, 1, tuple(name.encode() for name in lengths), outputs, True)
    return dict(zip(lengths, outputs)), failure


def _protobuf_values(record: bytes):
    """What protobuf's own parser makes of the record (the specification)."""
    feature = tf.train.Example.FromString(record).features.feature
    return {"input_ids": list(feature["input_ids"].int64_list.value),
            "masked_lm_weights": list(feature["masked_lm_weights"].float_list.value)}


@pytest.mark.parametrize("case", [
    "packed", "unpacked", "split_runs", "reordered", "unknown_fields", "repeated_key",
    "features_twice", "negative"])
def test_wire_format_variants_decode_as_protobuf_parses_them(case):
    ids, weights = [5, 300, 70000], [0.5, -2.0]
    if case == "negative":
        ids = [-1, -(2**63), 2**63 - 1]
    entries = [_entry("input_ids", _ints(ids)), _entry("masked_lm_weights", _floats(weights))]
    if case == "unpacked":
        entries = [_entry("input_ids", _ints(ids, packed=False)),
                   _entry("masked_lm_weights", _floats(weights, packed=False))]
    elif case == "split_runs":  # one list in two runs: protobuf appends them
        entries[0] = _entry("input_ids", _field(3, _field(1, _varint(ids[0]))
                                                + _field(1, b"".join(map(_varint, ids[1:])))))
    elif case == "reordered":
        entries = [_entry("other", _field(1, _field(1, b"text"))), *entries[::-1]]
    elif case == "unknown_fields":
        # (Not inside a map entry: there, Python's protobuf (upb) drops the
        # value, where C++ protobuf and this reader keep it.)
        entries = [_entry("input_ids", _field(3, _field(1, b"".join(map(_varint, ids)))
                                                 + UNKNOWN_FIELDS) + UNKNOWN_FIELDS),
                   entries[1]]
    elif case == "repeated_key":  # a map keeps a key's last entry
        entries = [_entry("input_ids", _ints([1, 2, 3])), *entries]
    features = b"".join(entries)
    record = _field(1, features)
    if case == "unknown_fields":
        record = UNKNOWN_FIELDS + _field(1, UNKNOWN_FIELDS + features)
    elif case == "features_twice":  # merged: the entries of both
        record = _field(1, entries[0]) + _field(1, entries[1])
    expected = _protobuf_values(record)
    assert expected == {"input_ids": ids, "masked_lm_weights": weights}
    arrays, failure = _decode(record)
    assert failure is None
    assert arrays["input_ids"].tolist() == [ids]
    assert arrays["masked_lm_weights"].tolist() == [weights]


def test_mutated_records_fail_or_decode_as_tensorflow_and_protobuf_do():
    """Single-byte corruptions behind a valid frame, of records that hold only
    the wanted features (others are skipped by their framing, not validated):
    where protobuf parses the record, the C reader succeeds exactly when
    ``tf.io.parse_example`` does, with the same values; where protobuf
    refuses it, so does the C reader."""
    spec = tensorflow_records.parse_spec(SMALL)
    rng = np.random.default_rng(0)
    counts = {"both decode": 0, "both refuse": 0, "not protobuf": 0}
    for _ in range(400):
        record = bytearray(_field(1, _entry("input_ids", _ints(rng.integers(-2**40, 2**40, 3).tolist()))
                                  + _entry("masked_lm_weights", _floats(rng.random(2).tolist()))))
        record[rng.integers(len(record))] = rng.integers(256)
        record = bytes(record)
        arrays, failure = _decode(record)
        try:
            tf.train.Example.FromString(record)
        except Exception:  # noqa: BLE001 - any DecodeError
            assert failure is not None, record.hex()
            counts["not protobuf"] += 1
            continue
        try:
            parsed = tf.io.parse_example([record], spec)
        # (TensorFlow's message quotes the record: undecodable bytes in it
        # turn its error into a UnicodeDecodeError.)
        except (tf.errors.InvalidArgumentError, UnicodeDecodeError):
            assert failure is not None, record.hex()
            counts["both refuse"] += 1
            continue
        assert failure is None, (record.hex(), failure)
        for name in SMALL:
            assert np.asarray(parsed[name]).tobytes() == arrays[name].tobytes()
        counts["both decode"] += 1
    assert min(counts.values()) >= 20, counts  # every outcome was exercised


# ------------------------------------------------------------------ bad files
def _write(path, arrays):
    record_files.write_arrays(str(path), arrays)
    return bytearray(path.read_bytes())


def test_corrupt_truncated_and_malformed_records_are_named(tmp_path):
    arrays = _arrays(5, np.random.default_rng(0))
    data = _write(tmp_path / "good.tfrecord", arrays)
    record = len(data) // 5  # every record has the same size here
    cases = {}
    flipped = bytearray(data)
    flipped[3 * record + 20] ^= 0xFF
    cases["data.tfrecord"] = (flipped, "record 3 is corrupt (its bytes fail their checksum)")
    length = bytearray(data)
    length[2 * record] ^= 0x01
    cases["length.tfrecord"] = (length, "record 2 is corrupt (its length fails its checksum)")
    cases["short.tfrecord"] = (data[:4 * record + 30],
                               "record 4 is corrupt (the file ends inside it)")
    cases["tail.tfrecord"] = (data + b"\x01\x02",
                              "record 5 is corrupt (the file ends inside it)")
    cases["garbage.tfrecord"] = (data[:record] + _frame(b"\x0a\x05\x01"),
                                 "record 1 is not a tf.train.Example")
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(bytes(content))
        with pytest.raises(record_files.RecordError) as error:
            _read(str(path), "c")
        assert str(error.value) == f"{path}: {message}"
    with pytest.raises(record_files.RecordError, match=r"^.*nothing.tfrecord: no such file$"):
        _read(str(tmp_path / "nothing.tfrecord"), "c")
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert list(record_files.iter_array_batches(str(tmp_path / "empty.tfrecord"),
                                           FORMAT)) == []


@pytest.mark.parametrize("entries, message", [
    ([_entry("input_ids", _ints([1, 2, 3]))], "has no feature 'masked_lm_weights'"),
    ([_entry("input_ids", _ints([1, 2])), _entry("masked_lm_weights", _floats([1, 2]))],
     "feature 'input_ids' has 2 values, expected 3"),
    ([_entry("input_ids", _ints([1, 2, 3, 4])), _entry("masked_lm_weights", _floats([1, 2]))],
     "feature 'input_ids' has 4 values, expected 3"),
    ([_entry("input_ids", _floats([1, 2, 3])), _entry("masked_lm_weights", _floats([1, 2]))],
     "feature 'input_ids' is a float_list, expected an int64_list"),
    ([_entry("input_ids", _ints([1, 2, 3])), _entry("masked_lm_weights", _ints([1, 2]))],
     "feature 'masked_lm_weights' is an int64_list, expected a float_list"),
    ([_entry("input_ids", b""), _entry("masked_lm_weights", _floats([1, 2]))],
     "feature 'input_ids' has 0 values, expected 3"),
])
@pytest.mark.parametrize("reader", ["c", "tensorflow"])
def test_a_feature_that_does_not_fit_is_named(tmp_path, entries, message, reader):
    path = tmp_path / "bad.tfrecord"
    good = _field(1, _entry("input_ids", _ints([1, 2, 3]))
                  + _entry("masked_lm_weights", _floats([1, 2])))
    path.write_bytes(_frame(good) + _frame(_field(1, b"".join(entries))))
    lengths = dict(SMALL)
    if reader == "c":
        batches = record_codec.iter_file_batches(str(path), lengths, 8, np.int64, False)
    else:
        batches = tensorflow_records.iter_array_batches_with_tensorflow(str(path), lengths, 8)
    with pytest.raises(record_files.RecordError) as error:
        list(batches)
    assert str(error.value) == f"{path}: record 1 {message}"


def test_field_number_zero_and_oversized_tags_are_not_an_example():
    good = _field(1, _entry("input_ids", _ints([1, 2, 3]))
                  + _entry("masked_lm_weights", _floats([1, 2])))
    assert _decode(good)[1] is None
    for prefix in (b"\x00\x05", _varint(1 << 35 | 0)):  # field 0; a tag above 2^32
        record = prefix + _varint(7) + good if prefix[-1:] != b"\x05" else prefix + good
        with pytest.raises(Exception):  # protobuf refuses both too
            tf.train.Example.FromString(record)
        assert _decode(record)[1] == ("not_example", -1, 0)


def test_the_c_extension_is_built():
    # `pip install` compiles it (a C compiler and Python's headers are
    # needed); without it every test of it here would be skipped.
    assert record_codec.available()


def test_a_batch_size_below_one_is_refused(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    record_files.write_arrays(path, _arrays(2, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        record_files.iter_array_batches(path, FORMAT, batch_size=0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="output 0 must be"):
        _record_codec.decode_records(b"", 0, 4, (b"x",), (np.zeros((2, 3)),), True)
    with pytest.raises(ValueError, match="output 0 must be"):
        _record_codec.decode_records(b"", 0, 4, (b"x",), (np.zeros((4, 3), np.int16),),
                                       True)
    with pytest.raises(ValueError, match="bad arguments"):
        _record_codec.decode_records(b"ab", 3, 4, (), (), True)
    with pytest.raises(ValueError, match="offsets must not decrease"):
        _record_codec.frame_records(b"abc", np.array([0, 2, 1], np.int64))
    with pytest.raises(ValueError, match="within the data"):
        _record_codec.frame_records(b"abc", np.array([0, 4], np.int64))
    with pytest.raises(ValueError, match="must be \\[N, K\\]"):
        _record_codec.encode_examples((b"a",), (np.zeros((2, 2), bool),),
                                        np.zeros(3, np.int64))


# ---------------------------------------------------------------- writing
@pytest.mark.parametrize("use_tables", [False, True])
def test_masked_crc32c_of_both_implementations(use_tables):
    # CRC-32C check value of "123456789" is 0xe3069283 (RFC 3720 B.4), masked.
    crc = 0xE3069283
    assert record_codec.masked_crc32c(b"123456789", use_tables) == (
        (((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 2000, dtype=np.uint8).tobytes()
    for start in range(9):  # every alignment
        for length in [*range(40), 100, 1000, 1991]:
            chunk = memoryview(data)[start:start + length]
            assert (_record_codec.masked_crc32c(chunk, use_tables)
                    == _record_codec.masked_crc32c(bytes(chunk), not use_tables))


def test_frame_records_writes_tensorflows_bytes(tmp_path):
    arrays = _arrays(7, np.random.default_rng(3))
    buffer, offsets = record_codec.encode_examples(arrays, {"masked_lm_weights"})
    framed = _record_codec.frame_records(buffer, offsets)
    path = tmp_path / "tf.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for begin, end in zip(offsets[:-1], offsets[1:]):
            writer.write(buffer[begin:end].tobytes())
    assert framed == path.read_bytes()
    assert _record_codec.frame_records(b"", np.zeros(1, np.int64)) == b""


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), num=st.integers(0, 12), width=st.integers(0, 9),
       dtype=st.sampled_from(["int8", "uint8", "int16", "uint16", "int32", "uint32",
                              "int64", "uint64"]))
def test_c_encoder_writes_the_tensorflow_encoders_bytes(seed, num, width, dtype):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    features = {"b_ints": rng.integers(info.min, info.max, (num, width), dtype=dtype,
                                       endpoint=True),
                "a_small": rng.integers(0, 3, (num, 2)),
                "c_floats": rng.standard_normal((num, width)).astype(np.float64)}
    floats = {"c_floats"}
    ours = record_codec.encode_examples(features, floats)
    theirs = tensorflow_records.encode_examples_with_tensorflow(features, floats)
    assert ours[0].tobytes() == theirs[0].tobytes()
    np.testing.assert_array_equal(ours[1], theirs[1])
    for index in range(num):  # and protobuf reads it back
        record = ours[0][ours[1][index]:ours[1][index + 1]].tobytes()
        feature = tf.train.Example.FromString(record).features.feature
        assert list(feature["b_ints"].int64_list.value) == features["b_ints"][index].astype(
            np.int64 if dtype != "uint64" else np.uint64).astype(np.int64).tolist()


@pytest.mark.parametrize("encode", [record_codec.encode_examples,
                                    tensorflow_records.encode_examples_with_tensorflow])
def test_both_encoders_write_protobufs_bytes(encode):
    rng = np.random.default_rng(7)
    features = {"empty": np.zeros((3, 0), np.int64), "ints": rng.integers(-5, 300, (3, 4)),
                "floats": rng.random((3, 2)), "no_floats": np.zeros((3, 0))}
    buffer, offsets = encode(features, {"floats", "no_floats"})
    for index in range(3):
        example = tf.train.Example(features=tf.train.Features(feature={
            "empty": tf.train.Feature(int64_list=tf.train.Int64List()),
            "ints": tf.train.Feature(int64_list=tf.train.Int64List(
                value=features["ints"][index].tolist())),
            "floats": tf.train.Feature(float_list=tf.train.FloatList(
                value=features["floats"][index].astype(np.float32).tolist())),
            "no_floats": tf.train.Feature(float_list=tf.train.FloatList())}))
        assert (buffer[offsets[index]:offsets[index + 1]].tobytes()
                == example.SerializeToString(deterministic=True))


def test_big_endian_and_strided_arrays_encode_as_native_ones():
    values = np.random.default_rng(1).integers(-2**40, 2**40, (5, 6))
    native = record_codec.encode_examples({"a": values})
    for other in (values.astype(">i8"), np.asfortranarray(values), values[:, ::-1][:, ::-1]):
        encoded = record_codec.encode_examples({"a": other})
        assert encoded[0].tobytes() == native[0].tobytes()


def test_without_the_c_extension_the_writer_writes_the_same_bytes(tmp_path, monkeypatch):
    arrays = _arrays(9, np.random.default_rng(5))
    fast = tmp_path / "fast.tfrecord"
    with record_files.RecordWriter(str(fast)) as writer:
        writer.write_arrays(arrays)
    monkeypatch.setattr(record_codec, "_record_codec", None)
    slow = tmp_path / "slow.tfrecord"
    with record_files.RecordWriter(str(slow)) as writer:
        writer.write_arrays(arrays)
    assert fast.read_bytes() == slow.read_bytes()
