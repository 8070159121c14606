r"""Fine-tuning accuracy, packed vs padded, over several seeds (SQuAD and classification).

    python benchmarks/fine_tuning_accuracy.py --write_markdown=BENCHMARKS.md

The paper's claim for fine-tuning, "the same accuracy", checked on data the
script makes itself (nothing is downloaded) and a tiny BERT trained from
scratch, through the front ends themselves: every run is a process of
``run_squad.py`` or ``run_classifier.py``.

The data, built once into ``--work_dir/data`` from the builtin corpus
(``python -m data_prep.builtin_corpus``: Python's own documentation),
deterministically; every ``--heldout_every``-th document goes to the dev
sets, the others to the training sets:

* ``squad``: SQuAD 1.1 JSON. A context is a run of ``--min_context_words`` to
  ``--max_context_words`` consecutive words of one document (long
  ones span several ``--doc_stride`` windows of ``--max_seq_length``
  tokens). The answer is a word of 3+ letters that occurs once in its
  context; its question names it (``find WORD``, a ``--lookup_fraction`` of
  the questions: easy) or is a cloze (``--cloze_words`` words either side of
  it, the word replaced by ``_``: hard for a tiny model from scratch), so
  that the exact match lands between the two.
* ``classifier``: GLUE's SST-2 layout (``train.tsv``, ``dev.tsv``): is the
  sentence as written (label 1) or backwards, its words in reverse order
  (label 0)? Every other sentence of 4+ words is reversed, so the labels
  are balanced. Word order is what a model sees through its positions,
  which packing restarts in every sequence of a row: a packed model that
  mixed up its sequences' positions, or attended across them, would fall
  behind.
* a WordPiece vocabulary of ``--vocab_size`` trained on the training text
  (``tokenizers``) and a BERT config of that vocabulary and the model-size
  flags (``bert_config.json``).

Then, for every seed of ``--seeds`` and every task of ``--tasks``, two runs
with the same hyper-parameters, seed, epochs, updates and sequences per
update: ``padded`` (``--batching=padded``, one sequence per row,
``--train_batch_size`` rows) and ``packed`` (``--batching=packed``, the
rows of a batch ``--train_batch_size`` divided by the task's packing
factor, rounded, so that an update holds about as many sequences, and the
updates of the task's epochs are about as many). Each run has a folder
of its own (``--work_dir/TASK/seedN/ARM``); a run whose folder holds its
``eval_results.json`` is read, not run again.

The report, per task: each seed's score (SQuAD: exact match and F1;
classification: accuracy), the mean and sample standard deviation of each
arm, and the difference of the means, packed - padded, with its 95 % Welch t
interval (`welch_interval`); the interval containing 0 is no evidence of a
gap. For SQuAD also how the packed runs' packs are made
(`squad_pack_sharing`): a run packs its features once, with its seed, and
reshuffles only the order of the packs each epoch, so features that share a
pack share every batch (unless ``--repack_each_epoch``: the packed arm packs
them anew every pass, and the table is its first pass); the count of packs
holding two windows or two questions of one context says whether one
context can weigh on a batch. ``report.json`` in ``--work_dir`` holds the
figures. Padded runs do not depend on ``--repack_each_epoch``: either value
reads the other's.

Both arms: AdamW, one micro-batch per update (``--steps_per_update=1``: the
loss of an update is the mean over its sequences in either arm), linear
warm-up over 10 % of the steps, the front ends' defaults otherwise.

SQuAD trains for ``--squad_num_train_epochs`` (10), the classifier for
``--classifier_num_train_epochs`` (3). The tiny model learns to find the
named word (the ``find WORD`` questions, most of them) in one jump, at an
update that differs from seed to seed: the start accuracy of the training
batches goes from about 0.1 to 0.5 somewhere between updates 300 and 900 at
the default learning rate. Three epochs (about 400 updates, the learning
rate down to 0 at the end) stop in the middle of that, so some seeds have
made the jump and others not: exact match 9 to 55 over 5 seeds in either
arm, a standard deviation of 18 to 20 points, an interval of packed - padded
55 points wide. SQuAD therefore trains 10 epochs (about 1,330 updates),
where most runs make the jump with updates to spare; a run that makes it
late, or not at all, still shows as an outlier, and the loss curves in each
run's ``run.log`` say when the jump came. The classifier trains 3 epochs
at a peak learning rate of its own, ``--classifier_learning_rate`` (5e-4):
at SQuAD's 2e-3, runs of either arm learnt the word order and then fell
back to chance (a dev accuracy of 50 %).
"""

import collections
import dataclasses
import json
import math
import os
import random
import re
import shutil
import sys

from absl import app, flags, logging

# Modules of benchmarks/, beside this script:
from common import (
    configuration,
    define_write_markdown,
    publish_section,
    run_tool,
    section_header,
)

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_fine_tuning_accuracy",
                    "The data (kept for the next run with the same data flags), the runs' "
                    "folders and logs, and report.json.")
define_write_markdown()
flags.DEFINE_list("tasks", ["squad", "classifier"], "Tasks: squad (run_squad.py) and/or "
                  "classifier (run_classifier.py).")
flags.DEFINE_list("seeds", [str(seed) for seed in range(1, 11)],
                  "Seeds (weights, dropout, packing, data order): each runs both arms.")
# Data.
flags.DEFINE_integer("max_documents", 600, "Documents of the builtin corpus.")
flags.DEFINE_integer("heldout_every", 10, "Every this-many-th document goes to the dev sets.")
flags.DEFINE_integer("min_context_words", 4, "Shortest SQuAD context, in words.")
flags.DEFINE_integer("max_context_words", 40, "Longest SQuAD context, in words.")
flags.DEFINE_integer("questions_per_context", 3, "Cloze questions per SQuAD context.")
flags.DEFINE_integer("cloze_words", 3, "Words of the question either side of the blank.")
flags.DEFINE_float("lookup_fraction", 0.75, "SQuAD: the fraction of questions that "
                   "name the answer (``find WORD``); the others are clozes.")
flags.DEFINE_integer("max_train_questions", 4000, "SQuAD training questions at most.")
flags.DEFINE_integer("max_dev_questions", 1000, "SQuAD dev questions at most.")
flags.DEFINE_integer("max_train_sentences", 6000, "Classification training sentences at "
                     "most.")
flags.DEFINE_integer("max_dev_sentences", 1000, "Classification dev sentences at most.")
flags.DEFINE_integer("vocab_size", 4000, "WordPiece vocabulary trained on the training text.")
flags.DEFINE_integer("data_seed", 12345, "Seed of the data (which words, which sentences).")
# Model and runs.
flags.DEFINE_integer("num_layers", 2, "Tiny BERT: transformer blocks.")
flags.DEFINE_integer("hidden_size", 128, "Tiny BERT: hidden size.")
flags.DEFINE_integer("num_heads", 2, "Tiny BERT: attention heads.")
flags.DEFINE_integer("intermediate_size", 512, "Tiny BERT: feed-forward width.")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per row, both tasks.")
flags.DEFINE_integer("doc_stride", 32, "SQuAD: tokens between window starts.")
flags.DEFINE_integer("max_query_length", 16, "SQuAD: question tokens kept.")
flags.DEFINE_integer("train_batch_size", 32, "Sequences per update (the padded arm's rows; "
                     "the packed arm's rows: this / the packing factor, rounded).")
flags.DEFINE_integer("max_sequences_per_pack", 3, "The packed arm's --max_sequences_per_pack.")
flags.DEFINE_bool("repack_each_epoch", False, "The packed arm's --repack_each_epoch: its "
                  "sequences packed anew every pass instead of once.")
flags.DEFINE_float("squad_num_train_epochs", 10.0, "Epochs of the SQuAD runs, both arms.")
flags.DEFINE_float("classifier_num_train_epochs", 3.0,
                   "Epochs of the classifier runs, both arms.")
flags.DEFINE_float("learning_rate", 2e-3, "Peak learning rate (AdamW) of the SQuAD runs, "
                   "both arms.")
flags.DEFINE_float("classifier_learning_rate", 5e-4, "Peak learning rate (AdamW) of the "
                   "classifier runs, both arms.")
flags.DEFINE_bool("jit_compile", True, "XLA, both arms.")

ARMS = ("packed", "padded")
SCORES = {"squad": ("exact_match", "f1"), "classifier": ("accuracy",)}
TITLES = {"squad": "SQuAD-format cloze (run_squad.py)",
          "classifier": "Word order, as written or reversed, SST-2 layout (run_classifier.py)"}
DATA_FLAGS = ("max_documents", "heldout_every", "min_context_words", "max_context_words",
              "questions_per_context", "cloze_words", "lookup_fraction", "max_train_questions",
              "max_dev_questions", "max_train_sentences", "max_dev_sentences", "vocab_size",
              "data_seed", "num_layers", "hidden_size", "num_heads", "intermediate_size",
              "max_seq_length")
RUN_FLAGS = ("doc_stride", "max_query_length", "train_batch_size", "max_sequences_per_pack",
             "squad_num_train_epochs", "classifier_num_train_epochs", "learning_rate",
             "jit_compile")
# Flags of one task's runs alone, in its runs' specs only.
TASK_FLAGS = {"squad": (), "classifier": ("classifier_learning_rate",)}
# Flags of the packed arm alone: a padded run is the same with any value, and
# its folder is read by either.
PACKED_FLAGS = ("repack_each_epoch",)
# A run's subsection of the section: these flags off their defaults (`configuration`).
CONFIGURATION_FLAGS = ("tasks", "seeds", *DATA_FLAGS, *RUN_FLAGS,
                       *TASK_FLAGS["classifier"], *PACKED_FLAGS)
# Per task: bump a task's version when the data a flag set makes for it
# changes (its runs are then made again, the other task's are kept).
DATA_VERSIONS = {"squad": 2, "classifier": 3}
_WORD = re.compile(r"[A-Za-z]{3,}")


# ------------------------------------------------------------------ statistics
def welch_interval(packed, padded, confidence: float = 0.95) -> dict:
    """The difference of two means, ``mean(packed) - mean(padded)``, with its
    Welch t interval (unequal variances; Welch-Satterthwaite degrees of freedom).

    Args:
      packed: the packed arm's scores, at least 2.
      padded: the padded arm's scores, at least 2.
      confidence: the interval's coverage.

    Returns:
      ``difference``, ``low``, ``high``, ``df``, ``contains_zero``; with no
      spread in either arm the interval is the difference itself.

    Raises:
      ValueError: an arm with fewer than 2 scores.
    """
    from scipy import stats

    if len(packed) < 2 or len(padded) < 2:
        raise ValueError(f"{len(packed)} packed and {len(padded)} padded scores: Welch's "
                         f"interval needs at least 2 per arm")
    summaries = [describe(scores) for scores in (packed, padded)]
    difference = summaries[0]["mean"] - summaries[1]["mean"]
    parts = [s["std"] ** 2 / s["n"] for s in summaries]  # squared standard errors
    error = math.sqrt(sum(parts))
    if error == 0:
        return dict(difference=difference, low=difference, high=difference, df=math.inf,
                    contains_zero=difference == 0)
    df = sum(parts) ** 2 / sum(p ** 2 / (s["n"] - 1) for p, s in zip(parts, summaries))
    half = stats.t.ppf(0.5 + confidence / 2, df) * error
    low, high = difference - half, difference + half
    return dict(difference=difference, low=low, high=high, df=df,
                contains_zero=bool(low <= 0 <= high))


def describe(scores) -> dict:
    """``n``, ``mean`` and sample standard deviation ``std`` (n - 1; 0 for one score)."""
    n = len(scores)
    mean = sum(scores) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in scores) / (n - 1)) if n > 1 else 0.0
    return dict(n=n, mean=mean, std=std)


# ------------------------------------------------------------------ data
def read_documents(path: str) -> list[list[str]]:
    """The documents of a documents-format text file (a sentence a line, a
    blank line between documents)."""
    documents, current = [], []
    with open(path, encoding="utf-8") as file:
        for line in file:
            line = " ".join(line.split())
            if line:
                current.append(line)
            elif current:
                documents.append(current)
                current = []
    if current:
        documents.append(current)
    return documents


def split_documents(documents, heldout_every: int):
    """(training documents, dev documents): every ``heldout_every``-th to dev."""
    dev = [d for i, d in enumerate(documents) if i % heldout_every == heldout_every - 1]
    train = [d for i, d in enumerate(documents) if i % heldout_every != heldout_every - 1]
    return train, dev


def cloze_questions(context_words, rng: random.Random, *, count: int,
                    cloze_words: int) -> tuple[str, list[dict]]:
    """A context and up to ``count`` cloze questions on it (SQuAD ``qas``, no id).

    The question is ``cloze_words`` words either side of a word of 3+ letters,
    the word replaced by ``_``; the answer is the word at its character offset.
    """
    context = " ".join(context_words)
    words = [(m.start(), m.group()) for m in re.finditer(r"\S+", context)]
    counts = collections.Counter(w.lower() for _, w in words)
    candidates = [i for i in range(cloze_words, len(words) - cloze_words)
                  if _WORD.fullmatch(words[i][1]) and counts[words[i][1].lower()] == 1]
    qas = []
    for i in sorted(rng.sample(candidates, min(count, len(candidates)))):
        start, answer = words[i]
        if rng.random() < FLAGS.lookup_fraction:  # the word itself: find it
            question = f"find {answer}"
        else:  # its neighbours: fill the blank
            question = " ".join([w for _, w in words[i - cloze_words:i]] + ["_"]
                                + [w for _, w in words[i + 1:i + 1 + cloze_words]])
        qas.append({"question": question, "answers": [{"text": answer,
                                                       "answer_start": start}]})
    return context, qas


def squad_json(documents, rng: random.Random, *, max_questions: int, prefix: str) -> dict:
    """SQuAD 1.1 JSON of questions on runs of the documents' words."""
    paragraphs, total = [], 0
    for document in documents:
        words = " ".join(document).split()
        start = 0
        while start < len(words) and total < max_questions:
            size = rng.randint(FLAGS.min_context_words, FLAGS.max_context_words)
            span = words[start:start + size]
            start += size
            context, qas = cloze_questions(span, rng, count=FLAGS.questions_per_context,
                                           cloze_words=FLAGS.cloze_words)
            qas = qas[:max_questions - total]
            for q in qas:
                q["id"] = f"{prefix}{total}"
                total += 1
            if qas:
                paragraphs.append({"context": context, "qas": qas})
    return {"version": "1.1", "data": [{"title": prefix, "paragraphs": paragraphs}]}


def word_order_sentences(documents, rng: random.Random, *,
                         max_sentences: int) -> list[tuple]:
    """(sentence, label) of at most ``max_sentences`` sentences of 4+ words of
    the documents (none that reads the same backwards), in random order:
    every other one as written (label ``1``), the others with their words in
    reverse order (label ``0``)."""
    sentences = [sentence for document in documents for sentence in document
                 if len(words := sentence.split()) >= 4 and words != words[::-1]]
    rng.shuffle(sentences)
    rows = []
    for i, sentence in enumerate(sentences[:max_sentences]):
        words = sentence.split()
        rows.append((" ".join(words[::-1]), "0") if i % 2 else (" ".join(words), "1"))
    return rows


def write_sst2(path: str, rows) -> None:
    """SST-2's TSV layout: a header, then the sentence and its label a row."""
    with open(path, "w", encoding="utf-8") as file:
        file.write("sentence\tlabel\n")
        file.writelines(f"{sentence}\t{label}\n" for sentence, label in rows)


def train_vocabulary(texts, path: str, vocab_size: int) -> int:
    """A lower-cased WordPiece ``vocab.txt`` of the texts; its size."""
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                  "[MASK]"])
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    with open(path, "w", encoding="utf-8") as file:
        file.write("".join(token + "\n" for token, _ in vocab))
    return len(vocab)


def data_spec(task: str | None = None) -> dict:
    """What makes the data (and the model's config): the data flags' values,
    and the version of the task's data (of every task's, without one)."""
    version = DATA_VERSIONS if task is None else DATA_VERSIONS[task]
    return {**{name: FLAGS[name].value for name in DATA_FLAGS}, "version": version}


def make_data(folder: str) -> dict:
    """The tasks' files in ``folder`` (kept while `data_spec` is the same)."""
    spec_path = os.path.join(folder, "spec.json")
    if os.path.exists(spec_path) and json.load(open(spec_path)) == data_spec():
        return json.load(open(os.path.join(folder, "data.json")))
    os.makedirs(folder, exist_ok=True)
    corpus = os.path.join(folder, "corpus.txt")
    run_tool([sys.executable, "-m", "data_prep.builtin_corpus", f"--output_file={corpus}",
              f"--max_documents={FLAGS.max_documents}"], os.path.join(folder, "corpus.log"))
    train_docs, dev_docs = split_documents(read_documents(corpus), FLAGS.heldout_every)
    rng = random.Random(FLAGS.data_seed)
    squad = {"train": squad_json(train_docs, rng, max_questions=FLAGS.max_train_questions,
                                 prefix="train"),
             "dev": squad_json(dev_docs, rng, max_questions=FLAGS.max_dev_questions,
                               prefix="dev")}
    for split, value in squad.items():
        with open(os.path.join(folder, f"squad_{split}.json"), "w") as file:
            json.dump(value, file)
    glue = os.path.join(folder, "SST-2")
    os.makedirs(glue, exist_ok=True)
    for split, documents, most in (("train", train_docs, FLAGS.max_train_sentences),
                                   ("dev", dev_docs, FLAGS.max_dev_sentences)):
        write_sst2(os.path.join(glue, f"{split}.tsv"),
                   word_order_sentences(documents, rng, max_sentences=most))
    vocab_size = train_vocabulary([s for d in train_docs for s in d],
                                  os.path.join(folder, "vocab.txt"), FLAGS.vocab_size)
    config = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "hidden_size": FLAGS.hidden_size,
              "initializer_range": 0.02, "intermediate_size": FLAGS.intermediate_size,
              "max_position_embeddings": FLAGS.max_seq_length,
              "num_attention_heads": FLAGS.num_heads, "num_hidden_layers": FLAGS.num_layers,
              "type_vocab_size": 2, "vocab_size": vocab_size}
    with open(os.path.join(folder, "bert_config.json"), "w") as file:
        json.dump(config, file, indent=2)
    data = {"squad_questions": {split: sum(len(p["qas"]) for p in value["data"][0]
                                           ["paragraphs"]) for split, value in squad.items()},
            "vocab_size": vocab_size}
    data["packing_factor"] = packing_factors(folder)
    with open(os.path.join(folder, "data.json"), "w") as file:
        json.dump(data, file, indent=2)
    with open(spec_path, "w") as file:
        json.dump(data_spec(), file)
    return data


def squad_pack_sharing(folder: str, seeds) -> list[dict]:
    """How the packed SQuAD runs' packs are made, per seed (each run packs with
    its seed, once, for all epochs): packs, those holding 2+ features, and
    those holding 2+ features of one context or of one question (windows)."""
    from packed_bert_tf.data.tokenization import WordPieceTokenizer
    from packed_bert_tf.squad.features import (
        convert_examples_to_features,
        read_squad_examples,
    )
    from packed_bert_tf.squad.packing import pack_features

    tokenizer = WordPieceTokenizer(os.path.join(folder, "vocab.txt"), do_lower_case=True)
    examples, _ = read_squad_examples(os.path.join(folder, "squad_train.json"),
                                      is_training=True)
    features, _ = convert_examples_to_features(
        examples, tokenizer, max_seq_length=FLAGS.max_seq_length,
        doc_stride=FLAGS.doc_stride, max_query_length=FLAGS.max_query_length,
        is_training=True)
    found = []
    for seed in seeds:
        packs = pack_features(features, max_sequences_per_pack=FLAGS.max_sequences_per_pack,
                              seed=seed)
        members = collections.defaultdict(list)  # pack -> its features' examples
        for feature, pack in enumerate(packs.sequence_pack):
            members[int(pack)].append(int(features.example_index[feature]))
        shared = [m for m in members.values() if len(m) > 1]
        found.append(dict(
            seed=seed, packs=packs.num_packs, features=packs.num_sequences,
            shared=len(shared),
            same_question=sum(len(set(m)) < len(m) for m in shared),
            same_context=sum(len({examples[e].paragraph_index for e in m}) < len(m)
                             for m in shared)))
    return found


def majority_accuracy(folder: str) -> float:
    """The classifier's dev accuracy, in percent, of always answering the
    commonest label: the floor its accuracy is read against."""
    with open(os.path.join(folder, "SST-2", "dev.tsv"), encoding="utf-8") as file:
        labels = [line.rstrip("\n").split("\t")[-1] for line in file][1:]
    return 100.0 * max(collections.Counter(labels).values()) / len(labels)


def packing_factors(folder: str) -> dict:
    """Each task's training packing factor, as the packed runs pack (seed 0)."""
    from packed_bert_tf.classification import glue
    from packed_bert_tf.classification import packing as classifier_packing
    from packed_bert_tf.classification.features import (
        convert_examples_to_features as classifier_features,
    )
    from packed_bert_tf.data.tokenization import WordPieceTokenizer
    from packed_bert_tf.squad import packing as squad_packing
    from packed_bert_tf.squad.features import (
        convert_examples_to_features as squad_features,
    )
    from packed_bert_tf.squad.features import read_squad_examples

    tokenizer = WordPieceTokenizer(os.path.join(folder, "vocab.txt"), do_lower_case=True)
    examples = read_squad_examples(os.path.join(folder, "squad_train.json"), is_training=True)
    examples = examples[0] if isinstance(examples, tuple) else examples
    features = squad_features(examples, tokenizer, max_seq_length=FLAGS.max_seq_length,
                              doc_stride=FLAGS.doc_stride,
                              max_query_length=FLAGS.max_query_length, is_training=True)[0]
    pack = dict(max_sequences_per_pack=FLAGS.max_sequences_per_pack)
    squad = squad_packing.pack_features(features, **pack).packing_factor
    task = glue.get_task("sst-2")
    sentences = classifier_features(glue.read_examples(task, os.path.join(folder, "SST-2"),
                                                   "train"), task, tokenizer,
                                FLAGS.max_seq_length)
    classifier = classifier_packing.pack_features(sentences, **pack).packing_factor
    return {"squad": float(squad), "classifier": float(classifier)}


# ------------------------------------------------------------------ runs
@dataclasses.dataclass(frozen=True)
class Run:
    """One run: a task, a seed, an arm, and its folder."""
    task: str
    seed: int
    arm: str
    folder: str


def rows_per_batch(arm: str, packing_factor: float) -> int:
    """``--train_batch_size`` of an arm: sequences per update over the rows' sequences."""
    if arm == "padded":
        return FLAGS.train_batch_size
    return max(1, round(FLAGS.train_batch_size / packing_factor))


def command(run: Run, data_dir: str, packing_factor: float) -> list[str]:
    """The front end's command line of a run."""
    learning_rate = (FLAGS.classifier_learning_rate if run.task == "classifier"
                     else FLAGS.learning_rate)
    common = [f"--bert_config_file={data_dir}/bert_config.json",
              f"--vocab_file={data_dir}/vocab.txt", "--do_lower_case",
              f"--max_seq_length={FLAGS.max_seq_length}", f"--output_dir={run.folder}",
              f"--batching={run.arm}", f"--max_sequences_per_pack={FLAGS.max_sequences_per_pack}",
              f"--train_batch_size={rows_per_batch(run.arm, packing_factor)}",
              f"--num_train_epochs={FLAGS[f'{run.task}_num_train_epochs'].value}",
              f"--learning_rate={learning_rate}", "--optimizer=adamw",
              f"--seed={run.seed}", f"--jit_compile={str(FLAGS.jit_compile).lower()}",
              "--save_checkpoints_steps=1000000", "--do_train"]
    if run.arm == "packed" and FLAGS.repack_each_epoch:
        common.append("--repack_each_epoch")
    if run.task == "squad":
        return [sys.executable, "run_squad.py", *common,
                f"--train_file={data_dir}/squad_train.json",
                f"--predict_file={data_dir}/squad_dev.json", "--do_predict",
                f"--doc_stride={FLAGS.doc_stride}",
                f"--max_query_length={FLAGS.max_query_length}", "--max_answer_length=10",
                "--predict_batch_size=64"]
    return [sys.executable, "run_classifier.py", *common, "--task_name=sst-2",
            f"--data_dir={data_dir}/SST-2", "--do_eval", "--eval_batch_size=64"]


def run_spec(run: Run) -> dict:
    """What makes a run: its task's `data_spec` and the run flags' values
    (``run.json``); the packed arm's own flags where off their defaults."""
    spec = {**data_spec(run.task), **{name: FLAGS[name].value
                                      for name in (*RUN_FLAGS, *TASK_FLAGS[run.task])}}
    if run.arm == "packed":
        spec.update({name: FLAGS[name].value for name in PACKED_FLAGS
                     if FLAGS[name].value != FLAGS[name].default})
    return spec


def read_scores(run: Run) -> dict | None:
    """A run's scores from its ``eval_results.json``, in percent (SQuAD's are
    already; the classifier's accuracy is a fraction), None when the run has
    not finished."""
    path = os.path.join(run.folder, "eval_results.json")
    if not os.path.exists(path):
        return None
    with open(path) as file:
        results = json.load(file)
    scale = 1.0 if run.task == "squad" else 100.0
    return {name: float(results[name]) * scale for name in SCORES[run.task]}


def run_once(run: Run, data_dir: str, packing_factor: float) -> dict:
    """The run's scores: read from its folder, or run (the front end) first.

    A folder made with other flags (``run.json``) is refused."""
    spec_path = os.path.join(run.folder, "run.json")
    spec = run_spec(run)
    if os.path.exists(spec_path) and json.load(open(spec_path)) != spec:
        raise ValueError(f"{run.folder} holds a run made with other flags: give another "
                         f"--work_dir")
    scores = read_scores(run)
    if scores is not None:
        logging.info("%s seed %d %s: read %s", run.task, run.seed, run.arm, scores)
        return scores
    if os.path.isdir(run.folder):  # an unfinished run starts afresh
        shutil.rmtree(run.folder)
    os.makedirs(run.folder)
    with open(spec_path, "w") as file:
        json.dump(spec, file)
    seconds = run_tool(command(run, data_dir, packing_factor),
                       os.path.join(run.folder, "run.log"))
    scores = read_scores(run)
    if scores is None:
        raise RuntimeError(f"{run.folder}: the run wrote no eval_results.json")
    logging.info("%s seed %d %s: %s in %.0f s", run.task, run.seed, run.arm, scores, seconds)
    return scores


def task_report(task: str, scores: dict) -> dict:
    """Per arm and score name: the per-seed values and `describe`; per score
    name the Welch interval of packed - padded.

    Args:
      task: ``squad`` or ``classifier``.
      scores: ``{arm: {seed: {score name: value}}}``.
    """
    report = {"arms": {}, "difference": {}}
    for arm in ARMS:
        per_seed = scores[arm]
        report["arms"][arm] = {
            name: {"seeds": {str(seed): per_seed[seed][name] for seed in sorted(per_seed)},
                   **describe([per_seed[seed][name] for seed in sorted(per_seed)])}
            for name in SCORES[task]}
    for name in SCORES[task]:
        values = [[scores[arm][seed][name] for seed in sorted(scores[arm])] for arm in ARMS]
        report["difference"][name] = (welch_interval(*values) if min(map(len, values)) > 1
                                      else None)
    return report


def markdown(reports: dict, data: dict) -> str:
    """The section's text: the header, the tables, the intervals."""
    key = configuration(CONFIGURATION_FLAGS)
    lines = section_header(None if key == "default" else key,
                           flags_shown=CONFIGURATION_FLAGS)
    lines += [f"Data: the builtin corpus's first {FLAGS.max_documents} documents; "
              f"SQuAD cloze questions {data['squad_questions']['train']:,} train / "
              f"{data['squad_questions']['dev']:,} dev; labelled sentences at most "
              f"{FLAGS.max_train_sentences:,} / {FLAGS.max_dev_sentences:,}; a WordPiece "
              f"vocabulary "
              f"of {data['vocab_size']:,}. Packing factor of the training rows: "
              + ", ".join(f"{task} {data['packing_factor'][task]:.2f} (packed rows per "
                          f"batch {rows_per_batch('packed', data['packing_factor'][task])} "
                          f"for {FLAGS.train_batch_size} padded)" for task in reports) + ".",
              ""]
    for task, report in reports.items():
        names = SCORES[task]
        lines += [f"#### {TITLES[task]}", "",
                  "| arm | seed | " + " | ".join(names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for arm in ARMS:
            seeds = report["arms"][arm][names[0]]["seeds"]
            for seed in seeds:
                lines.append(f"| {arm} | {seed} | " + " | ".join(
                    f"{report['arms'][arm][n]['seeds'][seed]:.2f}" for n in names) + " |")
            lines.append(f"| {arm} | mean ± sd (n={len(seeds)}) | " + " | ".join(
                f"{report['arms'][arm][n]['mean']:.2f} ± {report['arms'][arm][n]['std']:.2f}"
                for n in names) + " |")
        lines.append("")
        for name in names:
            d = report["difference"][name]
            if d is None:
                lines.append(f"- {name}: packed - padded: fewer than 2 seeds per arm.")
                continue
            verdict = ("contains 0: no evidence of a gap" if d["contains_zero"]
                       else "excludes 0: a gap")
            lines.append(f"- {name}: packed - padded = {d['difference']:+.2f}, 95 % Welch "
                         f"interval [{d['low']:+.2f}, {d['high']:+.2f}] "
                         f"(df {d['df']:.1f}); {verdict}.")
        if "majority_accuracy" in report:
            lines.append(f"- The commonest dev label alone scores "
                         f"{report['majority_accuracy']:.2f} % accuracy.")
        lines.append("")
        sharing = report.get("pack_sharing")
        if sharing:  # the packs of each packed run (fixed for every epoch, order reshuffled)
            lines += ["| packed seed | features | packs | packs of 2+ | of one context | "
                      "windows of one question |", "|---|---|---|---|---|---|"]
            lines += [f"| {f['seed']} | {f['features']:,} | {f['packs']:,} | {f['shared']:,} | "
                      f"{f['same_context']:,} | {f['same_question']:,} |" for f in sharing]
            lines.append("")
    return "\n".join(lines)


def main(argv):
    del argv
    unknown = set(FLAGS.tasks) - set(SCORES)
    if unknown:
        raise app.UsageError(f"--tasks: {sorted(unknown)} not among {sorted(SCORES)}")
    seeds = [int(seed) for seed in FLAGS.seeds]
    data_dir = os.path.abspath(os.path.join(FLAGS.work_dir, "data"))
    data = make_data(data_dir)
    logging.info("data: %s", data)
    reports = {}
    for task in FLAGS.tasks:
        scores = {arm: {} for arm in ARMS}
        for seed in seeds:  # seed by seed, both arms: a stopped benchmark is balanced
            for arm in ARMS:
                run = Run(task, seed, arm, os.path.abspath(
                    os.path.join(FLAGS.work_dir, task, f"seed{seed}", arm)))
                scores[arm][seed] = run_once(run, data_dir, data["packing_factor"][task])
        reports[task] = task_report(task, scores)
    if "squad" in reports:
        reports["squad"]["pack_sharing"] = squad_pack_sharing(data_dir, seeds)
    if "classifier" in reports:
        reports["classifier"]["majority_accuracy"] = majority_accuracy(data_dir)
    with open(os.path.join(FLAGS.work_dir, "report.json"), "w") as file:
        json.dump({"data": data, "tasks": reports}, file, indent=2)
    publish_section("fine_tuning_accuracy",
                    "Fine-tuning accuracy, packed vs padded, over seeds (CPU)",
                    markdown(reports, data), subsection=configuration(CONFIGURATION_FLAGS))


if __name__ == "__main__":
    app.run(main)
