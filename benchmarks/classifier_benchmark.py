r"""Sentence-classification fine-tuning throughput, packed vs unpacked (run_classifier.py's loop).

    python benchmarks/classifier_benchmark.py --write_markdown=BENCHMARKS.md

The examples are real short sentences: those of Python's own documentation
(`data_prep.builtin_corpus`, the corpus the demo pre-trains on), tokenised
with a WordPiece vocabulary trained on them. Two GLUE shapes are measured:

* ``single``: one sentence per example, as SST-2 and CoLA;
* ``pair``: two neighbouring sentences of a document per example, as MRPC,
  RTE or QQP.

For each, the same examples are laid out packed (optimal plan, up to
--max_sequences_per_pack per row of S = --max_seq_length) and unpacked
(google-research/bert's: one example per row padded to S), and the trainer
of run_classifier.py (`Trainer` with the classification task) trains the same
model on each; both trainers live in one process and their chunks of steps
alternate, so that both see the same machine; the first chunk of each
(compilation) is left out. Training examples per second, packed over
unpacked, is compared with the packing factor (target: at least 0.95 x).
"""

import os
import tempfile

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
flags.DEFINE_list("shapes", ["single", "pair"],
                  "Example shapes measured: single (SST-2-like), pair (MRPC-like).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per row (S), as run_classifier.py.")
flags.DEFINE_integer("max_sequences_per_pack", None,
                     "Cap on examples per row (default: run_classifier.py's).")
flags.DEFINE_integer("wordpiece_vocab_size", 8000, "WordPiece vocabulary trained on the "
                     "corpus (also the model's vocab_size).")
define_model_size_flags(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024)
flags.DEFINE_integer("batch_size", 32, "Rows per step (run_classifier.py's "
                     "--train_batch_size default).")
flags.DEFINE_integer("steps_per_chunk", 10, "Steps per timed chunk.")
flags.DEFINE_integer("chunks", 8, "Timed chunks per trainer (alternated).")
flags.DEFINE_bool("jit_compile", True, "XLA-compile the trainers' steps, as run_classifier.py "
                  "does by default (--nojit_compile: a quick check of the script).")
define_write_markdown()


def corpus_examples(documents, shape):
    """InputExamples of a GLUE shape from the documents' sentences, in
    document order; the label (0/1: the example mentions "return") only makes
    the task a real one: it does not change the timing."""
    from packed_bert_tf.classification.glue import InputExample

    examples = []
    for document in documents:
        if shape == "single":
            texts = [(sentence, None) for sentence in document]
        else:
            texts = list(zip(document[:-1], document[1:]))
        for text_a, text_b in texts:
            label = str(int("return" in f"{text_a} {text_b or ''}".lower()))
            examples.append(InputExample(f"train-{len(examples)}", text_a, text_b, label))
    return examples


def make_trainer(packs, packed, vocab_size, task):
    import tensorflow as tf

    from packed_bert_tf.classification import task as classifier_task
    from packed_bert_tf.models import BertClassifierModel, BertConfig
    from packed_bert_tf.training.fine_tuning import train_dataset_fn
    from packed_bert_tf.training.optimizers import create_optimizer
    from packed_bert_tf.training.trainer import Trainer

    config = BertConfig(**{**model_size(), "vocab_size": vocab_size},
                        max_position_embeddings=512)
    tf.keras.utils.set_random_seed(0)
    model = BertClassifierModel.from_bert_config(config, task.num_labels, packed=packed)
    model.build()
    trainer = Trainer(model, create_optimizer("adamw", 5e-5),
                      task=classifier_task.classification_task(task.is_regression),
                      jit_compile=FLAGS.jit_compile)
    dataset = train_dataset_fn(
        packs, global_batch_size=FLAGS.batch_size, steps_per_update=1, seed=0)(
        tf.distribute.InputContext())
    return trainer, iter(dataset)


def measure(documents, shape, tokenizer, task, **pack_args):
    from packed_bert_tf.classification.packing import pack_examples

    examples = corpus_examples(documents, shape)
    packs = {kind: pack_examples(examples, task, tokenizer,
                                 max_seq_length=FLAGS.max_seq_length,
                                 packed=kind == "packed", **pack_args)
             for kind in ("unpacked", "packed")}
    trainers = {kind: make_trainer(packs[kind], kind == "packed", tokenizer.vocab_size,
                                   task) for kind in packs}
    totals = time_alternately(trainers, FLAGS.chunks, FLAGS.steps_per_chunk,
                              FLAGS.batch_size)
    return len(examples), packs, throughput_figures(totals, packs["packed"].packing_factor)


def table_row(shape, num_examples, packs, figures) -> str:
    packed, unpacked = packs["packed"], packs["unpacked"]
    epoch = figures["epoch_sequences_per_second"]
    mean_length = packed.sequence_length.mean()
    return (f"| {shape} | {num_examples:,} | {mean_length:.1f} | {unpacked.num_packs:,} "
            f"({100 * unpacked.padding_fraction:.1f} %) | {packed.num_packs:,} "
            f"({100 * packed.padding_fraction:.2f} %) | {figures['packing_factor']:.3f} | "
            f"{epoch['unpacked']:.1f} | {epoch['packed']:.1f} | "
            f"**{figures['ratio']:.3f}** | **{figures['ratio_over_packing_factor']:.3f}** | "
            f"{1 / figures['rows_ratio']:.3f} |")


def markdown(rows, max_sequences_per_pack) -> str:
    met = all(ratio >= 0.95 for ratio in rows.values())
    return "\n".join([
        *section_header(),
        "Examples: the sentences of Python's documentation (`data_prep.builtin_corpus`), "
        "one per example (single, as SST-2) or two neighbouring ones (pair, as MRPC), "
        f"tokenised with a {FLAGS.wordpiece_vocab_size:,}-token WordPiece vocabulary "
        f"trained on them, truncated as google-research/bert does to S = "
        f"{FLAGS.max_seq_length}. Packed: optimal plan, at most {max_sequences_per_pack} "
        "examples per row; unpacked: one example per row padded to S. Model: "
        f"{FLAGS.num_layers} layers, hidden {FLAGS.hidden_size}, {FLAGS.num_heads} heads, "
        f"intermediate {FLAGS.intermediate_size}; {FLAGS.batch_size} rows per step, "
        f"AdamW, {'XLA' if FLAGS.jit_compile else 'no XLA'}; the trainer of run_classifier.py, one per layout in one process, "
        f"{FLAGS.chunks} alternated chunks of {FLAGS.steps_per_chunk} steps each after "
        "one chunk of compilation. Examples/s over an epoch = rows/s x the layout's "
        "examples per row.",
        "",
        "| shape | examples | mean tokens | unpacked rows (padding) | packed rows (padding) "
        "| packing factor | unpacked examples/s | packed examples/s | speed-up | "
        "speed-up / packing factor | packed step cost / unpacked |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows.keys(),
        "",
        f"Target: speed-up >= 0.95 x the packing factor: {'met' if met else 'NOT met'}.",
    ])


def main(argv):
    del argv
    from data_prep.builtin_corpus import iter_documents
    from packed_bert_tf.classification.glue import get_task
    from packed_bert_tf.classification.packing import DEFAULT_MAX_SEQUENCES_PER_PACK
    from packed_bert_tf.data.tokenization import WordPieceTokenizer, train_wordpiece_vocab

    max_sequences_per_pack = FLAGS.max_sequences_per_pack or DEFAULT_MAX_SEQUENCES_PER_PACK
    task = get_task("sst-2")  # two labels; the shapes differ only in their texts
    documents = list(iter_documents())
    with tempfile.TemporaryDirectory() as directory:
        vocab_file = os.path.join(directory, "vocab.txt")
        sentences = [sentence for document in documents for sentence in document]
        train_wordpiece_vocab(sentences, FLAGS.wordpiece_vocab_size, vocab_file)
        tokenizer = WordPieceTokenizer(vocab_file)
    rows = {}
    for shape in FLAGS.shapes:
        num_examples, packs, figures = measure(
            documents, shape, tokenizer, task, max_sequences_per_pack=max_sequences_per_pack)
        rows[table_row(shape, num_examples, packs, figures)] = (
            figures["ratio_over_packing_factor"])
    publish_section("classifier_benchmark", "Sentence-classification fine-tuning "
                    "throughput, packed vs unpacked (the training loop of "
                    "`run_classifier.py`, CPU)", markdown(rows, max_sequences_per_pack))


if __name__ == "__main__":
    app.run(main)
