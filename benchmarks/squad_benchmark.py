r"""SQuAD fine-tuning throughput, packed vs unpacked (the training loop of run_squad.py).

    python benchmarks/squad_benchmark.py --write_markdown=BENCHMARKS.md

Feature lengths drawn from the paper's SQuAD-384 histogram, S = 384; the
same features packed (optimal plan, D = 3) and unpacked (one per row); the
same model and batch of rows; `packed_bert_tf.training.Trainer` with the SQuAD
task (what run_squad.py runs). Both trainers live in one process and their
chunks of steps alternate, so that both see the same machine; the first chunk
of each (compilation) is left out. Training examples (features) per second,
packed over unpacked, is compared with the packing factor.
"""

import numpy as np
from absl import app, flags

# Modules of benchmarks/, beside this script:
from common import (
    define_model_size_flags,
    define_write_markdown,
    model_size,
    publish_section,
    section_header,
)
from throughput import throughput_figures, time_alternately

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_features", 20_000, "Synthetic features.")
define_model_size_flags(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024)
flags.DEFINE_integer("batch_size", 8, "Rows per step.")
flags.DEFINE_integer("steps_per_chunk", 10, "Steps per timed chunk.")
flags.DEFINE_integer("chunks", 10, "Timed chunks per trainer (alternated).")
define_write_markdown()

S, D = 384, 3


def synthetic_features(num_features, seed=0):
    """SquadFeatures with lengths from the SQuAD-384 histogram, labels inside."""
    from packed_bert_tf.data.records import synthetic_records
    from packed_bert_tf.packing import load_histogram
    from packed_bert_tf.squad.features import SquadFeatures

    rng = np.random.default_rng(seed)
    lengths = synthetic_records.lengths_from_histogram(load_histogram("squad_1_1_384").counts,
                                                       num_features, seed=seed).astype(np.int32)
    lengths = np.maximum(lengths, 4)
    column = np.arange(S)[None, :]
    real = column < lengths[:, None]
    input_ids = np.where(real, rng.integers(1000, 30000, (num_features, S)), 0)
    question = np.minimum(lengths // 4, 64)
    segment_ids = ((column > question[:, None]) & real).astype(np.int8)
    start = question + (rng.random(num_features) * (lengths - question - 1)).astype(np.int32)
    end = np.minimum(start + rng.integers(0, 5, num_features), lengths - 1)
    zeros = np.zeros((num_features, S), np.int32)
    return SquadFeatures(input_ids=input_ids.astype(np.int32), segment_ids=segment_ids,
                         token_is_max_context=zeros.astype(np.int8),
                         token_char_start=zeros, token_char_end=zeros,
                         example_index=np.arange(num_features, dtype=np.int32),
                         doc_span_index=np.zeros(num_features, np.int32), length=lengths,
                         start_position=start.astype(np.int32),
                         end_position=end.astype(np.int32))


def make_trainer(packs, packed):
    import tensorflow as tf

    from packed_bert_tf.models import BertConfig, BertSquadModel
    from packed_bert_tf.squad import task
    from packed_bert_tf.training.fine_tuning import train_dataset_fn
    from packed_bert_tf.training.optimizers import create_optimizer
    from packed_bert_tf.training.trainer import Trainer

    config = BertConfig(**model_size(), max_position_embeddings=512)
    tf.keras.utils.set_random_seed(0)
    model = BertSquadModel.from_bert_config(config, packed=packed)
    model.build()
    trainer = Trainer(model, create_optimizer("adamw", 5e-5), task=task.SQUAD_TASK)
    dataset = train_dataset_fn(packs, global_batch_size=FLAGS.batch_size,
                               steps_per_update=1, seed=0)(
        tf.distribute.InputContext())
    return trainer, iter(dataset)


def markdown(packs, figures) -> str:
    """The subsection: both layouts' rows and padding, the throughputs and their ratio."""
    met = figures["ratio_over_packing_factor"] >= 0.95
    rows, epoch = figures["rows_per_second"], figures["epoch_sequences_per_second"]
    measured = figures["measured_sequences_per_second"]
    return "\n".join([
        *section_header(),
        f"{FLAGS.num_features:,} synthetic features with lengths drawn from the "
        f"SQuAD-384 histogram, S = {S}; packed: optimal plan, D = {D} "
        f"({packs['packed'].num_packs:,} rows, padding "
        f"{100 * packs['packed'].padding_fraction:.2f} %) vs unpacked "
        f"({packs['unpacked'].num_packs:,} rows, padding "
        f"{100 * packs['unpacked'].padding_fraction:.2f} %). Model: "
        f"{FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, {FLAGS.num_heads} "
        f"heads, intermediate {FLAGS.intermediate_size}; {FLAGS.batch_size} rows per "
        f"step, AdamW, XLA; the trainer of run_squad.py, one per layout in one "
        f"process, {FLAGS.chunks} alternated chunks of {FLAGS.steps_per_chunk} steps "
        "each after one chunk of compilation.",
        "",
        "| | unpacked | packed |",
        "|---|---:|---:|",
        f"| rows/s | {rows['unpacked']:.3f} | {rows['packed']:.3f} |",
        f"| training examples/s over an epoch (rows/s x packing factor) | "
        f"{epoch['unpacked']:.2f} | {epoch['packed']:.2f} |",
        f"| training examples/s in the batches timed | {measured['unpacked']:.2f} | "
        f"{measured['packed']:.2f} |",
        "",
        f"Packing factor {figures['packing_factor']:.4f} (the batches timed held "
        f"{figures['trained_packing_factor']:.4f} features per row). Speed-up "
        f"**{figures['ratio']:.3f} = {figures['ratio_over_packing_factor']:.3f} x the "
        f"packing factor** (target >= 0.95: {'met' if met else 'NOT met'}); in the "
        f"batches timed {figures['measured_ratio']:.3f}. A packed step costs "
        f"{1 / figures['rows_ratio']:.3f} x an unpacked one in wall time, "
        f"{1 / figures['cpu_rows_ratio']:.3f} x in CPU time.",
    ])


def main(argv):
    del argv
    from packed_bert_tf.squad.packing import pack_features

    features = synthetic_features(FLAGS.num_features)
    packs = {"unpacked": pack_features(features, packed=False),
             "packed": pack_features(features, max_sequences_per_pack=D)}
    trainers = {kind: make_trainer(packs[kind], kind == "packed") for kind in packs}
    totals = time_alternately(trainers, FLAGS.chunks, FLAGS.steps_per_chunk,
                              FLAGS.batch_size)
    figures = throughput_figures(totals, packs["packed"].packing_factor)
    publish_section("squad_benchmark", "SQuAD fine-tuning throughput, packed vs unpacked "
                    "(the training loop of `run_squad.py`, CPU)", markdown(packs, figures))


if __name__ == "__main__":
    app.run(main)
