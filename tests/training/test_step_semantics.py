"""MLPerf's step semantics under accumulation: steps count micro-batches, the
learning rate of an update is the schedule's at the step it is applied, and the
gradient is clipped per micro-batch (default) or once per update, both against
a numpy transcription."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.training.clipping import Clipping, clipping
from packed_bert_tf.training.lamb import LAMB
from packed_bert_tf.training.loop import LoopIntervals, run_training
from packed_bert_tf.training.schedules import AtUpdateSteps, PolynomialDecayWithWarmup
from packed_bert_tf.training.step_counting import StepCounting, crossed, updates_to_boundary
from packed_bert_tf.training.trainer import Trainer, TrainingTask
from tests.training.numpy_lamb import LambReference, numpy_lamb

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]

K = 3          # micro-batches per update
ROWS = 4       # rows per micro-batch
UPDATES = 3
IN, OUT = 4, 3


# ------------------------------------------------------------ a linear task
class Linear(keras.Model):
    """features["x"] [b, 4] -> {"prediction": [b, 3]}."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(OUT, name="dense")

    def call(self, features, training=False):
        return {"prediction": self.dense(features["x"])}


def _loss(features, outputs, normalisers):
    """Weighted squared error, summed over rows, over the global row count."""
    error = outputs["prediction"] - features["y"]
    per_row = 0.5 * tf.reduce_sum(error ** 2, axis=-1) * features["w"]
    return {"loss": tf.reduce_sum(per_row) / normalisers["rows"]}


def _normalisers(features):
    rows = tf.reduce_sum(features["w"])
    return {"rows": tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, rows)}


def _statistics(features):
    rows = tf.reduce_sum(features["w"])
    return {"sequences": rows, "tokens": rows,
            "padded_tokens": tf.cast(tf.size(features["w"]), tf.float32),
            "attention_pairs": rows}


LINEAR_TASK = TrainingTask(metric_names=("loss",), loss=_loss, normalisers=_normalisers,
                           statistics=_statistics)


def updates_data(seed=0):
    """UPDATES elements of [K, ROWS, ...]: targets far off (gradient norms well
    above 1, so clipping acts), some rows empty (weight 0), so that the
    micro-batches hold different numbers of rows."""
    rng = np.random.default_rng(seed)
    elements = []
    for _ in range(UPDATES):
        x = rng.normal(size=(K, ROWS, IN)).astype(np.float32)
        y = (10 * rng.normal(size=(K, ROWS, OUT))).astype(np.float32)
        w = (rng.random((K, ROWS)) < 0.7).astype(np.float32)
        w[:, 0] = 1.0  # every micro-batch holds a row
        w[1] = 0.0
        w[1, 0] = 1.0  # micro-batch 1 holds one row only
        elements.append({"x": x, "y": y, "w": w})
    return elements


def schedule():
    return PolynomialDecayWithWarmup(0.1, num_train_steps=K * UPDATES, num_warmup_steps=4)


def schedule_numpy(step):
    peak, total, warmup = 0.1, K * UPDATES, 4
    if step < warmup:
        return peak * step / warmup
    return peak * (1 - min(step, total) / total)


def make_trainer(*, micro_batch_clipnorm, global_steps_per_update=K):
    keras.utils.set_random_seed(1)
    model = Linear()
    model({"x": np.zeros((1, IN), np.float32)})
    optimizer = LAMB(AtUpdateSteps(schedule(), global_steps_per_update),
                     global_clipnorm=None if micro_batch_clipnorm else 1.0)
    # Uncompiled: the semantics are the same, without seconds of XLA a trainer.
    return Trainer(model, optimizer, task=LINEAR_TASK, steps_per_update=K,
                   global_steps_per_update=global_steps_per_update,
                   micro_batch_clipnorm=micro_batch_clipnorm, jit_compile=False)


def iterator(elements):
    stacked = {name: np.stack([e[name] for e in elements]) for name in elements[0]}
    return iter(tf.data.Dataset.from_tensor_slices(stacked))


# ------------------------------------------------------------ numpy transcription
def gradient(weights, x, y, w):
    """The gradient of the weighted mean squared error over rows x, y, w."""
    error = x @ weights["kernel"] + weights["bias"] - y
    weighted = error * w[:, None]
    return {"kernel": x.T @ weighted / w.sum(), "bias": weighted.sum(0) / w.sum()}


def clip(gradients, norm=1.0):
    total = np.sqrt(sum(np.sum(g ** 2) for g in gradients.values()))
    return {name: g * norm / max(total, norm) for name, g in gradients.items()}, total


def numpy_run(initial, elements, *, per_micro_batch: bool):
    norms = []

    def gradients_at(update, weights):
        e = {name: value.astype(np.float64) for name, value in elements[update].items()}
        if not per_micro_batch:  # the update's rows at once; numpy_lamb clips
            merged = {name: value.reshape((K * ROWS,) + value.shape[2:])
                      for name, value in e.items()}
            return gradient(weights, merged["x"], merged["y"], merged["w"])
        total = {"kernel": 0.0, "bias": 0.0}
        for k in range(K):
            clipped, norm = clip(gradient(weights, e["x"][k], e["y"][k], e["w"][k]))
            norms.append(norm)
            total = {name: total[name] + clipped[name] / K for name in total}
        return total

    weights, _, _ = numpy_lamb(
        initial, gradients_at, LambReference(
            learning_rate=lambda update: schedule_numpy(update * K + K - 1),
            beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.01,
            decayed={"kernel"}, adapted={"kernel"}, bias_correction=True,
            global_clipnorm=None if per_micro_batch else 1.0),
        num_steps=UPDATES)
    return weights, norms


def trained_weights(trainer):
    return {"kernel": trainer.model.dense.kernel.numpy(),
            "bias": trainer.model.dense.bias.numpy()}


@pytest.fixture(scope="module")
def runs():
    elements = updates_data()
    results = {}
    for name, clipnorm in (("per_micro_batch", 1.0), ("after_allreduce", None)):
        trainer = make_trainer(micro_batch_clipnorm=clipnorm)
        initial = {name: value.astype(np.float64)
                   for name, value in trained_weights(trainer).items()}
        result = trainer.train_steps(iterator(elements), UPDATES)
        want, norms = numpy_run(initial, elements, per_micro_batch=clipnorm is not None)
        results[name] = dict(trainer=trainer, result=result, want=want, norms=norms,
                             got=trained_weights(trainer))
    return results


@pytest.mark.parametrize("mode", ["per_micro_batch", "after_allreduce"])
def test_both_clipping_modes_follow_the_numpy_transcription(runs, mode):
    run = runs[mode]
    for name in ("kernel", "bias"):
        np.testing.assert_allclose(run["got"][name], run["want"][name], rtol=2e-5,
                                   atol=1e-6, err_msg=name)
    assert int(run["trainer"].step.numpy()) == K * UPDATES
    assert int(run["trainer"].optimizer.iterations.numpy()) == UPDATES


def test_the_modes_differ_and_clipping_acted(runs):
    assert min(runs["per_micro_batch"]["norms"]) > 1.0  # every micro-batch clipped
    difference = max(float(np.abs(runs["per_micro_batch"]["got"][name]
                                  - runs["after_allreduce"]["got"][name]).max())
                     for name in ("kernel", "bias"))
    assert difference > 1e-3


def test_per_micro_batch_metrics_are_the_mean_of_the_micro_batch_means(runs):
    # The loss reported for the first update is the mean over its micro-batches
    # of each one's own mean (with the initial weights).
    run = runs["per_micro_batch"]
    elements = updates_data()
    model = make_trainer(micro_batch_clipnorm=1.0).model  # the same initial weights
    first = elements[0]
    want = np.mean([
        float(_loss({name: first[name][k] for name in first},
                    model({"x": first["x"][k]}),
                    {"rows": first["w"][k].sum()})["loss"]) for k in range(K)])
    assert run["result"].num_steps == UPDATES
    assert run["result"].statistics["sequences"] == sum(e["w"].sum() for e in elements)
    # The result sums the updates' losses: the first one is checked on its own.
    single = make_trainer(micro_batch_clipnorm=1.0).train_steps(iterator(elements[:1]), 1)
    assert single.metrics["loss"] == pytest.approx(want, rel=1e-5)


def test_the_trainer_refuses_to_clip_twice():
    model = Linear()
    model({"x": np.zeros((1, IN), np.float32)})
    with pytest.raises(ValueError, match="clip once: the optimizer's global_clipnorm must "
                                         "be None"):
        Trainer(model, LAMB(0.1, global_clipnorm=1.0), task=LINEAR_TASK,
                steps_per_update=2, micro_batch_clipnorm=1.0)
    with pytest.raises(ValueError, match="global_steps_per_update must be >= 1"):
        Trainer(model, LAMB(0.1), task=LINEAR_TASK, global_steps_per_update=0)


# ------------------------------------------------------------ the loop
def test_the_loop_counts_micro_batches_and_acts_at_update_boundaries():
    trainer = make_trainer(micro_batch_clipnorm=1.0)
    summary = run_training(trainer, iterator(updates_data()), num_train_steps=K * UPDATES,
                           intervals=LoopIntervals(iterations_per_loop=1,
                                                   log_every_n_steps=4),
                           learning_rate_at=lambda step: float(schedule()(step)))
    # Updates end at steps 3, 6, 9: the log point of step 4 comes at 6, that of 8 at 9.
    assert [point["step"] for point in summary.history] == [6, 9]
    assert [point["learning_rate"] for point in summary.history] == pytest.approx(
        [schedule_numpy(5), schedule_numpy(8)])
    assert (summary.start_step, summary.final_step) == (0, 9)
    assert int(trainer.optimizer.iterations.numpy()) == UPDATES


def test_one_step_per_update_is_still_available():
    trainer = make_trainer(micro_batch_clipnorm=None, global_steps_per_update=1)
    summary = run_training(trainer, iterator(updates_data()), num_train_steps=UPDATES,
                           intervals=LoopIntervals(iterations_per_loop=2,
                                                   log_every_n_steps=2))
    assert [point["step"] for point in summary.history] == [2, 3]
    assert int(trainer.step.numpy()) == UPDATES


def test_the_loop_refuses_steps_that_are_not_whole_updates():
    trainer = make_trainer(micro_batch_clipnorm=1.0)
    with pytest.raises(ValueError, match="--num_train_steps=10 is not a multiple of the "
                                         "3 steps of an update"):
        run_training(trainer, iterator(updates_data()), num_train_steps=10)
    trainer.step.assign(4)
    with pytest.raises(ValueError, match="resumes at step 4, which is not a multiple of "
                                         "the 3 steps"):
        run_training(trainer, iterator(updates_data()), num_train_steps=9)


# ------------------------------------------------------------ the pieces
def test_step_counting_in_micro_batches():
    steps = StepCounting("micro_batch", steps_per_update=4, micro_batches_per_update=2)
    assert steps.global_steps_per_update == 4
    assert steps.updates(100) == 25
    with pytest.raises(ValueError, match=r"--num_train_steps=10 is not a multiple of "
                                         r"--steps_per_update=4: .* give 12, or count "
                                         r"updates with --step_unit=update"):
        steps.updates(10)
    line = steps.describe(num_train_steps=100, train_batch_size=8, sequences_per_row=2.0)
    assert line == (
        "a step is one micro-batch of the unpacked run these flags describe "
        "(--step_unit=micro_batch, the MLPerf reference's global step); an update every 4 "
        "steps, made here of 2 micro-batches of 8 packs (packing adjustment: "
        "accumulation); --num_train_steps=100: 25 updates, 50 micro-batches, 400 rows, "
        "about 800 sequences")
    unpacked = StepCounting("micro_batch", steps_per_update=4, micro_batches_per_update=4)
    assert unpacked.describe(num_train_steps=8, train_batch_size=8) == (
        "a step is one micro-batch of 8 rows (--step_unit=micro_batch, the MLPerf "
        "reference's global step); an update every 4 steps; --num_train_steps=8: 2 updates, "
        "8 micro-batches, 64 rows")


def test_step_counting_in_updates():
    steps = StepCounting("update", steps_per_update=4, micro_batches_per_update=4)
    assert steps.global_steps_per_update == 1
    assert steps.updates(10) == 10
    assert steps.describe(num_train_steps=10, train_batch_size=8) == (
        "a step is one update of 4 micro-batches of 8 rows (--step_unit=update); "
        "--num_train_steps=10: 10 updates, 40 micro-batches, 320 rows")
    with pytest.raises(ValueError, match="--step_unit='epoch' is not one of micro_batch, "
                                         "update"):
        StepCounting("epoch", 1, 1)


def test_boundaries():
    assert updates_to_boundary(0, 10, 4) == 3
    assert updates_to_boundary(12, 10, 4) == 2
    assert updates_to_boundary(0, 5, 1) == 5
    assert updates_to_boundary(8, 4, 4) == 1
    assert crossed(8, 12, 10) and not crossed(0, 8, 10) and not crossed(0, 8, 0)


def test_clipping_plan():
    assert clipping(after_allreduce=False, micro_batches_per_update=4) == Clipping(
        optimizer_clipnorm=None, micro_batch_clipnorm=1.0)
    assert clipping(after_allreduce=True, micro_batches_per_update=4).optimizer_clipnorm \
        == 1.0
    # One micro-batch per update: the two modes are one computation; the optimizer clips.
    assert clipping(after_allreduce=False, micro_batches_per_update=1) == \
        clipping(after_allreduce=True, micro_batches_per_update=1)


def test_at_update_steps_takes_the_rate_of_the_step_an_update_ends():
    rates = AtUpdateSteps(schedule(), K)
    assert [float(rates(u)) for u in range(UPDATES)] == pytest.approx(
        [schedule_numpy(u * K + K - 1) for u in range(UPDATES)])
    restored = AtUpdateSteps.from_config(rates.get_config())
    assert restored.global_steps_per_update == K
    assert float(restored(1)) == pytest.approx(float(rates(1)))
    assert float(AtUpdateSteps(schedule(), 1)(2)) == pytest.approx(schedule_numpy(2))
