"""MLPerf's LAMB optimizer as a Keras 3 optimizer (TensorFlow backend).

For each variable ``w`` with gradient ``g`` at step ``t`` (1-based), after all
gradients were clipped together to global norm ``global_clipnorm``::

    m      = beta_1 m + (1 - beta_1) g
    v      = beta_2 v + (1 - beta_2) g^2
    m_hat  = m / (1 - beta_1^t)          (m_hat = m without bias correction)
    v_hat  = v / (1 - beta_2^t)          (v_hat = v without bias correction)
    update = m_hat / (sqrt(v_hat) + epsilon)
    update += weight_decay_rate w        unless excluded from weight decay
    ratio  = ||w|| / ||update||          1 where either norm is 0, or where
                                         excluded from layer adaptation
    w     -= learning_rate ratio update

Sources: LAMB of You et al. (arXiv 1904.00962) in the form of the TF1
``LAMBOptimizer`` of google-research's BERT code: ``AdamWeightDecayOptimizer``
(L2 weight decay added to the Adam update, epsilon outside the square root)
plus the trust ratio, ``exclude_from_layer_adaptation`` defaulting to
``exclude_from_weight_decay``; with the bias correction that the MLPerf
reference applies (``bias_correction``). Hyper-parameters and clipping as the
MLPerf BERT TensorFlow reference sets them (mlcommons/training
``language_model/tensorflow/bert/optimization.py``, ``create_optimizer``):
weight decay 0.01 with ``LayerNorm``, ``layer_norm`` and ``bias`` excluded,
betas 0.9 / 0.999, epsilon 1e-6, ``tf.clip_by_global_norm(grads, 1.0)`` first.
Because the decay is inside the update, it is also inside the trust ratio.

``keras.optimizers.Lamb`` differs on each of these points: its weight decay is
decoupled (applied to the variable, outside the trust ratio), it has no
exclusion lists and its epsilon is 1e-7.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import keras
import tensorflow as tf

from packed_bert_tf.training.clipping import ClipAfterCrossReplicaSum

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def variable_path(variable) -> str:
    """The name that the exclusion patterns are searched in.

    A Keras 3 variable's ``path`` (``"bert/encoder/layer_0/attention/query/bias"``);
    for a plain ``tf.Variable``, its ``name`` without the ``":0"`` suffix.
    """
    path = getattr(variable, "path", None)
    if path is None:
        path = re.sub(r":\d+$", "", variable.name)
    return path


def matches_any(path: str, patterns: Sequence[str]) -> bool:
    """Whether any regular expression of ``patterns`` is found in ``path`` (re.search)."""
    return any(re.search(pattern, path) is not None for pattern in patterns)


@keras.saving.register_keras_serializable(package="packed_bert_tf")
class LAMB(ClipAfterCrossReplicaSum, keras.optimizers.Optimizer):
    """MLPerf's LAMB: Adam moments, L2 weight decay, layer-wise trust ratio.

    The update rule is in the module docstring. Clipping is by the global norm
    of all gradients together, and under a ``tf.distribute`` strategy it is
    applied after the cross-replica sum, so that a replicated step equals the
    single-device step on the whole batch (Keras' own ``global_clipnorm`` clips
    each replica's partial gradients before the sum).

    Under ``tf.distribute.MirroredStrategy``, build the optimizer inside the
    strategy scope (``optimizer.build(model.trainable_variables)``) before the
    first ``apply_gradients``.

    Args:
      learning_rate: a float or a
        `keras.optimizers.schedules.LearningRateSchedule` (called with the
        optimizer's step count before the update, 0 at the first step).
      beta_1: decay rate of the first moment (MLPerf 0.9).
      beta_2: decay rate of the second moment (MLPerf 0.999).
      epsilon: added to ``sqrt(v_hat)`` (MLPerf 1e-6).
      weight_decay_rate: L2 weight decay inside the update (MLPerf 0.01).
      exclude_from_weight_decay: regular expressions searched (``re.search``)
        in each variable's path; a variable that matches gets neither weight
        decay nor, unless ``exclude_from_layer_adaptation`` says otherwise,
        the trust ratio. Default ``["LayerNorm", "layer_norm", "bias"]``.
      exclude_from_layer_adaptation: regular expressions for the variables
        whose trust ratio is 1. None: the same as ``exclude_from_weight_decay``.
      bias_correction: divide the moments by ``1 - beta^t`` (MLPerf: True).
      **kwargs: the `keras.optimizers.Optimizer` arguments: ``name``
        (default: a unique ``"lamb..."``), ``global_clipnorm`` (clip all
        gradients together to this global norm before the update; default
        1.0, MLPerf's; None or 0 disables clipping), ``use_ema``,
        ``loss_scale_factor``, ``gradient_accumulation_steps``...
        ``weight_decay``, ``clipnorm`` and ``clipvalue`` must be None: decay is
        ``weight_decay_rate`` and clipping is ``global_clipnorm``.
    """

    def __init__(self, learning_rate=0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, weight_decay_rate: float = 0.01,
                 exclude_from_weight_decay: Sequence[str] | None = None,
                 exclude_from_layer_adaptation: Sequence[str] | None = None,
                 bias_correction: bool = True, **kwargs):
        for argument, use in (("weight_decay", "weight_decay_rate"),
                              ("clipnorm", "global_clipnorm"),
                              ("clipvalue", "global_clipnorm")):
            if kwargs.get(argument) is not None:
                raise ValueError(f"LAMB does not take {argument}={kwargs[argument]!r}; "
                                 f"use {use}")
            kwargs.pop(argument, None)
        if isinstance(learning_rate, int):
            learning_rate = float(learning_rate)
        kwargs.setdefault("global_clipnorm", 1.0)
        super().__init__(learning_rate=learning_rate, **kwargs)
        if not 0.0 <= beta_1 < 1.0 or not 0.0 <= beta_2 < 1.0:
            raise ValueError(f"beta_1 and beta_2 must be in [0, 1), got "
                             f"beta_1={beta_1}, beta_2={beta_2}")
        if epsilon < 0 or weight_decay_rate < 0:
            raise ValueError(f"epsilon and weight_decay_rate must be >= 0, got "
                             f"epsilon={epsilon}, weight_decay_rate={weight_decay_rate}")
        if isinstance(exclude_from_weight_decay, str) or isinstance(
                exclude_from_layer_adaptation, str):
            raise ValueError("exclusions must be lists of regular expressions, not a "
                             "single string")
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate
        # Not named like the constructor arguments: `exclude_from_weight_decay`
        # is a method of the Keras base optimizer.
        self.weight_decay_exclusions = list(
            DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY if exclude_from_weight_decay is None
            else exclude_from_weight_decay)
        self.layer_adaptation_exclusions = (
            None if exclude_from_layer_adaptation is None
            else list(exclude_from_layer_adaptation))
        self.bias_correction = bias_correction

    def uses_weight_decay(self, variable) -> bool:
        """Whether ``variable`` gets the L2 weight decay term."""
        return (self.weight_decay_rate > 0
                and not matches_any(variable_path(variable), self.weight_decay_exclusions))

    def uses_layer_adaptation(self, variable) -> bool:
        """Whether ``variable``'s update is scaled by the trust ratio."""
        exclusions = (self.weight_decay_exclusions if self.layer_adaptation_exclusions is None
                      else self.layer_adaptation_exclusions)
        return not matches_any(variable_path(variable), exclusions)

    def build(self, var_list):
        """Creates the moments ``m`` and ``v`` and decides each variable's exclusions."""
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"])
        # Decided once, in Python, from the Keras paths (update_step only sees
        # the backend variables, and XLA needs static choices).
        self._applies_weight_decay = tuple(self.uses_weight_decay(v) for v in var_list)
        self._applies_layer_adaptation = tuple(self.uses_layer_adaptation(v)
                                               for v in var_list)

    def update_step(self, gradient, variable, learning_rate):
        """One variable's LAMB update (formulas in the module docstring)."""
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        momentum, velocity = self._momentums[index], self._velocities[index]
        learning_rate = tf.cast(learning_rate, dtype)
        gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)  # IndexedSlices: dense
        beta_1 = tf.constant(self.beta_1, dtype)
        beta_2 = tf.constant(self.beta_2, dtype)

        next_momentum = beta_1 * momentum + (1.0 - beta_1) * gradient
        next_velocity = beta_2 * velocity + (1.0 - beta_2) * tf.square(gradient)
        self.assign(momentum, next_momentum)
        self.assign(velocity, next_velocity)
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, dtype)
            next_momentum = next_momentum / (1.0 - tf.pow(beta_1, step))
            next_velocity = next_velocity / (1.0 - tf.pow(beta_2, step))
        update = next_momentum / (tf.sqrt(next_velocity) + tf.constant(self.epsilon, dtype))
        if self._applies_weight_decay[index]:
            update += tf.constant(self.weight_decay_rate, dtype) * variable
        if self._applies_layer_adaptation[index]:
            weight_norm = tf.norm(variable)
            update_norm = tf.norm(update)
            trust_ratio = tf.where(
                weight_norm > 0,
                tf.where(update_norm > 0, weight_norm / update_norm, tf.ones_like(weight_norm)),
                tf.ones_like(weight_norm))
            update = trust_ratio * update
        self.assign_sub(variable, learning_rate * update)

    def get_config(self):
        config = super().get_config()
        config.update({
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
            "exclude_from_weight_decay": list(self.weight_decay_exclusions),
            "exclude_from_layer_adaptation": (
                None if self.layer_adaptation_exclusions is None
                else list(self.layer_adaptation_exclusions)),
            "bias_correction": self.bias_correction,
        })
        return config
