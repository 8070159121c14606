r"""Pre-training benchmark: packed vs unpacked, speed and convergence.

    python benchmarks/pretraining_benchmark.py --write_markdown=BENCHMARKS.md

Speed (``--parts=speed``): lengths drawn from the paper's Wikipedia-512
histogram, S = 512, P = 76, D = 3; the same unpacked records and their packed
copy (optimal plan); the trainer and TFRecord pipeline of run_pretraining.py
with the same model and batch of rows on each, both in one process, chunks of
steps alternated so that both see the same machine (the first chunk, which
compiles, is left out). The figure to compare is the sequences/s ratio
against the packing factor.

Convergence (``--parts=convergence``): the builtin corpus (Python's own
documentation) -> WordPiece vocab -> pre-training records at S = 512 ->
packed; a small BERT trained unpacked (two seeds, for the run-to-run noise)
and packed with ``--packing_hyperparameter_adjustment=accumulation`` (the
same sequences per update), loss against sequences seen, in a PNG.
"""

import glob
import json
import os
import shutil
import sys

import numpy as np
from absl import app, flags

# Modules of benchmarks/, beside this script:
from common import (
    REPOSITORY,
    define_model_size_flags,
    define_write_markdown,
    model_size,
    publish_section,
    run_tool,
    section_header,
)
from throughput import throughput_figures, time_alternately

FLAGS = flags.FLAGS
flags.DEFINE_list("parts", ["speed", "convergence"], "speed and/or convergence.")
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_pretraining_benchmark",
                    "Generated data and the runs' output.")
define_write_markdown()
# Speed.
flags.DEFINE_integer("num_sequences", 12_000, "Sequences generated for the speed part.")
define_model_size_flags(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                        model="Speed model")
flags.DEFINE_integer("batch_size", 8, "Rows per step (packs or sequences).")
flags.DEFINE_integer("steps_per_chunk", 5, "Steps per timed chunk.")
flags.DEFINE_integer("chunks", 12, "Timed chunks per trainer (alternated).")
flags.DEFINE_bool("jit_compile", True, "XLA.")
# Convergence.
flags.DEFINE_integer("convergence_steps", 300, "Optimizer updates per convergence run.")
flags.DEFINE_integer("convergence_batch_size", 4, "Rows per micro-batch.")
flags.DEFINE_integer("convergence_steps_per_update", 5,
                     "Unpacked micro-batches per update (packed: / packing factor, "
                     "rounded; 5 / 1.70 -> 3 makes the packed updates 2 % bigger).")
flags.DEFINE_string("plot", "benchmarks/pretraining_loss_curves.png",
                    "PNG of the convergence loss curves.")

S, P, D = 512, 76, 3
# This script's section of BENCHMARKS.md; each part of --parts is a subsection.
SECTION, TITLE = "pretraining_benchmark", "Pre-training, packed vs unpacked"


def generate_speed_data(folder):
    """Unpacked Wikipedia-like records and their packed copy (cached)."""
    from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
    from packed_bert_tf.data.records import record_files, synthetic_records
    from packed_bert_tf.data.records.record_format import PACKING_STATS_FILE, RecordFormat
    from packed_bert_tf.packing import assign_sequences, load_histogram, pack_lengths

    marker = os.path.join(folder, "generated.json")
    spec = {"num_sequences": FLAGS.num_sequences, "version": 1}
    if os.path.exists(marker) and json.load(open(marker)) == spec:
        return json.load(open(os.path.join(folder, "packed", PACKING_STATS_FILE)))
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "unpacked"))
    os.makedirs(os.path.join(folder, "packed"))
    lengths = synthetic_records.lengths_from_histogram(load_histogram("wikipedia_512").counts,
                                                       FLAGS.num_sequences, seed=0)
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=S,
                                               max_predictions_per_seq=P, seed=0)
    num_shards = 4
    for shard, rows in enumerate(np.array_split(np.arange(lengths.size), num_shards)):
        record_files.write_arrays(os.path.join(folder, "unpacked", f"part-{shard}.tfrecord"),
                               {name: value[rows] for name, value in arrays.items()})
    sequences = compact_records(arrays)
    plan = pack_lengths(sequences["lengths"], S, D)
    packs = assign_sequences(sequences["lengths"], plan, seed=0)
    packed = pack_records(sequences, packs, RecordFormat.packed(S, P + D - 1, D))
    for shard, rows in enumerate(np.array_split(np.arange(len(packs)), num_shards)):
        record_files.write_arrays(os.path.join(folder, "packed", f"part-{shard}.tfrecord"),
                               {name: value[rows] for name, value in packed.items()})
    stats = {"sequences_in": int(lengths.size), "packs": len(packs),
             "packing_factor": lengths.size / len(packs),
             "efficiency": float(plan.efficiency)}
    json.dump(stats, open(os.path.join(folder, "packed", PACKING_STATS_FILE), "w"))
    json.dump(spec, open(marker, "w"))
    return stats


def train(output_dir, input_file, extra, log_name):
    shutil.rmtree(output_dir, ignore_errors=True)
    os.makedirs(output_dir)
    run_tool([sys.executable, "run_pretraining.py", f"--output_dir={output_dir}",
         f"--input_file={input_file}", "--do_train", f"--max_seq_length={S}",
         f"--max_predictions_per_seq={P}", "--save_checkpoints_steps=0"] + extra,
        os.path.join(output_dir, log_name))
    return json.load(open(os.path.join(output_dir, "train_summary.json")))


def make_trainer(files, packed):
    """The trainer and input iterator run_pretraining.py builds, for one dataset."""
    import tensorflow as tf

    from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling
    from packed_bert_tf.models import BertConfig, BertPretrainingModel
    from packed_bert_tf.pretraining import task
    from packed_bert_tf.training.optimizers import create_optimizer
    from packed_bert_tf.training.trainer import Trainer

    config = BertConfig(**model_size(), max_position_embeddings=S)
    tf.keras.utils.set_random_seed(0)
    model = BertPretrainingModel.from_bert_config(config, packed=packed)
    model.build()
    trainer = Trainer(model, create_optimizer("lamb", 1e-4), task=task.PRETRAINING_TASK,
                      jit_compile=FLAGS.jit_compile)
    record_format = task.expected_record_format(
        files, max_seq_length=S, max_predictions_per_seq=P, max_sequences_per_pack=D)
    dataset = task.train_dataset_fn(
        files, global_batch_size=FLAGS.batch_size, steps_per_update=1,
        record_format=record_format,
        shuffling=Shuffling(seed=0, shuffle_buffer_size=1000))(
        tf.distribute.InputContext())
    return trainer, iter(dataset)


def speed_part():
    """Both trainers in one process, chunks of steps alternated (same machine state)."""
    folder = os.path.join(FLAGS.work_dir, "speed")
    stats = generate_speed_data(folder)
    trainers = {kind: make_trainer(sorted(glob.glob(os.path.join(folder, kind,
                                                                 "part-*.tfrecord"))),
                                   kind == "packed")
                for kind in ("unpacked", "packed")}
    totals = time_alternately(trainers, FLAGS.chunks, FLAGS.steps_per_chunk,
                              FLAGS.batch_size)
    return throughput_figures(totals, stats["packing_factor"])


def speed_markdown(figures):
    met = figures["ratio_over_packing_factor"] >= 0.97
    lines = [
        *section_header("Throughput (the training loop of `run_pretraining.py`, CPU)"),
        f"{FLAGS.num_sequences:,} sequences with lengths drawn from the Wikipedia-512 "
        f"histogram, S = {S}, P = {P}; packed copy: optimal plan, D = {D}, M = {P + D - 1}. "
        f"Model: {FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, "
        f"{FLAGS.num_heads} heads, intermediate {FLAGS.intermediate_size}, vocab 30522; "
        f"batch {FLAGS.batch_size} rows of {S} tokens, LAMB, XLA "
        f"{'on' if FLAGS.jit_compile else 'off'}. The trainer and TFRecord input pipeline "
        "of run_pretraining.py, one per dataset in one process, their chunks of "
        f"{FLAGS.steps_per_chunk} steps alternated ({FLAGS.chunks} timed chunks each, "
        "after one chunk of compilation).",
        "",
        "| | unpacked | packed |",
        "|---|---:|---:|",
        f"| rows/s | {figures['rows_per_second']['unpacked']:.3f} | "
        f"{figures['rows_per_second']['packed']:.3f} |",
        f"| sequences/s over an epoch (rows/s x packing factor) | "
        f"{figures['epoch_sequences_per_second']['unpacked']:.2f} | "
        f"{figures['epoch_sequences_per_second']['packed']:.2f} |",
        f"| sequences/s in the batches timed | "
        f"{figures['measured_sequences_per_second']['unpacked']:.2f} | "
        f"{figures['measured_sequences_per_second']['packed']:.2f} |",
        "",
        f"Packing factor {figures['packing_factor']:.4f} (the batches timed held "
        f"{figures['trained_packing_factor']:.4f} sequences per row). Speed-up in "
        f"sequences/s: **{figures['ratio']:.3f} = {figures['ratio_over_packing_factor']:.3f}"
        f" x the packing factor** (target >= 0.97: {'met' if met else 'NOT met'}; the "
        f"paper: 1.913 / 1.996 = 0.958); in the batches timed {figures['measured_ratio']:.3f}."
        f" A packed step costs {1 / figures['rows_ratio']:.3f} x an unpacked one in wall "
        f"time, {1 / figures['cpu_rows_ratio']:.3f} x in CPU time.",
    ]
    return "\n".join(lines)


def convergence_part():
    folder = os.path.join(FLAGS.work_dir, "convergence")
    data = os.path.join(folder, "data")
    if not os.path.exists(os.path.join(data, "packed", "packing_stats.json")):
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data)
        run_tool([sys.executable, "-m", "data_prep.builtin_corpus",
             f"--output_file={data}/corpus.txt"], f"{data}/corpus.log")
        run_tool([sys.executable, "-m", "data_prep.create_pretraining_data",
             f"--input_file={data}/corpus.txt", f"--output_file={data}/unpacked/train.tfrecord",
             "--vocab_size=8000", f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
             "--dupe_factor=4", "--random_seed=12345"], f"{data}/create.log")
        run_tool([sys.executable, "-m", "data_prep.pack_pretraining_data",
             f"--input_file={data}/unpacked/train.tfrecord", f"--output_dir={data}/packed",
             f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
             "--num_output_shards=2"], f"{data}/pack.log")
    config = os.path.join(REPOSITORY, "configs", "demo_bert_config.json")
    common = [f"--bert_config_file={config}",
              f"--train_batch_size={FLAGS.convergence_batch_size}",
              f"--steps_per_update={FLAGS.convergence_steps_per_update}",
              f"--num_train_steps={FLAGS.convergence_steps}",
              f"--num_warmup_steps={FLAGS.convergence_steps // 10}",
              "--learning_rate=2e-3", "--log_every_n_steps=10", "--iterations_per_loop=10"]
    runs = {}
    for label, files, extra in (
            ("unpacked, seed 0", f"{data}/unpacked/train.tfrecord",
             ["--seed=0", "--batching=padded"]),
            ("unpacked, seed 1", f"{data}/unpacked/train.tfrecord",
             ["--seed=1", "--batching=padded"]),
            ("packed, seed 0", f"{data}/packed/*.tfrecord",
             ["--seed=0", "--packing_hyperparameter_adjustment=accumulation"])):
        name = label.replace(", ", "_").replace(" ", "")
        runs[label] = train(os.path.join(folder, name), files, common + extra, "log.txt")
        print(f"{label}: final loss {runs[label]['train']['final_metrics']['loss']:.4f}")
    from packed_bert_tf.plots import plot_loss_curves

    plot_loss_curves({label: s["train"]["history"] for label, s in runs.items()},
                     os.path.join(REPOSITORY, FLAGS.plot),
                     title="builtin corpus, S = 512: loss vs sequences seen")
    return runs


def tail_loss(summary, points=5):
    """Mean loss over the last few logged points (less noisy than the last one)."""
    return float(np.mean([p["loss"] for p in summary["train"]["history"][-points:]]))


def convergence_markdown(runs):
    lines = [
        *section_header("Convergence (builtin corpus)"),
        f"Python's documentation (`data_prep.builtin_corpus`) -> WordPiece vocab of 8000 -> "
        f"records at S = {S}, P = {P}, dupe factor 4 -> packed (D = {D}). Model "
        "`configs/demo_bert_config.json` (2 layers, hidden 128); LAMB, learning rate 2e-3, "
        f"{FLAGS.convergence_steps} updates of {FLAGS.convergence_batch_size} rows; "
        f"unpacked: {FLAGS.convergence_steps_per_update} micro-batches per update; packed: "
        "`--packing_hyperparameter_adjustment=accumulation` (micro-batches per update "
        "divided by the packing factor, rounded).",
        "",
        "| run | packing factor | micro-batches per update | sequences seen | "
        "final loss (mean of last 5 points) | sequences/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, summary in runs.items():
        train = summary["train"]
        lines.append(
            f"| {label} | {summary.get('packing_factor') or 1:.4f} | "
            f"{summary['adjustment']['steps_per_update']} | {train['sequences']:,.0f} | "
            f"{tail_loss(summary):.4f} | {train['sequences_per_second']:.2f} |")
    losses = {label: tail_loss(summary) for label, summary in runs.items()}
    seeds_gap = abs(losses["unpacked, seed 0"] - losses["unpacked, seed 1"])
    packing_gap = abs(losses["packed, seed 0"] - losses["unpacked, seed 0"])
    lines += ["", f"Loss curves: `{FLAGS.plot}`. Final-loss difference packed vs unpacked: "
              f"{packing_gap:.4f}; between the two unpacked seeds: {seeds_gap:.4f}.",
              "", f"![loss curves]({FLAGS.plot})"]
    return "\n".join(lines)


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    if "speed" in FLAGS.parts:
        publish_section(SECTION, TITLE, speed_markdown(speed_part()), subsection="speed")
    if "convergence" in FLAGS.parts:
        publish_section(SECTION, TITLE, convergence_markdown(convergence_part()),
                        subsection="convergence")


if __name__ == "__main__":
    app.run(main)
