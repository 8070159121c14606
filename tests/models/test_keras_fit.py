"""Every model of the package trains with Keras' own loop: compile + fit on
packed batches, its own per-sequence loss, the project's Trainer's step.

Each test runs once per `tests.models.model_cases.MODEL_CASES` entry;
test_keras_fit_distributed.py runs fit under MirroredStrategy and mixed_bfloat16.
"""

import keras
import pytest
import tensorflow as tf

from packed_bert_tf.training.trainer import Trainer
from tests.models.model_cases import MODEL_CASES, as_tensors, model_of, packed_dataset
from tests.models.packed_batches import gradient_errors
from tests.training.trainer_checks import functions_run_eagerly

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]
CASES = pytest.mark.parametrize("case", MODEL_CASES, ids=[c.name for c in MODEL_CASES])


@CASES
def test_fit_trains_with_the_models_own_loss(case):
    model = model_of(case)
    batch = as_tensors(case.make_batch(0))
    initial_loss = float(model.compute_loss(x=batch, y_pred=model(batch)))
    # Eager: tracing Adam's update costs seconds; fit's graph takes the
    # Trainer's step below (and compiled, in test_xla_fit_on_one_device).
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    losses = model.fit(packed_dataset(case, [0]), epochs=4, verbose=0,
                       shuffle=False).history["loss"]
    # The first epoch reports the loss before its step: the model's own.
    assert losses[0] == pytest.approx(initial_loss, rel=1e-5)
    # 3 Adam steps on one batch: its loss falls well below the initial one.
    assert losses[-1] < 0.8 * initial_loss, (initial_loss, losses)
    assert losses == sorted(losses, reverse=True)


@CASES
def test_one_fit_step_is_the_trainers_step(case):
    # Same weights, same SGD, same batch: Keras' loop and the project's
    # Trainer (normalisers computed first, then the loss) take the same step.
    # The steps are compared as (before - after) / lr, relative per variable
    # (gradient_errors); float32 weights of size up to 1 (LayerNorm gamma)
    # lose 1.2e-7 / lr = 1.2e-6 of a gradient entry to the subtraction, and
    # the two graphs sum in other orders: 1e-4 leaves room for both, while a
    # wrong normaliser (per row, not per sequence) is off by more than 0.1.
    learning_rate = 0.1
    batch = case.make_batch(1)
    fitted = model_of(case)
    before = [v.numpy() for v in fitted.trainable_variables]
    fitted.compile(optimizer=keras.optimizers.SGD(learning_rate))
    fitted.fit(packed_dataset(case, [1]), epochs=1, verbose=0, shuffle=False)

    trained = model_of(case)
    # XLA or not, traced or not, the Trainer takes the same steps
    # (tests/training/test_trainer.py): its step runs eagerly here, a second
    # where tracing it costs several.
    trainer = Trainer(trained, keras.optimizers.SGD(learning_rate), task=case.task,
                      jit_compile=False)
    stacked = {name: value[None] for name, value in batch.items()}  # [K = 1, B, ...]
    with functions_run_eagerly():
        trainer.train_steps(iter(tf.data.Dataset.from_tensors(stacked)), 1)

    def step(model):
        return [(b - v.numpy()) / learning_rate
                for b, v in zip(before, model.trainable_variables)]

    assert max(gradient_errors(step(fitted), step(trained))) < 1e-4


def test_xla_fit_on_one_device():
    # One case only (an XLA compilation costs seconds); under several replicas
    # jit_compile=True is refused (test_keras_fit_distributed.py).
    case = MODEL_CASES[-1]
    model = model_of(case)
    batch = as_tensors(case.make_batch(0))
    initial_loss = float(model.compute_loss(x=batch, y_pred=model(batch)))
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=True)
    assert model.jit_compile is True
    losses = model.fit(packed_dataset(case, [0]), epochs=2, verbose=0,
                       shuffle=False).history["loss"]
    assert losses[0] == pytest.approx(initial_loss, rel=1e-5) and losses[1] < losses[0]
