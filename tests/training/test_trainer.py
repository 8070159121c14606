import contextlib
import functools

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models.bert_pretraining import pretraining_losses
from tests.training.trainer_checks import (
    functions_run_eagerly,
    make_trainer,
    max_relative_difference,
    micro_batches,
    random_features,
    weights,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


def _iterator(elements):
    """A tf.data iterator over a list of [K, b, ...] numpy feature dicts."""
    stacked = {name: np.stack([e[name] for e in elements]) for name in elements[0]}
    return iter(tf.data.Dataset.from_tensor_slices(stacked))


CHUNKS = (1, 3, 2, 1)


@functools.lru_cache(maxsize=None)
def k2_elements() -> list:
    """One element per update of the K = 2 runs: [2, 2 packs, ...], 4 random
    packs each (made on first use: no TensorFlow op at collection)."""
    return [micro_batches(random_features(seed, 4), 2) for seed in range(sum(CHUNKS))]


@pytest.fixture(scope="module")
def uncompiled_run():
    """The uncompiled trainer (K = 2) on `k2_elements`' first 4 updates: the
    result of the first update, the weights after it and after the fourth;
    then the result of 4 more updates at a learning rate of 1e30 (a variable
    of the optimizer: the same step function runs), after which the weights
    blow up."""
    # Uncompiled (here and below where the claim is not about XLA): tracing
    # alone costs seconds, XLA more again; one step function serves three tests.
    trainer = make_trainer(steps_per_update=2, jit_compile=False)
    iterator = _iterator(k2_elements()[:4])
    first = trainer.train_steps(iterator, 1)
    after_first = weights(trainer)
    trainer.train_steps(iterator, 3)
    after_fourth = weights(trainer)
    trainer.optimizer.learning_rate = 1e30
    blown_up = trainer.train_steps(_iterator(k2_elements()[:4]), 4)
    return first, after_first, after_fourth, blown_up


def test_accumulated_micro_batches_take_the_big_batch_step(uncompiled_run):
    features = random_features(0, 4)  # k2_elements()[0], as one batch
    result, accumulated_weights, _, _ = uncompiled_run
    # The big batch's step, taken by hand (eager: no step function to trace)
    # from the same initial weights (same seed) and optimizer.
    big = make_trainer(jit_compile=False)
    variables = big.model.trainable_variables
    with tf.GradientTape() as tape:
        want = pretraining_losses(features, big.model(features, training=True))
    gradients = [tf.convert_to_tensor(g) for g in tape.gradient(want["loss"], variables)]
    big.optimizer.apply_gradients(zip(gradients, variables))
    # A micro-batch lost or counted twice moves the weights by their scale (2.0);
    # float32 rounding by 2e-5 on an AVX-512 CPU: LAMB's first update of a bias,
    # g / (|g| + epsilon), passes a gradient element below epsilon on as is, and
    # two micro-batches sum in another order than one batch.
    assert max_relative_difference(accumulated_weights, weights(big)) < 1e-4
    # Metrics are the update's means, as for the big batch.
    assert result.metrics["loss"] == pytest.approx(float(want["loss"]), rel=1e-5)
    assert result.metrics["masked_lm_accuracy"] == pytest.approx(
        float(want["masked_lm_accuracy"]), abs=1e-6)
    assert result.statistics["sequences"] == features["next_sentence_weights"].sum()
    assert result.statistics["tokens"] == (features["input_mask"] > 0).sum()
    assert result.statistics["padded_tokens"] == features["input_mask"].size


@pytest.fixture(scope="module")
def compiled_run():
    """One XLA-compiled trainer (K = 2) run on `k2_elements` in chunks of several
    sizes, and its weights after the first two chunks (4 updates): compiling
    it is most of the cost of the two tests that read it."""
    trainer = make_trainer(steps_per_update=2, jit_compile=True)
    iterator = _iterator(k2_elements())
    results, weights_after = [], {}
    for chunk in CHUNKS:
        results.append(trainer.train_steps(iterator, chunk))
        weights_after[sum(result.num_steps for result in results)] = weights(trainer)
    return trainer, results, weights_after


def test_xla_and_eager_graphs_take_the_same_steps(compiled_run, uncompiled_run):
    compiled, _, weights_after = compiled_run
    assert compiled.jit_compile
    _, _, plain_weights, _ = uncompiled_run
    assert max_relative_difference(weights_after[4], plain_weights) < 1e-4


def test_one_trace_for_the_whole_run_whatever_the_chunk_sizes(compiled_run):
    trainer, results, _ = compiled_run
    for chunk, result in zip(CHUNKS, results):
        assert result.num_steps == chunk and result.first_nonfinite_step == -1
    # The global step counts micro-batches (MLPerf's), the optimizer updates.
    assert int(trainer.step.numpy()) == 14
    assert int(trainer.optimizer.iterations.numpy()) == 7
    assert trainer.train_steps_function.experimental_get_tracing_count() == 1
    assert trainer._accumulate.experimental_get_tracing_count() == 1


def test_a_nan_loss_is_reported_with_its_step(uncompiled_run):
    # Weights blow up after one update at the rate of 1e30.
    _, _, _, result = uncompiled_run
    assert result.first_nonfinite_step in (1, 2)
    assert not np.isfinite(result.metrics["loss"])


def test_evaluation_sums_are_exact_ratios():
    from packed_bert_tf.pretraining import task

    trainer = make_trainer(jit_compile=False)
    batches = [random_features(seed, 4) for seed in range(3)]
    sums = trainer.evaluate(iter(tf.data.Dataset.from_tensor_slices(
        {name: np.stack([b[name] for b in batches]) for name in batches[0]})), 3,
        task.eval_sums)
    whole = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}
    want = pretraining_losses(whole, trainer.model(whole), global_normaliser=False)
    results = task.eval_results(sums)
    for name in ("masked_lm_accuracy", "next_sentence_accuracy", "masked_lm_loss",
                 "next_sentence_loss"):
        assert results[name] == pytest.approx(float(want[name]), rel=1e-5), name
    assert results["sequences"] == whole["next_sentence_weights"].sum()


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="steps_per_update must be >= 1"):
        make_trainer(steps_per_update=0)
    from packed_bert_tf.pretraining.task import PRETRAINING_TASK
    from packed_bert_tf.training.trainer import TrainingTask

    with pytest.raises(ValueError, match=r"metric_names must start with 'loss', got "
                                         r"\('masked_lm_loss', 'loss'\)"):
        TrainingTask(metric_names=("masked_lm_loss", "loss"), loss=PRETRAINING_TASK.loss,
                     normalisers=PRETRAINING_TASK.normalisers,
                     statistics=PRETRAINING_TASK.statistics)


@pytest.mark.parametrize("micro_batch_clipnorm", [None, 1.0])
@pytest.mark.parametrize("mode, compute_dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_mixed_precision_steps_keep_float32_weights(mode, compute_dtype,
                                                    micro_batch_clipnorm):
    from packed_bert_tf.training.startup import mixed_precision_policy

    elements = [micro_batches(random_features(seed, 4), 2) for seed in range(2)]
    with mixed_precision_policy(mode):
        trainer = make_trainer(steps_per_update=2, micro_batch_clipnorm=micro_batch_clipnorm,
                               jit_compile=False)
        if mode == "fp16":
            import keras

            from packed_bert_tf.training.optimizers import create_optimizer
            from packed_bert_tf.training.trainer import Trainer
            optimizer = create_optimizer(
                "lamb", 0.01, loss_scaling=True,
                global_clipnorm=None if micro_batch_clipnorm else 1.0)
            trainer = Trainer(trainer.model, optimizer, task=trainer.task,
                              steps_per_update=2, micro_batch_clipnorm=micro_batch_clipnorm,
                              jit_compile=False)
            assert isinstance(trainer.optimizer, keras.optimizers.LossScaleOptimizer)
        before = weights(trainer)
        # The traced step under fp16 with clipping per micro-batch (loss
        # scaling and clipping, the most the step does); the other cases'
        # steps run eagerly, a second where tracing costs several: the
        # dtypes and the update are the same either way.
        traced = mode == "fp16" and micro_batch_clipnorm
        with contextlib.nullcontext() if traced else functions_run_eagerly():
            result = trainer.train_steps(_iterator(elements), 2)
    assert trainer.model.compute_dtype == compute_dtype
    assert all(v.dtype == "float32" for v in trainer.model.trainable_variables)
    assert np.isfinite(result.metrics["loss"]) and result.first_nonfinite_step == -1
    assert max_relative_difference(weights(trainer), before) > 1e-4  # it trained
