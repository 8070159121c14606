r"""Writes the token lengths of the builtin corpus's documents as a histogram.

    python benchmarks/document_lengths.py \
        --output_file=packed_bert_tf/packing/paper_histograms/builtin_corpus_documents.json

Python's own documentation (``data_prep.builtin_corpus``: the help topics and
one document per standard-library module), a 30,522-token WordPiece
vocabulary trained on it, and every document tokenised whole, without
truncation: a real long-tailed distribution of document lengths, from which
`packed_bert_tf.packing.histograms.split_documents` synthesises the
long-context histograms of `packing_benchmark.py` (2048 to 8192 tokens). The
result depends on the Python version whose documentation it reads; the file
in the package names the one it was made with.
"""

import os
import platform
import tempfile

import numpy as np
from absl import app, flags

from data_prep import builtin_corpus
from packed_bert_tf.data import tokenization
from packed_bert_tf.json_files import write_json_atomically

FLAGS = flags.FLAGS
flags.DEFINE_string("output_file", None, "Histogram JSON to write.")
flags.DEFINE_integer("vocab_size", 30522, "WordPiece vocabulary size.")
flags.mark_flag_as_required("output_file")


def document_token_lengths(vocab_size: int) -> np.ndarray:
    """Tokens per document of the builtin corpus (no [CLS]/[SEP])."""
    with tempfile.TemporaryDirectory() as folder:
        corpus = os.path.join(folder, "corpus.txt")
        builtin_corpus.write_corpus(corpus)
        with open(corpus, encoding="utf-8") as reader:
            documents = [text.splitlines() for text in reader.read().split("\n\n")]
        lines = [line for document in documents for line in document]
        vocab = os.path.join(folder, "vocab.txt")
        tokenization.train_wordpiece_vocab(lines, vocab_size, vocab)
        tokenizer = tokenization.WordPieceTokenizer(vocab, do_lower_case=True)
        per_line = np.array([len(ids) for ids in tokenizer.encode_batch(lines)])
    ends = np.cumsum([len(document) for document in documents])
    return np.add.reduceat(per_line, ends - np.array([len(d) for d in documents]))


def main(argv):
    del argv
    lengths = document_token_lengths(FLAGS.vocab_size)
    counts = np.bincount(lengths, minlength=lengths.max() + 1)[1:]
    document = {
        "name": "builtin_corpus_documents",
        "description": (
            f"Tokens per document of the builtin corpus (Python {platform.python_version()}'s "
            f"help topics and one document per standard-library module, "
            f"python -m data_prep.builtin_corpus), WordPiece vocabulary of "
            f"{FLAGS.vocab_size:,} trained on it, lower-cased, no truncation, no "
            f"[CLS]/[SEP]: {lengths.size} documents, median {int(np.median(lengths))}, "
            f"longest {lengths.max()} tokens. Document lengths, not sequences: "
            f"packing.histograms.split_documents cuts them into sequences."),
        "source": "python benchmarks/document_lengths.py "
                  "--output_file=packed_bert_tf/packing/paper_histograms/"
                  "builtin_corpus_documents.json",
        "indexing": "counts[i] = number of documents of i+1 tokens",
        "max_sequence_length": int(lengths.max()),
        "counts": counts.tolist(),
    }
    write_json_atomically(FLAGS.output_file, document, indent=None)
    print(f"wrote {FLAGS.output_file}: {lengths.size} documents, "
          f"{lengths.sum():,} tokens, longest {lengths.max():,}")


if __name__ == "__main__":
    app.run(main)
