"""The record encoders, the C codec's and TensorFlow's fallback: protobuf's bytes."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.data.records import record_codec
from packed_bert_tf.data.records.tensorflow_records import encode_examples_with_tensorflow

ENCODERS = [pytest.param(record_codec.encode_examples, id="c",
                         marks=pytest.mark.skipif(not record_codec.available(),
                                                  reason="the C codec was not built")),
            pytest.param(encode_examples_with_tensorflow, id="tensorflow")]


def _reference(features, float_features, row):
    example = tf.train.Example()
    for name, values in features.items():
        feature = example.features.feature[name]
        if name in float_features:
            feature.float_list.value.extend(np.asarray(values[row], np.float32).tolist())
        else:
            feature.int64_list.value.extend(np.asarray(values[row]).tolist())
    return example.SerializeToString(deterministic=True)


@settings(max_examples=40, deadline=None)
@given(num=st.integers(1, 6), widths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       magnitude=st.sampled_from([1, 127, 300, 70_000, 2**40, 2**62]),
       negative=st.booleans(), seed=st.integers(0, 1000))
@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_bytes_equal_the_protobuf_library(encode_examples, num, widths, magnitude,
                                          negative, seed):
    rng = np.random.default_rng(seed)
    low = -magnitude if negative else 0
    features = {f"f{i}": rng.integers(low, magnitude, (num, w), dtype=np.int64)
                for i, w in enumerate(widths)}
    features["weights"] = rng.normal(size=(num, 3)).astype(np.float32)
    buffer, offsets = encode_examples(features, float_features={"weights"})
    assert offsets[0] == 0 and offsets[-1] == buffer.size
    for row in range(num):
        ours = buffer[offsets[row]:offsets[row + 1]].tobytes()
        assert ours == _reference(features, {"weights"}, row)


@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_parse_example_reads_what_we_wrote(encode_examples):
    rng = np.random.default_rng(0)
    features = {"input_ids": rng.integers(0, 30522, (5, 16)),
                "masked_lm_weights": rng.random((5, 4)).astype(np.float32)}
    buffer, offsets = encode_examples(features, float_features={"masked_lm_weights"})
    records = [buffer[a:b].tobytes() for a, b in zip(offsets[:-1], offsets[1:])]
    parsed = tf.io.parse_example(records, {
        "input_ids": tf.io.FixedLenFeature([16], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([4], tf.float32)})
    np.testing.assert_array_equal(parsed["input_ids"].numpy(), features["input_ids"])
    np.testing.assert_array_equal(parsed["masked_lm_weights"].numpy(),
                                  features["masked_lm_weights"])


@pytest.mark.parametrize("features, message", [
    ({}, "no features"),
    ({"a": np.zeros((2, 3)), "b": np.zeros((3, 3), int)}, "must hold integers"),
    ({"a": np.zeros((2, 3), int), "b": np.zeros((3, 3), int)}, "has 3 records, expected 2"),
    ({"a": np.zeros((2, 3, 4), int)}, "must be \\[N, K\\]"),
])
@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_bad_features_are_rejected(encode_examples, features, message):
    with pytest.raises(ValueError, match=message):
        encode_examples(features)


@pytest.mark.parametrize("values", [
    [0, 5, 127],  # one byte each: the values themselves
    [0, 128, 300, 16383],  # two-byte words from the table
    [0, 16384, 30521, 65535],  # four-byte words from the table
    [0, 65536, 2**21 - 1, 2**21, 2**28 - 1],  # four-byte words computed
    [0, 2**28, 2**35, 2**63 - 1],  # wider than a word
    [-1, 0, 5, -(2**63)],  # negative: ten bytes
    [0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**32, 2**63 - 1, -1],  # every edge
])
@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_every_varint_width_equals_the_protobuf_library(encode_examples, values):
    features = {"ids": np.array([values, values[::-1]], dtype=np.int64),
                "small": np.array([[1], [2]], dtype=np.int32)}
    buffer, offsets = encode_examples(features)
    for row in range(2):
        assert buffer[offsets[row]:offsets[row + 1]].tobytes() == _reference(
            features, set(), row)


@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_packed_records_equal_the_protobuf_library(encode_examples):
    from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
    from packed_bert_tf.data.records import synthetic_records
    from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES, RecordFormat
    from packed_bert_tf.packing import assign_sequences, pack_lengths

    lengths = np.random.default_rng(0).integers(5, 129, 300)
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=128,
                                               max_predictions_per_seq=20, seed=0)
    sequences = compact_records(arrays)
    lengths = sequences["lengths"]
    packs = assign_sequences(lengths, pack_lengths(lengths, 128, 3), seed=0)
    features = pack_records(sequences, packs, RecordFormat.packed(128, 22, 3))
    buffer, offsets = encode_examples(features, float_features=FLOAT_FEATURE_NAMES)
    assert offsets.size == len(packs) + 1 and offsets[-1] == buffer.size
    for row in range(0, len(packs), 7):
        assert buffer[offsets[row]:offsets[row + 1]].tobytes() == _reference(
            features, FLOAT_FEATURE_NAMES, row)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                   np.uint64])
@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_any_integer_type(encode_examples, dtype):
    values = np.array([[0, 1, 127, 128, 255], [200, 7, 0, 0, 1]], dtype=dtype)
    reference, _ = encode_examples({"a": values.astype(np.int64)})
    buffer, _ = encode_examples({"a": values})
    assert buffer.tobytes() == reference.tobytes()


@pytest.mark.parametrize("encode_examples", ENCODERS)
def test_no_records(encode_examples):
    buffer, offsets = encode_examples({"a": np.zeros((0, 3), np.int64)})
    assert buffer.size == 0 and offsets.tolist() == [0]
