"""tf.data pipelines over `SquadPacks`, and prediction (one device or many).

Letters: B batch, S sequence length, D max sequences per pack.

Every element is a dict of int32 tensors with static shapes::

    input_ids, segment_ids, input_mask, positions          [B, S]
    start_positions, end_positions, sequence_weights       [B, D]
    pack_index                                             [B]  (-1: padding row)

``pack_index`` says which row of the `SquadPacks` each element is, so the
outputs can be matched back to features (`unpack_logits`) whatever the order
or sharding.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from packed_bert_tf.squad.packing import FeatureLogits, SquadPacks, unpack_logits
from packed_bert_tf.tool_progress import Progress


def _padded_arrays(packs: SquadPacks, multiple: int) -> dict[str, np.ndarray]:
    """The packs' arrays and ``pack_index``, with empty rows up to a multiple."""
    arrays = dict(packs.arrays)
    arrays["pack_index"] = np.arange(packs.num_packs, dtype=np.int32)
    extra = -packs.num_packs % multiple
    if extra:
        arrays = {name: np.concatenate([value, np.full((extra,) + value.shape[1:],
                                                       -1 if name == "pack_index" else 0,
                                                       value.dtype)])
                  for name, value in arrays.items()}
    return arrays


def squad_dataset(packs: SquadPacks, batch_size: int, *, is_training: bool,
                  input_context: tf.distribute.InputContext | None = None,
                  seed: int | None = None, repeat: bool | None = None,
                  shuffle_buffer_size: int | None = None,
                  skip_batches: int = 0, micro_batches: int | None = None
                  ) -> tf.data.Dataset:
    """Batches of packed (or unpacked) SQuAD features.

    Rows are shared between replicas, not input pipelines: replica r of R
    takes rows r, r + R, ... whichever process it lives in, and a pipeline
    feeding several replicas yields their batches in turn (see
    `packed_bert_tf.data.pipeline.pretraining_dataset`): the rows of each
    global batch depend on the replica count alone.

    Parameters
    ----------
    packs : SquadPacks
    batch_size : int
        The global batch size; with `input_context` each replica gets
        ``input_context.get_per_replica_batch_size(batch_size)`` rows.
    is_training : bool
        True: shuffle the rows (reshuffled every pass, from `seed`), repeat
        forever, drop the last partial batch. False: every row once, in
        order, the rows filled up with empty ones (``pack_index`` -1, weight
        0) to a multiple of `batch_size`, so that shapes stay static and every
        replica gets the same number of whole batches.
    input_context : tf.distribute.InputContext, optional
        This pipeline's place among the replicas.
    repeat : bool, optional
        Default: `is_training`.
    shuffle_buffer_size : int, optional
        Default: all rows.
    skip_batches : int
        Batches of each replica to skip (a resumed run, with the same `seed`).
    micro_batches : int, optional
        K: each element stacks K consecutive batches of one replica,
        [K, b, ...]; default: elements are batches.

    Returns
    -------
    tf.data.Dataset of dicts (see the module docstring).
    """
    from packed_bert_tf.data.pipeline import pipeline_replicas, take_in_turn

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    replicas, num_replicas = pipeline_replicas(input_context)
    per_replica_batch = (batch_size if input_context is None
                         else input_context.get_per_replica_batch_size(batch_size))
    repeat = is_training if repeat is None else repeat
    if is_training:
        if packs.num_packs < batch_size:
            raise ValueError(f"{packs.num_packs} rows of SQuAD features cannot fill one "
                             f"training batch of {batch_size}")
        arrays = _padded_arrays(packs, 1)
    else:
        arrays = _padded_arrays(packs, batch_size)
    streams = []
    for replica in replicas:
        dataset = tf.data.Dataset.from_tensor_slices(arrays)
        if num_replicas > 1:
            dataset = dataset.shard(num_replicas, replica)
        if is_training:
            dataset = dataset.shuffle(shuffle_buffer_size or packs.num_packs, seed=seed,
                                      reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.batch(per_replica_batch, drop_remainder=True)
        if skip_batches:
            dataset = dataset.skip(skip_batches)
        if micro_batches is not None:
            dataset = dataset.batch(micro_batches, drop_remainder=True)
        streams.append(dataset)
    return take_in_turn(streams).prefetch(tf.data.AUTOTUNE)


def predict_rows(model, packs, batch_size: int, output_names, *,
                 strategy: tf.distribute.Strategy | None = None,
                 jit_compile: bool = False) -> list[np.ndarray] | None:
    """``pack_index`` and the named outputs of a model on every row, one device or many.

    Runs ``model(features)`` on every row of `squad_dataset` (prediction
    mode) under the strategy and gathers the replicas' rows: what every
    task's ``predict_logits`` unpacks (SQuAD's, the classifier's).

    Args:
      model: called as ``model(features, training=False)``; returns a dict
        holding ``output_names``.
      packs: the rows to predict (any layout with ``arrays`` and ``num_packs``).
      batch_size: global batch size.
      output_names: the outputs to gather.
      strategy: default: the current strategy.
      jit_compile: XLA-compile the per-replica forward pass.

    Returns:
      ``[pack_index [N], output [N, ...] for each name]`` (N rows, padding
      rows included with ``pack_index`` -1), or None when there is no row.
    """
    strategy = strategy or tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(
        lambda context: squad_dataset(packs, batch_size, is_training=False,
                                      input_context=context))

    @tf.function(jit_compile=jit_compile)
    def forward(features):
        outputs = model(features, training=False)
        return [features["pack_index"]] + [outputs[name] for name in output_names]

    def replica_forward(features):
        # A Python function around the compiled one, as the trainer's steps:
        # given a jit-compiled tf.function itself, MirroredStrategy.run off GPUs
        # compiles every replica's call into one XLA computation, which fails
        # ("Trying to access resource .../replica_1 located in device CPU:1").
        return forward(features)

    @tf.function
    def step(features):
        # Every replica's rows, those of other workers too (an all-gather).
        return [strategy.gather(value, axis=0)
                for value in strategy.run(replica_forward, args=(features,))]

    parts = [[] for _ in range(len(output_names) + 1)]
    with Progress("predicting", total=packs.num_packs, unit="rows") as progress:
        for features in dataset:
            for part, value in zip(parts, step(features)):
                part.append(value.numpy())
            progress.advance(int(np.sum(parts[0][-1] >= 0)))  # padding rows: -1
    if not parts[0]:
        return None
    return [np.concatenate(part) for part in parts]


def predict_logits(model, packs: SquadPacks, batch_size: int, *,
                   strategy: tf.distribute.Strategy | None = None,
                   jit_compile: bool = False) -> FeatureLogits:
    """Per-feature start and end logits of a model, on one device or many.

    `predict_rows` of ``start_logits`` and ``end_logits`` [B, S], unpacked
    (`unpack_logits`).

    Args:
      model: called as ``model(features, training=False)``; returns
        ``start_logits`` and ``end_logits`` [B, S].
      packs: the rows to predict.
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


def bucketed_squad_dataset(packs: SquadPacks, batch_size: int, *, seed: int,
                           boundaries=None, pool_size: int = 8192,
                           input_context: tf.distribute.InputContext | None = None,
                           skip_batches: int = 0) -> tf.data.Dataset:
    """Length-bucketed training batches of unpacked SQuAD features, repeated forever.

    Each epoch is planned by `packed_bert_tf.batching` (seeded by (seed,
    epoch)): features shuffled, sorted by length in pools of `pool_size`,
    cut into batches of `batch_size` rows padded to their bucket's boundary
    (one shape per bucket), and dealt in steps of one batch per replica of
    this pipeline, every batch of a step at one shape and of comparable cost.
    Every feature of the pipeline's share appears once per epoch.

    Args:
      packs: an unpacked layout (``pack_features(..., packed=False)``).
      batch_size: the global batch size (rows per step over all replicas).
      seed: seeds the plans.
      boundaries: bucket upper edges; default four equal buckets up to S.
      pool_size: features bucketed together.
      input_context: pipeline i takes features i, i + n, ... of n pipelines.
      skip_batches: batches of this pipeline to skip (a resumed run).

    Returns:
      tf.data.Dataset of the layout of `squad_dataset`, shapes [None, None] /
      [None, 1] / [None].
    """
    from packed_bert_tf.batching.bucketing import bucket_batches
    from packed_bert_tf.batching.dataset import default_boundaries
    from packed_bert_tf.batching.sharding import balance_across_workers

    if packs.packed:
        raise ValueError("bucketed batches need the unpacked layout (packed=False)")
    pipelines, pipeline_id, rows_per_batch = 1, 0, batch_size
    if input_context is not None:
        pipelines = input_context.num_input_pipelines
        pipeline_id = input_context.input_pipeline_id
        rows_per_batch = input_context.get_per_replica_batch_size(batch_size)
    replicas = 1 if input_context is None else (input_context.num_replicas_in_sync
                                                // pipelines)
    max_length = packs.max_sequence_length
    boundaries = tuple(boundaries or default_boundaries(max_length))
    rows = np.arange(pipeline_id, packs.num_packs, pipelines)
    lengths = packs.feature_length[rows]  # unpacked: feature f is row f
    arrays = {name: value[rows] for name, value in packs.arrays.items()}
    arrays["pack_index"] = rows.astype(np.int32)

    def batch(example_rows, num_rows, length):
        out = {}
        for name, value in arrays.items():
            taken = value[example_rows]
            if taken.ndim == 2 and value.shape[1] == max_length:
                taken = taken[:, :length]
            fill = -1 if name == "pack_index" else 0
            pad = [(0, num_rows - len(example_rows))] + [(0, 0)] * (taken.ndim - 1)
            out[name] = np.pad(taken, pad, constant_values=fill)
        return out

    def generate():
        epoch = 0
        while True:
            plan = bucket_batches(lengths, batch_size=rows_per_batch, pool_size=pool_size,
                                  boundaries=boundaries, pad_to_bucket_boundary=True,
                                  max_sequence_length=max_length, seed=seed, epoch=epoch)
            steps = balance_across_workers(plan, replicas, seed=seed + epoch)
            for step in range(steps.num_steps):
                for worker in range(replicas):
                    index = steps.batch_indices[step, worker]
                    members = (plan.example_indices[plan.row_splits[index]:
                                                    plan.row_splits[index + 1]]
                               if index >= 0 else np.zeros(0, np.int64))
                    yield batch(members, int(steps.batch_rows[step, worker]),
                                int(steps.padded_lengths[step, worker]))
            epoch += 1

    # Rows and token length vary; the sequence axis (D = 1) stays static.
    def spec(value):
        if value.ndim == 1:
            return tf.TensorSpec([None], tf.as_dtype(value.dtype))
        width = None if value.shape[1] == max_length else value.shape[1]
        return tf.TensorSpec([None, width], tf.as_dtype(value.dtype))

    signature = {name: spec(value) for name, value in arrays.items()}
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)
