r"""Streaming packing benchmark: our streaming packer against Grain's greedy
windows and the offline optimum, and the tf.data transformation's throughput.

    python benchmarks/streaming_packing_benchmark.py --write_markdown=BENCHMARKS.md

Two parts:

1. Efficiency (numpy/scipy only): ``--num_sequences`` lengths drawn (fixed
   seed) from each of the paper's histograms (``wikipedia_512`` at S = 512,
   ``squad_1_1_384`` at S = 384), packed with at most
   ``--max_sequences_per_pack`` sequences per pack by
   `packed_bert_tf.packing.streaming_packer.pack_stream` with each buffer size of
   ``--buffer_sizes``, by Grain's own first-fit and best-fit packers
   (``grain.experimental.FirstFitPackIterDataset`` and
   ``BestFitPackIterDataset``, the ``reference`` extra; run by
   ``grain_packers.py`` beside this script) with as many bins, and offline by
   the optimal plan of the whole sample's histogram, with the LP bound.
   Packs, efficiency, gap to the LP bound, waits, and the time: of the
   decision alone for ours and the offline plan (which sequences share a
   pack; no data moves), of Grain's packer on one-byte tokens for Grain
   (Grain decides as it copies; about 0.1 ms a sequence here, so the Grain
   rows take most of this part's time).
2. Throughput (TensorFlow, skipped by ``--skip_throughput``):
   `packed_bert_tf.data.inputs.pack_dataset.pack_dataset` on synthetic MLPerf
   pre-training examples (S = 512, P = 76, D = 3) held in memory, against
   the same source without it, both batched by 32 and iterated to the end,
   alternately, twice; the best of each. The transformation's own rate is
   what it adds to the time per example: 1 / (1/packed - 1/source).

Prints the tables; with --write_markdown, replaces the subsection of each part
in this benchmark's section of that file (``efficiency``, and ``throughput``
unless the throughput is skipped). Exits non-zero (after writing) when a target is missed.
"""

import importlib.metadata
import importlib.util
import os
import sys
import time

import numpy as np
from absl import app, flags

from packed_bert_tf.data.records.synthetic_records import lengths_from_histogram, unpacked_arrays
from packed_bert_tf.packing import histogram_from_lengths, load_histogram, pack_histogram
from packed_bert_tf.packing.assign import assign_sequences
from packed_bert_tf.packing.streaming_packer import pack_stream

# Modules of benchmarks/, beside this script:
from common import (
    define_write_markdown,
    publish_section,
    section_header,
)
from grain_packers import grain_pack

FLAGS = flags.FLAGS
define_write_markdown()
flags.DEFINE_integer("num_sequences", 1_000_000,
                     "Lengths drawn from each histogram for the efficiency table.")
flags.DEFINE_list("buffer_sizes", ["1000", "10000"],
                  "Buffer sizes of the streaming packer (and bins of the greedy windows).")
flags.DEFINE_integer("max_sequences_per_pack", 3, "D: at most this many sequences per pack.")
flags.DEFINE_integer("throughput_examples", 50_000,
                     "Distinct synthetic examples held in memory for the tf.data throughput.")
flags.DEFINE_integer("throughput_repeats", 20,
                     "The throughput's source repeats its examples this many times.")
flags.DEFINE_bool("skip_throughput", False, "Skip the tf.data throughput (no TensorFlow).")

EFFICIENCY_FLAGS = ("num_sequences", "buffer_sizes", "max_sequences_per_pack")
THROUGHPUT_FLAGS = ("throughput_examples", "throughput_repeats")
SEED = 0  # of the drawn lengths and the synthetic examples
HISTOGRAMS = ("wikipedia_512", "squad_1_1_384")  # S: the histogram's own length
# (histogram, buffer size) -> least efficiency of our streaming packer (the issue's targets)
EFFICIENCY_TARGETS = {("wikipedia_512", 10_000): 0.995, ("squad_1_1_384", 10_000): 0.980}
# The throughput part: the pre-training example of MLPerf at S = 512.
THROUGHPUT_HISTOGRAM = "wikipedia_512"
THROUGHPUT_S, THROUGHPUT_P, THROUGHPUT_D = 512, 76, 3
THROUGHPUT_BUFFER, THROUGHPUT_BATCH, THROUGHPUT_ROUNDS = 10_000, 32, 2
THROUGHPUT_TARGET = 100_000  # sequences/s of the transformation itself
STREAMING, FIRST_FIT, BEST_FIT = "streaming (ours)", "Grain first-fit", "Grain best-fit"
OFFLINE, LP_BOUND = "offline optimal plan", "LP bound"


# ------------------------------------------------------------------ part 1
def check_packs(packing, lengths, max_sequence_length, max_sequences_per_pack):
    """Raises AssertionError unless every sequence is in exactly one pack that fits."""
    assignment = packing.assignment
    assert np.array_equal(np.sort(assignment.sequence_indices), np.arange(lengths.size)), \
        "a sequence is missing or packed twice"
    assert assignment.sum_per_pack(lengths[assignment.sequence_indices]).max() \
        <= max_sequence_length, "a pack holds more than S tokens"
    assert assignment.sequences_per_pack.max() <= max_sequences_per_pack, \
        "a pack holds more than D sequences"


def streaming_row(name, packer, buffer_size, run, lengths, max_sequence_length,
                  max_sequences_per_pack, lp_bound_packs):
    """Runs one stream packer (timed), checks its packs, and makes its table row."""
    start = time.perf_counter()
    packing = run()
    seconds = time.perf_counter() - start
    check_packs(packing, lengths, max_sequence_length, max_sequences_per_pack)
    waits = packing.waits
    efficiency = packing.efficiency(lengths, max_sequence_length)
    target = EFFICIENCY_TARGETS.get((name, buffer_size)) if packer == STREAMING else None
    row = dict(histogram=name, S=max_sequence_length, buffer=f"{buffer_size:,}",
               packer=packer, packs=packing.num_packs, efficiency=efficiency,
               gap=packing.num_packs - lp_bound_packs, mean_wait=float(waits.mean()),
               max_wait=int(waits.max()), seconds=seconds,
               rate=lengths.size / seconds,
               target="" if target is None else f">= {100 * target:.1f} %",
               met="" if target is None else ("yes" if efficiency >= target else "NO"))
    print(format_row(row), flush=True)
    return row


def offline_rows(name, lengths, max_sequence_length, max_sequences_per_pack):
    """The optimal plan of the sample's histogram (timed with the assignment of
    every sequence to a pack), and the LP bound's row."""
    start = time.perf_counter()
    plan = pack_histogram(histogram_from_lengths(lengths, max_sequence_length),
                          max_sequence_length, max_sequences_per_pack, "optimal")
    assignment = assign_sequences(lengths, plan, seed=SEED)
    seconds = time.perf_counter() - start
    assert len(assignment) == plan.num_packs
    tokens = int(lengths.sum())
    common = dict(histogram=name, S=max_sequence_length, buffer="all", mean_wait=None,
                  max_wait=None, target="", met="")
    offline = dict(common, packer=OFFLINE, packs=plan.num_packs, efficiency=plan.efficiency,
                   gap=plan.num_packs - plan.lp_lower_bound_packs, seconds=seconds,
                   rate=lengths.size / seconds)
    bound = dict(common, packer=LP_BOUND, packs=plan.lp_lower_bound_packs,
                 efficiency=tokens / (plan.lp_lower_bound * max_sequence_length),
                 gap=0, seconds=None, rate=None, lp_fractional=plan.lp_lower_bound)
    for row in (offline, bound):
        print(format_row(row), flush=True)
    return offline, bound


def efficiency_rows(num_sequences, buffer_sizes, max_sequences_per_pack):
    rows = []
    for name in HISTOGRAMS:
        histogram = load_histogram(name)
        S, D = histogram.max_sequence_length, max_sequences_per_pack
        lengths = lengths_from_histogram(histogram.counts, num_sequences, seed=SEED)
        offline, bound = offline_rows(name, lengths, S, D)
        for buffer_size in buffer_sizes:
            runs = ((STREAMING, lambda: pack_stream(lengths, S, D, buffer_size=buffer_size)),
                    (FIRST_FIT, lambda: grain_pack(lengths, S, D, buffer_size,
                                                   best_fit=False)),
                    (BEST_FIT, lambda: grain_pack(lengths, S, D, buffer_size,
                                                  best_fit=True)))
            for packer, run in runs:
                rows.append(streaming_row(name, packer, buffer_size, run, lengths, S, D,
                                          bound["packs"]))
        rows += [offline, bound]
    return rows


def _dash(value, form):
    return "-" if value is None else format(value, form)


def format_row(row) -> str:
    return (f"| {row['histogram']} | {row['S']} | {row['buffer']} | {row['packer']} | "
            f"{row['packs']:,} | {100 * row['efficiency']:.3f} | {row['gap']:,} | "
            f"{_dash(row['mean_wait'], ',.0f')} | {_dash(row['max_wait'], ',')} | "
            f"{_dash(row['seconds'], '.2f')} | {_dash(row['rate'], ',.0f')} | "
            f"{row['target']} | {row['met']} |")


# ------------------------------------------------------------------ part 2
def throughput_source(num_examples, repeats):
    """The in-memory source dataset of unpacked examples, and its real tokens."""
    import tensorflow as tf

    lengths = lengths_from_histogram(load_histogram(THROUGHPUT_HISTOGRAM).counts,
                                     num_examples, seed=SEED)
    arrays = unpacked_arrays(lengths, max_seq_length=THROUGHPUT_S,
                             max_predictions_per_seq=THROUGHPUT_P, seed=SEED)
    # As `parse_records` gives them: int64 on disk, int32 in the pipeline.
    arrays = {name: value.astype(np.int32) if value.dtype == np.int64 else value
              for name, value in arrays.items()}
    tokens = int(np.count_nonzero(arrays["input_mask"])) * repeats
    return tf.data.Dataset.from_tensor_slices(arrays).repeat(repeats), tokens


def iterate(dataset):
    """Iterates a batched dataset to its end: (rows, wall s, process CPU s)."""
    wall, cpu = time.perf_counter(), time.process_time()
    rows = 0
    for batch in dataset:
        rows += int(batch["input_ids"].shape[0])
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def measure_throughput(num_examples, repeats):
    from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly, pack_dataset

    source, tokens = throughput_source(num_examples, repeats)
    examples = num_examples * repeats
    pipelines = {
        "source": source.batch(THROUGHPUT_BATCH),
        "packed": pack_dataset(source, max_sequence_length=THROUGHPUT_S,
                               packing=PackOnTheFly(max_sequences_per_pack=THROUGHPUT_D,
                                                    buffer_size=THROUGHPUT_BUFFER),
                               ).batch(THROUGHPUT_BATCH),
    }
    load_before = os.getloadavg()[0]
    best = {}
    for attempt in range(THROUGHPUT_ROUNDS):
        for kind, dataset in pipelines.items():
            rows, seconds, cpu = iterate(dataset)
            print(f"throughput, round {attempt + 1}, {kind}: {rows:,} rows, {seconds:.2f} s, "
                  f"{examples / seconds:,.0f} examples/s, {cpu:.2f} CPU s", flush=True)
            if kind not in best or seconds < best[kind]["seconds"]:
                best[kind] = dict(rows=rows, seconds=seconds, cpu_seconds=cpu)
    source_rate = examples / best["source"]["seconds"]
    packed_rate = examples / best["packed"]["seconds"]
    extra = 1 / packed_rate - 1 / source_rate
    transformation = 1 / extra if extra > 0 else None
    packs = best["packed"]["rows"]
    assert best["source"]["rows"] == examples, best["source"]["rows"]
    return dict(examples=examples, source_rate=source_rate, packed_rate=packed_rate,
                transformation=transformation, packs=packs,
                efficiency=tokens / (packs * THROUGHPUT_S),
                source_cpu=best["source"]["cpu_seconds"],
                packed_cpu=best["packed"]["cpu_seconds"],
                source_seconds=best["source"]["seconds"],
                packed_seconds=best["packed"]["seconds"],
                met="yes" if transformation and transformation >= THROUGHPUT_TARGET else "NO",
                load=(load_before, os.getloadavg()[0]))


# ------------------------------------------------------------------ report
def efficiency_markdown(rows, num_sequences, max_sequences_per_pack) -> list[str]:
    D = max_sequences_per_pack
    grain_version = importlib.metadata.version("grain")
    bounds = [r for r in rows if r["packer"] == LP_BOUND]
    return [
        f"{num_sequences:,} lengths drawn (seed {SEED}) from each histogram, packed in "
        f"stream order with at most {D} sequences per pack. Streaming (ours): "
        "`pack_stream(lengths, S, D, buffer_size=B)` (default `max_wait` = 2 B). Grain "
        f"first-fit / best-fit: Grain {grain_version}'s own "
        "`grain.experimental.FirstFitPackIterDataset` / `BestFitPackIterDataset` with "
        "`num_packing_bins=B`, `max_sequences_per_bin=D`, `shuffle_bins=False`, on "
        "elements of one int8 feature of each sequence's length "
        "(`benchmarks/grain_packers.py`); "
        "a window is emitted only when every one of its B bins holds a sequence, so the "
        "greedy baselines have at least as many sequences in flight as our buffer "
        f"(between B and {D} B when they emit; ours holds at most B).",
        "",
        "Offline optimal plan: `pack_histogram(histogram_from_lengths(lengths, S), S, D, \"optimal\")` on "
        "the whole sample, timed with `assign_sequences` (concrete packs, as the "
        "streaming rows make). LP bound: ceil of the plan's LP lower bound in packs; its "
        "efficiency is total tokens / (LP bound x S) with the fractional bound "
        + ", ".join(f"{r['histogram']} {r['lp_fractional']:,.2f}" for r in bounds) + ".",
        "",
        "Gap: packs above the LP bound. Waits: later sequences read while a sequence "
        "waited for its pack to be emitted (`StreamPacking.waits`). Time: wall seconds, "
        "one run, of the decision alone for ours and the offline plan (which sequences "
        "share a pack; no data moves) and of Grain's packer for Grain (it decides as it "
        "copies the sequences' one-byte tokens into its bins); sequences / s = "
        "sequences / that time. Every row's packs are checked: each "
        "sequence exactly once, at most S tokens and D sequences a pack.",
        "",
        "| histogram | S | buffer B | packer | packs | efficiency % | gap to LP bound, "
        "packs | mean wait | max wait | time s | sequences / s | target | met |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
        *(format_row(r) for r in rows),
    ]


def throughput_markdown(result, num_examples, repeats) -> list[str]:
    cores = os.cpu_count()
    transformation = result["transformation"]
    return [
        f"{num_examples:,} synthetic MLPerf pre-training examples (S = {THROUGHPUT_S}, "
        f"P = {THROUGHPUT_P}; lengths from `{THROUGHPUT_HISTOGRAM}`, seed {SEED}) in "
        "memory, int64 features cast to int32 as `parse_records` gives them: "
        f"`Dataset.from_tensor_slices(arrays).repeat({repeats})`, "
        f"{result['examples']:,} examples. (a) the source alone, "
        f"`.batch({THROUGHPUT_BATCH})`; (b) the source, `pack_dataset(..., "
        f"max_sequence_length={THROUGHPUT_S}, packing=PackOnTheFly("
        f"max_sequences_per_pack={THROUGHPUT_D}, buffer_size={THROUGHPUT_BUFFER}))` "
        "(default M = P + D - 1 = "
        f"{THROUGHPUT_P + THROUGHPUT_D - 1}), `.batch({THROUGHPUT_BATCH})`. Each iterated "
        f"to its end in Python, in one process, alternately, {THROUGHPUT_ROUNDS} times; "
        f"the best of each. Machine: {cores} cores (`os.cpu_count()`), shared with other "
        f"work: load average {result['load'][0]:.2f} before, {result['load'][1]:.2f} after. "
        "The transformation's own rate is 1 / (1/b - 1/a): the time it adds per example.",
        "",
        "| pipeline | examples / s | wall s | process CPU s | packs | efficiency % |",
        "|---|---:|---:|---:|---:|---:|",
        f"| (a) source, batch | {result['source_rate']:,.0f} | {result['source_seconds']:.2f} "
        f"| {result['source_cpu']:.2f} | - | - |",
        f"| (b) source, `pack_dataset`, batch | {result['packed_rate']:,.0f} | "
        f"{result['packed_seconds']:.2f} | {result['packed_cpu']:.2f} | "
        f"{result['packs']:,} | {100 * result['efficiency']:.3f} |",
        "",
        "| | sequences / s | target | met |",
        "|---|---:|---|---|",
        f"| `pack_dataset` itself, 1 / (1/b - 1/a) | "
        f"{'n/a (b not slower than a)' if transformation is None else f'{transformation:,.0f}'}"
        f" | >= {THROUGHPUT_TARGET:,} | {result['met']} |",
    ]


def main(argv):
    del argv
    if importlib.util.find_spec("grain") is None:
        sys.exit("Grain's packers come with the reference extra: "
                 "pip install -e '.[reference]'")
    buffer_sizes = [int(size) for size in FLAGS.buffer_sizes]
    print("| histogram | S | buffer B | packer | packs | efficiency % | gap | mean wait | "
          "max wait | time s | sequences / s | target | met |", flush=True)
    rows = efficiency_rows(FLAGS.num_sequences, buffer_sizes, FLAGS.max_sequences_per_pack)
    result = None
    if not FLAGS.skip_throughput:
        result = measure_throughput(FLAGS.throughput_examples, FLAGS.throughput_repeats)
    # A subsection per part, so that a run of one part leaves the other's figures
    # and their date as they were measured.
    section = "streaming_packing_benchmark"
    title = "Streaming packing: `pack_stream` and `pack_dataset`"
    publish_section(section, title, "\n".join([
        *section_header("A bounded buffer against Grain's greedy packers and the offline "
                        f"optimum ({FLAGS.num_sequences:,} lengths per histogram, "
                        f"D = {FLAGS.max_sequences_per_pack})", flags_shown=EFFICIENCY_FLAGS),
        *efficiency_markdown(rows, FLAGS.num_sequences, FLAGS.max_sequences_per_pack)]),
        subsection="efficiency")
    if result is not None:
        publish_section(section, title, "\n".join([
            *section_header("The throughput of `pack_dataset`",
                            flags_shown=THROUGHPUT_FLAGS),
            *throughput_markdown(result, FLAGS.throughput_examples,
                                 FLAGS.throughput_repeats)]), subsection="throughput")
    missed = [f"{r['histogram']} B = {r['buffer']}: {100 * r['efficiency']:.3f} % "
              f"({r['target']})" for r in rows if r["met"] == "NO"]
    if result is not None and result["met"] == "NO":
        missed.append(f"pack_dataset: {result['transformation'] or 0:,.0f} sequences/s "
                      f"(>= {THROUGHPUT_TARGET:,})")
    if missed:
        sys.exit("targets missed: " + "; ".join(missed))


if __name__ == "__main__":
    app.run(main)
