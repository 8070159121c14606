"""Plain numpy versions of BERT's pieces, written from google-research/bert."""

import numpy as np


def layer_norm(x, layer, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * layer.gamma.numpy() + \
        layer.beta.numpy()


def dense(x, layer):
    return x @ layer.kernel.numpy() + layer.bias.numpy()


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def attention(layer, hidden, mask, num_heads):
    """``mask`` bool [B, S, S]; fully masked rows give zero probabilities."""
    batch, length, size = hidden.shape
    head = size // num_heads

    def split(x):
        return x.reshape(batch, length, num_heads, head).transpose(0, 2, 1, 3)
    q, k, v = (split(dense(hidden, d)) for d in (layer.query, layer.key, layer.value))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head)
    scores = np.where(mask[:, None], scores, -1e30)
    probabilities = np.exp(scores - scores.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    probabilities *= mask[:, None].any(-1, keepdims=True)
    context = (probabilities @ v).transpose(0, 2, 1, 3).reshape(batch, length, size)
    return dense(context, layer.output_dense)


def transformer_block(block, hidden, mask, num_heads):
    hidden = layer_norm(hidden + attention(block.attention, hidden, mask, num_heads),
                        block.attention_layer_norm)
    feed_forward = dense(gelu(dense(hidden, block.intermediate_dense)),
                         block.output_dense)
    return layer_norm(hidden + feed_forward, block.output_layer_norm)
