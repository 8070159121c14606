r"""Peer benchmark: our packed BERT step against keras-hub's `BertMaskedLM`.

    python benchmarks/peer_benchmark.py --write_markdown=BENCHMARKS.md
    python benchmarks/peer_benchmark.py --mixed_precision=bf16 \
        --write_markdown=BENCHMARKS.md

Needs keras-hub (``pip install -e '.[keras-hub]'``); without it the script
exits with one line saying so. Three models of the same size (random
weights, nothing downloaded), each trained by the same XLA-compiled step
(forward + backward + Adam, ``jit_compile=True``), on batches of the same
shape B x S with M masked-LM predictions per row:

* keras-hub: `keras_hub.models.BertMaskedLM` on a `BertBackbone`
  (TensorFlow backend), the way its users train: unpacked rows, one
  sequence each, with a padding mask, sparse cross entropy from logits
  weighted by the mask of the real predictions;
* packed: our `BertPretrainingModel` (``from_bert_config(..., packed=True)``) on packed rows
  (block-diagonal attention, gathered positions), its pre-training loss
  (masked LM + next sentence);
* unpacked: our `BertPretrainingModel` (``packed=False``) on the same
  unpacked rows as keras-hub.

Dropout is 0.1 in all three (BERT's and keras-hub's default; ``--dropout``
changes it for all).

Sequence lengths are drawn from the paper's Wikipedia-512 histogram
(``packed_bert_tf/packing/paper_histograms``); the packed rows are packs of
the optimal plan of that histogram (at most D sequences per pack). The
models are timed in interleaved repetitions in one process (the order
rotates every repetition), by wall clock and by the process's CPU time; the
figures are medians over repetitions of each model's step time over
keras-hub's. A step costs the same whatever its rows hold (static shapes),
so over an epoch packed sequences/s = rows/s x the plan's packing factor,
and packed sequences/s over keras-hub's = packing factor / step ratio.
"""

import sys
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from packed_bert_tf.data.records.synthetic_records import lengths_from_histogram, unpacked_arrays
from packed_bert_tf.models import BertConfig, BertPretrainingModel
from packed_bert_tf.models.bert_pretraining import pretraining_losses
from packed_bert_tf.packing import load_histogram, pack_histogram
from packed_bert_tf.training.distribution import MIXED_PRECISION

# Modules of benchmarks/, beside this script:
from common import (
    configuration,
    define_model_size_flags,
    define_write_markdown,
    publish_section,
    section_header,
    zero_packed_features,
)

FLAGS = flags.FLAGS
# Model and data shapes (--num_layers is a list here: one measurement per count).
define_model_size_flags(num_layers=None, hidden_size=256, num_heads=4,
                        intermediate_size=1024, vocab_size=30522,
                        notes={"vocab_size": "BERT's uncased vocabulary."})
flags.DEFINE_list("num_layers", ["2", "4", "8"],
                  "Transformer blocks (L); each count is measured in turn.")
flags.DEFINE_integer("batch_size", 8, "B, rows per step (packs or sequences).")
flags.DEFINE_integer("sequence_length", 512,
                     "S; longer histogram lengths are cut to S.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "D, of the packed rows.")
flags.DEFINE_integer("max_predictions_per_row", 80,
                     "M, masked-LM slots of every row (packed or not): every model "
                     "projects M positions per row onto the vocabulary.")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16"],
                  "bf16: the mixed_bfloat16 policy for all three models.")
flags.DEFINE_float("dropout", 0.1, "Dropout rate of all three models (hidden and "
                   "attention; BERT's and keras-hub's default 0.1).")
flags.DEFINE_string("histogram", "wikipedia_512", "Length histogram (name or path).")
# Timing.
flags.DEFINE_integer("repetitions", 20, "Interleaved repetitions per model.")
flags.DEFINE_integer("seed", 0, "Seed of the weights and the batches.")
flags.DEFINE_bool("jit_compile", True, "XLA-compile the three train steps (the published "
                  "figures); --nojit_compile: a quick check of the script.")
define_write_markdown()

MODELS = ("keras-hub", "packed", "unpacked")
# The flags that make a configuration: a subsection of this script's section each
# (`common.configuration`: peer_benchmark/default, peer_benchmark/mixed_precision=bf16, ...).
CONFIGURATION_FLAGS = ("mixed_precision", "dropout", "num_layers", "hidden_size", "num_heads",
                       "intermediate_size", "vocab_size", "batch_size", "sequence_length",
                       "max_sequences_per_pack", "max_predictions_per_row", "histogram",
                       "jit_compile")
MISSING_KERAS_HUB = ("peer_benchmark: keras-hub is not installed; install it with "
                     "pip install -e '.[keras-hub]'")


# ------------------------------------------------------------------ batches
def histogram_counts(S):
    """The histogram's counts per length 1..S (longer lengths cut to S)."""
    counts = np.asarray(load_histogram(FLAGS.histogram).counts, dtype=np.int64)
    folded = np.zeros(S, np.int64)
    folded[:min(S, counts.size)] = counts[:S]
    folded[S - 1] += counts[S:].sum()
    return folded


def unpacked_batch(counts, *, B, S, M, vocab_size, seed):
    """B unpacked rows of histogram lengths, MLPerf layout (D = 1)."""
    lengths = np.maximum(lengths_from_histogram(counts, B, seed=seed), 5)
    arrays = unpacked_arrays(np.minimum(lengths, S), max_seq_length=S,
                             max_predictions_per_seq=M, vocab_size=vocab_size, seed=seed)
    return arrays, lengths


def packed_batch(plan, *, B, S, M, vocab_size, seed):
    """B packs drawn from the plan (in proportion to its counts), packed layout.

    Each pack's sequences are laid one after another (``input_mask`` their
    index 1..D, ``positions`` restarting at 0); its masked-LM slots are its
    sequences' predictions in order, cut at M.
    """
    rng = np.random.default_rng(seed)
    D = plan.max_sequences_per_pack
    counts = np.asarray(plan.counts, np.float64)
    chosen = rng.choice(len(plan.strategies), size=B, p=counts / counts.sum())
    f = zero_packed_features(B, S, D, M)
    for row, strategy in enumerate(chosen):
        lengths = np.asarray(plan.strategies[strategy])
        sequences = unpacked_arrays(np.maximum(lengths, 5), max_seq_length=S,
                                    max_predictions_per_seq=M, vocab_size=vocab_size,
                                    seed=seed * 1000 + row)
        start = slot = 0
        for d, length in enumerate(lengths):
            length = min(int(length), S - start)
            stop = start + length
            f["input_ids"][row, start:stop] = sequences["input_ids"][d, :length]
            f["segment_ids"][row, start:stop] = sequences["segment_ids"][d, :length]
            f["input_mask"][row, start:stop] = d + 1
            f["positions"][row, start:stop] = np.arange(length)
            used = sequences["masked_lm_weights"][d] > 0
            offsets = sequences["masked_lm_positions"][d][used]
            ids = sequences["masked_lm_ids"][d][used]
            keep = offsets < length
            offsets, ids = offsets[keep][:M - slot], ids[keep][:M - slot]
            f["masked_lm_positions"][row, slot:slot + offsets.size] = start + offsets
            f["masked_lm_ids"][row, slot:slot + offsets.size] = ids
            f["masked_lm_weights"][row, slot:slot + offsets.size] = d + 1
            slot += offsets.size
            f["next_sentence_positions"][row, d] = start
            f["next_sentence_labels"][row, d] = sequences["next_sentence_labels"][d, 0]
            f["next_sentence_weights"][row, d] = 1
            start = stop
    return {name: tf.constant(value) for name, value in f.items()}


def our_unpacked_features(arrays):
    """Our feature dict for unpacked rows (D = 1)."""
    B = arrays["input_ids"].shape[0]
    return {
        "input_ids": tf.constant(arrays["input_ids"], tf.int32),
        "input_mask": tf.constant(arrays["input_mask"], tf.int32),
        "segment_ids": tf.constant(arrays["segment_ids"], tf.int32),
        "positions": tf.zeros_like(tf.constant(arrays["input_ids"], tf.int32)),  # unused
        "masked_lm_positions": tf.constant(arrays["masked_lm_positions"], tf.int32),
        "masked_lm_ids": tf.constant(arrays["masked_lm_ids"], tf.int32),
        "masked_lm_weights": tf.constant(arrays["masked_lm_weights"], tf.float32),
        "next_sentence_positions": tf.zeros((B, 1), tf.int32),
        "next_sentence_labels": tf.constant(arrays["next_sentence_labels"], tf.int32),
        "next_sentence_weights": tf.ones((B, 1), tf.int32),
    }


def keras_hub_features(arrays):
    """keras-hub's `BertMaskedLM` inputs (x) and labels, sample weights."""
    x = {"token_ids": tf.constant(arrays["input_ids"], tf.int32),
         "segment_ids": tf.constant(arrays["segment_ids"], tf.int32),
         "padding_mask": tf.constant(arrays["input_mask"], tf.int32),
         "mask_positions": tf.constant(arrays["masked_lm_positions"], tf.int32)}
    return (x, tf.constant(arrays["masked_lm_ids"], tf.int32),
            tf.constant(arrays["masked_lm_weights"], tf.float32))


# ------------------------------------------------------------------ steps
def train_step(loss_of, variables):
    """Forward + backward + Adam on ``variables``, XLA-compiled unless
    --nojit_compile."""
    optimizer = keras.optimizers.Adam(1e-4)
    optimizer.build(variables)

    @tf.function(jit_compile=FLAGS.jit_compile)
    def step(batch):
        with tf.GradientTape() as tape:
            loss = loss_of(batch)
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    return step


def build_steps(num_layers, keras_hub):
    """{model name: its train step} for one layer count."""
    S, V = FLAGS.sequence_length, FLAGS.vocab_size
    config = BertConfig(vocab_size=V, hidden_size=FLAGS.hidden_size,
                        num_hidden_layers=num_layers, num_attention_heads=FLAGS.num_heads,
                        intermediate_size=FLAGS.intermediate_size,
                        max_position_embeddings=S, hidden_dropout_prob=FLAGS.dropout,
                        attention_probs_dropout_prob=FLAGS.dropout)
    keras.utils.set_random_seed(FLAGS.seed)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=V, num_layers=num_layers, num_heads=FLAGS.num_heads,
        hidden_dim=FLAGS.hidden_size, intermediate_dim=FLAGS.intermediate_size,
        dropout=config.hidden_dropout_prob, max_sequence_length=S)
    masked_lm = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # The pooled output is not part of the masked-LM loss: its dense layer gets no
    # gradient, and is left out of the update.
    unused = {id(v) for v in backbone.pooled_dense.trainable_variables}
    hub_variables = [v for v in masked_lm.trainable_variables if id(v) not in unused]

    def hub_loss(batch):
        x, labels, weights = batch
        return cross_entropy(labels, masked_lm(x, training=True), sample_weight=weights)

    ours = {}
    for name, packed in (("packed", True), ("unpacked", False)):
        model = BertPretrainingModel.from_bert_config(config, packed=packed)
        model.build()
        ours[name] = model

    def our_loss(model):
        return lambda batch: pretraining_losses(batch, model(batch, training=True))["loss"]

    return {"keras-hub": train_step(hub_loss, hub_variables),
            **{name: train_step(our_loss(model), model.trainable_variables)
               for name, model in ours.items()}}


def time_step(step, batch):
    """(wall seconds, process CPU seconds) of one step."""
    wall, cpu = time.perf_counter(), time.process_time()
    step(batch).numpy()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(num_layers, keras_hub, batches):
    """Per model, an array [repetitions, 2] of (wall, CPU) seconds per step."""
    steps = build_steps(num_layers, keras_hub)
    for name, step in steps.items():
        start = time.perf_counter()
        step(batches[name]).numpy()  # compile
        step(batches[name]).numpy()  # warm up
        logging.info("L=%d %s: compiled and warmed up in %.1f s", num_layers, name,
                     time.perf_counter() - start)
    times = {name: [] for name in MODELS}
    for repetition in range(FLAGS.repetitions):
        shift = repetition % len(MODELS)
        for name in MODELS[shift:] + MODELS[:shift]:
            times[name].append(time_step(steps[name], batches[name]))
    return {name: np.array(value) for name, value in times.items()}


def summarise(times, packing_factor):
    """Rows of the table (one per clock) from one layer count's times."""
    rows = []
    for clock, column in (("wall", 0), ("CPU", 1)):
        hub = times["keras-hub"][:, column]
        row = dict(clock=clock, ms={name: 1e3 * float(np.median(times[name][:, column]))
                                    for name in MODELS})
        for name in ("packed", "unpacked"):
            ratios = times[name][:, column] / hub  # interleaved pairs
            row[name] = (float(np.median(ratios)), *map(float, np.percentile(ratios,
                                                                              [25, 75])))
        row["speed_up"] = packing_factor / row["packed"][0]
        rows.append(row)
    return rows


# ------------------------------------------------------------------ report
def markdown(results, plan, packed_tokens, unpacked_tokens) -> str:
    B, S, M = FLAGS.batch_size, FLAGS.sequence_length, FLAGS.max_predictions_per_row
    precision = MIXED_PRECISION[FLAGS.mixed_precision]
    lines = [
        *section_header(
            f"{precision}, {'XLA' if FLAGS.jit_compile else 'no XLA'}, dropout "
            f"{FLAGS.dropout:g}, layers {'/'.join(FLAGS.num_layers)}",
            flags_shown=("num_layers", "hidden_size", "num_heads", "intermediate_size",
                         "vocab_size", "batch_size", "sequence_length",
                         "max_sequences_per_pack", "max_predictions_per_row",
                         "mixed_precision", "dropout", "histogram", "repetitions")),
        f"Hidden {FLAGS.hidden_size}, {FLAGS.num_heads} heads, intermediate "
        f"{FLAGS.intermediate_size}, vocab {FLAGS.vocab_size}, dropout {FLAGS.dropout}; batch {B} x {S} "
        f"tokens with M = {M} masked-LM slots per row, random weights, policy "
        f"`{precision}`, `jit_compile={FLAGS.jit_compile}`, one step = forward + backward + Adam. "
        "keras-hub: `BertMaskedLM` on `BertBackbone` (TensorFlow backend) on unpacked "
        "rows with a padding mask, weighted sparse cross entropy; packed: our "
        "`BertPretrainingModel` (`from_bert_config(..., packed=True)`) on packed rows (at most "
        f"D = {FLAGS.max_sequences_per_pack} sequences), masked-LM + next-sentence loss; "
        "unpacked: ours with `packed=False` on keras-hub's rows. Lengths from "
        f"`{FLAGS.histogram}`: the packed batch holds {packed_tokens} real tokens of "
        f"{B * S}, the unpacked one {unpacked_tokens}; the optimal plan's packing factor "
        f"is {plan.packing_factor:.4f} (sequences per pack over the whole histogram).",
        "",
        "| layers | clock | keras-hub ms | packed ms | unpacked ms | packed / keras-hub "
        "(IQR) | unpacked / keras-hub (IQR) | packed seq/s over keras-hub seq/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for num_layers, rows in results:
        for row in rows:
            ms = row["ms"]
            packed, unpacked = row["packed"], row["unpacked"]
            lines.append(
                f"| {num_layers} | {row['clock']} | {ms['keras-hub']:.1f} | "
                f"{ms['packed']:.1f} | {ms['unpacked']:.1f} | "
                f"{packed[0]:.4f} ({packed[1]:.3f} - {packed[2]:.3f}) | "
                f"{unpacked[0]:.4f} ({unpacked[1]:.3f} - {unpacked[2]:.3f}) | "
                f"{row['speed_up']:.3f} |")
    lines += ["", f"{FLAGS.repetitions} interleaved repetitions of one step per model "
              "(the order rotating), after compilation and one warm-up step; ratios are "
              "medians of the per-repetition ratios, IQR their interquartile range. Wall: "
              "elapsed time; CPU: this process's CPU time (all threads), less sensitive to "
              "other processes on this shared machine. The last column is the packing "
              "factor over the step ratio. Targets: packed / keras-hub at most "
              "1.02 (packed sequences/s at least 1.95x keras-hub's), unpacked / keras-hub "
              "at most 1.00.", ""]
    return "\n".join(lines)


def main(argv):
    del argv
    try:
        import keras_hub
    except ImportError:
        sys.exit(MISSING_KERAS_HUB)
    keras.mixed_precision.set_global_policy(MIXED_PRECISION[FLAGS.mixed_precision])
    B, S, M = FLAGS.batch_size, FLAGS.sequence_length, FLAGS.max_predictions_per_row
    counts = histogram_counts(S)
    plan = pack_histogram(counts, S, FLAGS.max_sequences_per_pack)
    logging.info("plan: %d packs, packing factor %.4f", plan.num_packs, plan.packing_factor)
    arrays, _ = unpacked_batch(counts, B=B, S=S, M=M, vocab_size=FLAGS.vocab_size,
                               seed=FLAGS.seed)
    packed = packed_batch(plan, B=B, S=S, M=M, vocab_size=FLAGS.vocab_size, seed=FLAGS.seed)
    batches = {"keras-hub": keras_hub_features(arrays), "packed": packed,
               "unpacked": our_unpacked_features(arrays)}
    results = []
    for num_layers in map(int, FLAGS.num_layers):
        rows = summarise(measure(num_layers, keras_hub, batches), plan.packing_factor)
        for row in rows:
            logging.info("L=%d %s: packed/keras-hub %.4f, unpacked/keras-hub %.4f",
                         num_layers, row["clock"], row["packed"][0], row["unpacked"][0])
        results.append((num_layers, rows))
    publish_section("peer_benchmark",
                    "Packed BERT against keras-hub's BertMaskedLM, step time (CPU)",
                    markdown(results, plan, int(tf.math.count_nonzero(packed["input_mask"])),
                             int(arrays["input_mask"].sum())),
                    subsection=configuration(CONFIGURATION_FLAGS))


if __name__ == "__main__":
    app.run(main)
