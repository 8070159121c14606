"""Pure tensor functions shared by the layers.

Letters: B batch, S sequence length, K gathered positions (M masked-LM slots or
D sequences per pack), H hidden.
"""

import math

import tensorflow as tf


def gelu(x):
    """Original BERT's GELU: the tanh approximation (google-research/bert).

    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, in ``x``'s dtype.
    """
    x = tf.convert_to_tensor(x)
    coefficient = tf.cast(math.sqrt(2.0 / math.pi), x.dtype)
    cubic = tf.cast(0.044715, x.dtype)
    return 0.5 * x * (1.0 + tf.tanh(coefficient * (x + cubic * x * x * x)))


def _linear(x):
    return x


_ACTIVATIONS = {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": _linear}
ACTIVATION_NAMES = tuple(sorted(_ACTIVATIONS))


def get_activation(name: str):
    """The activation function for a ``hidden_act`` name of ``bert_config.json``."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of "
                         f"{', '.join(ACTIVATION_NAMES)}") from None


def gather_positions(sequence, positions):
    """Rows of ``sequence`` at per-example ``positions``.

    Args:
      sequence: [B, S, H] hidden states.
      positions: [B, K] int token offsets into each row.

    Returns:
      [B, K, H]: ``out[b, k] = sequence[b, positions[b, k]]``.
    """
    return tf.gather(sequence, positions, batch_dims=1)  # [B, K, H]
