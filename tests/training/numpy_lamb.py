"""MLPerf's LAMB transcribed in numpy (float64), the reference of the optimizer and
trainer tests."""

import dataclasses
from collections.abc import Callable, Collection

import numpy as np


@dataclasses.dataclass(frozen=True)
class LambReference:
    """The hyper-parameters of `numpy_lamb`, each given by hand (no defaults).

    Attributes:
      learning_rate: ``learning_rate(step)`` with step 0 at the first update.
      beta_1, beta_2, epsilon, weight_decay_rate, bias_correction: as the
        arguments of `LAMB` of the same names.
      global_clipnorm: clip all gradients together to this global norm before
        each update; None or 0: no clipping.
      decayed: the paths that get weight decay.
      adapted: the paths that get the trust ratio.
    """

    learning_rate: Callable[[int], float]
    beta_1: float
    beta_2: float
    epsilon: float
    weight_decay_rate: float
    decayed: Collection[str]
    adapted: Collection[str]
    bias_correction: bool
    global_clipnorm: float | None


def numpy_lamb(weights, gradients_per_step, reference: LambReference, *, num_steps=None):
    """MLPerf's LAMB, step by step, in float64.

    Args:
      weights: {path: array}.
      gradients_per_step: list of {path: array}, or a function
        ``(step, weights) -> {path: array}`` of the 0-based step and the
        weights before it (then `num_steps` says how many).
      reference: the hyper-parameters (`LambReference`).
      num_steps: the steps to take when `gradients_per_step` is a function.

    Returns:
      The weights and the moments after the last step.
    """
    # The formulas below read as MLPerf's, under the names of its arguments.
    learning_rate, decayed, adapted = (reference.learning_rate, reference.decayed,
                                       reference.adapted)
    beta_1, beta_2, epsilon = reference.beta_1, reference.beta_2, reference.epsilon
    weight_decay_rate = reference.weight_decay_rate
    global_clipnorm = reference.global_clipnorm
    if callable(gradients_per_step):
        gradients_at = gradients_per_step
    else:
        num_steps = len(gradients_per_step)
        gradients_at = lambda step, weights: gradients_per_step[step]  # noqa: E731
    weights = {path: np.array(w, np.float64) for path, w in weights.items()}
    m = {path: np.zeros_like(w) for path, w in weights.items()}
    v = {path: np.zeros_like(w) for path, w in weights.items()}
    for t in range(1, num_steps + 1):
        gradients = {path: np.array(g, np.float64)
                     for path, g in gradients_at(t - 1, dict(weights)).items()}
        if global_clipnorm:
            global_norm = np.sqrt(sum(np.sum(g ** 2) for g in gradients.values()))
            scale = global_clipnorm / max(global_norm, global_clipnorm)
            gradients = {path: g * scale for path, g in gradients.items()}
        lr = learning_rate(t - 1)
        for path, g in gradients.items():
            w = weights[path]
            m[path] = beta_1 * m[path] + (1 - beta_1) * g
            v[path] = beta_2 * v[path] + (1 - beta_2) * g ** 2
            m_hat, v_hat = m[path], v[path]
            if reference.bias_correction:
                m_hat = m_hat / (1 - beta_1 ** t)
                v_hat = v_hat / (1 - beta_2 ** t)
            update = m_hat / (np.sqrt(v_hat) + epsilon)
            if path in decayed:
                update = update + weight_decay_rate * w
            ratio = 1.0
            if path in adapted:
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                if w_norm > 0 and u_norm > 0:
                    ratio = w_norm / u_norm
            weights[path] = w - lr * ratio * update
    return weights, m, v
