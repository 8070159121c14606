"""Shared pieces of the trainer tests: a tiny model, random packed batches, a step."""

import contextlib

import numpy as np
import tensorflow as tf

from packed_bert_tf.models import BertPretrainingModel
from packed_bert_tf.pretraining.task import PRETRAINING_TASK
from packed_bert_tf.training.optimizers import create_optimizer
from packed_bert_tf.training.trainer import Trainer
from tests.models.packed_batches import TINY_CONFIG, layout, random_packs

SHAPES = dict(sequence_length=32, max_sequences_per_pack=3, max_masked=8)

#: The tiny model with one layer: tracing and compiling a step cost about
#: in proportion to the layers, and no check here needs a second one.
ONE_LAYER = TINY_CONFIG.__class__(**{**TINY_CONFIG.to_dict(), "num_hidden_layers": 1})


def random_features(seed: int, num_packs: int) -> dict:
    """``num_packs`` random packs of 1 to 3 sequences, numpy, packed layout."""
    rng = np.random.default_rng(seed)
    packs = []
    for index in range(num_packs):
        packs += random_packs(rng, 1 + index % 3, num_packs=1, sequence_length=32)
    features, _ = layout(packs, **SHAPES)
    return {name: value.numpy() for name, value in features.items()}


def micro_batches(features: dict, steps_per_update: int) -> dict:
    """[B, ...] -> [K, B / K, ...]."""
    return {name: value.reshape((steps_per_update, -1) + value.shape[1:])
            for name, value in features.items()}


def make_trainer(*, steps_per_update=1, strategy=None, optimizer="lamb", jit_compile=True,
                 learning_rate=0.01, config=ONE_LAYER, seed=0, micro_batch_clipnorm=None):
    """A trainer of the tiny model; clipping once per update (the optimizer's)
    unless ``micro_batch_clipnorm``."""
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        tf.keras.utils.set_random_seed(seed)
        model = BertPretrainingModel.from_bert_config(config)
        model.build()
        optimizer = create_optimizer(
            optimizer, learning_rate,
            global_clipnorm=None if micro_batch_clipnorm else 1.0)
    return Trainer(model, optimizer, task=PRETRAINING_TASK, strategy=strategy,
                   steps_per_update=steps_per_update, jit_compile=jit_compile,
                   micro_batch_clipnorm=micro_batch_clipnorm)


def weights(trainer) -> list:
    return [v.numpy() for v in trainer.model.trainable_variables]


def max_relative_difference(got: list, want: list) -> float:
    """Largest difference relative to each variable's scale (at least 0.01:
    variables that start at 0, like biases, are compared absolutely)."""
    return max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-2))
               for g, w in zip(got, want))


@contextlib.contextmanager
def functions_run_eagerly():
    """Every ``tf.function`` (the trainer's steps) runs its Python eagerly
    inside: for a reference run whose claim is not about the traced step,
    eager ops on the tiny model cost a second where tracing costs several."""
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)
