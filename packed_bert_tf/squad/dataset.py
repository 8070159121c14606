"""Per-feature SQuAD logits of a model, on one device or many.

The rows come from `packed_bert_tf.data.inputs.rows_dataset` like every task's
rows held in memory; this adds what is SQuAD's own: per-token outputs,
unpacked feature by feature.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packed_bert_tf.data.inputs.rows_dataset import predict_rows
from packed_bert_tf.data.packed.packed_rows import PackedRows
from packed_bert_tf.squad.packing import FeatureLogits, unpack_logits


def predict_logits(model, packs: PackedRows, batch_size: int, *,
                   strategy: tf.distribute.Strategy | None = None,
                   jit_compile: bool = False) -> FeatureLogits:
    """Per-feature start and end logits of a model, on one device or many.

    `packed_bert_tf.data.inputs.rows_dataset.predict_rows` of ``start_logits`` and
    ``end_logits`` [B, S], unpacked (`unpack_logits`).

    Args:
      model: called as ``model(features, training=False)``; returns
        ``start_logits`` and ``end_logits`` [B, S].
      packs: the rows to predict (`packed_bert_tf.squad.packing.pack_features`).
      batch_size: global batch size.
      strategy: default: the current strategy.
      jit_compile: XLA-compile the per-replica forward pass.
    """
    rows = predict_rows(model, packs, batch_size, ("start_logits", "end_logits"),
                        strategy=strategy, jit_compile=jit_compile)
    if rows is None:
        empty = np.zeros((0, packs.max_sequence_length), np.float32)
        return unpack_logits(packs, np.zeros(0, np.int64), empty, empty)
    return unpack_logits(packs, *rows)
