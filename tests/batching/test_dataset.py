"""The tf.data layer: layout, exactly once per epoch, determinism, shapes, sharding."""

import json

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.batching import Bucketing, bucket_batches, bucketed_pretraining_dataset
from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling
from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import IdLimits, RecordFormat
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH
from tests.tool_runs import run_json_check

pytestmark = pytest.mark.slow

S, P = SMALL_SEQ_LENGTH, SMALL_PREDICTIONS
BOUNDARIES = (16, 32, 48, 64)


@pytest.fixture(scope="module")
def raw(unpacked_files):
    """All records of the three files, file after file, and an index by content."""
    arrays = [record_files.read_arrays(f, RecordFormat.unpacked(S, P)) for f in unpacked_files]
    records = {name: np.concatenate([a[name] for a in arrays]) for name in arrays[0]}
    index = {row.tobytes(): i for i, row in enumerate(records["input_ids"].astype(np.int32))}
    assert len(index) == len(records["input_ids"])  # random tokens: all distinct
    return records, index


def _dataset(files, **options):
    bucketing = {"pool_size": 100, "bucket_boundaries": BOUNDARIES,
                 "pad_to_bucket_boundary": True}
    for name in ("batch_size", "token_budget", "pool_size", "pad_to_bucket_boundary",
                 "balance_cost"):
        if name in options:
            bucketing[name] = options.pop(name)
    return bucketed_pretraining_dataset(
        files, record_format=RecordFormat.unpacked(S, P), bucketing=Bucketing(**bucketing),
        shuffling=Shuffling(seed=options.pop("seed", 0)), **options)


def _record_ids(batch, index):
    """Indices of the batch's real rows among the raw records (padded back to S)."""
    ids = batch["input_ids"]
    real = batch["next_sentence_weights"][:, 0] == 1
    full = np.pad(ids[real], [[0, 0], [0, S - ids.shape[1]]]).astype(np.int32)
    return [index[row.tobytes()] for row in full]


def test_batches_are_the_records_in_the_packed_layout(unpacked_files, raw):
    records, index = raw
    batches = list(_dataset(unpacked_files, batch_size=16, is_training=False)
                   .as_numpy_iterator())
    seen = []
    for batch in batches:
        rows, length = batch["input_ids"].shape
        assert rows == 16 and length in BOUNDARIES
        ids = _record_ids(batch, index)
        real = len(ids)
        for name in ("input_ids", "input_mask", "segment_ids"):
            np.testing.assert_array_equal(batch[name][:real], records[name][ids, :length])
            assert not records[name][ids, length:].any()  # nothing cut off
            assert not batch[name][real:].any()  # empty rows
        for name in ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                     "next_sentence_labels"):
            np.testing.assert_array_equal(batch[name][:real], records[name][ids])
            assert not batch[name][real:].any()
        np.testing.assert_array_equal(batch["positions"],
                                      np.arange(length) * batch["input_mask"])
        assert not batch["next_sentence_positions"].any()
        assert batch["input_ids"].dtype == np.int32
        assert batch["masked_lm_weights"].dtype == np.float32
        seen.extend(ids)
    np.testing.assert_array_equal(np.sort(seen), np.arange(len(records["input_ids"])))


@pytest.fixture(scope="module")
def first_file_batches(unpacked_files):
    """The first file's batches of 16 rows, in order (not training): a
    pipeline costs most of a second to build, and two tests read these."""
    return list(_dataset(unpacked_files[0], batch_size=16, is_training=False)
                .as_numpy_iterator())


def test_one_file_in_order_gives_the_numpy_plan(unpacked_files, raw, first_file_batches):
    records, index = raw
    lengths = records["input_mask"][:300].sum(axis=1)
    for options in (dict(batch_size=16), dict(token_budget=512)):
        plan = bucket_batches(lengths, Bucketing(pool_size=100, bucket_boundaries=BOUNDARIES,
                                                 pad_to_bucket_boundary=True, **options),
                              shuffle=False)
        batches = first_file_batches if "batch_size" in options else list(
            _dataset(unpacked_files[0], is_training=False, **options).as_numpy_iterator())
        assert [b["input_ids"].shape for b in batches] == list(
            zip(plan.batch_rows, plan.padded_lengths))
        assert [_record_ids(b, index) for b in batches] == [k.tolist() for k in plan]


def _epochs(batches, num_records):
    """Splits batches at every num_records real rows (an epoch boundary)."""
    epochs, current = [], []
    for batch in batches:
        current.append(batch)
        if sum(int(b["next_sentence_weights"].sum()) for b in current) == num_records:
            epochs.append(current)
            current = []
    assert not current
    return epochs


def test_training_is_deterministic_and_each_epoch_holds_every_record_once(
        unpacked_files, raw):
    records, index = raw

    def run(seed, num_epochs=2):
        return list(_dataset(unpacked_files, token_budget=512, seed=seed,
                             num_epochs=num_epochs).as_numpy_iterator())

    first, again = run(3), run(3)
    assert len(first) == len(again)
    for a, b in zip(first, again):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    epochs = _epochs(first, len(records["input_ids"]))
    # Another seed, another order: its first epoch against this one's.
    assert [_record_ids(b, index) for b in epochs[0]] != [
        _record_ids(b, index) for b in run(4, num_epochs=1)]
    assert len(epochs) == 2
    for epoch in epochs:
        ids = [i for batch in epoch for i in _record_ids(batch, index)]
        np.testing.assert_array_equal(np.sort(ids), np.arange(len(records["input_ids"])))
    # Budgets never exceeded, shapes from the allowed set only.
    assert {b["input_ids"].shape for b in first} <= {(512 // e, e) for e in BOUNDARIES}
    # The two epochs are shuffled differently.
    assert [_record_ids(b, index) for b in epochs[0]] != [
        _record_ids(b, index) for b in epochs[1]]


def test_input_pipelines_read_disjoint_files(unpacked_files, raw):
    records, index = raw
    seen = []
    for pipeline_id in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3,
                                             input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=3)
        batches = list(_dataset(unpacked_files, batch_size=48, input_context=context,
                                num_epochs=1).as_numpy_iterator())
        assert {b["input_ids"].shape[0] for b in batches} == {16}  # per replica
        ids = [i for b in batches for i in _record_ids(b, index)]
        assert set(ids) == set(range(300 * pipeline_id, 300 * (pipeline_id + 1)))
        seen.extend(ids)
    assert sorted(seen) == list(range(900))
    context = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=0,
                                         num_replicas_in_sync=4)
    with pytest.raises(ValueError, match="3 input files cannot be sharded between 4"):
        _dataset(unpacked_files, batch_size=8, input_context=context)


@pytest.mark.parametrize("pad", [True, False])
def test_replicas_of_a_step_get_batches_of_one_shape(unpacked_files, raw, pad):
    records, index = raw
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=4)
    batches = list(_dataset(unpacked_files, batch_size=32, input_context=context,
                            pad_to_bucket_boundary=pad, balance_cost="real_tokens",
                            num_epochs=1, pool_size=200).as_numpy_iterator())
    assert len(batches) % 4 == 0
    for step in range(0, len(batches), 4):
        shapes = {b["input_ids"].shape for b in batches[step:step + 4]}
        assert len(shapes) == 1 and shapes.pop()[0] == 8
    ids = [i for b in batches for i in _record_ids(b, index)]
    assert sorted(ids) == list(range(900))


def test_bad_options_are_rejected(unpacked_files):
    with pytest.raises(ValueError, match="pool_size=8 is smaller than batch_size=16"):
        _dataset(unpacked_files, batch_size=16, pool_size=8)
    with pytest.raises(ValueError, match="token_budget=32 is below the longest sequence's "
                                         "64 tokens"):
        _dataset(unpacked_files, token_budget=32)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    with pytest.raises(ValueError, match="replicas of a step need one shape"):
        _dataset(unpacked_files, token_budget=1024, pad_to_bucket_boundary=False,
                 input_context=context)


def test_every_token_id_is_checked_against_the_vocabulary(unpacked_files, raw):
    records, _ = raw
    in_file = slice(0, 300)  # the first file's records
    largest = int(max(records["input_ids"][in_file].max(),
                      records["masked_lm_ids"][in_file].max()))
    batches = list(_dataset(unpacked_files[0], batch_size=16, is_training=False,
                            id_limits=IdLimits(largest + 1, 2, S)).as_numpy_iterator())
    assert sum(int(b["next_sentence_weights"].sum()) for b in batches) == 300
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"id out of range: limits input_ids {largest}, masked_lm_ids "
                             rf"{largest}, segment_ids 2, masked_lm_positions {S}\]"):
        list(_dataset(unpacked_files[0], batch_size=16, is_training=False,
                      id_limits=IdLimits(largest, 2, S)).as_numpy_iterator())


@pytest.mark.parametrize("feature, value", [("masked_lm_ids", -3), ("segment_ids", 2),
                                            ("input_ids", 5000),
                                            ("masked_lm_positions", S)])
def test_every_id_out_of_range_fails_the_batch(unpacked_files, tmp_path, feature, value):
    arrays = record_files.read_arrays(unpacked_files[0], RecordFormat.unpacked(S, P))
    arrays = {name: value[:20].copy() for name, value in arrays.items()}
    arrays[feature][7, 0] = value
    path = str(tmp_path / "bad.tfrecord")
    record_files.write_arrays(path, arrays)
    with pytest.raises(tf.errors.InvalidArgumentError, match="id out of range"):
        list(_dataset(path, batch_size=16, is_training=False,
                      id_limits=IdLimits(5000, 2, S)).as_numpy_iterator())


def test_empty_rows_leave_the_model_losses_unchanged(first_file_batches):
    from packed_bert_tf.models import BertConfig, BertPretrainingModel
    from packed_bert_tf.models.bert_pretraining import pretraining_losses

    config = BertConfig(vocab_size=5000, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=S)
    model = BertPretrainingModel.from_bert_config(config, packed=False)
    partial = [b for b in first_file_batches if b["next_sentence_weights"].sum() < 16]
    assert partial  # the epoch's last batch of a bucket
    for batch in partial[:2]:
        real = int(batch["next_sentence_weights"].sum())
        trimmed = {name: value[:real] for name, value in batch.items()}
        with_empty = pretraining_losses(batch, model(batch), global_normaliser=False)
        without = pretraining_losses(trimmed, model(trimmed), global_normaliser=False)
        for name in ("masked_lm_loss", "next_sentence_loss"):
            assert np.isfinite(float(with_empty[name]))
            assert float(with_empty[name]) == pytest.approx(float(without[name]), rel=1e-5)


MIRRORED_SCRIPT = r'''
import json, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
import numpy as np
from packed_bert_tf.batching import Bucketing, bucketed_pretraining_dataset
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling

tf.random.set_seed(0)  # a global seed (as keras.utils.set_random_seed sets) is fine
files = json.loads(sys.argv[1])


def make(context):
    return bucketed_pretraining_dataset(
        files, record_format=RecordFormat.unpacked(64, 10),
        bucketing=Bucketing(batch_size=16, pool_size=100, pad_to_bucket_boundary=True,
                            balance_cost="real_tokens"),
        shuffling=Shuffling(seed=3, shuffle_buffer_size=300), num_epochs=1,
        input_context=context)


strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
steps = [[v.numpy() for v in strategy.experimental_local_results(x["input_ids"])]
         for x in strategy.distribute_datasets_from_function(make)]
direct = list(make(tf.distribute.InputContext(1, 0, 2)).as_numpy_iterator())
print(json.dumps({
    "steps": len(steps), "direct": len(direct),
    "same": all(np.array_equal(steps[t][w], direct[2 * t + w]["input_ids"])
                for t in range(len(steps)) for w in range(2)),
    "one_shape": all(steps[t][0].shape == steps[t][1].shape for t in range(len(steps))),
}))
'''


def test_mirrored_strategy_gives_each_replica_its_share_of_a_step(unpacked_files):
    # One file is enough to deal out (the pipeline is one input pipeline).
    got = run_json_check("-c", MIRRORED_SCRIPT, json.dumps(unpacked_files[:1]))
    # distribute_datasets_from_function deals the pipeline's batches to the
    # replicas in turn: step t is batches 2t and 2t + 1, of one shape.
    assert got["steps"] * 2 == got["direct"] and got["same"] and got["one_shape"]
