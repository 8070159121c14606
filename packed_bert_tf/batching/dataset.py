"""tf.data input pipelines of length-bucketed batches: of pre-training
records (`bucketed_pretraining_dataset`), and of rows held in memory
(`bucketed_rows_dataset`, SQuAD's and the classifier's).

Reads unpacked (MLPerf-format) TFRecords and yields batches in the packed
layout of `packed_bert_tf.data.inputs.pretraining_dataset` with one sequence per row (D = 1),
each batch at its own shape [R, S]: S its bucket's boundary (or its longest
sequence), R its rows. Letters: R rows, S padded length, P masked-LM slots.

    input_ids, input_mask, segment_ids, positions          [R, S]
    masked_lm_positions, masked_lm_ids, masked_lm_weights  [R, P]
    next_sentence_positions, next_sentence_labels,
    next_sentence_weights                                  [R, 1]

Rows beyond a batch's sequences are empty (every feature 0, every weight 0).

How it runs, per epoch (seeded by (seed, epoch), stateless): files
shuffled, records interleaved and shuffled block by block
(`shuffle_buffer_size` records a block), taken `pool_size` at a time; each pool is planned
in numpy (`plan_pool`: bucket, sort, cut, deal into steps) with the
unfilled batches carried into the next pool through ``Dataset.scan``; the
epoch ends with a flush of the carry, so each record comes out exactly once
per epoch.

Data parallelism (``input_context``): files are sharded between input
pipelines by `shard_files` (pipeline i of n reads files i, i + n, ...; each
record read by exactly one pipeline). A pipeline feeding W = replicas / pipelines replicas yields steps
of W consecutive batches of one shape and comparable cost (`plan_pool`):
batches tW .. tW + W - 1 are step t, which ``distribute_datasets_from_function``
deals to the replicas in turn (a test checks this under MirroredStrategy).
So with one pipeline (MirroredStrategy, one host) every step is balanced
across all replicas. Across several pipelines (hosts), each balances its own
replicas; their steps are not coordinated (statistical balance only), and
their numbers of steps per epoch can differ.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow as tf

from packed_bert_tf import filesystem
from packed_bert_tf.batching.bucketing import Bucketing, BucketSpec, bucket_batches, epoch_rng
from packed_bert_tf.batching.plan import COSTS
from packed_bert_tf.batching.sharding import balance_across_workers, plan_pool
from packed_bert_tf.data.inputs.pretraining_dataset import (
    Shuffling,
    interleave_records,
    parse_records,
    shard_files,
    to_packed_layout,
)
from packed_bert_tf.data.packed.packed_rows import PackedRows
from packed_bert_tf.data.records.record_format import IdLimits, RecordFormat

_TOKEN_FEATURES = ("input_ids", "input_mask", "segment_ids")


def default_boundaries(max_seq_length: int) -> tuple[int, ...]:
    """Four equal-width buckets: (S/4, S/2, 3S/4, S) rounded down, e.g. 128..512."""
    return tuple(sorted({max(1, max_seq_length * k // 4) for k in range(1, 5)}))


def bucketed_pretraining_dataset(file_patterns, *, record_format: RecordFormat,
                                 bucketing: Bucketing,
                                 shuffling: Shuffling = Shuffling(seed=0),
                                 input_context: tf.distribute.InputContext | None = None,
                                 is_training: bool = True, num_epochs: int | None = None,
                                 id_limits: IdLimits | None = None) -> tf.data.Dataset:
    """Length-bucketed batches of unpacked pre-training records, packed layout.

    Args:
      file_patterns: a str or list of str. Globs (comma-separated in a string)
        of unpacked TFRecord files.
      record_format: the records' `RecordFormat`: unpacked, S and P (must
        match data generation).
      bucketing: the `Bucketing`. ``batch_size``: global examples per step;
        each replica gets ``input_context.get_per_replica_batch_size(batch_size)``
        rows. Or ``token_budget``: global rows x S per step, split between
        replicas the same way (with ``pad_to_bucket_boundary``, a bucket's
        batches have ``budget // boundary`` rows). ``bucket_boundaries``:
        default `default_boundaries` (four buckets); the last bucket always
        ends at S. ``pad_to_bucket_boundary``: batches at their bucket's edge
        (one shape per bucket: one XLA compilation each); False: at their
        longest sequence (with more than one replica, the longest of the
        step), which needs a ``batch_size``. ``pool_size``: records bucketed
        together (per input pipeline). ``balance_cost``: what steps are
        balanced by, with more than one replica per pipeline (see
        `batch_costs`).
      shuffling: the `Shuffling`. Shuffles and plans depend on (seed, epoch)
        only (the seed must be an int >= 0). ``shuffle_buffer_size`` records
        are shuffled together (a block; bigger than the pool size so that
        pools differ from epoch to epoch); ``cycle_length`` files are read
        at once.
      input_context: a ``tf.distribute.InputContext``, optional. Pipeline i
        reads files i, i + n, ...; see the module docstring.
      is_training: shuffle files, records and steps; repeat (see
        `num_epochs`). False: records in file order, batches bucket by
        bucket.
      num_epochs: int, optional. Epochs before the dataset ends. Default:
        forever when training, else 1.
      id_limits: `IdLimits`, optional. Check every id (token, segment,
        position) against them (`packed_bert_tf.data.inputs.pretraining_dataset.parse_records`).

    Returns:
      A ``tf.data.Dataset`` of feature dicts, shapes [None, None] / [None, P] /
      [None, 1] (see the module docstring), int32 except ``masked_lm_weights``.

    Raises:
      ValueError: for packed records, the options `BucketSpec.make` rejects
        (pool smaller than a batch, budget below the max length, ...), fewer
        files than input pipelines, or a token budget without
        ``pad_to_bucket_boundary`` for several replicas.
    """
    if record_format.is_packed:
        raise ValueError("bucketed batches need unpacked records (one sequence per row)")
    if bucketing.balance_cost not in COSTS:
        raise ValueError(f"unknown balance_cost {bucketing.balance_cost!r}; expected one "
                         f"of {', '.join(COSTS)}")
    epoch_rng(shuffling.seed, 0)  # rejects a negative seed now rather than mid-epoch
    files = shard_files(filesystem.expand_file_patterns(file_patterns), input_context)
    max_seq_length = record_format.max_seq_length
    num_workers, per_replica = _per_replica_bucketing(input_context, bucketing)
    if (bucketing.token_budget is not None and not bucketing.pad_to_bucket_boundary
            and num_workers > 1):
        raise ValueError("a token budget without pad_to_bucket_boundary gives each "
                         "batch its own row count; replicas of a step need one shape")
    if per_replica.bucket_boundaries is None:
        per_replica = dataclasses.replace(
            per_replica, bucket_boundaries=default_boundaries(max_seq_length))
    spec = BucketSpec.make(per_replica, max_sequence_length=max_seq_length)
    if num_epochs is None:
        epochs = tf.data.Dataset.counter() if is_training else tf.data.Dataset.range(1)
    else:
        epochs = tf.data.Dataset.range(num_epochs)
    one_epoch = _BucketedEpoch(files, record_format, spec, num_workers=num_workers,
                               balance_cost=bucketing.balance_cost, shuffling=shuffling,
                               is_training=is_training, id_limits=id_limits)
    return epochs.flat_map(one_epoch).prefetch(tf.data.AUTOTUNE)


def _per_replica_bucketing(input_context, bucketing: Bucketing) -> tuple[int, Bucketing]:
    """(replicas this pipeline feeds, the bucketing with per-replica batch size and
    budget)."""
    if input_context is None:
        return 1, bucketing
    pipelines = input_context.num_input_pipelines
    if input_context.num_replicas_in_sync % pipelines:
        raise ValueError(f"{input_context.num_replicas_in_sync} replicas do not "
                         f"divide between {pipelines} input pipelines")
    per_replica = input_context.get_per_replica_batch_size
    return (input_context.num_replicas_in_sync // pipelines, dataclasses.replace(
        bucketing,
        batch_size=None if bucketing.batch_size is None else per_replica(bucketing.batch_size),
        token_budget=(None if bucketing.token_budget is None
                      else per_replica(bucketing.token_budget))))


class _BucketedEpoch:
    """``epoch -> tf.data.Dataset`` of that epoch's bucketed batches (for ``flat_map``).

    Records (shuffled by (seed, epoch)) -> pools of `BucketSpec.pool_size`
    parsed records -> a numpy plan per pool (`plan_pool`), the unfilled
    batches carried into the next pool by ``Dataset.scan`` -> batches.
    """

    def __init__(self, files, record_format: RecordFormat, spec: BucketSpec, *,
                 num_workers: int, balance_cost: str, shuffling: Shuffling,
                 is_training: bool, id_limits: IdLimits | None):
        self.files = files
        self.record_format = record_format
        self.spec = spec
        self.num_workers = num_workers
        self.balance_cost = balance_cost
        self.seed = shuffling.seed
        self.shuffle_buffer_size = shuffling.shuffle_buffer_size
        self.cycle_length = shuffling.cycle_length
        self.is_training = is_training
        self.id_limits = id_limits
        self.empty = {name: tf.zeros([0, length], tf.float32 if name == "masked_lm_weights"
                                     else tf.int32)
                      for name, length in record_format.feature_lengths().items()}
        masked = record_format.max_masked_tokens
        self.static_shapes = {name: [None, None] for name in (*_TOKEN_FEATURES, "positions")}
        self.static_shapes.update({name: [None, masked] for name in (
            "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")})
        self.static_shapes.update({name: [None, 1] for name in (
            "next_sentence_positions", "next_sentence_labels", "next_sentence_weights")})

    def __call__(self, epoch: tf.Tensor) -> tf.data.Dataset:
        pools = self.parsed_pools(self.records(epoch))
        planned = pools.scan((self.empty, tf.constant(0, tf.int64)),
                             functools.partial(self.plan_step, epoch))
        return planned.flat_map(self.batches)

    def records(self, epoch: tf.Tensor) -> tf.data.Dataset:
        """The epoch's serialized records; shuffled when training.

        Stateless shuffles keyed by (seed, epoch): the same whatever the
        global seed, and a fresh order every epoch.
        """
        epoch_key = tf.random.experimental.stateless_fold_in(
            tf.constant([self.seed, 0], tf.int64), epoch)
        names = tf.constant(self.files)
        if self.is_training:
            names = tf.random.experimental.stateless_shuffle(
                names, tf.random.experimental.stateless_fold_in(epoch_key, 0))
        records = interleave_records(tf.data.Dataset.from_tensor_slices(names),
                                     len(self.files), cycle_length=self.cycle_length)
        if not self.is_training:
            return records
        # Block shuffle: each block of records in a random order.
        block_key = tf.random.experimental.stateless_fold_in(epoch_key, 1)
        return records.batch(self.shuffle_buffer_size).enumerate().map(
            lambda index, block: tf.random.experimental.stateless_shuffle(
                block, tf.random.experimental.stateless_fold_in(block_key, index))
        ).unbatch()

    def parsed_pools(self, records: tf.data.Dataset) -> tf.data.Dataset:
        """(features of `pool_size` records, False) ..., then (no records, True).

        The last, empty pool flushes the carry: the epoch's partial batches.
        """
        pools = records.batch(self.spec.pool_size).map(
            functools.partial(parse_records, record_format=self.record_format,
                              id_limits=self.id_limits),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return pools.map(lambda features: (features, False)).concatenate(
            tf.data.Dataset.from_tensors((self.empty, True)))

    # Not converted by AutoGraph (here and in `batch`): their control flow is
    # Python's, on the feature names.
    @tf.autograph.experimental.do_not_convert
    def plan_step(self, epoch, state, pool):
        """``scan`` step: plans the carry and a pool; carries the unfilled batches."""
        carry, pool_index = state
        features, final = pool
        both = {name: tf.concat([carry[name], features[name]], 0) for name in carry}
        lengths = tf.math.count_nonzero(both["input_mask"], axis=1)  # [n]
        order, splits, rows, padded, leftover = tf.numpy_function(
            self.plan_in_numpy, [lengths, final, epoch, pool_index], [tf.int64] * 5,
            stateful=False)
        carry = {name: tf.gather(value, leftover) for name, value in both.items()}
        return (carry, pool_index + 1), (both, order, splits, rows, padded)

    def plan_in_numpy(self, lengths, final, epoch, pool_index):
        """`plan_pool` of a pool's lengths: order, splits, rows, lengths, leftover."""
        rng = epoch_rng(self.seed, epoch, pool_index) if self.is_training else None
        plan = plan_pool(lengths, self.spec, num_workers=self.num_workers,
                         final=bool(final), rng=rng, cost=self.balance_cost)
        return plan.order, plan.splits, plan.rows, plan.padded_lengths, plan.leftover

    def batches(self, features, order, splits, rows, padded) -> tf.data.Dataset:
        """The planned batches of one pool, in the packed layout."""
        return tf.data.Dataset.range(tf.size(rows, out_type=tf.int64)).map(
            functools.partial(self.batch, features, order, splits, rows, padded),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    @tf.autograph.experimental.do_not_convert
    def batch(self, features, order, splits, rows, padded, index) -> dict:
        """Batch `index`: its records gathered, cut to its length, padded to its rows."""
        examples = order[splits[index]:splits[index + 1]]
        count = tf.shape(examples)[0]
        num_rows, length = tf.cast(rows[index], tf.int32), tf.cast(padded[index], tf.int32)
        out = {}
        for name, value in features.items():
            value = tf.gather(value, examples)
            if name in _TOKEN_FEATURES:
                value = value[:, :length]
            out[name] = tf.pad(value, [[0, num_rows - count], [0, 0]])
        out = to_packed_layout(out)
        out["next_sentence_weights"] = tf.cast(
            tf.range(num_rows)[:, None] < count, tf.int32)  # [R, 1]
        return {name: tf.ensure_shape(value, self.static_shapes[name])
                for name, value in out.items()}


def bucketed_rows_dataset(packs: PackedRows, batch_size: int, *, seed: int,
                           boundaries=None, pool_size: int = 8192,
                           input_context: tf.distribute.InputContext | None = None,
                           skip_batches: int = 0) -> tf.data.Dataset:
    """Length-bucketed training batches of unpacked rows, repeated forever.

    Each epoch is planned by `packed_bert_tf.batching` (seeded by (seed,
    epoch)): features shuffled, sorted by length in pools of `pool_size`,
    cut into batches of `batch_size` rows padded to their bucket's boundary
    (one shape per bucket), and dealt in steps of one batch per replica of
    this pipeline, every batch of a step at one shape and of comparable cost.
    Every sequence of the pipeline's share appears once per epoch.

    Args:
      packs: an unpacked layout (``packed=False``: row n is sequence n).
      batch_size: the global batch size (rows per step over all replicas).
      seed: seeds the plans.
      boundaries: bucket upper edges; default four equal buckets up to S.
      pool_size: sequences bucketed together.
      input_context: pipeline i takes sequences i, i + n, ... of n pipelines.
      skip_batches: batches of this pipeline to skip (a resumed run).

    Returns:
      tf.data.Dataset of the layout of
      `packed_bert_tf.data.inputs.rows_dataset.rows_dataset`, shapes [None, None] /
      [None, 1] / [None].
    """
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
    lengths = packs.sequence_length[rows]  # unpacked: sequence n is row n
    arrays = {name: value[rows] for name, value in packs.arrays.items()}
    arrays["pack_index"] = rows.astype(np.int32)
    bucketing = Bucketing(batch_size=rows_per_batch, pool_size=pool_size,
                          bucket_boundaries=boundaries, pad_to_bucket_boundary=True)

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
            plan = bucket_batches(lengths, bucketing, max_sequence_length=max_length,
                                  seed=seed, epoch=epoch)
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
