"""Evaluation during training (`PeriodicEvaluation`): when it happens, in training
samples; that it leaves the trajectory alone; the stop at a target; and a
resumed run that neither repeats nor skips an evaluation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.training.checkpoints import TrainingCheckpoints
from packed_bert_tf.training.lamb import LAMB
from packed_bert_tf.training.loop import LoopIntervals, PeriodicEvaluation, run_training
from packed_bert_tf.training.trainer import Trainer
from tests.training.test_step_semantics import IN, LINEAR_TASK, OUT, Linear

pytestmark = pytest.mark.slow

ROWS = 4
UPDATES = 12
INTERVAL = 10  # training samples (rows of weight 1) between evaluations
PROBE = np.linspace(-1, 1, 2 * IN, dtype=np.float32).reshape(2, IN)


def make_trainer() -> Trainer:
    keras.utils.set_random_seed(3)
    model = Linear()
    model({"x": np.zeros((1, IN), np.float32)})
    return Trainer(model, LAMB(0.05), task=LINEAR_TASK, jit_compile=False)


def elements(*, full_rows: bool, seed: int = 0) -> list:
    """UPDATES elements of one micro-batch [1, ROWS, ...]; ``full_rows``: every
    row counts (4 samples per update), else 1 to 4 rows count (as packs hold
    varying numbers of sequences)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(UPDATES):
        w = np.ones((1, ROWS), np.float32)
        if not full_rows:
            w[0, rng.integers(1, ROWS + 1):] = 0.0
        out.append({"x": rng.normal(size=(1, ROWS, IN)).astype(np.float32),
                    "y": rng.normal(size=(1, ROWS, OUT)).astype(np.float32), "w": w})
    return out


def iterator(data):
    stacked = {name: np.stack([e[name] for e in data]) for name in data[0]}
    return iter(tf.data.Dataset.from_tensor_slices(stacked))


class Recorder:
    """An evaluation: the probe's prediction (reads the weights, changes nothing)
    and a score that grows with the samples seen."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.calls = []

    def __call__(self, step, samples_count):
        prediction = self.trainer.model({"x": PROBE}, training=False)["prediction"]
        self.calls.append((step, samples_count))
        return {"score": samples_count / 100, "probe": float(np.sum(prediction))}


def expected_evaluations(data) -> list:
    """The first update at or after each multiple of INTERVAL samples, and the end."""
    samples = np.cumsum([e["w"].sum() for e in data])
    updates = [int(np.argmax(samples >= multiple)) + 1
               for multiple in range(INTERVAL, int(samples[-1]) + 1, INTERVAL)]
    if updates[-1] != len(data):
        updates.append(len(data))
    return [(update, float(samples[update - 1])) for update in sorted(set(updates))]


def run(trainer, data, evaluation=None, **kwargs):
    return run_training(trainer, iterator(data), num_train_steps=len(data),
                        intervals=LoopIntervals(iterations_per_loop=100,
                                                log_every_n_steps=100),
                        evaluation=evaluation, **kwargs)


@pytest.mark.parametrize("full_rows", [True, False])
def test_evaluations_come_at_the_first_update_at_or_after_each_multiple(full_rows):
    data = elements(full_rows=full_rows)
    trainer = make_trainer()
    recorder = Recorder(trainer)
    samples_per_update = float(np.mean([e["w"].sum() for e in data]))
    summary = run(trainer, data, PeriodicEvaluation(recorder, INTERVAL, "score",
                                                    samples_per_update=samples_per_update))
    want = expected_evaluations(data)
    assert recorder.calls == want
    if full_rows:  # 4 samples per update: 12, 20, 32, 40 and the end, 48
        assert want == [(3, 12.0), (5, 20.0), (8, 32.0), (10, 40.0), (12, 48.0)]
    assert [(e["step"], e["samples_count"]) for e in summary.evaluations] == want
    assert [e["score"] for e in summary.evaluations] == [s / 100 for _, s in want]
    assert not summary.stopped_at_target
    assert summary.final_step == UPDATES


def test_evaluation_leaves_the_trajectory_alone():
    data = elements(full_rows=False)
    plain = make_trainer()
    run(plain, data)
    evaluated = make_trainer()
    run(evaluated, data, PeriodicEvaluation(Recorder(evaluated), INTERVAL, "score",
                                            samples_per_update=2.5))
    for a, b in zip(plain.model.get_weights(), evaluated.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_target(tmp_path):
    data = elements(full_rows=True)
    trainer = make_trainer()
    checkpoints = TrainingCheckpoints(str(tmp_path), model=trainer.model,
                                      optimizer=trainer.optimizer, step=trainer.step)
    evaluation = PeriodicEvaluation(Recorder(trainer), INTERVAL, "score",
                                    stop_threshold=0.3, samples_per_update=ROWS)
    summary = run(trainer, data, evaluation, checkpoints=checkpoints)
    # Evaluations at 12, 20 and 32 samples: 0.32 >= 0.3 at update 8.
    assert [e["samples_count"] for e in summary.evaluations] == [12.0, 20.0, 32.0]
    assert summary.stopped_at_target and summary.final_step == 8
    assert int(trainer.step.numpy()) == 8
    assert checkpoints.latest.endswith("ckpt-8")
    assert summary.history[-1]["step"] == 8  # the last point logged where it stopped


class _Killed(RuntimeError):
    pass


def test_a_resumed_run_neither_repeats_nor_skips_an_evaluation(tmp_path):
    data = elements(full_rows=False)
    straight = make_trainer()
    evaluation_args = dict(interval_samples=INTERVAL, metric="score", samples_per_update=2.5)
    want = run(straight, data, PeriodicEvaluation(Recorder(straight), **evaluation_args))

    first = make_trainer()
    checkpoints = TrainingCheckpoints(str(tmp_path), model=first.model,
                                      optimizer=first.optimizer, step=first.step)
    recorder = Recorder(first)

    def killed_at_the_third(step, samples_count):
        if len(recorder.calls) == 2:
            raise _Killed
        return recorder(step, samples_count)

    with pytest.raises(_Killed):
        run(first, data, PeriodicEvaluation(killed_at_the_third, **evaluation_args),
            checkpoints=checkpoints)
    resumed = make_trainer()
    checkpoints = TrainingCheckpoints(str(tmp_path), model=resumed.model,
                                      optimizer=resumed.optimizer, step=resumed.step)
    start = checkpoints.restore_latest()
    assert start == want.evaluations[1]["step"]  # the checkpoint of the 2nd evaluation
    resumed_recorder = Recorder(resumed)
    got = run_training(resumed, iterator(data[start:]), num_train_steps=len(data),
                       intervals=LoopIntervals(iterations_per_loop=100,
                                               log_every_n_steps=100),
                       checkpoints=checkpoints,
                       evaluation=PeriodicEvaluation(resumed_recorder, **evaluation_args))
    assert resumed_recorder.calls == [(e["step"], e["samples_count"])
                                      for e in want.evaluations[2:]]
    assert got.evaluations == want.evaluations
    for a, b in zip(straight.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("at_end, interval, expected", [
    (True, 10, [12, 20, 32, 40, 48]),
    (False, 10, [12, 20, 32, 40]),  # 48 is between the multiples 40 and 50
    (False, 0, [48]),  # no interval: the end is the schedule
])
def test_the_end_evaluation_comes_off_the_schedule_only_when_asked(at_end, interval,
                                                                  expected):
    evaluation = PeriodicEvaluation(lambda step, samples: {}, interval, "score",
                                    at_end=at_end)
    ends = list(range(4, 52, 4))  # updates of 4 samples, the last ending at 48
    due = [end for start, end in zip([0, *ends], ends)
           if evaluation.due(start, end, last=end == 48)]
    assert due == expected
