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
from packed_bert_tf.squad.dataset import bucketed_squad_dataset, squad_dataset

#: Batches of rows (`squad_dataset`'s docstring says how they are dealt to replicas).
classifier_dataset = squad_dataset
#: Length-bucketed batches of the unpacked layout (`bucketed_squad_dataset`).
bucketed_classifier_dataset = bucketed_squad_dataset


def predict_logits(model, packs: ClassifierPacks, batch_size: int, *,
                   strategy: tf.distribute.Strategy | None = None,
                   jit_compile: bool = False) -> np.ndarray:
    """Per-example logits of a model, in example order, on one device or many.

    Runs ``model(features)`` on every row of `classifier_dataset`
    (prediction mode) under the strategy, gathers ``pack_index`` and the
    logits from the replicas, and unpacks them (`unpack_logits`).

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
    strategy = strategy or tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(
        lambda context: classifier_dataset(packs, batch_size, is_training=False,
                                           input_context=context))

    @tf.function(jit_compile=jit_compile)
    def forward(features):
        return features["pack_index"], model(features, training=False)["logits"]

    def replica_forward(features):
        # A Python function around the compiled one, as in
        # `packed_bert_tf.squad.dataset.predict_logits` (MirroredStrategy.run
        # of a jit-compiled tf.function fails off GPUs).
        return forward(features)

    @tf.function
    def step(features):
        # Every replica's rows, those of other workers too (an all-gather).
        return [strategy.gather(value, axis=0)
                for value in strategy.run(replica_forward, args=(features,))]

    indices, logits = [], []
    for features in dataset:
        pack_index, batch_logits = step(features)
        indices.append(pack_index.numpy())
        logits.append(batch_logits.numpy())
    if not indices:
        return np.zeros((0, model.num_labels), np.float32)
    return unpack_logits(packs, np.concatenate(indices), np.concatenate(logits))
