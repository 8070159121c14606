"""Unpacked pre-training TFRecords to packed TFRecords, as a Beam pipeline.

Every Beam element is coarse, a whole group of input shards or a whole output
shard, with numpy doing the per-sequence work. Two scopes of planning:

``scope="groups"`` (the default): each group of input shards is read, planned
and written by one worker on its own, its packs dealt to the output shards it
owns; no shuffle, a few packs more than one global plan:

    input shard groups
      | PackGroups      per group: read, plan, write its shards under a
                        temporary name
      | GatherGroups
      | Finalize        as below

``scope="global"``: one plan for the whole dataset (efficiency is that of the
packing algorithm on the full histogram), every sequence routed to its output
shard:

    input shard groups
      | ReadLengths     per group: lengths and masked-LM counts only
      | GatherLengths   one element: every sequence's length
      | PlanPacks       histogram -> plan -> packs -> output shard and slot
                        of every sequence (masked-LM overflow re-planned)
    input shard groups
      | ReadAndRoute    per group: full records, cut by output shard (side
                        input: the routing)
      | GroupByShard
      | WriteShards     per output shard: lay out packs, encode, write to a
                        temporary name
      | Finalize        one element: rename every shard into place, remove
                        the shards of an earlier run, write
                        packing_stats.json

Output files only get their final names once every shard is written, so a
failed run leaves nothing that looks complete, and an earlier run's output is
only replaced by a complete new one. Temporary files carry `TEMPORARY_MARKER`
in their names (`is_temporary`).

Nothing relies on running in one process, so the same pipeline runs on
Beam's local runner, through the portability framework (a job service and SDK
worker processes) and on a cluster: every step is a DoFn or module-level
function that pickles by reference, carrying its configuration (the
`PackingJob`, the run's temporary suffix, fixed once when the pipeline is
built) and owning its counters; local paths are made absolute before
submission (workers run in other folders); stages meet only through
PCollections and side inputs; and a step a runner retries rewrites the same
bytes under the same temporary name (`finalize` too is safe to run again).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import re
import time
import uuid
from typing import Sequence

import apache_beam as beam
import numpy as np

from packed_bert_tf import filesystem
from packed_bert_tf.data.packed.packed_rows import PackSpec, concatenate, take
from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
from packed_bert_tf.data.records.record_files import (
    RecordWriter,
    iter_array_batches,
    uses_record_codec,
)
from packed_bert_tf.data.records.record_format import (
    PACKING_STATS_FILE,
    RecordFormat,
    default_max_masked_tokens,
)
from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.packing import (
    PackAssignment,
    assign_sequences,
    pack_histogram,
    replan_overflowing_packs,
)
from packed_bert_tf.packing.api import histogram_from_lengths

_NAMESPACE = "pack_pretraining_data"
WRITE_CHUNK_PACKS = 2048
SCOPES = ("global", "groups")
#: In the name of every file a run writes before it is complete.
TEMPORARY_MARKER = ".tmp-"
_SHARD_NAME = re.compile(r"part-\d{5}-of-\d{5}\.tfrecord")


def is_temporary(name: str) -> bool:
    """Whether a file name is a run's unfinished output (never a result)."""
    return TEMPORARY_MARKER in name


def is_output_file(name: str) -> bool:
    """Whether a file name is a finished run's output: a shard or the stats."""
    return not is_temporary(name) and (
        name == PACKING_STATS_FILE or _SHARD_NAME.fullmatch(name) is not None)


@dataclasses.dataclass(frozen=True)
class PackingJob:
    """Everything that defines one packing run (the tool's flags)."""

    input_files: tuple[str, ...]
    output_dir: str
    num_output_shards: int
    max_seq_length: int
    max_predictions_per_seq: int
    max_sequences_per_pack: int = 3
    max_masked_tokens: int | None = None  # default P + D - 1
    algorithm: str = "optimal"
    seed: int = 0
    files_per_group: int = 1
    scope: str = "groups"  # or "global": one plan for all, sequences shuffled

    def __post_init__(self):
        """Checks every field, naming the tool's flag, before anything runs."""
        from packed_bert_tf.packing import ALGORITHMS

        if self.scope not in SCOPES:
            raise ValueError(f"--packing_scope must be one of {', '.join(SCOPES)}, "
                             f"got {self.scope!r}")
        if not self.input_files:
            raise ValueError("no input files")
        for name in ("num_output_shards", "max_seq_length", "max_predictions_per_seq",
                     "max_sequences_per_pack", "files_per_group"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise ValueError(f"--max_predictions_per_seq={self.max_predictions_per_seq} "
                             f"is more than --max_seq_length={self.max_seq_length}")
        if self.max_masked_tokens is not None and \
                self.max_masked_tokens < self.max_predictions_per_seq:
            raise ValueError(f"--max_masked_tokens={self.max_masked_tokens} must be at "
                             f"least --max_predictions_per_seq="
                             f"{self.max_predictions_per_seq}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm={self.algorithm!r} is not one of "
                             f"{', '.join(ALGORITHMS)}")
        num_groups = len(self.groups())
        if self.scope == "groups" and num_groups > self.num_output_shards:
            raise ValueError(
                f"--packing_scope=groups writes each group of input files to shards of "
                f"its own: {num_groups} groups for --num_output_shards="
                f"{self.num_output_shards} (raise --files_per_group or the shards)")

    @property
    def unpacked_format(self) -> RecordFormat:
        return RecordFormat.unpacked(self.max_seq_length, self.max_predictions_per_seq)

    @property
    def packed_format(self) -> RecordFormat:
        masked = self.max_masked_tokens or default_max_masked_tokens(
            self.max_predictions_per_seq, self.max_sequences_per_pack)
        return RecordFormat.packed(self.max_seq_length, masked,
                                          self.max_sequences_per_pack)

    @property
    def pack_spec(self) -> PackSpec:
        """How its sequences go into packs (what the compact sequences carry)."""
        return PackSpec.pretraining(self.packed_format.max_masked_tokens)

    def groups(self) -> list[tuple[int, tuple[str, ...]]]:
        files = self.input_files
        return [(i, files[start:start + self.files_per_group]) for i, start in
                enumerate(range(0, len(files), self.files_per_group))]

    def shard_path(self, shard: int) -> str:
        return os.path.join(self.output_dir, f"part-{shard:05d}-of-"
                                             f"{self.num_output_shards:05d}.tfrecord")


# ------------------------------------------------------------ pure functions
def match_files(patterns: str | Sequence[str], *, flag: str = "input_file",
                skipped: list[str] | None = None) -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted.

    `filesystem.expand_file_patterns` through Beam's FileSystems (local,
    gs://, ...) instead of TensorFlow's: the process that launches the
    pipeline never imports TensorFlow (seconds of start-up on the critical
    path); only the workers that read and write records do.

    Local paths come back absolute (`filesystem.absolute_path`). Raises
    ValueError naming the flag when a pattern matches nothing, or names a
    folder (``skipped``: see `filesystem.expand_file_patterns_with_glob`).
    """
    from apache_beam.io.filesystems import FileSystems

    def glob(pattern):
        (result,) = FileSystems.match([pattern])
        return [metadata.path for metadata in result.metadata_list]

    files = [filesystem.absolute_path(path) for path in
             filesystem.expand_file_patterns_with_glob(patterns, glob=glob, flag=flag,
                                                       skipped=skipped)]
    folders = [path for path in files if os.path.isdir(path)]
    if folders:
        raise ValueError(f"--{flag}: {folders[0]} is a folder (give its files, e.g. "
                         f"'{os.path.join(folders[0], 'part-*')}')")
    return files


def read_group(job: PackingJob, files, *, lengths_only: bool):
    """Reads a group of unpacked shards.

    With ``lengths_only`` returns (lengths, masked_counts); else the
    sequences in compact form (`pretraining_records.compact_records`).
    Errors name the file and record.
    """
    record_format = job.unpacked_format
    # The masks alone for the lengths: cheap, and checked fully in the
    # second read.
    features = ("input_mask", "masked_lm_weights") if lengths_only else None
    batches, lengths, masked = [], [], []
    for path in files:
        records = 0
        # int32 into the same buffers batch after batch: each batch is
        # compacted before the next is read.
        for first, arrays in iter_array_batches(
                path, record_format, features=features, int_dtype=np.int32,
                reuse_buffers=True):
            records += arrays["input_mask"].shape[0]
            if lengths_only:
                lengths.append(arrays["input_mask"].sum(axis=1).astype(np.int32))
                masked.append((arrays["masked_lm_weights"] > 0).sum(axis=1)
                              .astype(np.int32))
            else:
                batches.append(compact_records(arrays, source=path, first_record=first))
        if not records:
            raise ValueError(f"{path}: the file holds no records")
    if lengths_only:
        return np.concatenate(lengths), np.concatenate(masked)
    return concatenate(batches)


@dataclasses.dataclass(frozen=True, eq=False)
class Routing:
    """Where every input sequence goes: per group, arrays over its sequences."""

    shard: dict[int, np.ndarray]  # group -> [n] output shard
    pack: dict[int, np.ndarray]  # group -> [n] pack index inside the shard
    slot: dict[int, np.ndarray]  # group -> [n] sequence index inside the pack
    summary: dict


def plan_packs(job: PackingJob, lengths: np.ndarray, masked: np.ndarray):
    """Plan, packs (masked-LM overflow re-planned) and a summary for sequences."""
    too_long = np.flatnonzero(lengths > job.max_seq_length)
    if too_long.size:
        raise ValueError(f"a sequence of length {lengths[too_long[0]]} is longer than "
                         f"--max_seq_length={job.max_seq_length}")
    start = time.perf_counter()
    plan = pack_histogram(histogram_from_lengths(lengths, job.max_seq_length),
                          job.max_seq_length, job.max_sequences_per_pack,
                          job.algorithm)
    packs = assign_sequences(lengths, plan, seed=job.seed)
    packs, replanned = replan_overflowing_packs(
        packs, lengths, masked, limit=job.packed_format.max_masked_tokens,
        max_sequence_length=job.max_seq_length,
        max_sequences_per_pack=job.max_sequences_per_pack, algorithm=job.algorithm,
        seed=job.seed)
    if replanned:
        # Re-planned packs were appended: mix them in again.
        order = np.random.default_rng(job.seed + 1).permutation(len(packs))
        packs = packs.take(order)
    num_packs = len(packs)
    real_tokens = int(lengths.sum())
    summary = {
        "sequences_in": int(lengths.size),
        "packs": num_packs,
        "real_tokens": real_tokens,
        "padding_tokens": num_packs * job.max_seq_length - real_tokens,
        "replanned_for_masked_overflow": replanned,
        "plan": {key: value for key, value in plan.summary().items()
                 if key in ("algorithm", "num_packs", "efficiency", "lp_lower_bound_packs",
                            "token_lower_bound", "theoretical_speedup",
                            "solve_time_seconds", "num_strategies")},
        "planning_seconds": time.perf_counter() - start,
    }
    return packs, summary


def plan_routing(job: PackingJob, group_lengths) -> Routing:
    """The global plan, and each sequence's output shard, pack and slot.

    ``group_lengths`` is a list of (group, lengths [n], masked_counts [n]).
    """
    group_lengths = sorted(group_lengths, key=lambda item: item[0])
    groups = [g for g, _, _ in group_lengths]
    sizes = np.array([lengths.size for _, lengths, _ in group_lengths])
    lengths = np.concatenate([lengths for _, lengths, _ in group_lengths])
    masked = np.concatenate([m for _, _, m in group_lengths])
    packs, summary = plan_packs(job, lengths, masked)
    pack_index = packs.pack_of_entries
    slot_of = np.empty(lengths.size, dtype=np.int8)
    shard_of = np.empty(lengths.size, dtype=np.int32)
    pack_of = np.empty(lengths.size, dtype=np.int64)
    shard_of[packs.sequence_indices] = pack_index % job.num_output_shards
    pack_of[packs.sequence_indices] = pack_index // job.num_output_shards
    slot_of[packs.sequence_indices] = packs.slot_of_entries
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    split = lambda values: {g: values[bounds[i]:bounds[i + 1]]  # noqa: E731
                            for i, g in enumerate(groups)}
    return Routing(shard=split(shard_of), pack=split(pack_of), slot=split(slot_of),
                   summary=summary)


def route_group(job: PackingJob, group: int, sequences: dict, routing: Routing):
    """Cuts one group's sequences (compact) by output shard: yields (shard, chunk)."""
    shard_of, pack_of, slot_of = (routing.shard[group], routing.pack[group],
                                  routing.slot[group])
    count = sequences["lengths"].size
    if shard_of.size != count:
        raise ValueError(f"group {group}: read {count} sequences the second "
                         f"time, {shard_of.size} the first (did the input change?)")
    order = np.argsort(shard_of, kind="stable")
    bounds = np.searchsorted(shard_of[order], np.arange(shard_of.max() + 2))
    for shard in np.flatnonzero(np.diff(bounds)):
        rows = order[bounds[shard]:bounds[shard + 1]]
        yield int(shard), (group, take(job.pack_spec, sequences, rows), pack_of[rows],
                           slot_of[rows])


def write_shard(job: PackingJob, shard: int, chunks, temporary_suffix: str) -> dict:
    """Lays out and writes one output shard under a temporary name."""
    chunks = sorted(chunks, key=lambda chunk: chunk[0])  # by group: deterministic
    sequences = concatenate([c[1] for c in chunks])
    pack = np.concatenate([c[2] for c in chunks])
    slot = np.concatenate([c[3] for c in chunks])
    order = np.lexsort((slot, pack))
    pack_ids, depths = np.unique(pack[order], return_counts=True)
    if pack_ids.size and not np.array_equal(pack_ids, np.arange(pack_ids.size)):
        raise RuntimeError(f"shard {shard}: packs are missing sequences")
    path = job.shard_path(shard) + temporary_suffix
    _write_packs(job, path, sequences, PackAssignment.from_sequences_per_pack(depths, order))
    return {"shard": shard, "path": path, "records": int(pack_ids.size),
            "sequences": int(sequences["lengths"].size),
            "tokens": int(sequences["input_ids"].size)}


def _write_packs(job: PackingJob, path: str, sequences: dict,
                 packs: PackAssignment) -> None:
    """Lays out and writes packs of compact `sequences` to one file, atomically."""
    try:
        with RecordWriter(path) as writer:
            # A few thousand packs at a time: small temporaries, fast.
            for first in range(0, len(packs), WRITE_CHUNK_PACKS):
                chunk = packs.take(np.arange(first, min(first + WRITE_CHUNK_PACKS,
                                                        len(packs))))
                writer.write_arrays(pack_records(sequences, chunk, job.packed_format,
                                                 narrow=True))
    except OSError as error:  # a full disk, a folder gone, ...
        raise OSError(f"--output_dir: cannot write {path}: {_write_failure(path, error)}"
                      ) from None


def _write_failure(path: str, error: OSError) -> str:
    """Why a write failed, without the path (the message names it)."""
    reason = error.strerror or str(error)
    # TensorFlow's message names the file it wrote: "PATH.tmp-X; No space ..."
    if reason.startswith(path) and "; " in reason:
        reason = reason.split("; ", 1)[1]
    return reason


def pack_group_locally(job: PackingJob, group: int, files, num_groups: int,
                       temporary_suffix: str) -> dict:
    """Scope "groups": reads, plans and writes one group of shards on its own.

    The group owns output shards group, group + G, ...; its packs are dealt
    to them in turn. Returns the shards written and the group's summary.
    """
    sequences = read_group(job, files, lengths_only=False)
    packs, summary = plan_packs(job, sequences["lengths"], sequences["prediction_counts"])
    owned = list(range(group, job.num_output_shards, num_groups))
    results = []
    paths = []  # written or being written
    try:
        for turn, shard in enumerate(owned):
            shard_packs = packs.take(np.arange(turn, len(packs), len(owned)))
            paths.append(job.shard_path(shard) + temporary_suffix)
            _write_packs(job, paths[-1], sequences, shard_packs)
            results.append({"shard": shard, "path": paths[-1], "records": len(shard_packs),
                            "sequences": shard_packs.sequence_indices.size})
    except BaseException:
        # This worker's own leftovers, the shard it was writing included,
        # whoever submitted the run and wherever it runs (the launching process
        # also cleans up after a failed run).
        filesystem.remove_if_exists(paths)
        raise
    return {"shards": results, "summary": summary}


def combine_group_summaries(summaries) -> dict:
    """The run's summary from the groups' (sums; the plans listed)."""
    total = {key: sum(s[key] for s in summaries)
             for key in ("sequences_in", "packs", "real_tokens", "padding_tokens",
                         "replanned_for_masked_overflow")}
    total["plan"] = {
        "algorithm": summaries[0]["plan"]["algorithm"],
        "solve_time_seconds": max(s["plan"]["solve_time_seconds"] for s in summaries),
        "groups": len(summaries),
        "lp_lower_bound_packs": sum(s["plan"]["lp_lower_bound_packs"] or 0
                                    for s in summaries) or None,
    }
    total["planning_seconds"] = max(s["planning_seconds"] for s in summaries)
    return total


def finalize(job: PackingJob, shard_results, summary: dict,
             temporary_suffix: str) -> dict:
    """Puts a complete run in place: renames every shard, then writes packing_stats.json.

    An earlier run's output in the folder is replaced only now: its stats go
    first (a folder without stats is not a finished run), then shards of its
    that this run does not overwrite (another --num_output_shards). Safe to
    run again after a failure part-way (runners retry failed steps).
    """
    shard_results = sorted(shard_results, key=lambda r: r["shard"])
    written_sequences = sum(r["sequences"] for r in shard_results)
    summary = dict(summary)
    summary["efficiency"] = summary["real_tokens"] / max(
        1, summary["packs"] * job.max_seq_length)
    summary["packing_factor"] = summary["sequences_in"] / max(1, summary["packs"])
    if written_sequences != summary["sequences_in"]:
        raise RuntimeError(f"wrote {written_sequences} sequences, read "
                           f"{summary['sequences_in']}")
    stats_path = os.path.join(job.output_dir, PACKING_STATS_FILE)
    filesystem.remove_if_exists([stats_path])
    for result in shard_results:
        final_path = result["path"][:-len(temporary_suffix)]
        # A temporary name is this run's alone: when it is gone and the final
        # name exists, an earlier attempt of this step (a runner's retry)
        # renamed it already.
        if filesystem.exists(result["path"]) or not filesystem.exists(final_path):
            filesystem.rename(result["path"], final_path)
    written = {r["shard"] for r in shard_results}
    for shard in range(job.num_output_shards):
        if shard not in written:  # fewer packs than shards: an empty shard
            filesystem.write_empty_file(job.shard_path(shard))
            shard_results.append({"shard": shard, "records": 0})
    ours = {os.path.basename(job.shard_path(shard))
            for shard in range(job.num_output_shards)}
    for name in filesystem.listdir(job.output_dir):
        if is_output_file(name) and name not in ours and name != PACKING_STATS_FILE:
            filesystem.remove(os.path.join(job.output_dir, name))
    shard_results.sort(key=lambda r: r["shard"])
    packed_format = job.packed_format
    stats = {
        "sequences_out": written_sequences,
        **summary,
        "num_output_shards": job.num_output_shards,
        "records_per_shard": [r["records"] for r in shard_results],
        "max_seq_length": job.max_seq_length,
        "max_predictions_per_seq": job.max_predictions_per_seq,
        "max_masked_tokens": packed_format.max_masked_tokens,
        "max_sequences_per_pack": job.max_sequences_per_pack,
        "algorithm": job.algorithm,
        "scope": job.scope,
        "files_per_group": job.files_per_group,
        "seed": job.seed,
        "input_files": list(job.input_files),
    }
    write_json_atomically(stats_path, stats)
    return stats


# ------------------------------------------------------------------ Beam
def uses_tensorflow(job: PackingJob) -> bool:
    """Whether workers need TensorFlow: for files that are not local (its
    filesystems) or when the C record codec was not built."""
    paths = (*job.input_files, job.output_dir)
    return not all(map(uses_record_codec, paths))


def prepare_worker(job: PackingJob) -> None:
    """Imports TensorFlow in a worker if the job needs it, then freezes the
    interpreter's objects.

    TensorFlow's import leaves about a million long-lived objects to the
    cyclic garbage collector. Frozen (`gc.freeze`), they are skipped by every
    later collection, including the one at interpreter exit, which otherwise
    keeps a finished worker process alive for about two seconds while the
    pipeline waits for it. Frozen objects are still freed when their last
    reference goes.
    """
    if uses_tensorflow(job):
        from packed_bert_tf.data.records import tensorflow_records  # noqa: F401 - the import is the point
    gc.freeze()
    _no_huge_pages_for_numpy()


def _no_huge_pages_for_numpy() -> None:
    """Stops numpy asking for transparent huge pages (``madvise``) in this process.

    Where the kernel compacts memory to honour that request (``defrag`` set to
    ``madvise``, a common default), each fresh large array of a worker that
    has just read gigabytes of files costs direct compaction: measured here,
    1.3 s of system time to concatenate 400 MB, and about 3 CPU s of the 11
    that reading and writing 500,000 records take, against 0.3 s with plain
    pages.
    """
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _set_madvise_hugepage
    _set_madvise_hugepage(False)


class _WorkerDoFn(beam.DoFn):
    """A step that reads or writes records: `prepare_worker` once per worker."""

    def setup(self):
        prepare_worker(self.job)


class _PackGroup(_WorkerDoFn):
    def __init__(self, job, num_groups, temporary_suffix):
        self.job = job
        self.num_groups = num_groups
        self.temporary_suffix = temporary_suffix
        self.replanned = _replanned_counter()

    def process(self, group):
        index, files = group
        result = pack_group_locally(self.job, index, files, self.num_groups,
                                    self.temporary_suffix)
        self.replanned.inc(result["summary"]["replanned_for_masked_overflow"])
        yield result


class _ReadLengths(_WorkerDoFn):
    def __init__(self, job):
        self.job = job
        self.sequences = beam.metrics.Metrics.counter(_NAMESPACE, "sequences_read")

    def process(self, group):
        index, files = group
        lengths, masked = read_group(self.job, files, lengths_only=True)
        self.sequences.inc(int(lengths.size))
        yield index, lengths, masked


class _PlanPacks(beam.DoFn):
    """All groups' lengths (one element) -> the `Routing` of every sequence."""

    def __init__(self, job):
        self.job = job
        self.replanned = _replanned_counter()

    def process(self, group_lengths):
        routing = plan_routing(self.job, group_lengths)
        self.replanned.inc(routing.summary["replanned_for_masked_overflow"])
        yield routing


class _ReadAndRoute(_WorkerDoFn):
    def __init__(self, job):
        self.job = job

    def process(self, group, routing):
        index, files = group
        yield from route_group(self.job, index,
                               read_group(self.job, files, lengths_only=False), routing)


class _WriteShard(_WorkerDoFn):
    def __init__(self, job, temporary_suffix):
        self.job = job
        self.temporary_suffix = temporary_suffix
        self.packs = beam.metrics.Metrics.counter(_NAMESPACE, "packs_written")

    def process(self, shard_and_chunks):
        shard, chunks = shard_and_chunks
        result = write_shard(self.job, shard, list(chunks), self.temporary_suffix)
        self.packs.inc(result["records"])
        yield result


def _replanned_counter():
    """Sequences re-planned into new packs because their pack had more masked-LM
    predictions than the packed format's slots
    (`packed_bert_tf.packing.replan_overflowing_packs`)."""
    return beam.metrics.Metrics.counter(_NAMESPACE, "replanned_for_masked_overflow")


def _finalize_groups(group_results, job: PackingJob, temporary_suffix: str) -> dict:
    """Scope "groups": `finalize` over every group's shards and summary."""
    return finalize(job, [shard for result in group_results for shard in result["shards"]],
                    combine_group_summaries([result["summary"] for result in group_results]),
                    temporary_suffix)


def _finalize_global(shard_results, routing: Routing, job: PackingJob,
                     temporary_suffix: str) -> dict:
    """Scope "global": `finalize` over every shard, with the plan's summary."""
    return finalize(job, shard_results, routing.summary, temporary_suffix)


class PackPretrainingData(beam.PTransform):
    """PBegin -> one element: the stats dict, once every shard is in place.

    The run's temporary suffix is drawn here, in the process that builds the
    pipeline, and travels inside the steps: every worker writes under the same
    one, and the launching process knows what to clean up after a failure.
    """

    def __init__(self, job: PackingJob):
        super().__init__()
        self.job = job
        self.temporary_suffix = f"{TEMPORARY_MARKER}{uuid.uuid4().hex[:8]}"

    def expand(self, pipeline):
        job = self.job
        suffix = self.temporary_suffix
        groups = pipeline | "ListShardGroups" >> beam.Create(job.groups())
        if job.scope == "groups":
            num_groups = len(job.groups())
            return (groups
                    | "PackGroups" >> beam.ParDo(_PackGroup(job, num_groups, suffix))
                    | "GatherGroups" >> beam.combiners.ToList()
                    | "Finalize" >> beam.Map(_finalize_groups, job, suffix))
        routing = (groups
                   | "ReadLengths" >> beam.ParDo(_ReadLengths(job))
                   | "GatherLengths" >> beam.combiners.ToList()
                   | "PlanPacks" >> beam.ParDo(_PlanPacks(job)))
        written = (groups
                   | "ReadAndRoute" >> beam.ParDo(_ReadAndRoute(job),
                                                  beam.pvalue.AsSingleton(routing))
                   | "GroupByShard" >> beam.GroupByKey()
                   | "WriteShards" >> beam.ParDo(_WriteShard(job, suffix))
                   | "GatherShards" >> beam.combiners.ToList())
        return (written
                | "Finalize" >> beam.Map(_finalize_global, beam.pvalue.AsSingleton(routing),
                                         job, suffix))


def default_files_per_group(num_files: int, num_workers: int, scope: str = "global",
                            num_output_shards: int = 1) -> int:
    """Groups of files, never empty.

    Scope "global": a few groups per worker, for balance. Scope "groups": one
    group per worker (each group pays for a plan of its own, about as long as
    the global one), and no more groups than output shards.
    """
    if scope == "groups":
        return max(1, math.ceil(num_files / max(1, min(num_workers, num_output_shards))))
    return max(1, math.ceil(num_files / max(1, 4 * num_workers)))
