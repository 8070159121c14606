"""tf.data input pipelines for pre-training records, packed or unpacked.

Both formats come out in the packed layout with static shapes, int32 (the
masked-LM weights float32), so one model code path serves both: an unpacked
batch is a packed batch with one sequence per pack (D = 1). Letters: B batch,
S sequence length, M masked-LM slots, D max sequences per pack.

    input_ids, input_mask, segment_ids, positions          [B, S]
    masked_lm_positions, masked_lm_ids, masked_lm_weights  [B, M]
    next_sentence_positions, next_sentence_labels,
    next_sentence_weights                                  [B, D]
    sequence_offsets (ReplicaBatches(sequence_offsets=True))  [B, D + 1]
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import tensorflow as tf
from absl import logging

from packed_bert_tf import filesystem
from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly, pack_dataset
from packed_bert_tf.data.records import tensorflow_records
from packed_bert_tf.data.records.record_format import IdLimits, RecordFormat
from packed_bert_tf.sequence_offsets import sequence_offsets

#: The start of the error an id out of range raises in the input pipeline
#: (``id_limits`` of `parse_records`); the host then finds the record by
#: `packed_bert_tf.pretraining.task.find_bad_record`.
ID_ERROR = "id out of range"

#: The feature `with_sequence_offsets` adds.
SEQUENCE_OFFSETS = "sequence_offsets"


@dataclasses.dataclass(frozen=True)
class Shuffling:
    """The order an input pipeline reads its records in (the ``--seed`` and
    ``--shuffle_buffer_size`` flags).

    `cycle_length` files are read at once, their records interleaved; in
    training the files are shuffled first and the records then shuffled
    through a buffer, both drawn from `seed`.

    Attributes:
      seed: seeds the shuffles; None: another order every run.
      shuffle_buffer_size: records shuffled together.
      cycle_length: files read at once.
    """

    seed: int | None = None
    shuffle_buffer_size: int = 10_000
    cycle_length: int = 8


@dataclasses.dataclass(frozen=True)
class ReplicaBatches:
    """What each replica's batches hold, where they start and whether they end
    (`pretraining_dataset`).

    Attributes:
      skip_rows: rows of each replica to skip first (records, without parsing
        them; packs when packing on the fly): a resumed run skips what it had
        read. With a seed the records that follow are exactly those the
        interrupted run would have read.
      repeat: read the files again and again; default: when training.
      pad_with_empty_batches: for evaluation: keep the last, partial batch,
        filled up with empty records (all features 0, so every weight is 0),
        then yield empty batches forever, so that replicas with fewer batches
        can run as many steps as the others and every record counts exactly
        once.
      micro_batches: K: each element stacks K consecutive batches of one
        replica, [K, b, ...] (gradient accumulation); default: elements are
        batches.
      pack_on_the_fly: unpacked records only: each replica packs its records
        as it reads them (`packed_bert_tf.data.inputs.pack_dataset.pack_dataset`,
        seeded with the shuffling's seed); batches are then packs, and
        `skip_rows` counts packs (the packs are the same on a resumed run).
      sequence_offsets: add the ``sequence_offsets`` feature [b, D + 1]
        (`with_sequence_offsets`; D: the packed records', the packer's when
        packing on the fly, 1 for unpacked records).
    """

    skip_rows: int = 0
    repeat: bool | None = None
    pad_with_empty_batches: bool = False
    micro_batches: int | None = None
    pack_on_the_fly: PackOnTheFly | None = None
    sequence_offsets: bool = False


def detect_record_format(files: Sequence[str]) -> RecordFormat:
    """The format of the first file (packed if it has ``positions``)."""
    from packed_bert_tf.data.records.packing_verification import infer_record_format

    return infer_record_format(files[0])


@tf.autograph.experimental.do_not_convert
def to_packed_layout(features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Unpacked batch features -> the packed layout with one sequence per pack.

    ``input_mask`` (1 on real tokens) is already the sequence index; positions
    count 0..S-1 on real tokens (0 on padding, as in packed records); the
    next-sentence features get a D = 1 axis with the [CLS] at offset 0.
    """
    input_mask = features["input_mask"]
    batch_size = tf.shape(input_mask)[0]
    positions = tf.range(tf.shape(input_mask)[1], dtype=input_mask.dtype)[None, :] \
        * input_mask
    return {
        "input_ids": features["input_ids"],
        "input_mask": input_mask,
        "segment_ids": features["segment_ids"],
        "positions": positions,
        "masked_lm_positions": features["masked_lm_positions"],
        "masked_lm_ids": features["masked_lm_ids"],
        "masked_lm_weights": features["masked_lm_weights"],
        "next_sentence_positions": tf.zeros([batch_size, 1], input_mask.dtype),
        "next_sentence_labels": features["next_sentence_labels"],
        "next_sentence_weights": tf.ones([batch_size, 1], input_mask.dtype),
    }


def with_sequence_offsets(dataset: tf.data.Dataset, max_sequences_per_pack: int, *,
                          num_parallel_calls: int | None = tf.data.AUTOTUNE
                          ) -> tf.data.Dataset:
    """Adds the ``sequence_offsets`` feature, computed from ``input_mask``.

    `packed_bert_tf.sequence_offsets.sequence_offsets` under
    ``tf.experimental.numpy`` (tf.data runs TensorFlow graphs whatever the
    Keras backend): ``input_mask`` [..., S] -> ``sequence_offsets``
    [..., D + 1] int32, the ``cu_seqlens`` of each pack (docs/formats.md),
    for elements of any batching: one pack [S], a batch [B, S],
    micro-batches [K, B, S]. O(S D) per pack, in a parallel map.

    Args:
      dataset: elements are dicts holding ``input_mask``, the sequence index
        (1..D, 0 for padding), as every packed pipeline of the package yields:
        `pretraining_dataset` (or its ``ReplicaBatches(sequence_offsets=
        True)``), `pack_dataset`, `packed_bert_tf.data.inputs.rows_dataset.rows_dataset`
        and `packed_bert_tf.batching.dataset.bucketed_rows_dataset`.
      max_sequences_per_pack: D, the pipeline's (``PackedRows.
        max_sequences_per_pack`` for rows held in memory, 1 for unpacked rows);
        sequence indices above D are not counted.
      num_parallel_calls: of the map.

    Raises:
      ValueError: elements that are not dicts with an ``input_mask``, or that
        already hold ``sequence_offsets``; D < 1.
    """
    spec = dataset.element_spec
    if not isinstance(spec, dict) or "input_mask" not in spec:
        raise ValueError(f"with_sequence_offsets needs elements that are dicts with an "
                         f"'input_mask' feature, got {spec}")
    if SEQUENCE_OFFSETS in spec:
        raise ValueError(f"the elements already hold {SEQUENCE_OFFSETS!r}")
    if spec["input_mask"].shape.rank == 0:
        raise ValueError(f"'input_mask' has shape {spec['input_mask'].shape}, expected "
                         f"[..., S]")
    if max_sequences_per_pack < 1:
        raise ValueError(f"max_sequences_per_pack must be >= 1, got "
                         f"{max_sequences_per_pack}")

    def add(features):
        offsets = sequence_offsets(features["input_mask"], max_sequences_per_pack,
                                   xp=tf.experimental.numpy)
        return {**features, SEQUENCE_OFFSETS: offsets}

    return dataset.map(add, num_parallel_calls=num_parallel_calls, deterministic=True)


def shard_files(files: Sequence[str],
                input_context: tf.distribute.InputContext | None) -> list[str]:
    """This input pipeline's files: pipeline i of n reads files i, i + n, ...

    Each record is read by exactly one pipeline.

    Raises:
      ValueError: fewer files than input pipelines.
    """
    if input_context is None:
        return list(files)
    pipelines = input_context.num_input_pipelines
    if len(files) < pipelines:
        raise ValueError(f"{len(files)} input files cannot be sharded between "
                         f"{pipelines} input pipelines: write more shards")
    return list(files[input_context.input_pipeline_id::pipelines])


def interleave_records(file_names: tf.data.Dataset, num_files: int, *,
                       cycle_length: int = 8, deterministic: bool = True
                       ) -> tf.data.Dataset:
    """Serialized records of a dataset of file names, `cycle_length` files at once."""
    return file_names.interleave(
        tf.data.TFRecordDataset, cycle_length=min(cycle_length, num_files),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


# Not for AutoGraph to convert in every map that calls it: no Python control
# flow on tensors here (nor in `to_packed_layout`).
@tf.autograph.experimental.do_not_convert
def parse_records(serialized: tf.Tensor, record_format: RecordFormat, *,
                  id_limits: IdLimits | None = None) -> dict[str, tf.Tensor]:
    """A batch of serialized records [B] -> the record's own features, int32.

    The one cast, here: int64 on disk, int32 in the model (the masked-LM
    weights stay float32).

    Args:
      serialized: [B] strings.
      record_format: the records' format (features and their lengths).
      id_limits: when given, an id out of range (`IdLimits`: token, segment
        and position ids) fails the batch with an InvalidArgumentError whose
        message holds `ID_ERROR` (an XLA lookup would otherwise clamp it,
        silently). One min and max per id feature and batch.
    """
    features = tf.io.parse_example(serialized, tensorflow_records.parse_spec(record_format))
    features = {name: value if value.dtype == tf.float32 else tf.cast(value, tf.int32)
                for name, value in features.items()}
    if id_limits is not None:
        # Signed int32 reductions and one Assert per batch: the Assert's fixed
        # cost dominates (the token-id check alone cost 2 to 4 % of the
        # pipeline's CPU at S = 512, batches of 32, one core); one max of the
        # ids bitcast to uint32 (both ends at once) was slower, its reduction
        # not being vectorised.
        limits = id_limits.limits(features, record_format.max_seq_length)
        in_range = tf.reduce_all(tf.stack([
            (tf.reduce_min(features[name]) >= 0) & (tf.reduce_max(features[name]) < limit)
            for name, limit in limits.items()]))
        check = tf.debugging.Assert(in_range, [
            f"{ID_ERROR}: limits {', '.join(f'{n} {v}' for n, v in limits.items())}"])
        with tf.control_dependencies([check]):
            features["input_ids"] = tf.identity(features["input_ids"])
    return features


def pipeline_replicas(input_context: tf.distribute.InputContext | None
                      ) -> tuple[list[int], int]:
    """The replicas an input pipeline feeds, and the number of replicas in all.

    Pipeline p of n feeds replicas p * r ... p * r + r - 1 (r = replicas per
    pipeline), the order in which ``tf.distribute`` numbers the replicas of
    its workers; without an input context, one replica.
    """
    if input_context is None:
        return [0], 1
    replicas = input_context.num_replicas_in_sync
    per_pipeline = replicas // input_context.num_input_pipelines
    first = input_context.input_pipeline_id * per_pipeline
    return list(range(first, first + per_pipeline)), replicas


def sharding(num_files: int, num_replicas: int) -> str:
    """How records are shared between replicas: ``"file"`` (replica r of R reads
    files r, r + R, ...) when there are at least as many files as replicas,
    else ``"record"`` (each replica reads every file, in one deterministic
    order, and keeps records r, r + R, ...)."""
    return "file" if num_files >= num_replicas else "record"


def pretraining_dataset(file_patterns, batch_size: int, *,
                        record_format: RecordFormat | None = None,
                        is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        shuffling: Shuffling = Shuffling(),
                        batches: ReplicaBatches = ReplicaBatches(),
                        id_limits: IdLimits | None = None) -> tf.data.Dataset:
    """Batches of pre-training features in the packed layout.

    Records are shared between replicas, not input pipelines: replica r of
    R reads its share (`sharding`: by file, or by record when there are
    fewer files than replicas) whichever process it lives in, and a pipeline
    feeding several replicas yields their batches in turn (replica order,
    as ``tf.distribute`` hands them out). So each record is read exactly once
    per pass over all replicas, and the rows of every global batch depend on
    the replica count alone: 2 workers of 1 replica see the batches of 1
    process with 2 replicas. In training (repeated), a replica's files are
    read at its own pace: with a file count that is not a multiple of the
    replica count, the replicas holding one file fewer go through their
    files more often (a warning says so; write the shards in a multiple of
    the replica count to read every file equally often).

    Args:
      file_patterns: globs of TFRecord files, all of one format: a str
        (comma-separated) or a list of str.
      batch_size: int, the global batch size; with `input_context`, each
        replica gets ``input_context.get_per_replica_batch_size(batch_size)``
        rows.
      record_format: optional `RecordFormat`, the expected format; read off
        the first file when not given. Records of another size fail to parse
        with an error naming the feature.
      is_training: bool, shuffle files and records (`shuffling`) and repeat
        forever.
      input_context: optional `tf.distribute.InputContext`, this pipeline's
        place among the replicas (`pipeline_replicas`).
      shuffling: `Shuffling`, the seed, the shuffle buffer and the files read
        at once.
      batches: `ReplicaBatches`, rows skipped first (a resumed run),
        repetition, padding with empty batches (evaluation), micro-batches
        and packing on the fly.
      id_limits: optional `IdLimits`; check every id (token, segment,
        position) against them (see `parse_records`).

    Returns:
      tf.data.Dataset of dicts, static shapes (``drop_remainder=True``).
    """
    files = filesystem.expand_file_patterns(file_patterns)
    if record_format is None:
        record_format = detect_record_format(files)
    if batches.pack_on_the_fly is not None and (record_format.is_packed
                                                or batches.pad_with_empty_batches):
        raise ValueError("packing on the fly needs unpacked records and no padding "
                         "with empty batches")
    replicas, num_replicas = pipeline_replicas(input_context)
    per_replica_batch = (batch_size if input_context is None
                         else input_context.get_per_replica_batch_size(batch_size))
    how = sharding(len(files), num_replicas)
    if num_replicas > 1:
        logging.info("%s input pipeline %d feeds replicas %s of %d: %d files, sharded "
                     "by %s", "training" if is_training else "evaluation",
                     input_context.input_pipeline_id, replicas, num_replicas, len(files),
                     how)
        if how == "file" and is_training and len(files) % num_replicas:
            logging.warning(
                "%d files over %d replicas: %d replicas read %d files and the others %d, "
                "so in training the files of the latter are read more often (write a "
                "multiple of %d shards to read every file equally often)", len(files),
                num_replicas, len(files) % num_replicas, len(files) // num_replicas + 1,
                len(files) // num_replicas, num_replicas)
    by_record = how == "record"
    # Sharding by record needs the same record order on every replica: files
    # shuffled by one seed, a deterministic interleave.
    deterministic = not is_training or shuffling.seed is not None or by_record
    repeat = is_training if batches.repeat is None else batches.repeat
    streams = []
    for replica in replicas:
        records = _replica_records(
            files if by_record else files[replica::num_replicas],
            (num_replicas, replica) if by_record else None, is_training=is_training,
            shuffling=shuffling, repeat=repeat, deterministic=deterministic)
        streams.append(_replica_batches(
            records, batch_size=per_replica_batch, record_format=record_format,
            batches=batches, seed=shuffling.seed, id_limits=id_limits,
            deterministic=deterministic))
    if batches.micro_batches is not None:
        streams = [stream.batch(batches.micro_batches, drop_remainder=True)
                   for stream in streams]
    return take_in_turn(streams).prefetch(tf.data.AUTOTUNE)


def take_in_turn(datasets: Sequence[tf.data.Dataset]) -> tf.data.Dataset:
    """One element of each dataset in turn (the first, the second, ..., the first
    again), as long as every one has elements."""
    if len(datasets) == 1:
        return datasets[0]
    return tf.data.Dataset.choose_from_datasets(
        list(datasets), tf.data.Dataset.range(len(datasets)).repeat(),
        stop_on_empty_dataset=True)


def _replica_records(files, record_shard: tuple[int, int] | None, *, is_training: bool,
                     shuffling: Shuffling, repeat: bool,
                     deterministic: bool) -> tf.data.Dataset:
    """The serialized records of one replica (see `pretraining_dataset`): those of
    its `files`, or with ``record_shard`` = (R, r) record r, r + R, ... of all
    files (every replica reading them in one order)."""
    # Sharding by record: the files are shuffled alike on every replica.
    file_seed = 0 if record_shard is not None and shuffling.seed is None else shuffling.seed
    dataset = tf.data.Dataset.from_tensor_slices(list(files))
    if is_training:
        dataset = dataset.shuffle(len(files), seed=file_seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = interleave_records(dataset, len(files), cycle_length=shuffling.cycle_length,
                                 deterministic=deterministic)
    if record_shard is not None:
        dataset = dataset.shard(*record_shard)
    if is_training:
        dataset = dataset.shuffle(shuffling.shuffle_buffer_size, seed=shuffling.seed)
    return dataset


def _replica_batches(records: tf.data.Dataset, *, batch_size: int,
                     record_format: RecordFormat, batches: ReplicaBatches,
                     seed: int | None, id_limits: IdLimits | None,
                     deterministic: bool) -> tf.data.Dataset:
    """One replica's serialized records -> its batches (see `pretraining_dataset`)."""
    if batches.pack_on_the_fly is not None:
        dataset = _packed_on_the_fly(records, batches.pack_on_the_fly,
                                     batch_size=batch_size, record_format=record_format,
                                     seed=seed, skip_rows=batches.skip_rows,
                                     id_limits=id_limits, deterministic=deterministic)
        max_sequences_per_pack = batches.pack_on_the_fly.max_sequences_per_pack
    else:
        dataset = _read_batches(records, batch_size=batch_size,
                                record_format=record_format, batches=batches,
                                id_limits=id_limits, deterministic=deterministic)
        max_sequences_per_pack = record_format.max_sequences_per_pack
    if batches.sequence_offsets:
        dataset = with_sequence_offsets(dataset, max_sequences_per_pack)
    return dataset


def _read_batches(records: tf.data.Dataset, *, batch_size: int,
                  record_format: RecordFormat, batches: ReplicaBatches,
                  id_limits: IdLimits | None, deterministic: bool) -> tf.data.Dataset:
    """Serialized records -> batches in the packed layout, as written (no packing)."""
    if batches.skip_rows:
        records = records.skip(batches.skip_rows)
    dataset = records.batch(batch_size, drop_remainder=not batches.pad_with_empty_batches)

    def parse(serialized):
        features = parse_records(serialized, record_format, id_limits=id_limits)
        return features if record_format.is_packed else to_packed_layout(features)

    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=deterministic)
    if batches.pad_with_empty_batches:
        dataset = _pad_with_empty_batches(dataset, batch_size)
    return dataset


def _packed_on_the_fly(records: tf.data.Dataset, packing: PackOnTheFly, *,
                       batch_size: int, record_format: RecordFormat, seed: int | None,
                       skip_rows: int, id_limits: IdLimits | None,
                       deterministic: bool) -> tf.data.Dataset:
    """Serialized unpacked records -> batches of packs made as they are read."""
    examples = records.batch(256).map(
        lambda serialized: parse_records(serialized, record_format, id_limits=id_limits),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic).unbatch()
    return batch_examples(examples, batch_size=batch_size,
                          max_seq_length=record_format.max_seq_length, packing=packing,
                          seed=seed, skip_rows=skip_rows)


def batch_examples(examples: tf.data.Dataset, *, batch_size: int, max_seq_length: int,
                   packing: PackOnTheFly | None, seed: int | None,
                   skip_rows: int = 0) -> tf.data.Dataset:
    """Unpacked examples (one dict per sequence, as an unpacked record parses)
    -> batches in the packed layout: of packs made as they are read
    (``packing``), else of one sequence per row; ``skip_rows`` rows skipped
    first (a resumed run)."""
    if packing is None:
        rows = examples.skip(skip_rows) if skip_rows else examples
        return rows.batch(batch_size, drop_remainder=True).map(to_packed_layout)
    packs = pack_dataset(examples, max_sequence_length=max_seq_length,
                         packing=packing, seed=0 if seed is None else seed)
    if skip_rows:
        # Packs depend on every record before them: skipping means packing.
        packs = packs.skip(skip_rows)
    return packs.batch(batch_size, drop_remainder=True)


def _pad_with_empty_batches(dataset: tf.data.Dataset, batch_size: int) -> tf.data.Dataset:
    """Partial batches filled up with zero records, then zero batches forever."""

    def fill(features):
        missing = batch_size - tf.shape(features["input_ids"])[0]
        return {name: tf.ensure_shape(
                    tf.pad(value, [[0, missing]] + [[0, 0]] * (value.shape.rank - 1)),
                    [batch_size] + value.shape[1:].as_list())
                for name, value in features.items()}

    dataset = dataset.map(fill)
    empty = tf.nest.map_structure(
        lambda spec: tf.zeros([batch_size] + spec.shape[1:].as_list(), spec.dtype),
        dataset.element_spec)
    return dataset.concatenate(tf.data.Dataset.from_tensors(empty).repeat())


def count_records(files: Sequence[str]) -> list[int]:
    """The number of records in each TFRecord file (reads the framing only)."""
    return [int(tf.data.TFRecordDataset(path).reduce(
        tf.constant(0, tf.int64), lambda count, _: count + 1)) for path in files]


def pipeline_batches(record_counts: Sequence[int], batch_size: int,
                     input_context: tf.distribute.InputContext | None = None) -> int:
    """Batches (the last one partial) of the biggest replica's share of the records.

    Evaluation runs this many steps over datasets made with
    ``ReplicaBatches(pad_with_empty_batches=True)``, so that every record is
    read once.
    ``batch_size`` is the global batch size, as for `pretraining_dataset`;
    only the replica count of ``input_context`` matters.
    """
    replicas = 1 if input_context is None else input_context.num_replicas_in_sync
    per_replica_batch = (batch_size if input_context is None
                         else input_context.get_per_replica_batch_size(batch_size))
    if sharding(len(record_counts), replicas) == "file":
        shares = [sum(record_counts[index::replicas]) for index in range(replicas)]
    else:
        total = sum(record_counts)
        shares = [total // replicas + (index < total % replicas)
                  for index in range(replicas)]
    return max(-(-count // per_replica_batch) for count in shares)
