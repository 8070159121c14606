"""MLPerf's LAMB transcribed in numpy (float64), the reference of the optimizer and
trainer tests."""

import numpy as np


def numpy_lamb(weights, gradients_per_step, *, learning_rate, beta_1, beta_2, epsilon,
               weight_decay_rate, decayed, adapted, bias_correction, global_clipnorm,
               num_steps=None):
    """MLPerf's LAMB, step by step, in float64.

    weights: {path: array}; gradients_per_step: list of {path: array}, or a
    function ``(step, weights) -> {path: array}`` of the 0-based step and the
    weights before it (then `num_steps` says how many);
    learning_rate(step) with step 0 at the first update; decayed / adapted:
    the paths that get weight decay / the trust ratio.
    Returns the weights and the moments after the last step.
    """
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
            if bias_correction:
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
