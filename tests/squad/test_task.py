"""The SQuAD task functions drive the shared `Trainer` (2 updates of 2 micro-batches)."""

import keras
import numpy as np
import tensorflow as tf

from packed_bert_tf.models import BertSquadModel
from packed_bert_tf.squad import task
from packed_bert_tf.squad.packing import pack_features
from packed_bert_tf.training.fine_tuning import train_dataset_fn
from packed_bert_tf.training.trainer import Trainer
from tests.models.packed_batches import TINY_CONFIG
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
