import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs import pretraining_dataset
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
from packed_bert_tf.data.inputs.pretraining_dataset import ReplicaBatches, Shuffling
from packed_bert_tf.data.packed.packed_rows import PackSpec, concatenate, fingerprints
from packed_bert_tf.data.packed.pretraining_records import (
    compact_records,
    pack_records,
    unpack_records,
)
from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.packing import assign_sequences, pack_lengths
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH

pytestmark = pytest.mark.slow

S, P = SMALL_SEQ_LENGTH, SMALL_PREDICTIONS


def _all(dataset):
    batches = list(dataset.as_numpy_iterator())
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


def test_unpacked_records_come_out_in_the_packed_layout(unpacked_files):
    dataset = pretraining_dataset.pretraining_dataset(unpacked_files[0], batch_size=32,
                                                      is_training=False)
    spec = dataset.element_spec
    assert spec["input_ids"].shape == (32, S) and spec["input_ids"].dtype == tf.int32
    assert spec["masked_lm_weights"].dtype == tf.float32
    assert spec["next_sentence_positions"].shape == (32, 1)
    got = _all(dataset)
    raw = record_files.read_arrays(unpacked_files[0], RecordFormat.unpacked(S, P))
    kept = (300 // 32) * 32  # drop_remainder
    np.testing.assert_array_equal(got["input_ids"], raw["input_ids"][:kept])
    np.testing.assert_array_equal(got["positions"],
                                  np.arange(S)[None, :] * raw["input_mask"][:kept])
    np.testing.assert_array_equal(got["next_sentence_labels"],
                                  raw["next_sentence_labels"][:kept])
    assert (got["next_sentence_weights"] == 1).all()
    assert (got["next_sentence_positions"] == 0).all()


def test_packed_reader_returns_exactly_what_was_written(tmp_path, unpacked_files):
    raw = record_files.read_arrays(unpacked_files[1], RecordFormat.unpacked(S, P))
    sequences = compact_records(raw)
    packed_format = RecordFormat.packed(S, P + 2, 3)
    lengths = sequences["lengths"]
    packs = assign_sequences(lengths, pack_lengths(lengths, S, 3), seed=0)
    written = pack_records(sequences, packs, packed_format)
    path = str(tmp_path / "packed.tfrecord")
    record_files.write_arrays(path, written)
    dataset = pretraining_dataset.pretraining_dataset(path, batch_size=8, is_training=False)
    assert dataset.element_spec["next_sentence_positions"].shape == (8, 3)
    got = _all(dataset)
    kept = (len(packs) // 8) * 8
    for name, values in written.items():
        np.testing.assert_array_equal(got[name], values[:kept], err_msg=name)
        assert got[name].dtype == values.dtype


def test_training_order_is_seeded_and_files_are_sharded(unpacked_files):
    def first_ids(seed):
        dataset = pretraining_dataset.pretraining_dataset(
            unpacked_files, batch_size=16,
            shuffling=Shuffling(seed=seed, shuffle_buffer_size=100))
        return next(iter(dataset))["input_ids"].numpy()

    np.testing.assert_array_equal(first_ids(5), first_ids(5))
    assert not np.array_equal(first_ids(5), first_ids(6))

    seen = []
    for pipeline_id in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3,
                                             input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=3)
        dataset = pretraining_dataset.pretraining_dataset(unpacked_files, batch_size=30,
                                                          is_training=False, input_context=context)
        assert dataset.element_spec["input_ids"].shape == (10, S)
        seen.append(_all(dataset)["input_ids"])
    raw = [record_files.read_arrays(f, RecordFormat.unpacked(S, P))["input_ids"]
           for f in unpacked_files]
    for pipeline_id in range(3):  # pipeline i reads file i only
        np.testing.assert_array_equal(seen[pipeline_id], raw[pipeline_id][:300])
    assert pretraining_dataset.sharding(3, 3) == "file" \
        and pretraining_dataset.sharding(3, 4) == "record"


def _replica_rows(files, *, pipelines, replicas, batch_size, **kwargs):
    """input_ids of every replica's first batches, in replica order: [R, n, b, S]."""
    rows = [[] for _ in range(replicas)]
    per_pipeline = replicas // pipelines
    for pipeline_id in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines,
                                             input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=replicas)
        dataset = pretraining_dataset.pretraining_dataset(files, batch_size=batch_size,
                                                          input_context=context, **kwargs)
        # A pipeline hands out its replicas' batches in turn.
        for index, batch in enumerate(dataset.take(6 * per_pipeline).as_numpy_iterator()):
            rows[pipeline_id * per_pipeline + index % per_pipeline].append(
                batch["input_ids"])
    return np.array(rows)


@pytest.mark.parametrize("num_files", [3, 1])  # by file; by record (1 file, 2 replicas)
def test_the_rows_of_each_replica_depend_on_the_replica_count_alone(unpacked_files,
                                                                    num_files):
    files = unpacked_files[:num_files]
    kwargs = dict(batch_size=8, replicas=2,
                  shuffling=Shuffling(seed=4, shuffle_buffer_size=50))
    one_process = _replica_rows(files, pipelines=1, **kwargs)
    two_workers = _replica_rows(files, pipelines=2, **kwargs)
    assert one_process.shape == (2, 6, 4, S)
    np.testing.assert_array_equal(two_workers, one_process)
    assert not np.array_equal(one_process[0], one_process[1])


@pytest.mark.parametrize("num_files", [3, 1])
def test_every_evaluation_record_is_read_once_across_workers(unpacked_files, num_files):
    files = unpacked_files[:num_files]
    raw = np.concatenate([record_files.read_arrays(f, RecordFormat.unpacked(S, P))["input_ids"]
                          for f in files])
    contexts = [tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index,
                                           num_replicas_in_sync=2) for index in range(2)]
    steps = pretraining_dataset.pipeline_batches([300] * num_files, 64, contexts[0])
    # By file: replica 0 reads files 0 and 2; by record: 150 records each.
    assert steps == (19 if num_files == 3 else 5)
    seen = np.concatenate([batch["input_ids"] for context in contexts
                           for batch in pretraining_dataset.pretraining_dataset(
                               files, batch_size=64, is_training=False,
                               input_context=context,
                               batches=ReplicaBatches(pad_with_empty_batches=True))
                           .take(2 * steps).as_numpy_iterator()])
    seen = seen[seen.any(axis=1)]
    assert len(seen) == len(raw)
    np.testing.assert_array_equal(np.unique(seen, axis=0), np.unique(raw, axis=0))


def test_records_of_another_size_fail_naming_the_feature(unpacked_files):
    dataset = pretraining_dataset.pretraining_dataset(
        unpacked_files[0], batch_size=4, is_training=False,
        record_format=RecordFormat.unpacked(S + 1, P))
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_ids|Key"):
        next(iter(dataset))


def test_evaluation_padding_reads_every_record_once_then_empty_batches(unpacked_files):
    dataset = pretraining_dataset.pretraining_dataset(
        unpacked_files[0], batch_size=32, is_training=False,
        batches=ReplicaBatches(pad_with_empty_batches=True))
    assert dataset.element_spec["input_ids"].shape == (32, S)
    batches = list(dataset.take(12).as_numpy_iterator())
    raw = record_files.read_arrays(unpacked_files[0], RecordFormat.unpacked(S, P))
    got = np.concatenate([b["input_ids"] for b in batches[:10]])  # 300 -> 10 batches
    np.testing.assert_array_equal(got[:300], raw["input_ids"])
    assert not got[300:].any()
    for empty in batches[10:]:
        assert all(not value.any() for value in empty.values())
    assert pretraining_dataset.count_records(unpacked_files) == [300, 300, 300]
    assert pretraining_dataset.pipeline_batches([300, 300, 300], 32) == 29  # ceil(900 / 32)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    # Pipeline 0 reads files 0 and 2 (600 records) in batches of 16.
    assert pretraining_dataset.pipeline_batches([300, 300, 300], 32, context) == 38


def test_skipping_batches_resumes_the_seeded_order(unpacked_files):
    def batches(skip):
        dataset = pretraining_dataset.pretraining_dataset(
            unpacked_files, batch_size=16,
            shuffling=Shuffling(seed=5, shuffle_buffer_size=100),
            batches=ReplicaBatches(skip_rows=16 * skip))
        return [b["input_ids"] for b in dataset.take(6 - skip).as_numpy_iterator()]

    whole, resumed = batches(0), batches(4)
    for got, want in zip(resumed, whole[4:]):
        np.testing.assert_array_equal(got, want)


PACK = PackOnTheFly(max_sequences_per_pack=3, buffer_size=80)


def test_unpacked_records_packed_on_the_fly_hold_each_record_once_per_epoch(unpacked_files):
    dataset = pretraining_dataset.pretraining_dataset(
        unpacked_files, batch_size=8, is_training=True,
        shuffling=Shuffling(seed=2, shuffle_buffer_size=100),
        batches=ReplicaBatches(repeat=False, pack_on_the_fly=PACK))
    packs = _all(dataset)
    assert packs["next_sentence_weights"].shape[1] == 3
    assert packs["masked_lm_ids"].shape[1] == P + 2
    sequences, _ = unpack_records(packs)
    records = concatenate([compact_records(
        record_files.read_arrays(path, RecordFormat.unpacked(S, P))) for path in unpacked_files])
    # Whole batches only: all but fewer than 8 packs' sequences.
    spec = PackSpec.pretraining(P + 2)
    packed_prints = fingerprints(spec, sequences)
    assert np.isin(packed_prints, fingerprints(spec, records)).all()
    count, records_count = sequences["lengths"].size, records["lengths"].size
    assert len(np.unique(packed_prints)) == count
    assert count > records_count - 8 * 3
    assert len(packs["input_ids"]) < records_count / 1.3


@pytest.mark.parametrize("num_files", [3, 1])
def test_packs_made_on_the_fly_depend_on_the_replica_count_alone(unpacked_files, num_files):
    kwargs = dict(batch_size=8, replicas=2,
                  shuffling=Shuffling(seed=4, shuffle_buffer_size=50),
                  batches=ReplicaBatches(pack_on_the_fly=PACK))
    one_process = _replica_rows(unpacked_files[:num_files], pipelines=1, **kwargs)
    two_workers = _replica_rows(unpacked_files[:num_files], pipelines=2, **kwargs)
    np.testing.assert_array_equal(two_workers, one_process)
    assert not np.array_equal(one_process[0], one_process[1])


def test_skipping_packed_batches_resumes_with_the_same_packs(unpacked_files):
    def batches(skip):
        dataset = pretraining_dataset.pretraining_dataset(
            unpacked_files, batch_size=8,
            shuffling=Shuffling(seed=5, shuffle_buffer_size=100),
            batches=ReplicaBatches(skip_rows=8 * skip, pack_on_the_fly=PACK))
        return [b["input_ids"] for b in dataset.take(10 - skip).as_numpy_iterator()]

    whole, resumed = batches(0), batches(6)
    assert len(resumed) == 4
    for got, want in zip(resumed, whole[6:]):
        np.testing.assert_array_equal(got, want)


def test_packing_on_the_fly_needs_unpacked_training_records(unpacked_files):
    with pytest.raises(ValueError, match="packing on the fly needs unpacked records"):
        pretraining_dataset.pretraining_dataset(
            unpacked_files, batch_size=8, is_training=False,
            batches=ReplicaBatches(pad_with_empty_batches=True, pack_on_the_fly=PACK))
