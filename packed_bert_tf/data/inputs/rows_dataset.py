"""tf.data pipelines over packed rows in memory, and prediction on them.

Every task whose examples fit in memory (SQuAD, classification) lays them
out as `packed_bert_tf.data.packed.packed_rows.PackedRows` and reads them here
(length-bucketed batches of them: `packed_bert_tf.batching.dataset`).
Training reads the same rows on every pass, reshuffled, or, given
`RepackedRows`, rows packed anew for every pass.

Letters: B batch, S sequence length, D max sequences per pack.

Every element is a dict of tensors with static shapes: the rows' arrays
([B, S] token features, [B, D] per-sequence features; see the task's
`PackSpec`) and

    pack_index   [B] int32   which row each element is (-1: a padding row)

so that outputs can be matched back to sequences
(`packed_bert_tf.data.packed.packed_rows.unpack_token_outputs`,
`unpack_sequence_outputs`) whatever the order or sharding.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable

import numpy as np
import tensorflow as tf

from packed_bert_tf.data.inputs.pretraining_dataset import pipeline_replicas, take_in_turn
from packed_bert_tf.data.packed.packed_rows import PackedRows
from packed_bert_tf.tool_progress import Progress


def _padded_arrays(packs: PackedRows, multiple: int) -> dict[str, np.ndarray]:
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


@dataclasses.dataclass(frozen=True, eq=False)
class RepackedRows:
    """Training rows packed anew for every pass over the sequences.

    Packed once, a sequence shares its row with the same neighbours on every
    pass, so the batches of an update are drawn from a fixed set of groups;
    packed anew, every pass is a fresh draw (the same plan, other sequences
    in its slots), as reshuffling is for unpacked rows.

    Attributes:
      first: the rows of pass 0.
      pack: ``pass -> PackedRows`` for every later pass: the same sequences
        and row shape in a packing of their own, in the order the packing
        drew. Deterministic, so that a resumed run reads the rows the
        uninterrupted run would have read.
    """

    first: PackedRows
    pack: Callable[[int], PackedRows]

    @property
    def num_packs(self) -> int:
        return self.first.num_packs

    @property
    def packing_factor(self) -> float:
        return self.first.packing_factor

    def rows_of_pass(self, index: int) -> PackedRows:
        """The rows of pass ``index`` (0, 1, ...)."""
        return self.first if index == 0 else self.pack(index)


class _PassArrays:
    """`_padded_arrays` of `RepackedRows` pass by pass, the latest two kept:
    the replicas of one pipeline read the same pass, at most one pass apart,
    and pack it once between them."""

    def __init__(self, rows: RepackedRows):
        self._rows = rows
        self._lock = threading.Lock()
        self._passes: dict[int, dict] = {}

    def __call__(self, index: int) -> dict:
        with self._lock:
            if index not in self._passes:
                self._passes[index] = _padded_arrays(self._rows.rows_of_pass(index), 1)
                for old in sorted(self._passes)[:-2]:
                    del self._passes[old]
            return self._passes[index]


def _repacked_rows(arrays_of_pass: _PassArrays, num_replicas: int,
                   replica: int) -> tf.data.Dataset:
    """Every pass's rows in its packing's order, one pass after another, forever
    (the replica's share of each: rows r, r + R, ...)."""
    first = arrays_of_pass(0)
    names = sorted(first)

    def pass_values(index):
        arrays = arrays_of_pass(int(index))
        return [arrays[name] for name in names]

    def one_pass(index):
        values = tf.numpy_function(pass_values, [index],
                                   [tf.as_dtype(first[name].dtype) for name in names],
                                   stateful=False)
        dataset = tf.data.Dataset.from_tensor_slices({
            name: tf.ensure_shape(value, (None,) + first[name].shape[1:])
            for name, value in zip(names, values)})
        return dataset.shard(num_replicas, replica) if num_replicas > 1 else dataset

    return tf.data.Dataset.counter().flat_map(one_pass)


def rows_dataset(packs: PackedRows | RepackedRows, batch_size: int, *, is_training: bool,
                  input_context: tf.distribute.InputContext | None = None,
                  seed: int | None = None,
                  shuffle_buffer_size: int | None = None,
                  skip_batches: int = 0, micro_batches: int | None = None
                  ) -> tf.data.Dataset:
    """Batches of packed (or unpacked) rows.

    Rows are shared between replicas, not input pipelines: replica r of R
    takes rows r, r + R, ... whichever process it lives in, and a pipeline
    feeding several replicas yields their batches in turn (see
    `packed_bert_tf.data.inputs.pretraining_dataset.pretraining_dataset`): the rows of each
    global batch depend on the replica count alone.

    Args:
      packs: the `PackedRows` to batch, or in training `RepackedRows`: the
        rows of each pass in the order their packing drew (`seed` and
        `shuffle_buffer_size` unused).
      batch_size: int, the global batch size; with `input_context` each
        replica gets ``input_context.get_per_replica_batch_size(batch_size)``
        rows.
      is_training: bool. True: shuffle the rows (reshuffled every pass, from
        `seed`), repeat forever, drop the last partial batch. False: every
        row once, in order, the rows filled up with empty ones
        (``pack_index`` -1, weight 0) to a multiple of `batch_size`, so that
        shapes stay static and every replica gets the same number of whole
        batches.
      input_context: optional `tf.distribute.InputContext`, this pipeline's
        place among the replicas.
      seed: optional int, the seed of the training shuffle (unused when
        `is_training` is False).
      shuffle_buffer_size: optional int. Default: all rows.
      skip_batches: int, batches of each replica to skip (a resumed run, with
        the same `seed`).
      micro_batches: optional int K: each element stacks K consecutive
        batches of one replica, [K, b, ...]; default: elements are batches.

    Returns:
      tf.data.Dataset of dicts (see the module docstring);
      ``packed_bert_tf.data.inputs.pretraining_dataset.with_sequence_offsets(dataset,
      packs.max_sequences_per_pack)`` adds the sequence offsets.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    replicas, num_replicas = pipeline_replicas(input_context)
    per_replica_batch = (batch_size if input_context is None
                         else input_context.get_per_replica_batch_size(batch_size))
    repacked = isinstance(packs, RepackedRows)
    if repacked and not is_training:
        raise ValueError("rows packed anew every pass are for training only")
    if is_training:
        if packs.num_packs < batch_size:
            raise ValueError(f"{packs.num_packs} rows cannot fill one training batch "
                             f"of {batch_size}")
        arrays = _PassArrays(packs) if repacked else _padded_arrays(packs, 1)
    else:
        arrays = _padded_arrays(packs, batch_size)
    streams = []
    for replica in replicas:
        if repacked:
            dataset = _repacked_rows(arrays, num_replicas, replica)
        else:
            dataset = tf.data.Dataset.from_tensor_slices(arrays)
            if num_replicas > 1:
                dataset = dataset.shard(num_replicas, replica)
        if is_training and not repacked:
            dataset = dataset.shuffle(shuffle_buffer_size or packs.num_packs, seed=seed,
                                      reshuffle_each_iteration=True).repeat()
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

    Runs ``model(features)`` on every row of `rows_dataset` (prediction
    mode) under the strategy and gathers the replicas' rows: what every
    task's ``predict_logits`` unpacks (SQuAD's, the classifier's).

    Args:
      model: called as ``model(features, training=False)``; returns a dict
        holding ``output_names``.
      packs: the rows to predict.
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
        lambda context: rows_dataset(packs, batch_size, is_training=False,
                                      input_context=context))

    @tf.function(jit_compile=jit_compile, autograph=False)
    def forward(features):
        outputs = model(features, training=False)
        return [features["pack_index"]] + [outputs[name] for name in output_names]

    def replica_forward(features):
        # A Python function around the compiled one, as the trainer's steps:
        # given a jit-compiled tf.function itself, MirroredStrategy.run off GPUs
        # compiles every replica's call into one XLA computation, which fails
        # ("Trying to access resource .../replica_1 located in device CPU:1").
        return forward(features)

    @tf.function(autograph=False)
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
