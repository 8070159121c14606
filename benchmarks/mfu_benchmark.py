r"""MFU benchmark: model FLOPs utilisation of BERT-base training, packed and padded.

    python benchmarks/mfu_benchmark.py --write_markdown=BENCHMARKS.md

Both arms train `BertPretrainingModel` (LAMB, the pre-training loss) through
the shared trainer and loop (`packed_bert_tf.training.loop.run_training`),
on sequences drawn from the Wikipedia length histogram of the packing paper
(``wikipedia_512``) with random tokens:

* packed: the sequences first-fit into rows of S tokens, at most D a row,
  the packed model (block-diagonal attention);
* padded: one sequence a row, the standard model (the padding mask).

Each arm runs one step (tracing and compiling) and then ``--steps`` timed
steps of ``--batch_size`` rows; its model FLOPs per second count the real
tokens alone (`packed_bert_tf.training.flops`: 6 N per token plus attention
over each sequence's own length) and its MFU divides them by the peak of a
large matrix multiply in the same dtype, measured once in this process (or
``--peak_flops_per_second``). The defaults fit a CPU in a few minutes; on a
GPU, raise ``--batch_size`` and ``--steps`` (and ``--mixed_precision=bf16``).
"""

import time

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from packed_bert_tf.models import BertConfig, BertPretrainingModel
from packed_bert_tf.packing import load_histogram
from packed_bert_tf.pretraining.task import PRETRAINING_TASK
from packed_bert_tf.training.distribution import MIXED_PRECISION
from packed_bert_tf.training.flops import (
    ACCELERATOR_MATMUL_SIZE,
    CPU_MATMUL_SIZE,
    EncoderShape,
    Utilisation,
    run_peak,
)
from packed_bert_tf.training.loop import LoopIntervals, run_training
from packed_bert_tf.training.optimizers import create_optimizer
from packed_bert_tf.training.progress import TrainingLogger
from packed_bert_tf.training.startup import mixed_precision_policy
from packed_bert_tf.training.trainer import Trainer

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
define_model_size_flags(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072,
                        vocab_size=30522, model="BERT-base")
flags.DEFINE_integer("sequence_length", 512, "S, tokens per row.")
flags.DEFINE_integer("batch_size", 2, "Rows per step (packs, or padded sequences).")
flags.DEFINE_integer("steps", 3, "Timed steps per arm, after one that compiles.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "D.")
flags.DEFINE_integer("max_predictions_per_seq", 76,
                     "Masked-LM slots per sequence (MLPerf's 76 at S = 512); a pack "
                     "has this many plus D - 1.")
flags.DEFINE_string("histogram", "wikipedia_512",
                    "The length histogram the sequences are drawn from (a name or a file).")
flags.DEFINE_enum("mixed_precision", "none", list(MIXED_PRECISION),
                  "Compute dtype of the model and of the measured peak.")
flags.DEFINE_bool("jit_compile", True, "XLA-compile the step.")
flags.DEFINE_float("peak_flops_per_second", None,
                   "The device's peak; default: measured (a large matrix multiply).")
flags.DEFINE_integer("seed", 0, "Seed of the lengths, tokens and weights.")
define_write_markdown()

ARMS = ("packed", "padded")


def draw_lengths(rng, count: int) -> np.ndarray:
    """``count`` sequence lengths from `--histogram`, cut at S."""
    counts = load_histogram(FLAGS.histogram).counts.astype(np.float64)
    lengths = rng.choice(np.arange(1, counts.size + 1), size=count, p=counts / counts.sum())
    return np.minimum(lengths, FLAGS.sequence_length)


def first_fit(lengths, sequence_length: int, max_sequences: int) -> list:
    """Rows of sequence indices: each sequence in the first row with room."""
    rows, room = [], []
    for index, length in enumerate(lengths):
        for row, free in enumerate(room):
            if free >= length and len(rows[row]) < max_sequences:
                rows[row].append(index)
                room[row] -= length
                break
        else:
            rows.append([index])
            room.append(sequence_length - length)
    return rows


def batch_of_rows(rng, lengths, rows) -> dict:
    """Pre-training features of ``rows`` (lists of sequence indices), random
    tokens, 15 % of each sequence masked: the packed layout (D = the most
    sequences a row holds)."""
    S = FLAGS.sequence_length
    D = max(len(row) for row in rows)
    M = FLAGS.max_predictions_per_seq + D - 1
    features = zero_packed_features(len(rows), S, D, M)
    for r, row in enumerate(rows):
        start, slot = 0, 0
        for d, index in enumerate(row):
            length = int(lengths[index])
            stop = start + length
            features["input_ids"][r, start:stop] = rng.integers(1, FLAGS.vocab_size, length)
            features["input_mask"][r, start:stop] = d + 1
            features["segment_ids"][r, start + length // 2:stop] = 1
            features["positions"][r, start:stop] = np.arange(length)
            masked = min(max(1, round(0.15 * length)), M - slot,
                         FLAGS.max_predictions_per_seq)
            offsets = start + np.sort(rng.choice(length, masked, replace=False))
            features["masked_lm_positions"][r, slot:slot + masked] = offsets
            features["masked_lm_ids"][r, slot:slot + masked] = rng.integers(
                1, FLAGS.vocab_size, masked)
            features["masked_lm_weights"][r, slot:slot + masked] = d + 1  # its sequence
            features["next_sentence_positions"][r, d] = start
            features["next_sentence_labels"][r, d] = rng.integers(0, 2)
            features["next_sentence_weights"][r, d] = 1
            start, slot = stop, slot + masked
    return features


def arm_batches(rng) -> dict:
    """Per arm, the features of each step ([1, B, ...]: one micro-batch an
    update): the padded arm a sequence a row, the packed arm the same kind of
    sequences first-fit (more of them: as many as fill its rows)."""
    B, steps = FLAGS.batch_size, FLAGS.steps + 1
    lengths = draw_lengths(rng, B * steps * FLAGS.max_sequences_per_pack)
    padded = [[index] for index in range(B * steps)]
    packed = first_fit(lengths, FLAGS.sequence_length, FLAGS.max_sequences_per_pack)
    batches = {}
    for arm, rows in (("packed", packed), ("padded", padded)):
        rows = rows[:B * steps]
        if len(rows) < B * steps:
            raise ValueError(f"{len(rows)} packed rows, expected {B * steps}")
        steps_features = [batch_of_rows(rng, lengths, rows[i * B:(i + 1) * B])
                          for i in range(steps)]
        # One D for all steps: the largest.
        slots = max(f["next_sentence_weights"].shape[1] for f in steps_features)
        masks = max(f["masked_lm_ids"].shape[1] for f in steps_features)
        batches[arm] = [_widen(f, slots, masks) for f in steps_features]
    return batches


def _widen(features: dict, slots: int, masks: int) -> dict:
    """Zero-pads the [B, D] and [B, M] features to ``slots`` and ``masks``; [1, B, ...]."""
    widened = {}
    for name, value in features.items():
        width = slots if name.startswith("next_sentence") else (
            masks if name.startswith("masked_lm") else value.shape[1])
        widened[name] = np.pad(value, ((0, 0), (0, width - value.shape[1])))[None]
    return widened


def train_arm(arm: str, steps_features: list, config: BertConfig,
              utilisation: Utilisation) -> dict:
    """One arm's run: its summary (`TrainingSummary.to_dict`) and wall time."""
    tf.keras.utils.set_random_seed(FLAGS.seed)
    model = BertPretrainingModel.from_bert_config(config, packed=arm == "packed")
    model.build()
    optimizer = create_optimizer("lamb", 1e-4, loss_scaling=FLAGS.mixed_precision == "fp16")
    trainer = Trainer(model, optimizer, task=PRETRAINING_TASK, jit_compile=FLAGS.jit_compile)
    stacked = {name: np.stack([f[name] for f in steps_features])
               for name in steps_features[0]}
    iterator = iter(tf.data.Dataset.from_tensor_slices(stacked))
    total = len(steps_features)
    logger = TrainingLogger(None, total, progress_bar=False, utilisation=utilisation)
    started = time.perf_counter()
    summary = run_training(trainer, iterator, num_train_steps=total,
                           intervals=LoopIntervals(iterations_per_loop=1,
                                                   log_every_n_steps=total),
                           logger=logger)
    logger.close()
    seconds = time.perf_counter() - started
    logging.info("%s: %d steps in %.1f s", arm, total, seconds)
    return summary.to_dict()


def run():
    config = BertConfig(**model_size(), max_position_embeddings=FLAGS.sequence_length)
    rng = np.random.default_rng(FLAGS.seed)
    batches = arm_batches(rng)
    results = {}
    with mixed_precision_policy(FLAGS.mixed_precision):
        peak = run_peak(FLAGS.peak_flops_per_second, FLAGS.mixed_precision)
        logging.info("peak: %.3e FLOPs per second (%s)", peak.flops_per_second, peak.source)
        utilisation = Utilisation(EncoderShape.of_config(config), peak)
        for arm in ARMS:
            results[arm] = train_arm(arm, batches[arm], config, utilisation)
    return config, utilisation, results


def markdown(config, utilisation: Utilisation, results: dict) -> str:
    B, S = FLAGS.batch_size, FLAGS.sequence_length
    peak = utilisation.peak
    on_gpu = bool(tf.config.list_logical_devices("GPU"))
    size = ACCELERATOR_MATMUL_SIZE if on_gpu else CPU_MATMUL_SIZE
    how = (f"measured: a {size} x {size} matrix multiply in {peak.dtype}"
           if peak.source == "measured" else "given by --peak_flops_per_second")
    lines = [
        *section_header(flags_shown=(*MODEL_SIZE_FLAGS, "sequence_length", "batch_size",
                                     "steps", "max_sequences_per_pack",
                                     "max_predictions_per_seq", "histogram",
                                     "mixed_precision", "jit_compile")),
        f"Config: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}, "
        f"vocab {config.vocab_size}; {B} rows x {S} tokens a step, "
        f"{FLAGS.steps} timed steps an arm after one that compiles; LAMB, "
        f"{'XLA' if FLAGS.jit_compile else 'no XLA'}, "
        f"{MIXED_PRECISION[FLAGS.mixed_precision]}. Sequences drawn from "
        f"`{FLAGS.histogram}`. N = {utilisation.encoder.parameters:,} encoder weights "
        f"(6 N FLOPs per real token, plus 12 L H l per token of a sequence of l).",
        f"Peak: {peak.flops_per_second:.3e} FLOP/s ({how}).",
        "",
        "| batching | sequences / step | occupancy | real tokens / s | model FLOP/s | "
        "MFU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm in ARMS:
        row = results[arm]
        sequences = row["steady_sequences"] / FLAGS.steps if FLAGS.steps else 0.0
        lines.append(f"| {arm} | {sequences:.2f} | {row['occupancy']:.4f} | "
                     f"{row['tokens_per_second']:,.0f} | "
                     f"{row['model_flops_per_second']:.3e} | {row['mfu']:.4f} |")
    packed, padded = results["packed"], results["padded"]
    lines += ["", f"Packed / padded: real tokens per second "
              f"{packed['tokens_per_second'] / padded['tokens_per_second']:.3f}x, "
              f"MFU {packed['mfu'] / padded['mfu']:.3f}x. Padding costs the padded arm "
              "its compute and earns it nothing; each packed row carries more real tokens "
              "for about the same step time. Timed by wall clock on a shared machine.", ""]
    return "\n".join(lines)


def main(argv):
    del argv
    config, utilisation, results = run()
    publish_section("mfu_benchmark", "Model FLOPs utilisation, BERT-base, packed and padded",
                    markdown(config, utilisation, results))


if __name__ == "__main__":
    app.run(main)
