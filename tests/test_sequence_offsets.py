"""Sequence offsets (``cu_seqlens`` per pack) from the sequence index and back,
the dense mask from them, and the checker of packed batches."""

import importlib.util
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.layers import block_diagonal_attention_mask
from packed_bert_tf.layers.block_diagonal_attention_mask import attention_mask_from_offsets
from packed_bert_tf.sequence_offsets import (
    check_packed_batch,
    sequence_index_from_offsets,
    sequence_offsets,
)
from tests.backends.jax_environment import jax_environment
from tests.tool_runs import REPOSITORY

tnp = tf.experimental.numpy
NAMESPACES = {"keras.ops": keras.ops, "tf.experimental.numpy": tnp, "numpy": np}

# Hand-written packs, S = 8, D = 3, and their offsets.
INDEX = np.array([
    [1, 1, 1, 1, 2, 2, 2, 0],  # two sequences, then padding
    [1, 2, 3, 3, 0, 0, 0, 0],  # three, the last of two tokens
    [1, 1, 1, 1, 1, 1, 1, 1],  # one sequence of the full length
    [0, 0, 0, 0, 0, 0, 0, 0],  # all padding
    [1, 1, 2, 2, 2, 3, 3, 3],  # three, no padding
], np.int32)
OFFSETS = np.array([
    [0, 4, 7, 7],
    [0, 1, 2, 4],
    [0, 8, 8, 8],
    [0, 0, 0, 0],
    [0, 2, 5, 8],
], np.int32)


def random_packs(rng, batch, length, max_sequences):
    """[B, S] sequence indices: 0..D sequences of >= 1 token per row, then padding;
    row 0 one full-length sequence, row 1 all padding."""
    index = np.zeros((batch, length), np.int32)
    for row in range(batch):
        count = 1 if row == 0 else 0 if row == 1 else int(rng.integers(0, max_sequences + 1))
        if count == 0:
            continue
        used = length if row == 0 else int(rng.integers(count, length + 1))
        cuts = np.sort(rng.choice(np.arange(1, used), count - 1, replace=False))
        lengths = np.diff(np.concatenate([[0], cuts, [used]]))
        index[row, :used] = np.repeat(np.arange(1, count + 1), lengths)
    return index


def reference_offsets(index, max_sequences):
    """Row by row, the plain way."""
    out = np.zeros((len(index), max_sequences + 1), np.int32)
    for row, values in enumerate(index):
        for k in range(1, max_sequences + 1):
            out[row, k] = out[row, k - 1] + np.count_nonzero(values == k)
    return out


@pytest.fixture(scope="module")
def packs():
    rng = np.random.default_rng(7)
    return [(random_packs(rng, 16, length, depth), depth)
            for length, depth in ((8, 3), (32, 1), (64, 5), (128, 16))]


@pytest.mark.parametrize("name", NAMESPACES)
def test_hand_written_offsets(name):
    xp = NAMESPACES[name]
    offsets = sequence_offsets(INDEX, 3, xp=xp)
    assert np.asarray(offsets).dtype == np.int32
    np.testing.assert_array_equal(offsets, OFFSETS)
    index = sequence_index_from_offsets(OFFSETS, 8, xp=xp)
    assert np.asarray(index).dtype == np.int32
    np.testing.assert_array_equal(index, INDEX)


def test_default_namespace_is_keras_ops():
    offsets = sequence_offsets(tf.constant(INDEX), 3)
    assert keras.ops.is_tensor(offsets) and offsets.dtype == "int32"
    np.testing.assert_array_equal(offsets, OFFSETS)


def test_offsets_of_a_wider_d_repeat_the_end():
    np.testing.assert_array_equal(sequence_offsets(INDEX[:1], 5, xp=np),
                                  [[0, 4, 7, 7, 7, 7]])
    np.testing.assert_array_equal(sequence_offsets(INDEX[2:3], 1, xp=np), [[0, 8]])


def test_hand_written_mask():
    mask = np.asarray(attention_mask_from_offsets(OFFSETS[:2, :], 8))
    expected_first = np.zeros((8, 8), bool)
    expected_first[:4, :4] = expected_first[4:7, 4:7] = True
    expected_second = np.zeros((8, 8), bool)
    expected_second[0, 0] = expected_second[1, 1] = True
    expected_second[2:4, 2:4] = True
    np.testing.assert_array_equal(mask, [expected_first, expected_second])


@pytest.mark.parametrize("name", NAMESPACES)
def test_random_round_trips(packs, name):
    xp = NAMESPACES[name]
    for index, depth in packs:
        offsets = np.asarray(sequence_offsets(index, depth, xp=xp))
        np.testing.assert_array_equal(offsets, reference_offsets(index, depth))
        np.testing.assert_array_equal(
            sequence_index_from_offsets(offsets, index.shape[1], xp=xp), index)
        check_packed_batch(index, offsets)


def test_mask_from_offsets_is_the_block_diagonal_mask(packs):
    for index, depth in packs:
        mask = attention_mask_from_offsets(sequence_offsets(index, depth), index.shape[1])
        expected = np.asarray(block_diagonal_attention_mask(index))
        assert np.asarray(mask).dtype == bool
        np.testing.assert_array_equal(mask, expected)
        check_packed_batch(index, attention_mask=expected)


def test_any_leading_axes():
    micro = np.stack([INDEX, INDEX[::-1]])  # [K, B, S]
    np.testing.assert_array_equal(sequence_offsets(micro, 3, xp=np),
                                  np.stack([OFFSETS, OFFSETS[::-1]]))
    np.testing.assert_array_equal(sequence_offsets(INDEX[0], 3, xp=tnp), OFFSETS[0])
    np.testing.assert_array_equal(sequence_index_from_offsets(OFFSETS[0], 8, xp=tnp),
                                  INDEX[0])


def test_symbolic_keras_tensors_and_graphs():
    inputs = keras.Input((8,), dtype="int32")
    offsets = sequence_offsets(inputs, 3)
    model = keras.Model(inputs, [offsets, attention_mask_from_offsets(offsets, 8)])
    got_offsets, got_mask = model(INDEX)
    np.testing.assert_array_equal(got_offsets, OFFSETS)
    np.testing.assert_array_equal(got_mask, block_diagonal_attention_mask(INDEX))
    graph = tf.function(lambda index: sequence_offsets(index, 3, xp=tnp),
                        input_signature=[tf.TensorSpec([None, None], tf.int32)])
    np.testing.assert_array_equal(graph(INDEX), OFFSETS)


JAX_CHECK = """
import json, sys
import jax, numpy as np
from packed_bert_tf.layers import block_diagonal_attention_mask
from packed_bert_tf.layers.block_diagonal_attention_mask import attention_mask_from_offsets
from packed_bert_tf.sequence_offsets import (
                                             sequence_index_from_offsets, sequence_offsets)
index = np.array(json.loads(sys.argv[1]), np.int32)
offsets = jax.jit(lambda index: sequence_offsets(index, 3))(index)
back = jax.jit(lambda offsets: sequence_index_from_offsets(offsets, 8))(offsets)
mask = jax.jit(lambda offsets: attention_mask_from_offsets(offsets, 8))(offsets)
same_mask = bool((np.asarray(mask) == np.asarray(block_diagonal_attention_mask(index))).all())
print(json.dumps({"backend": __import__("keras").backend.backend(),
                  "tensorflow_imported": "tensorflow" in sys.modules,
                  "offsets": np.asarray(offsets).tolist(), "dtype": str(offsets.dtype),
                  "index": np.asarray(back).tolist(), "same_mask": same_mask}))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
def test_under_jax_jit_without_tensorflow():
    result = subprocess.run([sys.executable, "-c", JAX_CHECK, json.dumps(INDEX.tolist())],
                            capture_output=True, text=True, timeout=300,
                            cwd=str(REPOSITORY), env=jax_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["backend"] == "jax" and got["tensorflow_imported"] is False
    assert got["offsets"] == OFFSETS.tolist() and got["dtype"] == "int32"
    assert got["index"] == INDEX.tolist() and got["same_mask"]


# ---------------------------------------------------------------- the checker
def test_checker_accepts_well_formed_batches():
    mask = block_diagonal_attention_mask(INDEX)
    check_packed_batch(INDEX, OFFSETS, mask)
    check_packed_batch(INDEX, sequence_offsets(INDEX, 6, xp=np))  # room for more


def _with(row, position, value, array=INDEX):
    changed = array.copy()
    changed[row, position] = value
    return changed


@pytest.mark.parametrize("index, message", [
    (_with(4, 0, 2), r"^pack 4, token 0: sequence index 2 at the first token: a pack "
                     r"starts with sequence 1$"),
    (_with(1, 1, 1), r"^pack 1, token 2: sequence index skips from 1 to 3$"),
    (_with(4, 3, 4), r"^pack 4, token 3: sequence index skips from 2 to 4$"),
    (_with(4, 6, 1), r"^pack 4, token 6: sequence index goes down from 3 to 1$"),
    (_with(0, 3, 0), r"^pack 0, token 4: sequence index 2 after padding \(0\): real "
                     r"tokens must come before the padding$"),
    (_with(3, 5, 1), r"^pack 3, token 5: sequence index 1 after padding \(0\): real "
                     r"tokens must come before the padding$"),
    (_with(2, 7, -1), r"^pack 2, token 7: sequence index -1 is negative$"),
])
def test_checker_refuses_a_malformed_sequence_index(index, message):
    with pytest.raises(ValueError, match=message):
        check_packed_batch(index)


def test_checker_names_the_first_fault_by_pack_then_token():
    index = _with(1, 1, 3, _with(3, 2, 1))  # pack 1 skips, pack 3 has a token after padding
    with pytest.raises(ValueError, match=r"^pack 1, token 1: sequence index skips "
                                         r"from 1 to 3$"):
        check_packed_batch(index)


@pytest.mark.parametrize("offsets, message", [
    (_with(2, 0, 1, OFFSETS), r"^pack 2, offset 0: the offsets start at 1, not 0$"),
    (_with(1, 2, 0, OFFSETS), r"^pack 1, offset 2: 0 is less than offset 1 \(1\); "
                              r"offsets must not decrease$"),
    (_with(0, 3, 9, OFFSETS), r"^pack 0, offset 3: 9 is past the row's 8 tokens$"),
    (_with(0, 2, 6, OFFSETS), r"^pack 0, offset 2: sequence 2 ends at token 6 by the "
                              r"offsets but at token 7 by the sequence index$"),
    (_with(3, 3, 2, OFFSETS), r"^pack 3, offset 3: sequence 3 ends at token 2 by the "
                              r"offsets but at token 0 by the sequence index$"),
    (OFFSETS[:, :3], r"^pack 1, token 2: sequence index 3 has no slot in offsets of "
                     r"D = 2 sequences$"),
    (OFFSETS[:4], r"^sequence offsets have shape \(4, 4\), expected \[5, D \+ 1\] for a "
                  r"sequence index of shape \(5, 8\)$"),
])
def test_checker_refuses_wrong_offsets(offsets, message):
    with pytest.raises(ValueError, match=message):
        check_packed_batch(INDEX, offsets)


def test_checker_refuses_a_wrong_mask():
    mask = np.array(block_diagonal_attention_mask(INDEX))
    mask[0, 3, 4] = True  # a1's last token sees b's first
    with pytest.raises(ValueError, match=r"^pack 0, query token 3, key token 4: the "
                                         r"attention mask says True but sequence indices "
                                         r"1 and 2 give False$"):
        check_packed_batch(INDEX, OFFSETS, mask)
    mask = np.array(block_diagonal_attention_mask(INDEX))
    mask[3, 7, 7] = True  # padding sees itself
    with pytest.raises(ValueError, match=r"^pack 3, query token 7, key token 7: .* "
                                         r"sequence indices 0 and 0 give False$"):
        check_packed_batch(INDEX, attention_mask=mask)
    with pytest.raises(ValueError, match=r"^the attention mask has shape \(5, 8\), "
                                         r"expected \(5, 8, 8\)$"):
        check_packed_batch(INDEX, attention_mask=mask[:, 0])


def test_checker_refuses_a_sequence_index_of_another_rank():
    with pytest.raises(ValueError, match=r"^sequence_index has shape \(8,\), expected "
                                         r"\[B, S\]$"):
        check_packed_batch(INDEX[0])
