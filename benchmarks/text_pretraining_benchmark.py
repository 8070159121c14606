r"""Pre-training straight from text against pre-packed records: sequences per second.

    python benchmarks/text_pretraining_benchmark.py --write_markdown=BENCHMARKS.md

The builtin corpus (Python's own documentation) is made into pre-training
records and packed offline, as ``make demo`` does (``create_pretraining_data``
with a trained 8,000-token vocabulary, then ``pack_pretraining_data``). The
same text then feeds the text pipeline of ``run_pretraining.py
--input_text_file``: tokenized, cut into sentence pairs, masked afresh and
packed on the fly as it is read. The trainer of ``run_pretraining.py`` with
the same model and the same rows per step trains on each, both in one
process, chunks of steps alternated so that both see the same machine (the
first chunk, which compiles, is left out). The figure to compare is the
sequences per second from text over those from the records (target >= 0.95).
The text pipeline's own rate, alone, is measured too.
"""

import glob
import json
import os
import shutil
import sys
import time

from absl import app, flags

# Modules of benchmarks/, beside this script:
from common import (
    define_model_size_flags,
    define_write_markdown,
    model_size,
    publish_section,
    run_tool,
    section_header,
)
from throughput import time_alternately

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_text_pretraining_benchmark",
                    "Generated data.")
define_write_markdown()
define_model_size_flags(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                        vocab_size=8000, model="Model")
flags.DEFINE_integer("max_seq_length", 128, "S.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "P.")
flags.DEFINE_integer("batch_size", 16, "Rows (packs) per step.")
flags.DEFINE_integer("steps_per_chunk", 10, "Steps per timed chunk.")
flags.DEFINE_integer("chunks", 10, "Timed chunks per input (alternated).")
flags.DEFINE_integer("pipeline_batches", 200, "Batches of the text pipeline timed alone.")

D = 3


def make_data(folder):
    """The corpus, its vocabulary and packed records (cached)."""
    S, P = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq
    marker = os.path.join(folder, "generated.json")
    spec = {"S": S, "P": P, "version": 1}
    if not (os.path.exists(marker) and json.load(open(marker)) == spec):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        run_tool([sys.executable, "-m", "data_prep.builtin_corpus",
                  f"--output_file={folder}/corpus.txt"], f"{folder}/corpus.log")
        run_tool([sys.executable, "-m", "data_prep.create_pretraining_data",
                  f"--input_file={folder}/corpus.txt",
                  f"--output_file={folder}/unpacked/train.tfrecord", "--vocab_size=8000",
                  f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
                  "--dupe_factor=2", "--random_seed=12345"], f"{folder}/create.log")
        run_tool([sys.executable, "-m", "data_prep.pack_pretraining_data",
                  f"--input_file={folder}/unpacked/train.tfrecord",
                  f"--output_dir={folder}/packed", f"--max_seq_length={S}",
                  f"--max_predictions_per_seq={P}", "--num_output_shards=2"],
                 f"{folder}/pack.log")
        json.dump(spec, open(marker, "w"))
    return {"corpus": os.path.join(folder, "corpus.txt"),
            "vocab": os.path.join(folder, "unpacked", "vocab.txt"),
            "packed": sorted(glob.glob(os.path.join(folder, "packed", "*.tfrecord"))),
            "stats": json.load(open(os.path.join(folder, "packed", "packing_stats.json")))}


def text_input(data):
    from packed_bert_tf.data.inputs.dynamic_masking import MaskingOptions
    from packed_bert_tf.data.inputs.text_dataset import TextInput
    from packed_bert_tf.data.inputs.text_sequences import TextSequenceOptions

    return TextInput((data["corpus"],), data["vocab"], True,
                     TextSequenceOptions("nsp", FLAGS.max_seq_length),
                     MaskingOptions(FLAGS.max_predictions_per_seq))


def make_trainers(data):
    """One trainer per input, as run_pretraining.py builds them."""
    import tensorflow as tf

    from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
    from packed_bert_tf.data.inputs.pretraining_dataset import Shuffling
    from packed_bert_tf.models import BertConfig, BertPretrainingModel
    from packed_bert_tf.pretraining import task
    from packed_bert_tf.training.optimizers import create_optimizer
    from packed_bert_tf.training.trainer import Trainer

    S, P = FLAGS.max_seq_length, FLAGS.max_predictions_per_seq
    config = BertConfig(**model_size(), max_position_embeddings=S)
    shuffling = Shuffling(seed=0, shuffle_buffer_size=1000)
    datasets = {
        "records": task.train_dataset_fn(
            data["packed"], global_batch_size=FLAGS.batch_size, steps_per_update=1,
            record_format=task.expected_record_format(
                data["packed"], max_seq_length=S, max_predictions_per_seq=P,
                max_sequences_per_pack=D), shuffling=shuffling),
        "text": task.text_train_dataset_fn(
            text_input(data), global_batch_size=FLAGS.batch_size, steps_per_update=1,
            shuffling=shuffling, pack_on_the_fly=PackOnTheFly(D, 10_000)),
    }
    trainers = {}
    for kind, dataset_fn in datasets.items():
        tf.keras.utils.set_random_seed(0)
        model = BertPretrainingModel.from_bert_config(config)
        model.build()
        trainer = Trainer(model, create_optimizer("lamb", 1e-4),
                          task=task.PRETRAINING_TASK, jit_compile=True)
        trainers[kind] = (trainer, iter(dataset_fn(tf.distribute.InputContext())))
    return trainers


def pipeline_rate(data):
    """Sequences per second of the text pipeline alone (batches of packs)."""
    import tensorflow as tf

    from packed_bert_tf.data.inputs.pack_dataset import PackOnTheFly
    from packed_bert_tf.data.inputs.pretraining_dataset import ReplicaBatches, Shuffling
    from packed_bert_tf.data.inputs.text_dataset import text_pretraining_dataset

    dataset = text_pretraining_dataset(
        text_input(data), FLAGS.batch_size,
        shuffling=Shuffling(seed=0, shuffle_buffer_size=1000),
        batches=ReplicaBatches(pack_on_the_fly=PackOnTheFly(D, 10_000)))
    iterator = iter(dataset)
    next(iterator)  # the first batch waits for the packing buffer
    sequences, start = 0.0, time.perf_counter()
    for _ in range(FLAGS.pipeline_batches):
        sequences += float(tf.reduce_sum(next(iterator)["next_sentence_weights"]))
    return sequences / (time.perf_counter() - start)


def markdown(figures, data):
    met = figures["ratio"] >= 0.95
    rows = figures["rows_per_second"]
    sequences = figures["sequences_per_second"]
    return "\n".join([
        *section_header(),
        f"The builtin corpus (Python's own documentation), S = {FLAGS.max_seq_length}, "
        f"P = {FLAGS.max_predictions_per_seq}, D = {D}: as records made by "
        f"`create_pretraining_data` (8,000-token vocabulary, dupe factor 2) and packed "
        f"offline by `pack_pretraining_data` (packing factor "
        f"{data['stats']['packing_factor']:.4f}), and as the same text read by "
        f"`--input_text_file` (sentence pairs with next-sentence prediction, masks drawn "
        f"afresh, packed on the fly over 10,000 sequences). Model: "
        f"{FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, {FLAGS.num_heads} "
        f"heads, intermediate {FLAGS.intermediate_size}; {FLAGS.batch_size} packs per "
        f"step, LAMB, XLA. One trainer per input in one process, chunks of "
        f"{FLAGS.steps_per_chunk} steps alternated ({FLAGS.chunks} timed chunks each, "
        f"after one of compilation).",
        "",
        "| | pre-packed records | from text |",
        "|---|---:|---:|",
        f"| rows/s | {rows['records']:.3f} | {rows['text']:.3f} |",
        f"| sequences per row in the batches timed | "
        f"{figures['sequences_per_row']['records']:.4f} | "
        f"{figures['sequences_per_row']['text']:.4f} |",
        f"| sequences/s | {sequences['records']:.2f} | {sequences['text']:.2f} |",
        "",
        f"From text over records: **{figures['ratio']:.3f}** of the sequences per second "
        f"(target >= 0.95: {'met' if met else 'NOT met'}); rows per second "
        f"{figures['rows_ratio']:.3f}. The text pipeline alone gives "
        f"{figures['pipeline_sequences_per_second']:,.0f} sequences/s (batches of "
        f"{FLAGS.batch_size} packs), {figures['pipeline_sequences_per_second'] / sequences['text']:.1f} "
        f"times what training takes. A step costs the same on either input (the rows "
        f"per second): the pipeline runs beside training without slowing it, and the "
        f"sequences per second differ by the packs each timed batch happens to hold.",
    ])


def main(argv):
    del argv
    data = make_data(os.path.join(FLAGS.work_dir, "data"))
    pipeline = pipeline_rate(data)
    totals = time_alternately(make_trainers(data), FLAGS.chunks, FLAGS.steps_per_chunk,
                              FLAGS.batch_size)
    figures = {
        "rows_per_second": {kind: t["rows"] / t["seconds"] for kind, t in totals.items()},
        "sequences_per_second": {kind: t["sequences"] / t["seconds"]
                                 for kind, t in totals.items()},
        "sequences_per_row": {kind: t["sequences"] / t["rows"] for kind, t in totals.items()},
        "pipeline_sequences_per_second": pipeline,
    }
    figures["ratio"] = (figures["sequences_per_second"]["text"]
                        / figures["sequences_per_second"]["records"])
    figures["rows_ratio"] = (figures["rows_per_second"]["text"]
                             / figures["rows_per_second"]["records"])
    print(json.dumps(figures, indent=2))
    publish_section("text_pretraining_benchmark", "Pre-training straight from text against "
                    "pre-packed records (the training loop of `run_pretraining.py`, CPU)",
                    markdown(figures, data))


if __name__ == "__main__":
    app.run(main)
