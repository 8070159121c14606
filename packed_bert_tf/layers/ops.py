"""Pure tensor functions shared by the layers, in `keras.ops` (every backend).

Letters: B batch, S sequence length, K gathered positions (M masked-LM slots or
D sequences per pack), H hidden.
"""

import math

from keras import ops


def gelu(x):
    """Original BERT's GELU: the tanh approximation (google-research/bert).

    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, in ``x``'s dtype.
    """
    x = ops.convert_to_tensor(x)
    coefficient = ops.cast(math.sqrt(2.0 / math.pi), x.dtype)
    cubic = ops.cast(0.044715, x.dtype)
    return 0.5 * x * (1.0 + ops.tanh(coefficient * (x + cubic * x * x * x)))


def gelu_exact(x):
    """The exact GELU, ``0.5 x (1 + erf(x / sqrt(2)))``, in ``x``'s dtype.

    What Hugging Face's ``hidden_act="gelu"`` computes (bert-base-uncased's);
    it differs from `gelu` by up to 4.7e-4 (near x = -2.7).
    """
    x = ops.convert_to_tensor(x)
    inverse_sqrt_2 = ops.cast(1.0 / math.sqrt(2.0), x.dtype)
    return 0.5 * x * (1.0 + ops.erf(x * inverse_sqrt_2))


def _linear(x):
    return x


_ACTIVATIONS = {"gelu": gelu, "gelu_exact": gelu_exact, "relu": ops.relu,
                "tanh": ops.tanh, "linear": _linear}
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

    One gather from the flattened [B * S, H] rows, at ``b * S + position``
    (google-research/bert's ``gather_indexes``).

    Args:
      sequence: [B, S, H] hidden states.
      positions: [B, K] int token offsets into each row.

    Returns:
      [B, K, H]: ``out[b, k] = sequence[b, positions[b, k]]``.
    """
    sequence = ops.convert_to_tensor(sequence)
    positions = ops.cast(positions, "int32")  # [B, K]
    batch_size, sequence_length, hidden_size = ops.shape(sequence)
    row_starts = ops.arange(batch_size, dtype="int32") * sequence_length  # [B]
    flat_positions = ops.reshape(positions + row_starts[:, None], (-1,))  # [B * K]
    rows = ops.reshape(sequence, (-1, hidden_size))  # [B * S, H]
    gathered = ops.take(rows, flat_positions, axis=0)  # [B * K, H]
    return ops.reshape(gathered, (batch_size, -1, hidden_size))  # [B, K, H]
