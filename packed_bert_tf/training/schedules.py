"""Learning-rate schedules of BERT pre-training as the MLPerf reference runs it."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class PolynomialDecayWithWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then polynomial decay: MLPerf BERT's learning rate.

    With ``t`` the global step (the optimizer's step count before the update)
    and ``T = num_train_steps``::

        decayed(t) = (learning_rate - end_learning_rate)
                     * (1 - min(t, T) / T) ** power + end_learning_rate
        warmup(t)  = learning_rate * (t - start_warmup_step) / num_warmup_steps
        lr(t)      = warmup(t)   if t - start_warmup_step < num_warmup_steps
                     decayed(t)  otherwise

    The decay runs on the global step, not on the steps since the warm-up
    ended, and there is no warm-up when ``num_warmup_steps`` is 0.

    Sources: mlcommons/training ``language_model/tensorflow/bert/optimization.py``
    (``create_optimizer``: ``tf.train.polynomial_decay(..., cycle=False)``,
    then the warm-up with ``start_warmup_step``), after google-research/bert.

    One departure: before ``start_warmup_step`` the reference's warm-up
    fraction is negative, hence a negative learning rate; here it is 0.

    Example (learning_rate 2, 100 steps, 20 of warm-up)::

        step  0   10   20   60   100  150
        lr    0.0 1.0  1.6  0.8  0.0  0.0

    Args:
      learning_rate: the peak learning rate, reached at the end of warm-up.
      num_train_steps: the step at which the decay reaches ``end_learning_rate``.
      num_warmup_steps: length of the linear warm-up (0: none).
      start_warmup_step: the step at which the warm-up starts (MLPerf allows
        negative values, to start training part-way through the warm-up).
      end_learning_rate: the learning rate from ``num_train_steps`` on.
      power: exponent of the decay (1: linear).
    """

    def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int,
                 start_warmup_step: int = 0, end_learning_rate: float = 0.0,
                 power: float = 1.0):
        if num_train_steps < 1:
            raise ValueError(f"num_train_steps must be >= 1, got {num_train_steps}")
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        if power <= 0:
            raise ValueError(f"power must be > 0, got {power}")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.start_warmup_step = start_warmup_step
        self.end_learning_rate = end_learning_rate
        self.power = power

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decay_fraction = ops.minimum(step, float(self.num_train_steps)) / float(
            self.num_train_steps)
        learning_rate = ((self.learning_rate - self.end_learning_rate)
                         * ops.power(1.0 - decay_fraction, float(self.power))
                         + self.end_learning_rate)
        if self.num_warmup_steps:
            steps_into_warmup = step - float(self.start_warmup_step)
            warmup_learning_rate = self.learning_rate * ops.maximum(
                steps_into_warmup, 0.0) / float(self.num_warmup_steps)
            learning_rate = ops.where(steps_into_warmup < float(self.num_warmup_steps),
                                      warmup_learning_rate, learning_rate)
        return learning_rate

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "start_warmup_step": self.start_warmup_step,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
        }


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class AtUpdateSteps(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule of the global step, given to an optimizer that counts updates.

    Update ``u`` (0-based, the optimizer's ``iterations``) is applied at global
    step ``u K + K - 1``, K being ``global_steps_per_update``: so the MLPerf
    reference's ``GradientAggregationOptimizer`` applies it, after the
    ``K``-th micro-batch, with the learning rate of that step. With K = 1 this
    is ``schedule`` itself.

    Example (`PolynomialDecayWithWarmup` of 100 steps, K = 4): updates 0, 1, 2
    get the rates of steps 3, 7, 11.

    Args:
      schedule: a `keras.optimizers.schedules.LearningRateSchedule` of the
        global step.
      global_steps_per_update: K (`StepCounting.global_steps_per_update`).
    """

    def __init__(self, schedule, global_steps_per_update: int):
        if global_steps_per_update < 1:
            raise ValueError(f"global_steps_per_update must be >= 1, got "
                             f"{global_steps_per_update}")
        self.schedule = schedule
        self.global_steps_per_update = global_steps_per_update

    def __call__(self, step):
        per_update = self.global_steps_per_update
        return self.schedule(ops.cast(step, "int64") * per_update + (per_update - 1))

    def get_config(self):
        return {"schedule": keras.saving.serialize_keras_object(self.schedule),
                "global_steps_per_update": self.global_steps_per_update}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)
