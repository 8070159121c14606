"""The SQuAD task functions drive the shared `Trainer` (2 updates of 2 micro-batches)."""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from packed_bert_tf.data.inputs.rows_dataset import RepackedRows
from packed_bert_tf.models import BertSquadModel
from packed_bert_tf.squad import task
from packed_bert_tf.squad.packing import pack_features
from packed_bert_tf.training.fine_tuning import train_dataset_fn
from packed_bert_tf.training.trainer import Trainer
from tests.models.packed_batches import TINY_CONFIG, twin_models
from tests.squad.squad_data import make_features


def test_trainer_runs_squad_updates_on_packed_rows():
    rng = np.random.default_rng(0)
    features = make_features(rng.integers(4, 30, 48), 32,
                             vocab_size=TINY_CONFIG.vocab_size)
    packs = pack_features(features, max_sequences_per_pack=3)
    tf.random.set_seed(0)
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    model.build()
    trainer = Trainer(model, keras.optimizers.Adam(1e-3), task=task.SQUAD_TASK,
                      steps_per_update=2, jit_compile=False)
    dataset_fn = train_dataset_fn(packs, global_batch_size=4, steps_per_update=2,
                                  seed=0)
    iterator = iter(tf.distribute.get_strategy().distribute_datasets_from_function(
        dataset_fn))
    before = [w.numpy().copy() for w in model.trainable_weights]
    result = trainer.train_steps(iterator, 2)
    assert result.first_nonfinite_step == -1
    assert all(np.isfinite(result.metrics[name]) for name in task.METRIC_NAMES)
    # Each micro-batch's loss is its share of the update's mean: summed over the
    # two micro-batches it is a mean cross entropy, about log(row length).
    assert 1.0 < result.mean("loss") < 2 * np.log(32)
    assert result.statistics["padded_tokens"] == 2 * 2 * 4 * 32
    assert 2 * 2 * 4 <= result.statistics["sequences"] <= 3 * 2 * 2 * 4
    assert any(not np.array_equal(b, w.numpy())
               for b, w in zip(before, model.trainable_weights))


def test_resumed_dataset_skips_the_updates_done():
    packs = pack_features(make_features(np.arange(4, 24), 32), packed=False)
    context = tf.distribute.InputContext()
    fresh = train_dataset_fn(packs, global_batch_size=2, steps_per_update=3,
                             seed=1)(context)
    resumed = train_dataset_fn(packs, global_batch_size=2, steps_per_update=3,
                               seed=1, skip_steps=2)(context)
    assert fresh.element_spec["input_ids"].shape == (3, 2, 32)
    expected = [e["pack_index"].numpy() for e in fresh.take(4)][2:]
    got = [e["pack_index"].numpy() for e in resumed.take(2)]
    np.testing.assert_array_equal(got, expected)


def _padded_like(packs, unpacked, packs_per_batch, rows_per_batch):
    """Unpacked rows whose batches of ``rows_per_batch`` hold the features of
    each ``packs_per_batch`` consecutive packs (empty rows: weight 0)."""
    order = np.argsort(packs.sequence_pack, kind="stable")
    batch_of = packs.sequence_pack[order] // packs_per_batch
    rows = [np.concatenate([order[batch_of == b],
                            np.full(rows_per_batch - np.sum(batch_of == b), -1)])
            for b in range(packs.num_packs // packs_per_batch)]
    index = np.concatenate(rows)
    arrays = {name: value[np.maximum(index, 0)] for name, value in unpacked.arrays.items()}
    arrays["sequence_weights"] = np.where(index[:, None] < 0, 0,
                                          arrays["sequence_weights"])
    return dataclasses.replace(unpacked, arrays=arrays)


def test_training_on_packed_rows_follows_training_on_the_same_sequences_unpacked():
    # The loss and gradients of a batch are the same packed and unpacked
    # (tests.models.test_bert_squad); so are whole runs of updates whose
    # batches hold the same sequences: the packed model trains as BERT does.
    rng = np.random.default_rng(5)
    features = make_features(rng.integers(4, 30, 60), 32,
                             vocab_size=TINY_CONFIG.vocab_size)
    packs = pack_features(features, max_sequences_per_pack=3, seed=2)
    assert packs.num_packs < 60
    unpacked = _padded_like(packs, pack_features(features, packed=False), 4, 12)
    # Whole batches a pass, as the unpacked rows have them.
    whole = dataclasses.replace(packs, arrays={
        name: value[:packs.num_packs // 4 * 4] for name, value in packs.arrays.items()})
    runs = {}
    models = twin_models(BertSquadModel, TINY_CONFIG)
    for name, model, rows, batch_size in (("packed", models[0], whole, 4),
                                          ("unpacked", models[1], unpacked, 12)):
        trainer = Trainer(model, keras.optimizers.AdamW(3e-3, global_clipnorm=1.0),
                          task=task.SQUAD_TASK, jit_compile=False)
        # Rows in their order (the packed rows' own, no shuffle), the same
        # every pass.
        dataset_fn = train_dataset_fn(RepackedRows(rows, lambda index, rows=rows: rows),
                                      global_batch_size=batch_size, steps_per_update=1,
                                      seed=0)
        iterator = iter(tf.distribute.get_strategy().distribute_datasets_from_function(
            dataset_fn))
        results = [trainer.train_steps(iterator, 5) for _ in range(4)]
        runs[name] = ([result.mean("loss") for result in results],
                      [result.statistics["sequences"] for result in results],
                      model.get_weights())
    np.testing.assert_allclose(runs["packed"][0], runs["unpacked"][0], rtol=1e-5)
    assert runs["packed"][1] == runs["unpacked"][1]
    # Adam moves a weight by up to the learning rate (3e-3) an update, even
    # where its gradient is rounding noise: the weights agree to a third of one
    # update's step.
    assert max(float(np.max(np.abs(a - b))) for a, b
               in zip(runs["packed"][2], runs["unpacked"][2])) < 1e-3
    assert runs["packed"][0][-1] < runs["packed"][0][0]  # it learnt something
