"""The optimizers of ``--optimizer``: MLPerf's LAMB (default) and AdamW, same options."""

from __future__ import annotations

import keras

from packed_bert_tf.training.clipping import ClipAfterCrossReplicaSum
from packed_bert_tf.training.lamb import (
    DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
    LAMB,
    matches_any,
    variable_path,
)

OPTIMIZERS = ("lamb", "adamw")


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class AdamW(ClipAfterCrossReplicaSum, keras.optimizers.AdamW):
    """Keras' AdamW (decoupled weight decay) with clipping after the replica sum.

    Variables whose path matches a pattern of ``exclude_from_weight_decay``
    (``re.search``, default LayerNorm and bias as for LAMB) get no decay;
    Keras' own exclusion by name would only see ``gamma`` or ``bias``.
    """

    def __init__(self, *args, exclude_from_weight_decay=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.weight_decay_exclusions = list(
            DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY if exclude_from_weight_decay is None
            else exclude_from_weight_decay)

    def _use_weight_decay(self, variable):
        if matches_any(variable_path(variable), self.weight_decay_exclusions):
            return False
        return super()._use_weight_decay(variable)

    def get_config(self):
        config = super().get_config()
        config["exclude_from_weight_decay"] = list(self.weight_decay_exclusions)
        return config


def create_optimizer(name: str, learning_rate, *, beta_1: float = 0.9,
                     beta_2: float = 0.999, epsilon: float = 1e-6,
                     weight_decay_rate: float = 0.01, global_clipnorm: float | None = 1.0,
                     loss_scaling: bool = False) -> keras.optimizers.Optimizer:
    """The optimizer for ``--optimizer``, with MLPerf's defaults.

    Args:
      name: ``"lamb"`` or ``"adamw"``. ``lamb``: `LAMB` (decay inside the
        trust ratio, LayerNorm and bias excluded). ``adamw``: Keras' AdamW,
        the same variables excluded from its decoupled weight decay.
      learning_rate: a float or a ``LearningRateSchedule``, called with the
        update count (0 at the first update).
      beta_1: decay rate of the first moment (MLPerf 0.9).
      beta_2: decay rate of the second moment (MLPerf 0.999).
      epsilon: the optimizer's epsilon (MLPerf 1e-6).
      weight_decay_rate: the weight decay (MLPerf 0.01): LAMB's
        ``weight_decay_rate``, AdamW's ``weight_decay``.
      global_clipnorm: clip all gradients together to this global norm
        (MLPerf 1.0); None or 0 disables clipping.
      loss_scaling: wrap in a dynamic `keras.optimizers.LossScaleOptimizer`
        (for float16).
    """
    if name == "lamb":
        optimizer = LAMB(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         weight_decay_rate=weight_decay_rate,
                         global_clipnorm=global_clipnorm)
    elif name == "adamw":
        optimizer = AdamW(learning_rate=learning_rate, weight_decay=weight_decay_rate,
                          beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                          global_clipnorm=global_clipnorm)
    else:
        raise ValueError(f"--optimizer={name!r} is not one of {', '.join(OPTIMIZERS)}")
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
