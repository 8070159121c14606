import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from packed_bert_tf.data.example_encoding import (encode_examples, encode_varint_rows,
                                                  varint_sizes)


def _reference(features, float_features, row):
    example = tf.train.Example()
    for name, values in features.items():
        feature = example.features.feature[name]
        if name in float_features:
            feature.float_list.value.extend(np.asarray(values[row], np.float32).tolist())
        else:
            feature.int64_list.value.extend(np.asarray(values[row]).tolist())
    return example.SerializeToString(deterministic=True)


def test_varints_of_edge_values():
    values = np.array([[0, 1, 127, 128, 16383, 16384, 2**31 - 1, 2**32, 2**63 - 1, -1]])
    data, sizes = encode_varint_rows(values)
    np.testing.assert_array_equal(varint_sizes(values[0]), [1, 1, 1, 2, 2, 3, 5, 5, 9, 10])
    assert sizes.tolist() == [39]
    assert data[:6].tolist() == [0x00, 0x01, 0x7F, 0x80, 0x01, 0xFF]
    assert data[-10:].tolist() == [0xFF] * 9 + [0x01]  # -1: ten bytes


@settings(max_examples=40, deadline=None)
@given(num=st.integers(1, 6), widths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
       magnitude=st.sampled_from([1, 127, 300, 70_000, 2**40, 2**62]),
       negative=st.booleans(), seed=st.integers(0, 1000))
def test_bytes_equal_the_protobuf_library(num, widths, magnitude, negative, seed):
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


def test_parse_example_reads_what_we_wrote():
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
def test_bad_features_are_rejected(features, message):
    with pytest.raises(ValueError, match=message):
        encode_examples(features)
