r"""Batching benchmark: padded, bucketed, token-budget bucketed and packed, side by side.

    python benchmarks/batching_benchmark.py --write_markdown=BENCHMARKS.md

On sequence lengths drawn from the paper's Wikipedia-512 and SQuAD-384
histograms (shipped with the package), three parts:

1. Plans (numpy, ``--plan_sequences`` lengths): occupancy, padding, examples
   and tokens per batch, distinct batch shapes, and the imbalance of W
   data-parallel workers (``--num_workers``) with balanced and round-robin
   dealing, for every batching.
2. Measured (``--num_sequences`` synthetic MLPerf-format records per
   histogram, a tiny BERT, forward + backward + Adam under XLA on this CPU):
   tokens per second, XLA compilations, compile time, XLA buffer memory and
   data-loader wait. Every approach trains the same model from the same
   weights on the same records, through ``bucketed_pretraining_dataset``
   (packed: packed records through tf.data). Each approach gets a fresh
   ``tf.function``, so its compilations are counted as in a fresh process
   (tracing count = distinct batch shapes).
3. Scaling: the paper's argument, simulated from per-batch costs of the
   real histograms: speed-up over the padded model with N = 1 .. 2048
   synchronous accelerators, each step lasting as long as its slowest
   accelerator. Drawn to ``--plot``.

XLA compilations are counted as a fresh training run would compile: one
per distinct batch shape an approach feeds (each shape's compile time is
measured once, at its first step in this process, and charged to every
approach that uses it). Memory is XLA's own account of each compiled step:
the "Total bytes used" of its buffer assignment (parameters, optimizer
state, activations, gradients, temporaries), read from the dump that
``--xla_dump_to`` (set by this script for part 2) writes at compilation; an
approach needs the most of its shapes. Process RSS and TensorFlow's BFC
statistics were tried and rejected: on the CPU both keep freed buffers
(RSS barely moves between shapes; BFC rounds a 190 MB request up to a
256 MB chunk).
"""

import dataclasses
import glob
import os
import re
import shutil
import tempfile
import time

import numpy as np
from absl import app, flags, logging

from packed_bert_tf.batching import (
    Bucketing,
    balance_across_workers,
    batch_costs,
    batching_metrics,
    bucket_batches,
    bucket_boundaries,
    expected_max_cost,
    packed_batches,
    padded_batches,
)
from packed_bert_tf.batching.dataset import default_boundaries
from packed_bert_tf.data.records.synthetic_records import lengths_from_histogram
from packed_bert_tf.packing import load_histogram, pack_histogram

# Modules of benchmarks/, beside this script:
from common import (
    MODEL_SIZE_FLAGS,
    define_model_size_flags,
    define_write_markdown,
    model_size,
    publish_section,
    section_header,
)

FLAGS = flags.FLAGS
# Data.
flags.DEFINE_list("histograms", ["wikipedia_512", "squad_1_1_384"],
                  "Length histograms by name or path (counts[i] = sequences of length i+1).")
flags.DEFINE_integer("batch_size", 16, "Sequences (padded, bucketed) or packs per batch.")
flags.DEFINE_list("pool_sizes", ["128", "4096"], "Pool sizes of the bucketed runs.")
flags.DEFINE_integer("num_buckets", 4, "Equal-width buckets (S/4, S/2, 3S/4, S).")
flags.DEFINE_integer("optimal_buckets", 3,
                     "Buckets chosen by bucket_boundaries (least padding, multiples of 32).")
flags.DEFINE_integer("max_sequences_per_pack", 3, "D of packing (algorithm optimal).")
flags.DEFINE_integer("seed", 0, "Seed of the lengths, records, shuffles and weights.")
# Part 1.
flags.DEFINE_integer("plan_sequences", 1_000_000, "Lengths drawn for the plan tables.")
flags.DEFINE_integer("num_workers", 8, "Data-parallel workers of the imbalance columns.")
# Part 2.
flags.DEFINE_bool("measure", True, "Run part 2 (the model).")
flags.DEFINE_integer("num_sequences", 256, "Records per histogram for part 2.")
flags.DEFINE_bool("measure_dynamic_shapes", False,
                  "Also run 'sorted, padded to longest' in part 2: one XLA compilation "
                  "per distinct batch length (dozens).")
define_model_size_flags(
    num_layers=1, hidden_size=128, num_heads=2, intermediate_size=512, vocab_size=2048,
    model="Tiny BERT",
    notes={"hidden_size": "Attention's share of the work per token grows as S / 6H (0.67 at "
                          "S = 512, H = 128; BERT-large 0.08): a smaller H favours short "
                          "padded shapes over full-length packs.",
           "vocab_size": "More than 1000 (synthetic ids)."})
# Part 3.
flags.DEFINE_integer("scaling_batch_size", 16, "Sequences per accelerator and step.")
flags.DEFINE_integer("max_accelerators", 2048, "Largest N of the scaling simulation.")
flags.DEFINE_integer("attention_hidden_size", 1024,
                     "H of the attention term of un-padded costs (BERT-large).")
flags.DEFINE_string("plot", "benchmarks/batching_scaling.png", "PNG of the scaling plot.")
define_write_markdown()


@dataclasses.dataclass(frozen=True)
class Approach:
    """One batching: its name and how to plan it / read it."""

    name: str
    kind: str  # padded | bucketed | budget | dynamic | packed
    pool_size: int = 0
    boundaries: tuple = ()


def approaches(max_len, histogram):
    """The batchings compared, for one histogram."""
    B = FLAGS.batch_size
    equal = tuple(max_len * k // FLAGS.num_buckets for k in range(1, FLAGS.num_buckets + 1))
    best = bucket_boundaries(histogram, FLAGS.optimal_buckets, multiple_of=32)
    pools = [int(p) for p in FLAGS.pool_sizes]
    result = [Approach("padded", "padded", B, (max_len,))]
    for pool in pools:
        result.append(Approach(f"bucketed, pool {pool}, {len(equal)} equal buckets",
                               "bucketed", pool, equal))
    result.append(Approach(f"bucketed, pool {pools[-1]}, {len(best)} least-padding "
                           f"buckets {best}", "bucketed", pools[-1], best))
    result.append(Approach(f"token budget {B * max_len}, pool {pools[-1]}, "
                           f"{len(equal)} equal buckets", "budget", pools[-1], equal))
    for pool in pools:
        result.append(Approach(f"sorted, pool {pool}, padded to longest", "dynamic",
                               pool, ()))
    result.append(Approach(f"packed (optimal, D = {FLAGS.max_sequences_per_pack})",
                           "packed"))
    return result


def plan_of(approach, lengths, max_len):
    B = FLAGS.batch_size
    if approach.kind == "packed":
        return packed_batches(lengths, batch_size=B, max_sequence_length=max_len,
                              max_sequences_per_pack=FLAGS.max_sequences_per_pack,
                              seed=FLAGS.seed)
    if approach.kind == "padded":
        return padded_batches(lengths, batch_size=B, max_sequence_length=max_len,
                              seed=FLAGS.seed)
    return bucket_batches(lengths, bucketing_of(approach, max_len),
                          max_sequence_length=max_len, seed=FLAGS.seed)


def bucketing_of(approach, max_len) -> Bucketing:
    """A bucketed approach's options: batches of --batch_size, or its tokens at
    the max length as a budget."""
    B = FLAGS.batch_size
    size = ({"token_budget": B * max_len} if approach.kind == "budget"
            else {"batch_size": B})
    return Bucketing(pool_size=approach.pool_size,
                     bucket_boundaries=approach.boundaries or None,
                     pad_to_bucket_boundary=approach.kind != "dynamic", **size)


# ------------------------------------------------------------------ part 1
def plan_rows(name, counts, max_len):
    lengths = lengths_from_histogram(counts, FLAGS.plan_sequences, seed=FLAGS.seed)
    random_longest = padded_batches(lengths, batch_size=FLAGS.batch_size,
                                    max_sequence_length=max_len, pad_to_longest=True,
                                    seed=FLAGS.seed)
    rows = []
    entries = [(a.name, plan_of(a, lengths, max_len))
               for a in approaches(max_len, counts)]
    entries.append(("random batches, padded to longest (un-padding's view)",
                    random_longest))
    W = FLAGS.num_workers
    for label, plan in entries:
        start = time.perf_counter()
        metrics = batching_metrics(plan)
        balanced = {cost: balance_across_workers(plan, W, cost=cost, seed=FLAGS.seed)
                    .imbalance for cost in ("padded_tokens", "real_tokens")}
        round_robin = balance_across_workers(plan, W, cost="real_tokens",
                                             method="round_robin",
                                             same_shape_per_step=False).imbalance
        rows.append(dict(histogram=name, approach=label, metrics=metrics,
                         balanced_padded=balanced["padded_tokens"],
                         balanced_real=balanced["real_tokens"], round_robin=round_robin))
        logging.info("%s / %s: occupancy %.4f, %d shapes, imbalance %.4f (%.1f s)", name,
                     label, metrics.occupancy, metrics.num_shapes,
                     balanced["real_tokens"], time.perf_counter() - start)
    return rows


# ------------------------------------------------------------------ part 3
def scaling_curves(counts, max_len):
    """Speed-up over the padded model against the number of accelerators N.

    Per sequence the padded model costs L (tokens; with the attention term
    L (1 + L / 6H)). A step of N accelerators lasts as long as the costliest
    of their batches; with batches drawn at random that is E[max of N
    batch costs] (`expected_max_cost`). Speed-up = L x sequences per batch /
    step time. Packing: every pack costs L, so the speed-up is the packing
    factor at any N. Bucketed with balanced dealing: all N batches of a step
    share one bucket shape, so a step costs the mean (steady state: the few
    steps with idle accelerators at the end of an epoch left out).
    """
    B, H = FLAGS.scaling_batch_size, FLAGS.attention_hidden_size
    workers = 2 ** np.arange(int(np.log2(FLAGS.max_accelerators)) + 1)
    lengths = lengths_from_histogram(counts, FLAGS.plan_sequences, seed=FLAGS.seed + 1)
    attention = max_len * (1 + max_len / (6 * H))
    random_batches = padded_batches(lengths, batch_size=B, max_sequence_length=max_len,
                                    pad_to_longest=True, seed=FLAGS.seed)
    full = random_batches.examples_per_batch == B  # the last, partial batch aside
    packing = pack_histogram(counts, max_len, FLAGS.max_sequences_per_pack)
    packing_factor = packing.num_sequences / packing.num_packs
    bucketed = bucket_batches(lengths, Bucketing(batch_size=B, pool_size=4096,
                                                 bucket_boundaries=default_boundaries(max_len),
                                                 pad_to_bucket_boundary=True),
                              max_sequence_length=max_len, seed=FLAGS.seed)
    bucket_cost = batch_costs(bucketed, "padded_tokens")
    curves = {
        f"packing (factor {packing_factor:.3f})": np.full(workers.size, packing_factor),
        "bucketed (4 buckets), balanced": np.full(
            workers.size, max_len * bucketed.num_examples / bucket_cost.sum()),
        "bucketed (4 buckets), round robin": max_len * bucketed.examples_per_batch.mean()
        / expected_max_cost(bucket_cost, workers),
        "un-padding, tokens": B * max_len / expected_max_cost(
            batch_costs(random_batches, "real_tokens")[full], workers),
        f"un-padding, tokens + attention (H = {H})": B * attention / expected_max_cost(
            batch_costs(random_batches, "attention", hidden_size=H)[full], workers),
    }
    return workers, curves


def plot_scaling(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from packed_bert_tf.plots import save_figure_atomically

    figure, axes = plt.subplots(1, len(results), figsize=(6.5 * len(results), 4.5),
                                squeeze=False)
    styles = ["-", "-", ":", "--", "-."]
    for axis, (name, (workers, curves)) in zip(axes[0], results.items()):
        ends = []
        for (label, values), style in zip(curves.items(), styles):
            line, = axis.plot(workers, values, style, marker=".", label=label)
            ends.append((values[-1], line.get_color()))
        # Labels of the last values, pushed apart where curves end close together.
        placed = []
        for value, color in sorted(ends):
            y = max(value, placed[-1] + 0.05) if placed else value
            placed.append(y)
            axis.annotate(f"{value:.2f}", (workers[-1], y), textcoords="offset points",
                          xytext=(5, -3), fontsize=8, color=color)
        axis.set_xscale("log", base=2)
        axis.set_xticks(workers[::2])
        axis.set_xticklabels([str(n) for n in workers[::2]])
        axis.set_xlim(workers[0] / 1.3, workers[-1] * 2.2)
        axis.set_xlabel("accelerators N (synchronous data parallelism)")
        axis.set_ylabel("speed-up over the padded model")
        axis.set_title(f"{name}: {FLAGS.scaling_batch_size} sequences per accelerator")
        axis.grid(True, alpha=0.3)
        axis.set_ylim(bottom=0.9)
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_figure_atomically(figure, path, dpi=110)
    plt.close(figure)


# ------------------------------------------------------------------ part 2
def write_records(folder, counts, max_len, max_predictions):
    """Unpacked shards of synthetic records with lengths from the histogram, and
    the same sequences packed."""
    from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
    from packed_bert_tf.data.records import record_files, synthetic_records
    from packed_bert_tf.data.records.record_format import RecordFormat, default_max_masked_tokens
    from packed_bert_tf.packing import assign_sequences, pack_lengths

    lengths = lengths_from_histogram(counts, FLAGS.num_sequences, seed=FLAGS.seed)
    arrays = synthetic_records.unpacked_arrays(lengths, max_seq_length=max_len,
                                               max_predictions_per_seq=max_predictions,
                                               vocab_size=FLAGS.vocab_size, seed=FLAGS.seed)
    unpacked = []
    for shard in range(4):
        path = os.path.join(folder, f"unpacked-{shard}.tfrecord")
        record_files.write_arrays(path, {k: v[shard::4] for k, v in arrays.items()})
        unpacked.append(path)
    sequences = compact_records(arrays)
    D = FLAGS.max_sequences_per_pack
    packs = assign_sequences(sequences["lengths"],
                             pack_lengths(sequences["lengths"], max_len, D), seed=FLAGS.seed)
    packed_format = RecordFormat.packed(
        max_len, default_max_masked_tokens(max_predictions, D), D)
    packed = os.path.join(folder, "packed.tfrecord")
    record_files.write_arrays(packed, pack_records(sequences, packs, packed_format))
    return unpacked, packed, packed_format, sequences["lengths"]


def packed_dataset(path, record_format):
    """Packed records in batches of B packs, the last one filled with empty packs."""
    import tensorflow as tf

    from packed_bert_tf.data.records import tensorflow_records

    spec, B = tensorflow_records.parse_spec(record_format), FLAGS.batch_size

    def parse(serialized):
        features = tf.io.parse_example(serialized, spec)
        return {name: tf.pad(value if value.dtype == tf.float32 else tf.cast(value, tf.int32),
                             [[0, B - tf.shape(value)[0]], [0, 0]])
                for name, value in features.items()}

    return (tf.data.TFRecordDataset(path).batch(B)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


class Trainer:
    """One model and one XLA-compiled train step (forward, backward, Adam), shared
    by the approaches: each shape compiles once, and its compile time is kept."""

    def __init__(self, model, initial_weights):
        import keras
        import tensorflow as tf

        from packed_bert_tf.models.bert_pretraining import pretraining_losses

        self.model, self.initial_weights = model, initial_weights
        self.optimizer = keras.optimizers.Adam(1e-4)
        self.optimizer.build(model.trainable_variables)
        self.compile_seconds = {}  # shape -> first call (compilation + one step)
        self.buffer_bytes = {}  # shape -> XLA buffer assignment of its program

        @tf.function(jit_compile=True)
        def train_step(features):
            with tf.GradientTape() as tape:
                loss = pretraining_losses(features, model(features, training=True),
                                          global_normaliser=False)["loss"]
            self.optimizer.apply(tape.gradient(loss, model.trainable_variables),
                                 model.trainable_variables)
            return loss

        self.train_step = train_step

    def reset(self):
        """The initial weights and a fresh optimizer state."""
        self.model.set_weights(self.initial_weights)
        for variable in self.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))


def xla_buffer_bytes(dump_folder: str) -> int:
    """"Total bytes used" of the XLA programs dumped since the last call (their
    largest); empties the dump folder."""
    sizes = []
    for path in glob.glob(os.path.join(dump_folder, "*buffer-assignment.txt")):
        with open(path) as report:
            found = re.search(r"Total bytes used: (\d+)", report.read())
        if found:
            sizes.append(int(found.group(1)))
    for entry in os.listdir(dump_folder):
        path = os.path.join(dump_folder, entry)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if not sizes:
        raise RuntimeError(f"no XLA buffer assignment in {dump_folder}: is XLA_FLAGS' "
                           "--xla_dump_to in effect?")
    return max(sizes)


def measure(approach, dataset, trainer, dump_folder):
    """Trains one epoch of `dataset`; returns the figures of part 2."""
    trainer.reset()
    shapes, totals = set(), dict(wait=0.0, step=0.0, cpu=0.0, compiled_here=0.0, tokens=0,
                                 steady_tokens=0, padded=0, sequences=0)
    iterator = iter(dataset)
    start = time.perf_counter()
    while True:
        before, cpu_before = time.perf_counter(), time.process_time()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        fetched = time.perf_counter()
        trainer.train_step(batch).numpy()
        done, cpu_done = time.perf_counter(), time.process_time()
        mask = batch["input_mask"].numpy()
        tokens = int(np.count_nonzero(mask))
        totals["tokens"] += tokens
        totals["padded"] += mask.size
        totals["sequences"] += int(batch["next_sentence_weights"].numpy().sum())
        if mask.shape not in trainer.compile_seconds:  # compiled at this step
            trainer.compile_seconds[mask.shape] = done - fetched
            trainer.buffer_bytes[mask.shape] = xla_buffer_bytes(dump_folder)
            totals["compiled_here"] += done - fetched
        elif mask.shape in shapes:  # a steady step of this approach
            totals["wait"] += fetched - before
            totals["step"] += done - fetched
            totals["cpu"] += cpu_done - cpu_before
            totals["steady_tokens"] += tokens
        shapes.add(mask.shape)
    wall = time.perf_counter() - start
    steady = totals["wait"] + totals["step"]
    compile_seconds = sum(trainer.compile_seconds[shape] for shape in shapes)
    # As in a fresh run: the epoch without this process's compilations, plus
    # one compilation of each of the approach's shapes.
    fresh_wall = wall - totals["compiled_here"] + compile_seconds
    return dict(
        approach=approach.name, sequences=totals["sequences"],
        occupancy=totals["tokens"] / totals["padded"],
        tokens_per_second=totals["steady_tokens"] / steady if steady else float("nan"),
        tokens_per_cpu_second=(totals["steady_tokens"] / totals["cpu"] if totals["cpu"]
                               else float("nan")),
        end_to_end=totals["tokens"] / fresh_wall,
        compilations=len(shapes), compile_seconds=compile_seconds,
        wait_fraction=totals["wait"] / steady if steady else float("nan"),
        memory_mb=max(trainer.buffer_bytes[shape] for shape in shapes) / 2**20)


def measured_rows(name, counts, max_len, dump_folder):
    import keras

    from packed_bert_tf.batching import bucketed_pretraining_dataset
    from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling
    from packed_bert_tf.data.records.record_format import RecordFormat
    from packed_bert_tf.models import BertConfig, BertPretrainingModel

    max_predictions = int(0.15 * max_len)
    config = BertConfig(**model_size(), max_position_embeddings=max_len)
    keras.utils.set_random_seed(FLAGS.seed)
    models = {packed: BertPretrainingModel.from_bert_config(config, packed=packed)
              for packed in (False, True)}
    for model in models.values():
        model.build()
    models[True].set_weights(models[False].get_weights())
    trainers = {packed: Trainer(model, models[False].get_weights())
                for packed, model in models.items()}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        unpacked, packed, packed_format, lengths = write_records(
            folder, counts, max_len, max_predictions)
        for approach in approaches(max_len, counts):
            if approach.kind == "dynamic" and not FLAGS.measure_dynamic_shapes:
                continue
            if approach.kind == "packed":
                dataset = packed_dataset(packed, packed_format)
            else:
                dataset = bucketed_pretraining_dataset(
                    unpacked, record_format=RecordFormat.unpacked(max_len, max_predictions),
                    bucketing=bucketing_of(approach, max_len),
                    shuffling=Shuffling(seed=FLAGS.seed), num_epochs=1)
            row = measure(approach, dataset, trainers[approach.kind == "packed"],
                          dump_folder)
            if row["sequences"] != lengths.size:
                raise RuntimeError(f"{approach.name} saw {row['sequences']} sequences, "
                                   f"expected {lengths.size}")
            row["histogram"] = name
            rows.append(row)
            logging.info("%s / %s: %.0f tokens/s (%.0f per CPU s), %d compilations "
                         "(%.1f s), wait %.1f %%, XLA buffers %.0f MB", name, approach.name,
                         row["tokens_per_second"], row["tokens_per_cpu_second"],
                         row["compilations"], row["compile_seconds"],
                         100 * row["wait_fraction"], row["memory_mb"])
    for trainer in trainers.values():  # one trace (one XLA compilation) per shape
        traced = trainer.train_step.experimental_get_tracing_count()
        if traced != len(trainer.compile_seconds):
            raise RuntimeError(f"{traced} traces for {len(trainer.compile_seconds)} shapes")
    return rows


# ------------------------------------------------------------------ report
def image_path() -> str:
    """The plot's path relative to the Markdown file (as given without one)."""
    if not FLAGS.write_markdown:
        return FLAGS.plot
    return os.path.relpath(os.path.abspath(FLAGS.plot),
                           os.path.dirname(os.path.abspath(FLAGS.write_markdown)))


def markdown(plan_table, measured, scaling, datasets) -> str:
    W = FLAGS.num_workers
    lines = [
        *section_header(
            flags_shown=("histograms", "batch_size", "pool_sizes", "num_buckets",
                         "optimal_buckets", "plan_sequences", "num_workers", "num_sequences",
                         "measure_dynamic_shapes", *MODEL_SIZE_FLAGS, "scaling_batch_size",
                         "max_accelerators", "seed")),
        f"Lengths drawn from {', '.join(f'`{d}`' for d in datasets)} (SQuAD's lengths "
        "in pre-training records: the fine-tuning model differs only in its heads). "
        f"Batches of {FLAGS.batch_size} sequences (packed: {FLAGS.batch_size} packs); "
        "bucketed batches padded to their bucket's upper edge (one shape per bucket) "
        "unless 'padded to longest'; a pool is shuffled, sorted by length and cut, "
        "unfilled batches wait for the next pool.",
        "",
        f"### Plans ({FLAGS.plan_sequences:,} sequences per histogram)",
        "",
        f"Imbalance: sum over steps of the slowest of {W} workers' cost / sum of the mean "
        "cost (1 = no waiting). Balanced: the steps' batches share one shape, neighbours "
        "in cost; the cost is padded tokens (a model on the batch tensor) or real tokens "
        "(a model that drops padding). Round robin: batches dealt in order, each at its "
        "own shape, real-token cost.",
        "",
        "| histogram | batching | occupancy | padding | sequences / batch | real tokens "
        "/ batch | shapes | imbalance, balanced, padded | imbalance, balanced, real | "
        "imbalance, round robin, real |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in plan_table:
        m = row["metrics"]
        lines.append(
            f"| {row['histogram']} | {row['approach']} | {m.occupancy:.4f} | "
            f"{100 * m.padding_fraction:.1f} % | {m.examples_per_batch:.2f} | "
            f"{m.real_tokens_per_batch:,.0f} | {m.num_shapes} | {row['balanced_padded']:.4f}"
            f" | {row['balanced_real']:.4f} | {row['round_robin']:.4f} |")
    if measured:
        lines += [
            "",
            f"### Measured: a tiny BERT trained on {FLAGS.num_sequences} sequences per "
            "histogram (CPU, XLA)",
            "",
            f"{FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, {FLAGS.num_heads} heads, "
            f"intermediate {FLAGS.intermediate_size}, vocab {FLAGS.vocab_size}; one "
            "`jit_compile=True` train step (forward, backward, Adam) per model, from the "
            "same weights for every approach. Tokens / s: real tokens of the steady steps "
            "(a shape's first step excluded) over their time, loader wait included; per "
            "CPU s: over this process's CPU time instead (all threads; less sensitive to "
            "other processes on a shared machine); end "
            "to end: all real tokens over the epoch with each of the approach's "
            "compilations at its measured cost. XLA compilations: the approach's distinct "
            "batch shapes, one compilation each in a fresh run. Loader wait: time in "
            "`next(iterator)` as a share of the steady steps' time. XLA buffers: the "
            "\"Total bytes used\" of the compiled step's buffer assignment (parameters, "
            "Adam state, activations, gradients, temporaries) for the approach's largest "
            "shape (bucketed runs: their largest bucket, the padded shape). Compile times "
            "include XLA's dump of each program (about 10 %). "
            "Attention's work per token relative to the dense layers is S / 6H "
            f"({512 / (6 * FLAGS.hidden_size):.2f} at S = 512 here, 0.08 in BERT-large), "
            "so short shapes gain more here than on a large model. A "
            f"{FLAGS.num_sequences}-sequence epoch ends with partial batches (at most "
            "one per bucket) that weigh more here than in a real epoch: the plan table "
            "has the large-epoch occupancy.",
            "",
            "| histogram | batching | sequences | occupancy | tokens / s | tokens / CPU s | "
            "tokens / s end to end | XLA compilations | compile s | XLA buffers MB | "
            "loader wait |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in measured:
            lines.append(
                f"| {row['histogram']} | {row['approach']} | {row['sequences']} | "
                f"{row['occupancy']:.4f} | {row['tokens_per_second']:,.0f} | "
                f"{row['tokens_per_cpu_second']:,.0f} | "
                f"{row['end_to_end']:,.0f} | {row['compilations']} | "
                f"{row['compile_seconds']:.1f} | {row['memory_mb']:,.0f} | "
                f"{100 * row['wait_fraction']:.1f} % |")
        if not FLAGS.measure_dynamic_shapes:
            lines += ["", "'Sorted, padded to longest' is not trained by default "
                      "(`--measure_dynamic_shapes`): it compiles once per distinct batch "
                      "length, as many as its 'shapes' column above."]
    shown = [n for n in (1, 8, 64, 512, 2048) if n <= FLAGS.max_accelerators]
    lines += [
        "",
        f"### Scaling: speed-up over the padded model with N accelerators "
        f"({FLAGS.scaling_batch_size} sequences per accelerator)",
        "",
        f"![speed-up against the number of accelerators]({image_path()})",
        "",
        "Each step lasts as long as its costliest accelerator. Un-padding (a model that "
        "drops padding, random batches): E[max of N batch costs] from the real histograms' "
        "per-batch costs, cost = real tokens (or with each sequence's attention term "
        f"l^2 / 6H, H = {FLAGS.attention_hidden_size}, against the padded model's). "
        "Packing: every pack costs one padded row, so the speed-up is the packing factor "
        "at any N. Bucketed: balanced steps share one shape (steady state, the few "
        "end-of-epoch steps with idle accelerators left out); round robin: each "
        "accelerator at its own bucket's shape.",
        "",
        "| histogram | batching | " + " | ".join(f"N = {n}" for n in shown) + " |",
        "|---|---|" + "---:|" * len(shown),
    ]
    for name, (workers, curves) in scaling.items():
        for label, values in curves.items():
            picked = [values[int(np.flatnonzero(workers == n)[0])] for n in shown]
            lines.append(f"| {name} | {label} | " + " | ".join(f"{v:.3f}" for v in picked)
                         + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv):
    del argv
    plan_table, measured, scaling, datasets = [], [], {}, []
    dump_folder = tempfile.mkdtemp(prefix="xla-dump-")
    if FLAGS.measure:
        # Read by XLA at its first compilation: nothing has compiled yet.
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_dump_to={dump_folder}").strip()
    for histogram_name in FLAGS.histograms:
        histogram = load_histogram(histogram_name)
        counts = np.asarray(histogram.counts, dtype=np.int64)
        max_len = histogram.max_sequence_length or counts.size
        datasets.append(histogram.name)
        plan_table += plan_rows(histogram.name, counts, max_len)
        scaling[histogram.name] = scaling_curves(counts, max_len)
        if FLAGS.measure:
            measured += measured_rows(histogram.name, counts, max_len, dump_folder)
    shutil.rmtree(dump_folder, ignore_errors=True)
    plot_scaling(scaling, FLAGS.plot)
    publish_section("batching_benchmark", "Batching: padded, bucketed, token budgets and "
                    "packing", markdown(plan_table, measured, scaling, datasets))


if __name__ == "__main__":
    app.run(main)
