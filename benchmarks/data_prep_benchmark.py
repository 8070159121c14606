r"""Data preparation benchmark: unpacked MLPerf-format TFRecords -> packed.

    python benchmarks/data_prep_benchmark.py --num_sequences=1000000 \
        --write_markdown=BENCHMARKS.md

Generates (once, cached in --work_dir) an unpacked dataset in the MLPerf format
(S = 512, P = 76) whose lengths follow the Wikipedia-512 histogram, then times
``python -m data_prep.pack_pretraining_data`` end to end as a user runs it
(process start, reading, planning, writing; Beam's default local runner
unless --beam_args say otherwise), then checks the result with
``python -m data_prep.verify_packing`` (not timed).

Before each timed run the input files are read once and the tool's modules
imported in a bare process, untimed (--warm_page_cache): the run then starts
as it does right after the data were written. This machine's kernel pages
out files untouched for a minute (DAMON reclaim) and reads them back at 30 to
150 MB/s, which would otherwise time the disk, differently on each run.

``--checkouts`` runs the tool from other checkouts of this repository too,
alternating with this one round by round (an A/B in one run, e.g. against a
clone of the code before a change); the fastest round of each is
reported, every round printed.

``--beam_args=portable`` runs the tool through Beam's portability framework,
as a cluster does: a job service and an SDK worker pool in processes of their
own (`data_prep.local_portable_runner`), started before the timed command and
stopped after it. The shards of every run are compared with the first run's
(byte-identical when the plan is the same: same --files_per_group).
"""

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

# Modules of benchmarks/, beside this script:
from common import (
    ENVIRONMENT,
    REPOSITORY,
    configuration,
    define_write_markdown,
    publish_section,
    section_header,
)

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_sequences", 1_000_000, "Unpacked sequences to generate.")
flags.DEFINE_integer("num_input_shards", 32, "Unpacked files.")
flags.DEFINE_integer("num_output_shards", 32, "Packed files.")
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_data_prep_benchmark",
                    "Where the generated data and the output go.")
flags.DEFINE_multi_string(
    "beam_args", ["default"],
    "One run per occurrence: space-separated Beam options for the packing tool, or "
    "'default' for none, 'portable' for a local job service and SDK worker pool "
    "(e.g. --beam_args=default --beam_args=--direct_running_mode=in_memory "
    "--beam_args=portable).")
flags.DEFINE_bool("verify", True, "Run verify_packing on the result.")
flags.DEFINE_bool("warm_page_cache", True, "Read the input files and import the tool's "
                  "modules (untimed) before each run.")
flags.DEFINE_list("checkouts", [], "Other checkouts of this repository (folders) to run "
                  "the tool from too, alternating with this one.")
flags.DEFINE_integer("rounds", 1, "Runs of each configuration, interleaved; the fastest "
                     "is reported.")
define_write_markdown()

# The flags that make a configuration: a subsection of this script's section each
# (`common.configuration`); --checkouts and --rounds repeat a configuration.
CONFIGURATION_FLAGS = ("num_sequences", "num_input_shards", "num_output_shards",
                       "beam_args", "warm_page_cache")


def generate(folder, num_sequences, num_shards):
    """Writes the unpacked dataset unless an identical one is there."""
    from packed_bert_tf.data.records import record_files, synthetic_records
    from packed_bert_tf.packing import load_histogram

    marker = os.path.join(folder, "generated.json")
    spec = {"num_sequences": num_sequences, "num_shards": num_shards, "version": 1}
    if os.path.exists(marker) and json.load(open(marker)) == spec:
        return
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    lengths = synthetic_records.lengths_from_histogram(
        load_histogram("wikipedia_512").counts, num_sequences, seed=0)
    for shard, rows in enumerate(np.array_split(np.arange(num_sequences), num_shards)):
        with record_files.RecordWriter(os.path.join(folder, f"part-{shard:05d}.tfrecord")) as w:
            for start in range(0, rows.size, 20_000):
                chunk = rows[start:start + 20_000]
                w.write_arrays(synthetic_records.unpacked_arrays(
                    lengths[chunk], max_seq_length=512, max_predictions_per_seq=76,
                    seed=shard * 1_000_003 + start))
    json.dump(spec, open(marker, "w"))


def shard_digests(folder) -> dict:
    """SHA-256 of every packed shard in a folder, by name."""
    digests = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("part-"):
            with open(os.path.join(folder, name), "rb") as f:
                digests[name] = hashlib.file_digest(f, "sha256").hexdigest()
    return digests


def warm_page_cache(unpacked: str, environment: dict) -> None:
    """The input files and the tool's modules read once, untimed."""
    for name in sorted(os.listdir(unpacked)):
        with open(os.path.join(unpacked, name), "rb") as f:
            while f.read(1 << 24):
                pass
    subprocess.run([sys.executable, "-c", "import apache_beam, scipy.optimize, "
                    "data_prep.pack_pretraining_data, "
                    "packed_bert_tf.data.preparation.beam_packing"],
                   env=environment, check=True, capture_output=True)


def checkout_label(folder: str) -> str:
    """The commit a checkout is at, and whether it has changes."""
    def git(*args):
        return subprocess.run(["git", "-C", folder, *args], capture_output=True,
                              text=True).stdout.strip()
    return git("rev-parse", "--short", "HEAD") + ("+" if git("status", "--porcelain",
                                                             "--untracked-files=no") else "")


def time_run(command, environment, packed):
    shutil.rmtree(packed, ignore_errors=True)
    start = time.perf_counter()
    result = subprocess.run(command, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        sys.exit(f"packing failed:\n{result.stderr[-3000:]}")
    return seconds, result


def main(argv):
    del argv
    unpacked = os.path.join(FLAGS.work_dir, "unpacked")
    packed = os.path.join(FLAGS.work_dir, "packed")
    start = time.perf_counter()
    generate(unpacked, FLAGS.num_sequences, FLAGS.num_input_shards)
    print(f"dataset ready in {time.perf_counter() - start:.1f} s", flush=True)
    checkouts = [REPOSITORY] + [os.path.abspath(folder) for folder in FLAGS.checkouts]
    labels = {folder: checkout_label(folder) for folder in checkouts}
    rows, verified, first_digests = [], "not run", None
    for beam_args in FLAGS.beam_args:
        extra = [] if beam_args == "default" else beam_args.split()
        best = {}  # checkout -> (seconds, stats, digests)
        scope_digests = None  # the first run of these arguments
        for round_index in range(FLAGS.rounds):
            for folder in checkouts:
                environment = dict(ENVIRONMENT, PYTHONPATH=folder)
                with contextlib.ExitStack() as stack:
                    if "portable" in extra:  # services up before the clock starts
                        from data_prep.local_portable_runner import local_portable_runner

                        services = stack.enter_context(local_portable_runner(
                            environment=environment))
                        at = extra.index("portable")
                        args = extra[:at] + services.pipeline_args + extra[at + 1:]
                    else:
                        args = extra
                    command = [sys.executable, "-m", "data_prep.pack_pretraining_data",
                               f"--input_file={unpacked}/part-*", f"--output_dir={packed}",
                               f"--num_output_shards={FLAGS.num_output_shards}",
                               "--max_seq_length=512", "--max_predictions_per_seq=76",
                               *args]
                    if FLAGS.warm_page_cache:
                        warm_page_cache(unpacked, environment)
                    seconds, result = time_run(command, environment, packed)
                stats = json.load(open(os.path.join(packed, "packing_stats.json")))
                digests = shard_digests(packed)
                first_digests = first_digests or digests
                scope_digests = scope_digests or digests
                print(result.stdout.strip())
                print(f"[{beam_args}, {labels[folder]}, round {round_index + 1}] "
                      f"{FLAGS.num_sequences:,} sequences in {seconds:.1f} s: "
                      f"{FLAGS.num_sequences / seconds:,.0f} sequences/s; shards identical "
                      f"to the first run's: {'yes' if digests == first_digests else 'no'}, "
                      f"to the first with these arguments: "
                      f"{'yes' if digests == scope_digests else 'no'}", flush=True)
                if digests != scope_digests:
                    sys.exit(f"[{beam_args}, {labels[folder]}] wrote other shards than "
                             "the first run with these arguments")
                if folder not in best or seconds < best[folder][0]:
                    best[folder] = (seconds, stats, digests)
        for folder in checkouts:
            seconds, stats, digests = best[folder]
            same = "yes" if digests == first_digests else "no"
            code = f" | {labels[folder]}" if len(checkouts) > 1 else ""
            rows.append(f"| {FLAGS.num_sequences:,} | {FLAGS.num_input_shards} | "
                        f"{FLAGS.num_output_shards} | {beam_args}{code} | {seconds:.1f} | "
                        f"{FLAGS.num_sequences / seconds:,.0f} | {stats['packs']:,} | "
                        f"{100 * stats['efficiency']:.3f} | "
                        f"{stats['plan']['solve_time_seconds']:.2f} | {same} |")
        if FLAGS.verify:  # the last run's output
            check = subprocess.run([sys.executable, "-m", "data_prep.verify_packing",
                                    f"--unpacked={unpacked}/part-*",
                                    f"--packed={packed}/part-*"],
                                   env=ENVIRONMENT, capture_output=True, text=True)
            verified = f"[{beam_args}] " + (check.stdout.strip() or check.stderr.strip()
                                              ).splitlines()[-1]
            print(verified)
    code_column = " code |" if len(checkouts) > 1 else ""
    text = "\n".join([
        *section_header(
            f"{FLAGS.num_sequences:,} sequences, {FLAGS.num_input_shards} shards in, "
            f"{FLAGS.num_output_shards} out; Beam: "
            + ", ".join(f"`{beam_args}`" for beam_args in FLAGS.beam_args)
            + ("" if FLAGS.warm_page_cache else "; page cache not warmed")),
        "Lengths drawn from the Wikipedia-512 histogram, S = 512, P = 76, D = 3, "
        "`--algorithm=optimal`; wall time of the whole command (process start, "
        "reading, planning, writing), runs one after the other"
        + (", input files read and modules imported just before each (untimed)"
           if FLAGS.warm_page_cache else "")
        + (f"; the fastest of {FLAGS.rounds} rounds" if FLAGS.rounds > 1 else "") + ".", "",
        "| sequences | input shards | output shards | beam args |" + code_column
        + " wall s | sequences/s | packs | efficiency % | plan s | shards = first run's |",
        "|---:|---:|---:|---|" + ("---|" if code_column else "")
        + "---:|---:|---:|---:|---:|---|",
        *rows, "", f"verify_packing: {verified}"])
    publish_section("data_prep_benchmark",
                    "Packing MLPerf-format TFRecords (`data_prep.pack_pretraining_data`)",
                    text, subsection=configuration(CONFIGURATION_FLAGS))


if __name__ == "__main__":
    app.run(main)
