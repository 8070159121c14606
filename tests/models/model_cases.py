"""The package's models as cases for the Keras-workflow tests (fit, save, export).

Every test of tests/models/test_keras_workflow.py and the MirroredStrategy
check (keras_fit_check.py) runs once per entry of `MODEL_CASES`: a new model
joins all of them by adding its case here.

Each case's batch is 4 packed rows, rows 0-1 of one sequence each and rows
2-3 of three: split over 2 replicas, the replicas hold very different
numbers of sequences, which the global loss normalisers must not notice.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from packed_bert_tf.classification import packing as classifier_packing
from packed_bert_tf.classification.task import classification_task
from packed_bert_tf.models import BertClassifierModel, BertPretrainingModel, BertSquadModel
from packed_bert_tf.packing import PackAssignment
from packed_bert_tf.pretraining.task import PRETRAINING_TASK
from packed_bert_tf.squad.packing import layout_packs
from packed_bert_tf.squad.task import SQUAD_TASK
from tests.classification.classifier_data import random_features
from tests.models.packed_batches import TINY_CONFIG, layout, random_sequence
from tests.squad.squad_data import make_features

S, D, M = 32, 3, 8
#: The cases' models: `TINY_CONFIG` with one layer. Fit, save, export and the
#: replicas' step are the same for any depth; tracing and the optimizers'
#: updates cost CPU in proportion to the layers.
CONFIG = dataclasses.replace(TINY_CONFIG, num_hidden_layers=1)
#: Sequences per row of every case's batch (see the module docstring).
SEQUENCES_PER_ROW = (1, 1, 3, 3)


@dataclasses.dataclass(frozen=True)
class ModelCase:
    """A model of the package, a packed batch for it and how to export it.

    Attributes:
      name: the test id.
      model_class: the class (what `packed_bert_tf.models.load_model` expects).
      make_model: ``(**kwargs) -> model`` of `CONFIG`, built (kwargs go to
        the constructor: ``dtype=...``).
      make_batch: ``seed -> dict`` of numpy arrays, 4 rows (SEQUENCES_PER_ROW).
      task: its `packed_bert_tf.training.trainer.TrainingTask`.
      export_sizes: the sizes `export_for_serving` needs beyond S.
    """

    name: str
    model_class: type
    make_model: Callable
    make_batch: Callable
    task: object
    export_sizes: dict


def _built(model_class, *args):
    def make(**kwargs):
        model = model_class.from_bert_config(CONFIG, *args, **kwargs)
        model.build()
        return model
    return make


def pretraining_batch(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    # At most 2 masked tokens a sequence: 3 sequences fit M = 8 slots.
    packs = [[random_sequence(rng, int(length), max_masked=2) for length in
              rng.integers(4, S // count + 1, count)] for count in SEQUENCES_PER_ROW]
    features, _ = layout(packs, sequence_length=S, max_sequences_per_pack=D, max_masked=M)
    return {name: value.numpy() for name, value in features.items()}


def _row_lengths(seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [int(n) for count in SEQUENCES_PER_ROW
            for n in rng.integers(4, S // count + 1, count)]


def _assignment(num_sequences: int) -> PackAssignment:
    return PackAssignment.from_sequences_per_pack(SEQUENCES_PER_ROW,
                                                  np.arange(num_sequences))


def squad_batch(seed: int) -> dict:
    lengths = _row_lengths(seed)
    features = make_features(lengths, S, seed=seed, vocab_size=CONFIG.vocab_size)
    return dict(layout_packs(features, _assignment(len(lengths)), D).arrays)


def classifier_batch(seed: int) -> dict:
    """Sentence pairs of 3 labels, skewed as real GLUE sets are (every 4th
    example label 2, the others 1), so that a few ``fit`` steps lower the
    loss (random labels need many steps to be memorised)."""
    lengths = _row_lengths(seed)
    features = random_features(lengths, S, vocab_size=CONFIG.vocab_size, seed=seed,
                               num_labels=3)
    labels = np.where(np.arange(len(lengths)) % 4 == 0, 2, 1).astype(np.int32)
    features = dataclasses.replace(features, label_ids=labels)
    return dict(classifier_packing.layout_packs(features, _assignment(len(lengths)),
                                                D).arrays)


MODEL_CASES = [
    ModelCase("pretraining", BertPretrainingModel, _built(BertPretrainingModel),
              pretraining_batch, PRETRAINING_TASK,
              dict(max_sequences_per_pack=D, max_predictions_per_seq=M)),
    ModelCase("squad", BertSquadModel, _built(BertSquadModel), squad_batch, SQUAD_TASK,
              {}),
    ModelCase("classifier", BertClassifierModel, _built(BertClassifierModel, 3),
              classifier_batch, classification_task(is_regression=False),
              dict(max_sequences_per_pack=D)),
]

CASES_BY_NAME = {case.name: case for case in MODEL_CASES}


def as_tensors(batch: dict) -> dict:
    return {name: tf.constant(value) for name, value in batch.items()}


def model_of(case: ModelCase, seed: int = 0, **kwargs):
    """The case's model, its weights drawn from ``seed``."""
    keras.utils.set_random_seed(seed)
    return case.make_model(**kwargs)


def packed_dataset(case: ModelCase, seeds) -> tf.data.Dataset:
    """One packed batch of 4 rows per seed (what ``fit`` takes)."""
    batches = [case.make_batch(seed) for seed in seeds]
    return tf.data.Dataset.from_tensor_slices(
        {name: np.stack([b[name] for b in batches]) for name in batches[0]})


__all__ = ["CASES_BY_NAME", "CONFIG", "MODEL_CASES", "ModelCase", "as_tensors", "model_of",
           "packed_dataset"]
