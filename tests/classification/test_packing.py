"""Classification features laid out in packs and per-example logits unpacked back."""

import numpy as np
import pytest

from packed_bert_tf.classification.features import ClassifierFeatures
from packed_bert_tf.classification.glue import get_task
from packed_bert_tf.classification.packing import (
    DEFAULT_MAX_SEQUENCES_PER_PACK,
    layout_packs,
    pack_examples,
    pack_features,
    unpack_logits,
)
from packed_bert_tf.data.tokenization import WordPieceTokenizer
from packed_bert_tf.packing import PackAssignment, ragged
from tests.classification.classifier_data import (
    random_examples,
    random_features,
    write_classifier_vocab,
)


def _small_features(labels=(1, 0, 2), dtype=np.int32):
    """Three pairs: ids 10 * (example + 1) + position; [CLS] a [SEP] b [SEP]."""
    lengths = np.array([5, 6, 3])
    position = ragged.position_in_row(lengths)
    example = ragged.row_of_elements(lengths)
    segment_ids = np.array([0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1], np.int32)
    return ClassifierFeatures((10 * (example + 1) + position).astype(np.int32),
                              segment_ids, ragged.row_splits_from_lengths(lengths),
                              np.array(labels, dtype), 12)


def test_layout_of_a_small_assignment():
    # Pack 0: examples 1 then 2; pack 1: example 0.
    packs = layout_packs(_small_features(),
                         PackAssignment(np.array([0, 2, 3]), np.array([1, 2, 0])), 3)
    a = packs.arrays
    np.testing.assert_array_equal(a["input_ids"], [
        [20, 21, 22, 23, 24, 25, 30, 31, 32, 0, 0, 0],
        [10, 11, 12, 13, 14, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["segment_ids"], [
        [0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["input_mask"], [
        [1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["positions"], [
        [0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 0, 0],
        [0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(a["cls_positions"], [[0, 6, 0], [0, 0, 0]])
    np.testing.assert_array_equal(a["label_ids"], [[0, 2, 0], [1, 0, 0]])
    np.testing.assert_array_equal(a["sequence_weights"], [[1, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(packs.sequence_pack, [1, 0, 0])
    np.testing.assert_array_equal(packs.sequence_slot, [0, 0, 1])
    np.testing.assert_array_equal(packs.sequence_offset, [0, 0, 6])
    assert packs.packing_factor == 1.5 and packs.max_sequences_per_pack == 3
    assert packs.padding_fraction == pytest.approx(1 - 14 / 24)
    assert all(value.dtype == np.int32 for value in a.values())


def test_regression_labels_stay_float():
    packs = pack_features(_small_features((0.5, 4.25, 3.0), np.float32))
    assert packs.arrays["label_ids"].dtype == np.float32
    np.testing.assert_array_equal(
        packs.arrays["label_ids"][packs.sequence_pack, packs.sequence_slot],
        [0.5, 4.25, 3.0])


def test_unpacked_layout_is_the_references():
    features = _small_features()
    packs = pack_features(features, packed=False)
    assert not packs.packed and packs.num_packs == 3 and packs.max_sequences_per_pack == 1
    np.testing.assert_array_equal(packs.arrays["input_ids"], features.padded())
    np.testing.assert_array_equal(packs.arrays["segment_ids"],
                                  features.padded("segment_ids"))
    np.testing.assert_array_equal(packs.arrays["input_mask"],
                                  features.padded() > 0)  # 0/1 as the reference's
    np.testing.assert_array_equal(packs.arrays["cls_positions"], [[0], [0], [0]])
    np.testing.assert_array_equal(packs.arrays["label_ids"], [[1], [0], [2]])


@pytest.mark.parametrize("algorithm", ["optimal", "lpfhp", "none"])
def test_every_example_lands_once_where_the_maps_say(algorithm):
    rng = np.random.default_rng(0)
    features = random_features(rng.integers(3, 40, 200), 64, vocab_size=100)
    packs = pack_features(features, max_sequences_per_pack=5, algorithm=algorithm)
    tokens = packs.arrays["input_ids"]
    lengths = features.length
    for example in range(len(features)):
        row, slot = packs.sequence_pack[example], packs.sequence_slot[example]
        start = packs.sequence_offset[example]
        span = slice(start, start + lengths[example])
        np.testing.assert_array_equal(
            tokens[row, span], features.input_ids[features.row_splits[example]:
                                                  features.row_splits[example + 1]])
        assert (packs.arrays["input_mask"][row, span] == slot + 1).all()
        assert packs.arrays["cls_positions"][row, slot] == start
        assert packs.arrays["label_ids"][row, slot] == features.label_ids[example]
    assert packs.arrays["sequence_weights"].sum() == 200
    if algorithm != "none":
        assert packs.packing_factor > 2.5


def test_unpack_logits_in_any_row_order_with_padding_rows():
    features = random_features(np.random.default_rng(1).integers(3, 20, 30), 48,
                               vocab_size=100)
    packs = pack_features(features, max_sequences_per_pack=4)
    logits = np.random.default_rng(2).standard_normal(
        (packs.num_packs, 4, 3)).astype(np.float32)
    want = logits[packs.sequence_pack, packs.sequence_slot]
    order = np.random.default_rng(3).permutation(packs.num_packs)
    index = np.concatenate([order, [-1, -1]])
    shuffled = np.concatenate([logits[order], np.zeros((2, 4, 3), np.float32)])
    np.testing.assert_array_equal(unpack_logits(packs, index, shuffled), want)
    with pytest.raises(ValueError, match="1 packs missing, 0 repeated"):
        unpack_logits(packs, order[1:], logits[order[1:]])
    with pytest.raises(ValueError, match="0 packs missing, 1 repeated"):
        unpack_logits(packs, np.concatenate([order, order[:1]]),
                      np.concatenate([logits[order], logits[order[:1]]]))


def test_layout_refuses_bad_assignments():
    features = _small_features()
    with pytest.raises(ValueError, match="pack 0 holds 14 tokens, more than max_sequence_length=12"):
        layout_packs(features, PackAssignment(np.array([0, 3]), np.array([0, 1, 2])), 3)
    with pytest.raises(ValueError, match="pack 0 holds 2 sequences, more than "
                                         "max_sequences_per_pack=1"):
        layout_packs(features, PackAssignment(np.array([0, 2, 3]), np.array([0, 2, 1])),
                     1)
    with pytest.raises(ValueError, match="not each of the 3 sequences exactly once"):
        layout_packs(features, PackAssignment(np.array([0, 1, 2, 3]),
                                              np.array([0, 0, 2])), 3)


def test_pack_examples_without_the_front_end(tmp_path):
    tokenizer = WordPieceTokenizer(write_classifier_vocab(tmp_path / "vocab.txt"))
    examples = random_examples(64, 0, pairs=False)
    packs = pack_examples(examples, get_task("sst-2"), tokenizer, max_seq_length=128)
    assert packs.max_sequences_per_pack == DEFAULT_MAX_SEQUENCES_PER_PACK == 16
    assert packs.num_sequences == 64 and packs.packing_factor > 4
    unpacked = pack_examples(examples, get_task("sst-2"), tokenizer, max_seq_length=128,
                             packed=False)
    assert unpacked.num_packs == 64
