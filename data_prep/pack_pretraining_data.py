r"""Packs unpacked pre-training TFRecords into packed TFRecords (Apache Beam).

    python -m data_prep.pack_pretraining_data \
        --input_file='data/unpacked/part-*' --output_dir=data/packed \
        --max_seq_length=512 --max_predictions_per_seq=76 \
        --max_sequences_per_pack=3 --num_output_shards=8

Every other flag goes to Beam: by default Beam's local runner (FnApiRunner) in
multi-process mode on all cores; the same pipeline runs unchanged on Dataflow, Flink or
Spark with the standard Beam options (--runner, --project, ...), and through Beam's
portability framework (``--runner=PortableRunner --job_endpoint=HOST:PORT``; tested
with Beam's local job service and an SDK worker pool,
`data_prep.local_portable_runner`). Local paths are made absolute before the
pipeline is submitted: the workers run in folders of their own. Writes the
shards, then packing_stats.json (what training reads for the packing factor),
and prints a short report. Check the result with
``python -m data_prep.verify_packing``.

Every flag is checked before Beam starts. By default the tool prints what it
reads, a summary or one error line, none of Beam's or TensorFlow's logging
(``--verbosity=0`` brings it back; see `data_prep.tool_output`). Files are
written under temporary names (``*.tmp-*``) and get their final names only when
all are complete; SIGINT or SIGTERM stops the workers (or asks the job service
to cancel the job) and removes them, and a run removes those a killed run left. With ``--overwrite`` an earlier run's
output is replaced only once the new one is complete.
"""

import contextlib
import json
import logging as python_logging
import os
import re
import signal
import sys
import threading
import time

from absl import app, flags, logging

from data_prep import process_tree, tool_output
from packed_bert_tf import filesystem, output_files

FLAGS = flags.FLAGS
TOOL = "pack_pretraining_data"


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    # Required.
    flags.DEFINE_string("input_file", None,
                        "Unpacked TFRecords: a glob or comma-separated globs.")
    flags.DEFINE_string("output_dir", None, "Folder for the packed shards and stats.")

    # Other.
    flags.DEFINE_integer("num_output_shards", 8, "Number of packed TFRecord files.")
    flags.DEFINE_integer("max_seq_length", 512,
                         "Tokens per record. Must match data generation "
                         "(create_pretraining_data's --max_seq_length).")
    flags.DEFINE_integer("max_predictions_per_seq", 76,
                         "Masked-LM slots per unpacked record. Must match data "
                         "generation (create_pretraining_data's "
                         "--max_predictions_per_seq).")
    # Aliases, as packing_report takes them.
    flags.DEFINE_alias("max_sequence_length", "max_seq_length")
    flags.DEFINE_alias("max_predictions_per_sequence", "max_predictions_per_seq")
    flags.DEFINE_integer("max_sequences_per_pack", 3,
                         "Cap on sequences per pack (the paper's packing depth).")
    flags.DEFINE_integer("max_masked_tokens", None,
                         "Masked-LM slots per pack. Default: max_predictions_per_seq"
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
                      "Replace the shards and stats of an earlier run in --output_dir "
                      "(once the new ones are complete).")


def _beam_options(pipeline_args, quiet: bool):
    """Beam's options: the local runner in multi-process mode on every core
    unless told otherwise.

    Raises ValueError for a flag that is neither the tool's nor Beam's (Beam
    would drop it with a warning), and for a PortableRunner whose job service
    does not answer (`_check_job_endpoint`).
    """
    from apache_beam.options.pipeline_options import (
        PipelineOptions,
        PortableOptions,
        StandardOptions,
    )

    args = list(pipeline_args)
    known = PipelineOptions([]).get_all_options()
    unknown = [name for name in PipelineOptions(args).get_all_options(
        retain_unknown_options=True) if name not in known]
    if unknown:
        raise ValueError(f"unknown flag --{unknown[0]} (neither {TOOL}'s nor a Beam "
                         f"pipeline option; see --helpfull)")
    positional = [a for a in args if not a.startswith("-")]
    if positional:
        raise ValueError(f"unexpected argument {positional[0]!r}")
    if not any(a.startswith("--runner") for a in args):
        # The local runner itself (DirectRunner would first try to download
        # the Prism runner binary from the internet).
        args.append("--runner=FnApiRunner")
    options = PipelineOptions(args)
    runner = options.view_as(StandardOptions).runner or ""
    if runner in LOCAL_RUNNERS:  # all cores of this machine
        if not any(a.startswith("--direct_running_mode") for a in args):
            args.append("--direct_running_mode=multi_processing")
        if not any(a.startswith("--direct_num_workers") for a in args):
            args.append(f"--direct_num_workers={os.cpu_count() or 1}")
    elif runner.split(".")[-1] == "PortableRunner":
        _check_job_endpoint(options.view_as(PortableOptions))
    if quiet and not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=CRITICAL")
    return PipelineOptions(args)


#: Beam's runners in this process (the rest submit the pipeline elsewhere).
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "BundleBasedDirectRunner")


def _check_job_endpoint(options) -> None:
    """--runner=PortableRunner: the job service at --job_endpoint answers within
    --job_server_timeout seconds (Beam's option), else ValueError naming the flag.

    Without the check an address nobody serves fails after that timeout with
    gRPC's ``FutureTimeoutError``, and no --job_endpoint at all makes Beam
    start a Java job server in Docker.
    """
    import grpc

    endpoint = options.job_endpoint
    if not endpoint:
        raise ValueError("--runner=PortableRunner needs --job_endpoint=HOST:PORT, a "
                         "running Beam job service (see docs/pack_pretraining_data.md: "
                         "running the Beam tools on a cluster)")
    if endpoint == "embed":  # Beam's Python job service, in this process
        return
    timeout = options.job_server_timeout
    channel = grpc.insecure_channel(endpoint)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise ValueError(f"--job_endpoint={endpoint}: no job service answered within "
                         f"{timeout} s (--job_server_timeout)") from None
    finally:
        channel.close()


def _beam_error_message(error: Exception, pipeline_args=()) -> str:
    """The worker's one-line error out of a Beam failure (which quotes the
    worker's traceback), else the failure's first line; a service the runner
    could not reach is named with its flag among ``pipeline_args``
    (``--environment_config=HOST:PORT``, ...)."""
    text = str(error)
    unreachable = re.search(r'details = "(?:failed to connect to all addresses; )?(?:'
                            r'last error: )?(?:\w+: )?(?:ipv[46]:)?([^"]*)"', text)
    if unreachable and "StatusCode.UNAVAILABLE" in text:
        # gRPC: a service the runner needs (an SDK worker pool, ...) is not there.
        port = re.search(r":(\d+):", unreachable[1])
        named = [arg.split("=", 1)[0] for arg in pipeline_args
                 if port and "=" in arg and arg.endswith(f":{port[1]}")]
        return (f"{named[0] + ': ' if named else ''}the runner could not reach a service "
                f"it needs at {unreachable[1]}")
    found = re.findall(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", text, re.MULTILINE)
    if found:
        line = found[-1][1]
    else:
        line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return line.split(" [while running")[0].strip(" '\"")


def _list_dir(folder):
    """(name, path) of every file in a folder, sorted (Beam's FileSystems)."""
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(folder):
        return []
    (result,) = FileSystems.match([FileSystems.join(folder, "*")])
    return sorted((FileSystems.split(m.path)[1], m.path) for m in result.metadata_list)


def _remove(paths) -> int:
    from apache_beam.io.filesystems import FileSystems

    if paths:
        FileSystems.delete(list(paths))
    return len(paths)


def _make_output_dir(job) -> None:
    """Makes --output_dir, refusing one that holds an input: nothing of the
    folder a run replaces and cleans may be an input."""
    from apache_beam.io.filesystems import FileSystems

    if os.path.isfile(job.output_dir):
        raise ValueError(f"--output_dir {job.output_dir} is a file")
    output_files.check_folder_holds_no_input(
        job.output_dir, job.input_files, folder_flag="--output_dir",
        input_flag="--input_file")
    try:
        FileSystems.mkdirs(job.output_dir)
    except OSError as error:  # Beam: "already exists", or cannot
        if not FileSystems.exists(job.output_dir):
            raise ValueError(f"--output_dir {job.output_dir}: cannot create it "
                             f"({str(error).splitlines()[0]})") from None


def _prepare_output_dir(job, overwrite) -> int:
    """Checks --output_dir's files before any work (the run holds the folder's
    lock: no other run is writing there); returns the number of unfinished
    files of an interrupted earlier run it removed."""
    from packed_bert_tf.data.preparation import beam_packing

    names = _list_dir(job.output_dir)
    existing = [name for name, _ in names if beam_packing.is_output_file(name)]
    if existing and not overwrite:
        raise ValueError(f"--output_dir {job.output_dir} already holds {existing[0]} "
                         f"(and {len(existing) - 1} more); pass --overwrite to replace")
    # Killed runs (SIGKILL, power loss) leave unfinished files: never results.
    return _remove([path for name, path in names if beam_packing.is_temporary(name)])


def _job_from_flags(skipped: list[str]):
    """The packing job of the flags, every flag checked (ValueError naming it);
    side files the --input_file globs matched go to ``skipped``."""
    from packed_bert_tf.data.preparation import beam_packing

    for name in ("input_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise ValueError(f"--{name} is required")
    files = beam_packing.match_files(FLAGS.input_file, skipped=skipped)
    if FLAGS.files_per_group < 0:
        raise ValueError(f"--files_per_group must be >= 0, got {FLAGS.files_per_group}")
    workers = os.cpu_count() or 1
    return beam_packing.PackingJob(
        input_files=tuple(files), output_dir=filesystem.absolute_path(FLAGS.output_dir),
        num_output_shards=FLAGS.num_output_shards,
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        max_sequences_per_pack=FLAGS.max_sequences_per_pack,
        max_masked_tokens=FLAGS.max_masked_tokens, algorithm=FLAGS.algorithm,
        seed=FLAGS.seed, scope=FLAGS.packing_scope,
        files_per_group=FLAGS.files_per_group or beam_packing.default_files_per_group(
            len(files), workers, FLAGS.packing_scope, FLAGS.num_output_shards))


def _stop_on_signals(output_dir: str, temporary_suffix: str, submitted: list,
                     release_lock) -> None:
    """SIGINT and SIGTERM: stop the workers, remove this run's unfinished
    files, release the folder's lock, one line, exit 128 + signal.

    The workers are this process's children with the local runner; with a
    runner that submits the job to a service (``submitted`` then holds its
    `PipelineResult`), the service is asked to cancel the job, waiting at most
    `CANCEL_TIMEOUT_S` for its answer.

    Exits with ``os._exit``: Beam's gRPC threads are still running, and a
    normal interpreter exit under them aborts (``terminate called ...``).
    """
    def stop(signum, frame):
        del frame
        for other in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C: same end
            signal.signal(other, signal.SIG_IGN)
        try:
            say_and_clean(signum)
        finally:  # whatever failed on the way (a closed stderr, say): still end
            release_lock()
            os._exit(128 + signum)

    def say_and_clean(signum):
        # Beam's threads report the workers' end as exceptions, and the runner
        # logs what its workers log as Ctrl-C reaches them (CRITICAL, with a
        # KeyboardInterrupt traceback): none of it is for the user.
        python_logging.disable(python_logging.CRITICAL)
        stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
        threading.excepthook = lambda args: None
        cancelled = ""
        for result in submitted:  # a job a service runs: cancel it there
            answer = {}

            def cancel(result=result, answer=answer):
                try:
                    result.cancel()
                    answer["ok"] = True
                except Exception as error:  # noqa: BLE001 - said in the one line
                    answer["error"] = f"{type(error).__name__}"

            canceller = threading.Thread(target=cancel, daemon=True)
            canceller.start()
            canceller.join(CANCEL_TIMEOUT_S)
            # Cancelling is the service's to do: Beam's Python job service
            # acknowledges it without stopping the job (files it writes later
            # stay unfinished until the next run into the folder removes them).
            if "ok" in answer:
                cancelled = "asked the job service to cancel the job; "
            elif "error" in answer:
                cancelled = f"the job service refused the cancel ({answer['error']}); "
            else:
                cancelled = (f"the job service did not answer the cancel within "
                             f"{CANCEL_TIMEOUT_S} s; ")
        process_tree.kill_descendants()
        time.sleep(0.2)  # let the killed workers' last writes land before cleaning
        try:
            removed = _remove([path for name, path in _list_dir(output_dir)
                               if temporary_suffix in name])
            outcome = (f"removed its {removed} unfinished files from {output_dir}"
                       if removed else f"nothing written to {output_dir}")
        except Exception as error:  # noqa: BLE001 - still exit with one line
            outcome = f"could not remove its unfinished files ({error})"
        sys.stdout.flush()
        if stderr.isatty():  # the line replaces the progress line (and ^C)
            stderr.write("\r\x1b[K")
        stderr.write(f"{TOOL}: interrupted by {signal.Signals(signum).name}; "
                     f"{cancelled}{outcome}\n")
        stderr.flush()
        process_tree.kill_descendants()  # any worker Beam's threads started meanwhile

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


#: How long an interrupted run waits for the job service to cancel its job.
CANCEL_TIMEOUT_S = 10


@contextlib.contextmanager
def _written_so_far(output_dir: str, temporary_suffix: str, poll_seconds: float = 1.0):
    """Shows the packed MB the workers have written so far (this run's
    unfinished files in ``output_dir``) while the pipeline runs (`Progress`:
    nothing when it ends within seconds)."""
    from packed_bert_tf.tool_progress import Progress

    stop = threading.Event()

    def watch(progress):
        while not stop.wait(poll_seconds):
            try:
                written = sum(os.path.getsize(path) for name, path in _list_dir(output_dir)
                              if temporary_suffix in name and os.path.isfile(path))
            except OSError:  # renamed or removed meanwhile: next time
                continue
            progress.update(written / 1e6)

    with Progress("packing, written", unit="MB") as progress:
        watcher = threading.Thread(target=watch, args=(progress,), daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()


def _size(paths) -> str:
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    return f"{total / 1e6:,.1f} MB" if total else "remote"


@tool_output.one_line_on_interrupt(TOOL)
def main(argv):
    quiet = tool_output.quiet_unless_verbose()
    # No TensorFlow here (seconds to import): only the workers read and write
    # records; files are found and managed with Beam's FileSystems.
    skipped = []
    with contextlib.ExitStack() as stack:
        try:
            job = _job_from_flags(skipped)
            options = _beam_options(argv[1:], quiet)
            _make_output_dir(job)
            release_lock = stack.enter_context(
                output_files.output_lock(job.output_dir, flag="--output_dir"))
            removed = _prepare_output_dir(job, FLAGS.overwrite)
        except ValueError as error:
            sys.exit(f"{TOOL}: {error}")
        _pack(job, options, argv, skipped, removed, release_lock)


def _pack(job, options, argv, skipped: list[str], removed: int, release_lock) -> None:
    """Runs the pipeline of a checked job (the output folder locked) and prints
    its report."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.runner import PipelineState

    from packed_bert_tf.data.preparation import beam_packing

    transform = beam_packing.PackPretrainingData(job)
    if skipped:
        print(f"skipped {', '.join(os.path.basename(p) for p in skipped)} (not records)")
    if removed:
        print(f"removed {removed} unfinished files of an interrupted run in "
              f"{job.output_dir}")
    print(f"packing {len(job.input_files)} files ({_size(job.input_files)}) into "
          f"{job.num_output_shards} shards in {job.output_dir} ...", flush=True)
    logging.info("Packing %d files into %d shards in %s: %s", len(job.input_files),
                 job.num_output_shards, job.output_dir, job)
    start = time.perf_counter()
    submitted = []  # the job a service runs (not the local runner's): to cancel
    _stop_on_signals(job.output_dir, transform.temporary_suffix, submitted, release_lock)
    try:
        with _written_so_far(job.output_dir, transform.temporary_suffix):
            pipeline = beam.Pipeline(options=options)
            _ = pipeline | "Pack" >> transform
            result = pipeline.run()  # the local runner returns once done
            if (options.view_as(StandardOptions).runner or "") not in LOCAL_RUNNERS:
                submitted.append(result)
            state = result.wait_until_finish()
        if state != PipelineState.DONE:
            raise RuntimeError(f"the pipeline ended in state {state}")
    except Exception as error:  # noqa: BLE001 - Beam wraps worker errors
        _remove([path for name, path in _list_dir(job.output_dir)
                 if transform.temporary_suffix in name])
        sys.exit(f"{TOOL}: {_beam_error_message(error, argv[1:])}")

    from apache_beam.io.filesystems import FileSystems

    from packed_bert_tf.data.records.record_format import PACKING_STATS_FILE

    with FileSystems.open(FileSystems.join(job.output_dir, PACKING_STATS_FILE)) as f:
        stats = json.loads(f.read())
    print(f"packed {stats['sequences_in']:,} sequences into {stats['packs']:,} packs "
          f"({job.num_output_shards} shards in {job.output_dir}) in "
          f"{time.perf_counter() - start:.1f} s")
    print(f"efficiency {100 * stats['efficiency']:.3f} %, packing factor "
          f"{stats['packing_factor']:.4f}, {stats['padding_tokens']:,} padding tokens, "
          f"{stats['replanned_for_masked_overflow']} sequences re-planned for masked-LM "
          f"overflow; plan ({stats['plan']['algorithm']}) in "
          f"{stats['plan']['solve_time_seconds']:.2f} s")


if __name__ == "__main__":
    import functools

    from packed_bert_tf.command_line import parse_flags

    define_flags()
    # Our flags are absl's; everything else is a Beam pipeline option.
    app.run(main, flags_parser=functools.partial(parse_flags, known_only=True))
