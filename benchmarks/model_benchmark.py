r"""Model benchmark: step time of packed BERT against standard (unpacked) BERT.

    python benchmarks/model_benchmark.py \
        --write_markdown=BENCHMARKS.md

Both models are `BertPretrainingModel` with the same config and weights, run
under XLA (``jit_compile=True``) on the same feature tensors (identical
shapes: a packed batch):

* packed: position embeddings gathered by ``positions``, block-diagonal
  [B, S, S] attention mask built from ``input_mask`` (``packed=True``);
* unpacked: standard BERT, positions 0..S-1 sliced from the table and the
  [B, 1, S] padding mask (``packed=False``).

The two are timed in interleaved repetitions (ABBA order) in one process, so
that the machine's noise hits both alike; the figure is the median over
repetitions of packed time / unpacked time, by wall clock and by the
process's CPU time. Two steps are timed: forward +
backward (gradients of the pre-training loss), and that plus an Adam update.
"""

import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from packed_bert_tf.models import BertConfig, BertPretrainingModel
from packed_bert_tf.models.bert_pretraining import pretraining_losses

# Modules of benchmarks/, beside this script:
from common import (
    MODEL_SIZE_FLAGS,
    define_model_size_flags,
    define_write_markdown,
    model_size,
    publish_section,
    section_header,
    zero_packed_features,
)

FLAGS = flags.FLAGS
# Model and data shapes.
define_model_size_flags(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                        vocab_size=30522, notes={"vocab_size": "BERT's uncased vocabulary."})
flags.DEFINE_integer("batch_size", 8, "B, packs per step.")
flags.DEFINE_integer("sequence_length", 512, "S.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "D.")
flags.DEFINE_integer("max_predictions_per_pack", 80, "M.")
# Timing.
flags.DEFINE_integer("repetitions", 30, "Interleaved repetitions per model and step.")
flags.DEFINE_integer("steps_per_repetition", 1, "Steps timed together in a repetition.")
flags.DEFINE_integer("seed", 0, "Seed of the weights and the synthetic batch.")
define_write_markdown()


def synthetic_packed_batch(rng, *, batch_size, sequence_length, max_sequences_per_pack,
                           max_predictions, vocab_size):
    """A packed batch of random tokens: 1..D sequences per row filling most of S."""
    B, S, D, M = batch_size, sequence_length, max_sequences_per_pack, max_predictions
    f = zero_packed_features(B, S, D, M)
    for row in range(B):
        count = int(rng.integers(1, D + 1))
        cuts = np.sort(rng.choice(np.arange(8, S - 8), count - 1, replace=False))
        end = int(rng.integers(S - 16, S + 1))
        bounds = np.concatenate([[0], cuts, [end]])
        slot = 0
        for d in range(count):
            start, stop = int(bounds[d]), int(bounds[d + 1])
            length = stop - start
            f["input_ids"][row, start:stop] = rng.integers(1, vocab_size, length)
            f["input_mask"][row, start:stop] = d + 1
            f["segment_ids"][row, start + length // 2:stop] = 1
            f["positions"][row, start:stop] = np.arange(length)
            masked = min(max(1, round(0.15 * length)), M - slot)
            offsets = start + np.sort(rng.choice(length, masked, replace=False))
            f["masked_lm_positions"][row, slot:slot + masked] = offsets
            f["masked_lm_ids"][row, slot:slot + masked] = rng.integers(1, vocab_size, masked)
            f["masked_lm_weights"][row, slot:slot + masked] = d + 1
            slot += masked
            f["next_sentence_positions"][row, d] = start
            f["next_sentence_labels"][row, d] = rng.integers(0, 2)
            f["next_sentence_weights"][row, d] = 1
    return {name: tf.constant(value) for name, value in f.items()}


def make_steps(model, optimizer):
    """XLA-compiled (forward + backward, forward + backward + Adam) for ``model``."""
    variables = model.trainable_variables

    def gradients(features):
        with tf.GradientTape() as tape:
            loss = pretraining_losses(features, model(features, training=True))["loss"]
        return loss, tape.gradient(loss, variables)

    @tf.function(jit_compile=True)
    def forward_backward(features):
        loss, grads = gradients(features)
        # A cheap reduction of every gradient keeps them all live.
        return loss + tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads]) * 0

    @tf.function(jit_compile=True)
    def train(features):
        loss, grads = gradients(features)
        optimizer.apply(grads, variables)
        return loss

    return {"forward+backward": forward_backward, "forward+backward+Adam": train}


def time_steps(step, features, count):
    """(wall seconds, process CPU seconds) per step, averaged over ``count`` steps."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        result = step(features)
    result.numpy()
    return ((time.perf_counter() - wall) / count, (time.process_time() - cpu) / count)


def run():
    config = BertConfig(**model_size(), max_position_embeddings=FLAGS.sequence_length)
    rng = np.random.default_rng(FLAGS.seed)
    features = synthetic_packed_batch(
        rng, batch_size=FLAGS.batch_size, sequence_length=FLAGS.sequence_length,
        max_sequences_per_pack=FLAGS.max_sequences_per_pack,
        max_predictions=FLAGS.max_predictions_per_pack, vocab_size=FLAGS.vocab_size)
    tf.random.set_seed(FLAGS.seed)
    models = {"packed": BertPretrainingModel.from_bert_config(config, packed=True),
              "unpacked": BertPretrainingModel.from_bert_config(config, packed=False)}
    models["packed"].build()
    models["unpacked"].build()
    models["unpacked"].set_weights(models["packed"].get_weights())
    steps = {}
    for name, model in models.items():
        optimizer = keras.optimizers.Adam(1e-4)
        optimizer.build(model.trainable_variables)
        for kind, step in make_steps(model, optimizer).items():
            start = time.perf_counter()
            step(features).numpy()  # compile
            step(features).numpy()  # warm up
            logging.info("%s %s: compiled and warmed up in %.1f s", name, kind,
                         time.perf_counter() - start)
            steps[kind, name] = step

    times = {key: [] for key in steps}
    for repetition in range(FLAGS.repetitions):
        for kind in ("forward+backward", "forward+backward+Adam"):
            order = ("packed", "unpacked") if repetition % 2 == 0 else ("unpacked", "packed")
            for name in order:
                times[kind, name].append(
                    time_steps(steps[kind, name], features, FLAGS.steps_per_repetition))
        logging.info("repetition %d/%d done", repetition + 1, FLAGS.repetitions)

    rows = []
    for kind in ("forward+backward", "forward+backward+Adam"):
        for clock, column in (("wall", 0), ("CPU", 1)):
            packed = np.array(times[kind, "packed"])[:, column]
            unpacked = np.array(times[kind, "unpacked"])[:, column]
            ratios = packed / unpacked
            low, high = np.percentile(ratios, [25, 75])
            rows.append(dict(kind=kind, clock=clock, packed_ms=1e3 * np.median(packed),
                             unpacked_ms=1e3 * np.median(unpacked),
                             ratio=float(np.median(ratios)), ratio_low=float(low),
                             ratio_high=float(high),
                             ratio_of_minima=float(packed.min() / unpacked.min())))
    real_tokens = int(tf.math.count_nonzero(features["input_mask"]))
    sequences = int(tf.reduce_sum(features["next_sentence_weights"]))
    return config, rows, real_tokens, sequences


def markdown(config, rows, real_tokens, sequences) -> str:
    B, S = FLAGS.batch_size, FLAGS.sequence_length
    lines = [
        *section_header(
            flags_shown=(*MODEL_SIZE_FLAGS, "batch_size", "sequence_length",
                         "max_sequences_per_pack", "max_predictions_per_pack", "repetitions",
                         "steps_per_repetition")),
        f"Config: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}, "
        f"vocab {config.vocab_size}; batch {B} x {S} tokens, "
        f"D = {FLAGS.max_sequences_per_pack}, M = {FLAGS.max_predictions_per_pack} "
        f"({sequences} sequences, {real_tokens} real tokens of {B * S}). "
        "Both models get the same feature tensors; the packed one gathers position "
        "embeddings by `positions` and masks attention block-diagonally ([B, S, S] "
        "from `input_mask`), the unpacked one slices positions 0..S-1 and uses the "
        "[B, 1, S] padding mask. Same weights, `jit_compile=True`, float32.",
        "",
        "| step | clock | packed ms (median) | unpacked ms (median) | packed / unpacked "
        "(median of interleaved pairs) | interquartile range | ratio of minima |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['kind']} | {row['clock']} | {row['packed_ms']:.1f} | "
            f"{row['unpacked_ms']:.1f} | "
            f"{row['ratio']:.4f} ({100 * (row['ratio'] - 1):+.2f} %) | "
            f"{row['ratio_low']:.4f} - {row['ratio_high']:.4f} | "
            f"{row['ratio_of_minima']:.4f} |")
    lines += ["", f"{FLAGS.repetitions} interleaved repetitions of "
              f"{FLAGS.steps_per_repetition} steps per model and step kind, after "
              "compilation and one warm-up step. Wall: elapsed time; CPU: this process's "
              "CPU time (all threads), less sensitive to other processes on the "
              "machine. The machine is shared and noisy: the ratio, measured in one "
              "run, is the figure to compare.", ""]
    return "\n".join(lines)


def main(argv):
    del argv
    config, rows, real_tokens, sequences = run()
    publish_section("model_benchmark", "Packed vs unpacked model step time (XLA, CPU)",
                    markdown(config, rows, real_tokens, sequences))


if __name__ == "__main__":
    app.run(main)
