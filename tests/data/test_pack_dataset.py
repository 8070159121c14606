"""`packed_bert_tf.data.inputs.pack_dataset.pack_dataset`: packing a tf.data stream."""

import logging
import types

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly, pack_dataset
from packed_bert_tf.data.packed.packed_rows import PackSpec, fingerprints
from packed_bert_tf.data.packed.pretraining_records import (
    compact_records,
    pack_records,
    unpack_records,
)
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.data.records.synthetic_records import lengths_from_histogram, unpacked_arrays
from packed_bert_tf.packing.streaming_packer import pack_stream
from packed_bert_tf.squad.packing import layout_packs
from tests.tool_runs import run_json_check

pytestmark = pytest.mark.slow

S, P, D = 128, 20, 3
M = P + D - 1


def examples(count, seed=0, histogram=None, max_seq_length=S, masked_lm_prob=0.15):
    """Unpacked pre-training examples as parse_records gives them (int32)."""
    if histogram is None:
        lengths = np.random.default_rng(seed).integers(5, max_seq_length + 1, count)
    else:
        lengths = lengths_from_histogram(histogram, count, seed=seed)
    arrays = unpacked_arrays(lengths, max_seq_length=max_seq_length,
                             max_predictions_per_seq=P, vocab_size=5000,
                             masked_lm_prob=masked_lm_prob, seed=seed)
    return {name: value.astype(np.int32) if value.dtype == np.int64 else value
            for name, value in arrays.items()}


def sorted_prints(sequences: dict) -> np.ndarray:
    """The sorted fingerprints of compact pre-training sequences: equal for
    the same sequences in any order."""
    return np.sort(fingerprints(PackSpec.pretraining(M), sequences))


def collect(dataset) -> dict:
    rows = list(dataset.batch(64).as_numpy_iterator())
    return {name: np.concatenate([row[name] for row in rows]) for name in rows[0]}


@pytest.fixture(scope="module")
def stream():
    return examples(1500, seed=1)


def test_every_example_is_in_one_pack_whole_and_the_packs_are_well_formed(stream):
    packed = pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                          max_sequence_length=S, packing=PackOnTheFly(buffer_size=200),
                          seed=4)
    assert {name: spec.shape.as_list() for name, spec in packed.element_spec.items()} == {
        name: [length] for name, length in
        RecordFormat.packed(S, M, D).feature_lengths().items()}
    packs = collect(packed)
    # unpack_records checks every rule of the packed format on every pack.
    sequences, _ = unpack_records(packs)
    assert np.array_equal(sorted_prints(sequences), sorted_prints(compact_records(stream)))
    assert sequences["lengths"].size == 1500  # nothing dropped, nothing cut, nothing twice
    assert packs["input_ids"].shape[0] < 1500 * 0.75


def test_the_packs_are_what_the_offline_packer_writes_for_the_same_assignment(stream):
    packs = collect(pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                                 max_sequence_length=S,
                                 packing=PackOnTheFly(buffer_size=300, chunk_size=128),
                                 seed=2))
    lengths = stream["input_mask"].sum(axis=1)
    assignment = pack_stream(lengths, S, D, buffer_size=300, seed=2).assignment
    expected = pack_records(compact_records(stream), assignment, RecordFormat.packed(S, M, D))
    assert set(packs) == set(expected)
    for name, value in expected.items():
        assert packs[name].dtype == value.dtype, name
        np.testing.assert_array_equal(packs[name], value, err_msg=name)


def test_the_packs_are_deterministic_for_a_seed(stream):
    dataset = tf.data.Dataset.from_tensor_slices(stream)
    packing = PackOnTheFly(buffer_size=250)
    first = collect(pack_dataset(dataset, max_sequence_length=S, packing=packing, seed=7))
    again = collect(pack_dataset(dataset, max_sequence_length=S, packing=packing, seed=7,
                                 num_parallel_calls=1))
    other = collect(pack_dataset(dataset, max_sequence_length=S, packing=packing, seed=8))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["input_ids"], other["input_ids"])
    assert sorted(map(bytes, first["input_ids"])) == sorted(map(bytes, other["input_ids"]))


def test_an_iterator_restored_mid_epoch_yields_the_rest_of_the_uninterrupted_run(
        stream, tmp_path):
    dataset = pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                           max_sequence_length=S, packing=PackOnTheFly(buffer_size=300),
                           seed=3).batch(8)
    uninterrupted = [batch["input_ids"] for batch in dataset.as_numpy_iterator()]
    iterator = iter(dataset)
    for _ in range(30):  # several rounds in: the buffer holds waiting examples
        next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    next(iterator)  # moves on after saving
    restored = iter(dataset)
    tf.train.Checkpoint(iterator=restored).restore(saved)
    rest = [batch["input_ids"].numpy() for batch in restored]
    assert len(rest) == len(uninterrupted) - 30
    for got, expected in zip(rest, uninterrupted[30:]):
        np.testing.assert_array_equal(got, expected)


def test_replica_shards_hold_each_example_once(stream):
    source = tf.data.Dataset.from_tensor_slices(stream)

    def replica_dataset(context: tf.distribute.InputContext):
        shard = source.shard(context.num_input_pipelines, context.input_pipeline_id)
        return pack_dataset(shard, max_sequence_length=S,
                            packing=PackOnTheFly(buffer_size=200), seed=1)

    prints = []
    for replica in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2,
                                             input_pipeline_id=replica,
                                             num_replicas_in_sync=2)
        sequences, _ = unpack_records(collect(replica_dataset(context)))
        shard = {name: value[replica::2] for name, value in stream.items()}
        assert np.array_equal(sorted_prints(sequences), sorted_prints(compact_records(shard)))
        prints.append(sorted_prints(sequences))
    assert np.intersect1d(*prints).size == 0


MIRRORED_SCRIPT = r'''
import json, sys
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly, pack_dataset
from tests.data.test_pack_dataset import examples, S

stream = examples(600, seed=5)
source = tf.data.Dataset.from_tensor_slices(stream)
contexts = []


def make(context):
    contexts.append([context.num_input_pipelines, context.input_pipeline_id])
    shard = source.shard(context.num_input_pipelines, context.input_pipeline_id)
    return pack_dataset(shard, max_sequence_length=S, packing=PackOnTheFly(buffer_size=100),
                        seed=1).batch(4, drop_remainder=True)


strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
seen = []
for step in strategy.distribute_datasets_from_function(make):
    seen.append([local.numpy().tolist()
                 for local in strategy.experimental_local_results(step["input_ids"])])
direct = [batch["input_ids"].tolist()
          for batch in make(tf.distribute.InputContext(1, 0, 2)).as_numpy_iterator()]
print(json.dumps({"contexts": contexts, "steps": len(seen), "direct": len(direct),
                  "dealt_in_turn": all(seen[t][r] == direct[2 * t + r]
                                       for t in range(len(seen)) for r in range(2))}))
'''


def test_under_mirrored_strategy_the_packs_are_dealt_to_the_replicas():
    # One worker: one input pipeline (the whole stream), whose batches
    # distribute_datasets_from_function deals to the 2 replicas in turn.
    got = run_json_check("-c", MIRRORED_SCRIPT)
    assert got["contexts"][0] == [1, 0]
    assert got["steps"] == got["direct"] // 2 > 10 and got["dealt_in_turn"]


def test_a_too_long_example_is_named_or_skipped_and_counted(caplog):
    stream = examples(300, seed=2, max_seq_length=64)
    long_ones = np.flatnonzero(stream["input_mask"].sum(axis=1) > 40)
    dataset = tf.data.Dataset.from_tensor_slices(stream)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"example {long_ones[0]} of the stream has \d+ tokens, more "
                             rf"than max_sequence_length=40"):
        collect(pack_dataset(dataset, max_sequence_length=40,
                             packing=PackOnTheFly(buffer_size=50)))
    with caplog.at_level(logging.WARNING):
        packs = collect(pack_dataset(dataset, max_sequence_length=40,
                                     packing=PackOnTheFly(buffer_size=50),
                                     skip_long_sequences=True))
    sequences, _ = unpack_records(packs)
    assert sequences["lengths"].size == 300 - long_ones.size
    skipped = [int(line.split("skipped ")[1].split()[0]) for line in caplog.messages
               if "pack_dataset: skipped" in line]
    assert sum(skipped) == long_ones.size


def test_a_mismatched_dataset_lists_every_difference():
    stream = examples(10)
    stream["extra"] = stream.pop("segment_ids")
    stream["input_ids"] = stream["input_ids"][:, :, None]
    with pytest.raises(ValueError) as raised:
        pack_dataset(tf.data.Dataset.from_tensor_slices(stream), max_sequence_length=S)
    message = str(raised.value)
    assert message.startswith("the dataset's elements do not match the PackSpec: ")
    for problem in ("'segment_ids' is missing", "'extra' is not in the spec (it would "
                    "be dropped)", "'input_ids' has shape (128, 1), not a fixed-length "
                    "vector"):
        assert problem in message
    with pytest.raises(ValueError, match="max_predictions_per_pack=5 is less than the 20"):
        pack_dataset(tf.data.Dataset.from_tensor_slices(examples(10)),
                     max_sequence_length=S, max_predictions_per_pack=5)
    with pytest.raises(ValueError, match="needs a dataset of dicts"):
        pack_dataset(tf.data.Dataset.range(3), max_sequence_length=S)


def test_packs_over_the_prediction_slots_are_replanned_not_truncated(caplog):
    # Sequences of 64 tokens, two to a pack, half with 17 predictions and half
    # with 4, in M = P = 20 slots: a pack with a heavy one overflows, two light
    # ones fit. Re-planned, light ones released from overflowing packs pair up.
    stream = unpacked_arrays(np.full(400, 64), max_seq_length=S, max_predictions_per_seq=P,
                             vocab_size=5000, masked_lm_prob=0.3, seed=3)
    counts = np.where(np.random.default_rng(0).random(400) < 0.5, 17, 4)
    for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"):
        stream[name][np.arange(P)[None, :] >= counts[:, None]] = 0
    with caplog.at_level(logging.WARNING):
        packs = collect(pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                                     max_sequence_length=S, spec=PackSpec.pretraining(P),
                                     packing=PackOnTheFly(buffer_size=100)))
    assert packs["masked_lm_ids"].shape[1] == P  # no pack over M
    sequences, _ = unpack_records(packs)  # every rule of the format holds
    assert np.array_equal(sorted_prints(sequences), sorted_prints(compact_records(stream)))
    replanned = [int(line.split("dataset: ")[1].split()[0]) for line in caplog.messages
                 if "re-planned into new packs" in line]
    assert sum(replanned) > 100
    # One pack per sequence of every overflowing pack of the packer's choice.
    chosen = pack_stream(np.full(400, 64), S, D, buffer_size=100, seed=0).assignment
    over = chosen.sum_per_pack(counts[chosen.sequence_indices]) > P
    split = len(chosen) + int((chosen.sequences_per_pack[over] - 1).sum())
    assert split == 345 and packs["input_ids"].shape[0] == 326


def test_squad_features_pack_as_the_squad_layout_does():
    rng = np.random.default_rng(0)
    count, width = 300, 96
    lengths = rng.integers(8, width + 1, count)
    real = np.arange(width)[None, :] < lengths[:, None]
    features = {
        "input_ids": np.where(real, rng.integers(1, 500, (count, width)), 0).astype(np.int32),
        "segment_ids": np.where(real, rng.integers(0, 2, (count, width)), 0).astype(np.int32),
        "input_mask": real.astype(np.int32),
        "start_positions": rng.integers(0, lengths).astype(np.int32),
    }
    features["end_positions"] = np.minimum(
        features["start_positions"] + rng.integers(0, 4, count), lengths - 1).astype(np.int32)
    packs = collect(pack_dataset(tf.data.Dataset.from_tensor_slices(features),
                                 max_sequence_length=width, spec=PackSpec.squad(),
                                 packing=PackOnTheFly(buffer_size=60), seed=1))
    assignment = pack_stream(lengths, width, 3, buffer_size=60, seed=1).assignment
    expected = layout_packs(types.SimpleNamespace(
        input_ids=features["input_ids"], segment_ids=features["segment_ids"],
        length=lengths, start_position=features["start_positions"],
        end_position=features["end_positions"]), assignment, 3).arrays
    assert set(packs) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(packs[name], value, err_msg=name)


def test_a_malformed_example_is_named_by_its_index_in_the_stream():
    stream = examples(50, seed=6)
    stream["input_mask"][37, 2] = 0  # a hole in the run of real tokens
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="example 37 of the stream: input_mask is not a non-empty "
                             "run of nonzero values followed by 0s"):
        collect(pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                             max_sequence_length=S,
                             packing=PackOnTheFly(buffer_size=20, chunk_size=8)))


def test_with_skipping_a_malformed_example_is_still_named_by_its_stream_index():
    stream = examples(60, seed=7, max_seq_length=64)
    long_ones = np.flatnonzero(stream["input_mask"].sum(axis=1) > 40)
    later = [i for i in range(60) if i not in long_ones and i > long_ones[2]][0]
    stream["masked_lm_positions"][later, 0] = 63  # outside its sequence
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"example {later} of the stream: its real predictions"):
        collect(pack_dataset(tf.data.Dataset.from_tensor_slices(stream),
                             max_sequence_length=40,
                             packing=PackOnTheFly(buffer_size=20, chunk_size=60),
                             skip_long_sequences=True))


def test_prediction_slots_of_unknown_width_are_listed_not_crashed_on():
    stream = examples(4)
    dataset = tf.data.Dataset.from_generator(
        lambda: iter([{name: value[i] for name, value in stream.items()} for i in range(4)]),
        output_signature={name: tf.TensorSpec(
            [None] if name.startswith("masked_lm") else value.shape[1:],
            tf.as_dtype(value.dtype)) for name, value in stream.items()})
    with pytest.raises(ValueError, match=r"'masked_lm_weights' has shape \(None,\), not a "
                                         r"fixed-length vector"):
        pack_dataset(dataset, max_sequence_length=S)
    with pytest.raises(ValueError, match="give max_predictions_per_pack in the spec"):
        pack_dataset(tf.data.Dataset.from_tensor_slices(stream), max_sequence_length=S,
                     spec=PackSpec.pretraining(M), max_predictions_per_pack=M)
