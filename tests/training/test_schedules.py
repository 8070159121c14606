"""PolynomialDecayWithWarmup: exact values at chosen steps, config round trip."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.training import PolynomialDecayWithWarmup


def values(schedule, steps):
    return [float(schedule(tf.constant(step, tf.int64))) for step in steps]


def test_linear_warmup_then_linear_decay():
    schedule = PolynomialDecayWithWarmup(2.0, num_train_steps=100, num_warmup_steps=20)
    # step:      0, mid-warm-up, end of warm-up, mid-decay, end, past the end
    steps = [0, 10, 19, 20, 60, 100, 150]
    # At 20 the decay takes over on the global step: 2 * (1 - 20/100).
    np.testing.assert_allclose(values(schedule, steps),
                               [0.0, 1.0, 1.9, 1.6, 0.8, 0.0, 0.0], rtol=1e-6, atol=0)


def test_end_learning_rate_and_power():
    schedule = PolynomialDecayWithWarmup(1.0, num_train_steps=100, num_warmup_steps=10,
                                         end_learning_rate=0.1, power=2.0)
    # decay: (1 - 0.1) * (1 - t/100)^2 + 0.1
    np.testing.assert_allclose(
        values(schedule, [5, 10, 50, 90, 100, 1000]),
        [0.5, 0.9 * 0.81 + 0.1, 0.9 * 0.25 + 0.1, 0.9 * 0.01 + 0.1, 0.1, 0.1],
        rtol=1e-6, atol=0)


def test_negative_start_warmup_step_starts_part_way_through_the_warmup():
    # MLPerf's start_warmup_step: warm-up fraction (t - start) / num_warmup_steps.
    schedule = PolynomialDecayWithWarmup(1.0, num_train_steps=1000, num_warmup_steps=100,
                                         start_warmup_step=-50)
    np.testing.assert_allclose(values(schedule, [0, 25, 49, 50, 500]),
                               [0.5, 0.75, 0.99, 0.95, 0.5], rtol=1e-6, atol=0)


def test_positive_start_warmup_step_is_zero_before_the_start():
    schedule = PolynomialDecayWithWarmup(1.0, num_train_steps=100, num_warmup_steps=10,
                                         start_warmup_step=20)
    np.testing.assert_allclose(values(schedule, [0, 19, 20, 25, 30, 50]),
                               [0.0, 0.0, 0.0, 0.5, 0.7, 0.5], rtol=1e-6, atol=0)


def test_no_warmup_is_pure_decay():
    schedule = PolynomialDecayWithWarmup(4.0, num_train_steps=8, num_warmup_steps=0)
    np.testing.assert_allclose(values(schedule, [0, 2, 8, 9]), [4.0, 3.0, 0.0, 0.0],
                               rtol=1e-6, atol=0)


def test_matches_tf_polynomial_decay_after_warmup():
    schedule = PolynomialDecayWithWarmup(3e-3, num_train_steps=500, num_warmup_steps=40,
                                         end_learning_rate=1e-4, power=0.5)
    reference = keras.optimizers.schedules.PolynomialDecay(
        3e-3, decay_steps=500, end_learning_rate=1e-4, power=0.5)
    steps = [40, 41, 123, 377, 499, 500, 2000]
    np.testing.assert_allclose(values(schedule, steps), values(reference, steps), rtol=1e-6)


def test_works_inside_xla():
    schedule = PolynomialDecayWithWarmup(2.0, num_train_steps=100, num_warmup_steps=20)
    compiled = tf.function(schedule.__call__, jit_compile=True)
    np.testing.assert_allclose([float(compiled(tf.constant(s, tf.int64))) for s in (10, 60)],
                               [1.0, 0.8], rtol=1e-6)


def test_get_config_round_trip():
    schedule = PolynomialDecayWithWarmup(1e-3, num_train_steps=1000, num_warmup_steps=100,
                                         start_warmup_step=-10, end_learning_rate=1e-6,
                                         power=2.0)
    config = schedule.get_config()
    assert config == {"learning_rate": 1e-3, "num_train_steps": 1000,
                      "num_warmup_steps": 100, "start_warmup_step": -10,
                      "end_learning_rate": 1e-6, "power": 2.0}
    restored = PolynomialDecayWithWarmup.from_config(config)
    assert restored.get_config() == config
    serialized = json.loads(json.dumps(keras.optimizers.schedules.serialize(schedule)))
    deserialized = keras.optimizers.schedules.deserialize(serialized)
    assert type(deserialized) is PolynomialDecayWithWarmup
    steps = [0, 50, 95, 100, 400, 1000]
    assert values(deserialized, steps) == values(schedule, steps)


@pytest.mark.parametrize("arguments, message", [
    (dict(num_train_steps=0, num_warmup_steps=0), "num_train_steps must be >= 1, got 0"),
    (dict(num_train_steps=10, num_warmup_steps=-1), "num_warmup_steps must be >= 0, got -1"),
    (dict(num_train_steps=10, num_warmup_steps=1, power=0.0), "power must be > 0, got 0.0"),
])
def test_rejects_invalid_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        PolynomialDecayWithWarmup(1.0, **arguments)
