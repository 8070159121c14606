"""Every packed pipeline gives the sequence offsets of its rows: the offline packed
records and packing on the fly (`pretraining_dataset` with
``ReplicaBatches(sequence_offsets=True)``, `pack_dataset`), SQuAD's and the
classifier's rows (`rows_dataset`, `bucketed_rows_dataset`), each through
`with_sequence_offsets`."""

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.batching.dataset import bucketed_rows_dataset
from packed_bert_tf.classification.features import ClassifierFeatures
from packed_bert_tf.classification.packing import pack_features as pack_classifier
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly, pack_dataset
from packed_bert_tf.data.inputs.pretraining_dataset import (
    SEQUENCE_OFFSETS,
    ReplicaBatches,
    pretraining_dataset,
    with_sequence_offsets,
)
from packed_bert_tf.data.inputs.rows_dataset import rows_dataset
from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
from packed_bert_tf.data.records import record_files, synthetic_records
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.packing import assign_sequences, pack_lengths
from packed_bert_tf.sequence_offsets import check_packed_batch
from packed_bert_tf.squad.features import SquadFeatures
from packed_bert_tf.squad.packing import pack_features as pack_squad

S, P, D = 32, 5, 3
PACK = PackOnTheFly(max_sequences_per_pack=D, buffer_size=32)


def expected_offsets(input_mask, max_sequences):
    """Offsets from the sequence index in numpy, row by row: 0, then each
    sequence's end."""
    input_mask = np.asarray(input_mask).reshape(-1, np.shape(input_mask)[-1])
    out = np.zeros((len(input_mask), max_sequences + 1), np.int32)
    for row, values in enumerate(input_mask):
        out[row, 1:] = np.cumsum([np.count_nonzero(values == k)
                                  for k in range(1, max_sequences + 1)])
    return out


def check_elements(dataset, max_sequences, shape):
    """Every element's offsets: their shape, and equal to those of its input_mask.
    Returns the rows' real tokens and offsets, [N] and [N, D + 1]."""
    spec = dataset.element_spec[SEQUENCE_OFFSETS]
    assert spec.dtype == tf.int32 and tuple(spec.shape) == shape
    real, offsets = [], []
    for element in dataset.as_numpy_iterator():
        mask = element["input_mask"].reshape(-1, element["input_mask"].shape[-1])
        got = element[SEQUENCE_OFFSETS].reshape(-1, max_sequences + 1)
        np.testing.assert_array_equal(got, expected_offsets(mask, max_sequences))
        check_packed_batch(mask, got)
        real.append((mask > 0).sum(axis=1))
        offsets.append(got)
    return np.concatenate(real), np.concatenate(offsets)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """An unpacked and a packed TFRecord file of the same 120 sequences."""
    folder = tmp_path_factory.mktemp("offsets")
    rng = np.random.default_rng(3)
    lengths = np.where(rng.random(120) < 0.2, S, rng.integers(5, S + 1, 120))
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, vocab_size=5000, seed=3)
    unpacked = str(folder / "unpacked.tfrecord")
    record_files.write_arrays(unpacked, arrays)
    sequences = compact_records(arrays)
    packs = assign_sequences(sequences["lengths"], pack_lengths(sequences["lengths"], S, D),
                             seed=0)
    packed = str(folder / "packed.tfrecord")
    record_files.write_arrays(packed, pack_records(sequences, packs,
                                                   RecordFormat.packed(S, P + D - 1, D)))
    return unpacked, packed


def test_offline_packed_records(records):
    dataset = pretraining_dataset(records[1], batch_size=8, is_training=False,
                                  batches=ReplicaBatches(sequence_offsets=True))
    _, offsets = check_elements(dataset, D, (8, D + 1))
    depths = (offsets[:, 1:] > offsets[:, :-1]).sum(axis=1)
    assert depths.min() < D and depths.max() == D  # short packs end in zero lengths


def test_offline_packed_records_padded_in_micro_batches(records):
    dataset = pretraining_dataset(
        records[1], batch_size=4, is_training=False,
        batches=ReplicaBatches(sequence_offsets=True, pad_with_empty_batches=True,
                               micro_batches=2)).take(12)
    _, offsets = check_elements(dataset, D, (2, 4, D + 1))
    assert not offsets[-8:].any()  # the empty batches after the last record


def test_unpacked_records_have_one_sequence_per_row(records):
    dataset = pretraining_dataset(records[0], batch_size=8, is_training=False,
                                  batches=ReplicaBatches(sequence_offsets=True))
    real, offsets = check_elements(dataset, 1, (8, 2))
    np.testing.assert_array_equal(offsets[:, 1], real)


def test_off_by_default(records):
    dataset = pretraining_dataset(records[1], batch_size=8, is_training=False)
    assert SEQUENCE_OFFSETS not in dataset.element_spec


def test_packing_on_the_fly_in_the_pipeline(records):
    dataset = pretraining_dataset(
        records[0], batch_size=8, is_training=False,
        batches=ReplicaBatches(repeat=False, pack_on_the_fly=PACK, sequence_offsets=True))
    _, offsets = check_elements(dataset, D, (8, D + 1))
    assert (offsets[:, D] > 0).all()


def test_pack_dataset_one_pack_per_element(records):
    examples = tf.data.TFRecordDataset(records[0]).batch(64).map(
        lambda serialized: tf.io.parse_example(serialized, {
            name: tf.io.FixedLenFeature([size], tf.float32 if name == "masked_lm_weights"
                                        else tf.int64)
            for name, size in RecordFormat.unpacked(S, P).feature_lengths().items()})
    ).unbatch()
    packs = with_sequence_offsets(pack_dataset(examples, max_sequence_length=S,
                                               packing=PACK), D)
    real, offsets = check_elements(packs, D, (D + 1,))
    np.testing.assert_array_equal(offsets[:, D], real)


def _squad_features(rng, count):
    lengths = rng.integers(4, S + 1, count).astype(np.int32)
    real = np.arange(S)[None, :] < lengths[:, None]
    ids = np.where(real, rng.integers(5, 100, (count, S)), 0).astype(np.int32)
    zeros = np.zeros((count, S), np.int32)
    start = (rng.integers(0, 1000, count) % lengths).astype(np.int32)
    return SquadFeatures(ids, zeros.astype(np.int8), zeros.astype(np.int8), zeros, zeros,
                         np.arange(count, dtype=np.int32), np.zeros(count, np.int32),
                         lengths, start, start)


def test_squad_rows(records):
    packs = pack_squad(_squad_features(np.random.default_rng(5), 40),
                       max_sequences_per_pack=D)
    dataset = with_sequence_offsets(rows_dataset(packs, 4, is_training=False),
                                    packs.max_sequences_per_pack)
    _, offsets = check_elements(dataset, D, (4, D + 1))
    # Each sequence where the rows say it is: its start and its length.
    rows, slots = packs.sequence_pack, packs.sequence_slot
    np.testing.assert_array_equal(offsets[rows, slots], packs.sequence_offset)
    np.testing.assert_array_equal(offsets[rows, slots + 1] - offsets[rows, slots],
                                  packs.sequence_length)


def _classifier_features(rng, count):
    lengths = rng.integers(3, 13, count)
    ids = rng.integers(5, 100, lengths.sum()).astype(np.int32)
    return ClassifierFeatures(ids, np.zeros_like(ids),
                              np.concatenate([[0], np.cumsum(lengths)]),
                              rng.integers(0, 2, count).astype(np.int32), max_seq_length=S)


def test_classifier_rows_in_training_micro_batches():
    packs = pack_classifier(_classifier_features(np.random.default_rng(6), 60),
                            max_sequences_per_pack=6)
    dataset = with_sequence_offsets(
        rows_dataset(packs, 2, is_training=True, seed=0, micro_batches=2),
        packs.max_sequences_per_pack).take(4)
    check_elements(dataset, 6, (2, 2, 7))


def test_classifier_bucketed_unpacked_rows():
    packs = pack_classifier(_classifier_features(np.random.default_rng(7), 24),
                            packed=False)
    assert packs.max_sequences_per_pack == 1
    dataset = with_sequence_offsets(bucketed_rows_dataset(packs, 4, seed=0), 1).take(6)
    real, offsets = check_elements(dataset, 1, (None, 2))
    np.testing.assert_array_equal(offsets[:, 1], real)


def test_refusals():
    with pytest.raises(ValueError, match=r"^with_sequence_offsets needs elements that "
                                         r"are dicts with an 'input_mask' feature, got "):
        with_sequence_offsets(tf.data.Dataset.range(3), D)
    masks = tf.data.Dataset.from_tensors({"input_mask": tf.ones([S], tf.int32)})
    with pytest.raises(ValueError, match=r"^max_sequences_per_pack must be >= 1, got 0$"):
        with_sequence_offsets(masks, 0)
    with pytest.raises(ValueError, match=r"^the elements already hold "
                                         r"'sequence_offsets'$"):
        with_sequence_offsets(with_sequence_offsets(masks, D), D)
    scalar = tf.data.Dataset.from_tensors({"input_mask": tf.constant(1)})
    with pytest.raises(ValueError, match=r"^'input_mask' has shape \(\), expected "
                                         r"\[\.\.\., S\]$"):
        with_sequence_offsets(scalar, D)
