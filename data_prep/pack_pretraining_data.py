r"""Packs unpacked pre-training TFRecords into packed TFRecords (Apache Beam).

    python -m data_prep.pack_pretraining_data \
        --input_file='data/unpacked/part-*' --output_dir=data/packed \
        --max_sequence_length=512 --max_predictions_per_sequence=76 \
        --max_sequences_per_pack=3 --num_output_shards=8

Every other flag goes to Beam: by default Beam's local runner (FnApiRunner) in
multi-process mode on all cores; the same pipeline runs unchanged on Dataflow, Flink or
Spark with the standard Beam options (--runner, --project, ...). Writes the
shards, then packing_stats.json (what training reads for the packing factor),
and prints a short report. Check the result with
``python -m data_prep.verify_packing``.
"""

import json
import logging as logging_module
import os
import sys

from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    # Required.
    flags.DEFINE_string("input_file", None,
                        "Unpacked TFRecords: a glob or comma-separated globs.")
    flags.DEFINE_string("output_dir", None, "Folder for the packed shards and stats.")

    # Other.
    flags.DEFINE_integer("num_output_shards", 8, "Number of packed TFRecord files.")
    flags.DEFINE_integer("max_sequence_length", 512,
                         "Tokens per record. Must match data generation "
                         "(create_pretraining_data's --max_seq_length).")
    flags.DEFINE_integer("max_predictions_per_sequence", 76,
                         "Masked-LM slots per unpacked record. Must match data "
                         "generation (--max_predictions_per_seq).")
    flags.DEFINE_integer("max_sequences_per_pack", 3,
                         "Cap on sequences per pack (the paper's packing depth).")
    flags.DEFINE_integer("max_masked_tokens", None,
                         "Masked-LM slots per pack. Default: max_predictions_per_sequence"
                         " + max_sequences_per_pack - 1.")
    flags.DEFINE_string("algorithm", "optimal",
                        "Packing algorithm (see packed_bert_tf.packing.ALGORITHMS).")
    flags.DEFINE_integer("seed", 0, "Seed of the pack order and sequence placement.")
    flags.DEFINE_integer(
        "files_per_group", 0,
        "Input files per Beam work item (0: one group per worker with "
        "--packing_scope=groups, a few per worker with global). The output depends "
        "on the grouping: set it to reproduce a run on another machine.")
    flags.DEFINE_enum(
        "packing_scope", "groups", ["groups", "global"],
        "groups: each group of input shards (one per worker by default, see "
        "--files_per_group) is planned and written on its own: no shuffle, "
        "about 1.8x faster, a few packs more. global: one plan for the whole "
        "dataset, every sequence travels to its output shard.")
    flags.DEFINE_bool("overwrite", False,
                      "Replace the shards and stats of an earlier run in --output_dir.")


def _parse_flags(argv):
    # Our flags are absl's; everything else is a Beam pipeline option.
    return FLAGS(argv, known_only=True)


def _beam_options(pipeline_args):
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(pipeline_args)
    if not any(a.startswith("--runner") for a in args):
        # The local runner itself (DirectRunner would first try to download
        # the Prism runner binary from the internet).
        args.append("--runner=FnApiRunner")
    if not any(a.startswith("--direct_running_mode") for a in args):
        args.append("--direct_running_mode=multi_processing")
    if not any(a.startswith("--direct_num_workers") for a in args):
        args.append(f"--direct_num_workers={os.cpu_count() or 1}")
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        # Worker failures come back as the tool's own one-line error.
        args.append("--default_sdk_harness_log_level=CRITICAL")
    return PipelineOptions(args)


def _beam_error_message(error: Exception) -> str:
    """The library's one-line message out of a Beam worker failure."""
    text = str(error)
    line = text.splitlines()[0] if text else type(error).__name__
    for marker in ("RecordError: ", "ValueError: "):
        if marker in text:  # a worker's error, inside Beam's own message
            line = text.rsplit(marker, 1)[1].splitlines()[0]
            break
    return line.split(" [while running")[0].strip(" '\"")


def _list_dir(folder):
    """(name, path) of every file in a folder, sorted (Beam's FileSystems)."""
    from apache_beam.io.filesystems import FileSystems

    (result,) = FileSystems.match([FileSystems.join(folder, "*")])
    return sorted((FileSystems.split(m.path)[1], m.path) for m in result.metadata_list)


def _prepare_output_dir(job, overwrite):
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(job.output_dir):
        FileSystems.mkdirs(job.output_dir)
    existing = [(name, path) for name, path in _list_dir(job.output_dir)
                if name.startswith("part-") or name.startswith("packing_stats.json")]
    if existing and not overwrite:
        raise ValueError(f"--output_dir {job.output_dir} already holds {existing[0][0]} "
                         f"(and {len(existing) - 1} more); pass --overwrite to replace")
    if existing:
        FileSystems.delete([path for _, path in existing])


def main(argv):
    # No TensorFlow here (seconds to import): only the workers read and write
    # records; files are found and managed with Beam's FileSystems.
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from packed_bert_tf.data import pack_pipeline
    from packed_bert_tf.data.features import PACKING_STATS_FILE

    try:
        for name in ("input_file", "output_dir"):
            if not getattr(FLAGS, name):
                raise ValueError(f"--{name} is required")
        files = pack_pipeline.match_files(FLAGS.input_file)
        workers = os.cpu_count() or 1
        job = pack_pipeline.PackingJob(
            input_files=tuple(files), output_dir=FLAGS.output_dir,
            num_output_shards=FLAGS.num_output_shards,
            max_sequence_length=FLAGS.max_sequence_length,
            max_predictions_per_sequence=FLAGS.max_predictions_per_sequence,
            max_sequences_per_pack=FLAGS.max_sequences_per_pack,
            max_masked_tokens=FLAGS.max_masked_tokens, algorithm=FLAGS.algorithm,
            seed=FLAGS.seed, scope=FLAGS.packing_scope,
            files_per_group=FLAGS.files_per_group or pack_pipeline.default_files_per_group(
                len(files), workers, FLAGS.packing_scope, FLAGS.num_output_shards))
        from packed_bert_tf.packing import ALGORITHMS
        if job.algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm={job.algorithm!r} is not one of "
                             f"{', '.join(ALGORITHMS)}")
        _prepare_output_dir(job, FLAGS.overwrite)
    except ValueError as error:
        sys.exit(f"pack_pretraining_data: {error}")

    transform = pack_pipeline.PackPretrainingData(job)
    logging.info("Packing %d files into %d shards in %s", len(files),
                 job.num_output_shards, job.output_dir)
    # In-process workers log each failure with its traceback before Beam
    # raises it; the tool reports it as one line instead.
    logging_module.getLogger("apache_beam.runners.common").setLevel(logging_module.CRITICAL)
    try:
        with beam.Pipeline(options=_beam_options(argv[1:])) as pipeline:
            _ = pipeline | "Pack" >> transform
    except Exception as error:  # noqa: BLE001 - Beam wraps worker errors
        leftovers = [path for name, path in _list_dir(job.output_dir)
                     if transform.temporary_suffix in name]
        if leftovers:
            FileSystems.delete(leftovers)
        sys.exit(f"pack_pretraining_data: {_beam_error_message(error)}")

    with FileSystems.open(FileSystems.join(job.output_dir, PACKING_STATS_FILE)) as f:
        stats = json.loads(f.read())
    print(f"packed {stats['sequences_in']:,} sequences into {stats['packs']:,} packs "
          f"({job.num_output_shards} shards in {job.output_dir})")
    print(f"efficiency {100 * stats['efficiency']:.3f} %, packing factor "
          f"{stats['packing_factor']:.4f}, {stats['padding_tokens']:,} padding tokens, "
          f"{stats['replanned_for_masked_overflow']} sequences re-planned for masked-LM "
          f"overflow; plan ({stats['plan']['algorithm']}) in "
          f"{stats['plan']['solve_time_seconds']:.2f} s")


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=_parse_flags)
