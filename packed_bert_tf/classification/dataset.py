"""Per-example classifier logits of a model, on one device or many.

The rows come from `packed_bert_tf.data.inputs.rows_dataset` like every task's
rows held in memory; this adds what is the classifier's own: one output per
sequence, unpacked example by example.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packed_bert_tf.classification.packing import unpack_logits
from packed_bert_tf.data.inputs.rows_dataset import predict_rows
from packed_bert_tf.data.packed.packed_rows import PackedRows


def predict_logits(model, packs: PackedRows, batch_size: int, *,
                   strategy: tf.distribute.Strategy | None = None,
                   jit_compile: bool = False) -> np.ndarray:
    """Per-example logits of a model, in example order, on one device or many.

    `packed_bert_tf.data.inputs.rows_dataset.predict_rows` of ``logits``, unpacked
    (`unpack_logits`).

    Args:
      model: called as ``model(features, training=False)``; returns
        ``logits`` [B, D, L].
      packs: the rows to predict
        (`packed_bert_tf.classification.packing.pack_features`).
      batch_size: global batch size.
      strategy: default: the current strategy.
      jit_compile: XLA-compile the per-replica forward pass.

    Returns:
      [F, L] float32.
    """
    rows = predict_rows(model, packs, batch_size, ("logits",), strategy=strategy,
                        jit_compile=jit_compile)
    if rows is None:
        return np.zeros((0, model.num_labels), np.float32)
    return unpack_logits(packs, *rows)
