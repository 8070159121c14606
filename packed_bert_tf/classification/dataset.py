"""tf.data pipelines over `ClassifierPacks`, and prediction (one device or many).

Letters: B batch, S sequence length, D max sequences per pack, L labels.

Every element is a dict of tensors with static shapes::

    input_ids, segment_ids, input_mask, positions   [B, S] int32
    cls_positions, sequence_weights                 [B, D] int32
    label_ids                                       [B, D] int32 (float32: regression)
    pack_index                                      [B]    int32 (-1: padding row)

The row pipelines are SQuAD's (`packed_bert_tf.squad.dataset`): they only
read a layout's ``arrays``, ``num_packs``, ``feature_length``, ``packed``
and ``max_sequence_length``, which `ClassifierPacks` has too.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packed_bert_tf.classification.packing import ClassifierPacks, unpack_logits
from packed_bert_tf.squad.dataset import bucketed_squad_dataset, predict_rows, squad_dataset

#: Batches of rows (`squad_dataset`'s docstring says how they are dealt to replicas).
classifier_dataset = squad_dataset
#: Length-bucketed batches of the unpacked layout (`bucketed_squad_dataset`).
bucketed_classifier_dataset = bucketed_squad_dataset


def predict_logits(model, packs: ClassifierPacks, batch_size: int, *,
                   strategy: tf.distribute.Strategy | None = None,
                   jit_compile: bool = False) -> np.ndarray:
    """Per-example logits of a model, in example order, on one device or many.

    `packed_bert_tf.squad.dataset.predict_rows` of ``logits`` (the rows of
    `classifier_dataset`, gathered from the replicas), unpacked
    (`unpack_logits`).

    Args:
      model: called as ``model(features, training=False)``; returns
        ``logits`` [B, D, L].
      packs: the rows to predict.
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
