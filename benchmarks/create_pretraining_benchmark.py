r"""create_pretraining_data against google-research/bert's reference, per core.

    python benchmarks/create_pretraining_benchmark.py --write_markdown=BENCHMARKS.md

Runs, one process at a time and interleaved round by round:

* the reference: ``python -m bert.create_pretraining_data``, google-research/bert's
  tool as the `bert-tensorflow` package ships it, unmodified (the ``reference``
  extra: ``pip install -e '.[reference]'``; pure-Python ``FullTokenizer``, one
  ``tf.train.Example`` per instance);
* ours: ``python -m data_prep.create_pretraining_data`` with one worker
  (``RAYON_NUM_THREADS=1``, so `tokenizers` tokenizes on one core too);
* for each tool, a bare process that only imports what the tool imports
  before any work (the reference: its module, which imports TensorFlow; ours:
  its own module, which imports no TensorFlow when the files are local): its
  start-up, subtracted for the "less start-up" rates;
* ours on the same text split into --num_files files, with --num_workers=1
  and with --num_workers=2 (the same bytes either way; checked).

on the builtin corpus (``python -m data_prep.builtin_corpus``: text from
Python's own docs), with a WordPiece vocabulary of --vocab_size trained on
it, the same flags and seed for both tools. Each run is timed by the wall
clock and by the CPU time of its process tree (``os.wait4``): instances per
CPU second is the rate per core. After the runs, the reference's records and
ours are read back and compared (the same instances are expected: one input
file; see ``tests/data_prep/test_reference_bert_equivalence.py``).
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

# Modules of benchmarks/, beside this script:
from common import (
    ENVIRONMENT,
    REPOSITORY,
    configuration,
    define_write_markdown,
    publish_section,
    section_header,
)

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_create_pretraining_benchmark",
                    "Where the corpus, the vocabulary and the outputs go.")
flags.DEFINE_integer("rounds", 2, "Rounds of runs (each tool once a round); the "
                     "fastest of each is reported.")
flags.DEFINE_integer("vocab_size", 8000, "WordPiece vocabulary trained on the corpus.")
flags.DEFINE_integer("max_seq_length", 128, "As the tools' flag.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "As the tools' flag.")
flags.DEFINE_integer("dupe_factor", 10, "As the tools' flag.")
flags.DEFINE_integer("random_seed", 12345, "As the tools' flag.")
flags.DEFINE_integer("num_files", 4, "Files the corpus is split into for the "
                     "--num_workers runs (by documents, in turn).")
define_write_markdown()

SHOWN_FLAGS = ("vocab_size", "max_seq_length", "max_predictions_per_seq", "dupe_factor",
               "random_seed", "rounds", "num_files")
# The flags that make a configuration: a subsection of this script's section each
# (`common.configuration`); --rounds repeats a configuration.
CONFIGURATION_FLAGS = ("dupe_factor", "vocab_size", "max_seq_length",
                       "max_predictions_per_seq", "random_seed", "num_files")
STARTUP = {"reference": "import bert.create_pretraining_data",
           "ours": "import data_prep.create_pretraining_data"}
# How each tool reports its count: ours on stdout, the reference in its log (stderr).
INSTANCES = {"reference": re.compile(r"Wrote (\d+) total instances"),
             "ours": re.compile(r"-> ([\d,]+) instances")}


def prepare(work_dir):
    """The corpus (one file and --num_files files) and the vocabulary, once."""
    from packed_bert_tf.data import tokenization
    from packed_bert_tf.data.preparation import pretraining_instances

    os.makedirs(work_dir, exist_ok=True)
    corpus = os.path.join(work_dir, "corpus.txt")
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, "-m", "data_prep.builtin_corpus",
                        f"--output_file={corpus}"], env=ENVIRONMENT, check=True)
    documents = pretraining_instances.read_text_documents([corpus])
    vocab = os.path.join(work_dir, f"vocab-{FLAGS.vocab_size}.txt")
    if not os.path.exists(vocab):
        tokenization.train_wordpiece_vocab(
            [sentence for document in documents for sentence in document],
            FLAGS.vocab_size, vocab)
    parts = []
    for index in range(FLAGS.num_files):
        part = os.path.join(work_dir, "split", f"part-{index}.txt")
        os.makedirs(os.path.dirname(part), exist_ok=True)
        with open(part, "w", encoding="utf-8") as writer:
            writer.write("\n".join("\n".join(document) + "\n"
                                   for document in documents[index::FLAGS.num_files]))
        parts.append(part)
    megabytes = os.path.getsize(corpus) / 1e6
    return corpus, parts, vocab, len(documents), megabytes


def timed(command, environment):
    """Runs a command to the end; returns (stdout and stderr, wall seconds). Its
    CPU time (and its waited-for children's) is then in `os.times`' children
    fields."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPOSITORY)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return stdout + stderr, wall


class ChildTimes:
    """CPU seconds of the children finished since the last call."""

    def __init__(self):
        self.last = self._now()

    @staticmethod
    def _now():
        usage = os.times()
        return usage.children_user + usage.children_system

    def __call__(self):
        now = self._now()
        seconds, self.last = now - self.last, now
        return seconds


def main(argv):
    del argv
    if importlib.util.find_spec("bert") is None:
        sys.exit("the reference is the bert-tensorflow package: pip install -e '.[reference]'")
    work_dir = FLAGS.work_dir
    corpus, parts, vocab, num_documents, megabytes = prepare(work_dir)
    common = [f"--vocab_file={vocab}", f"--max_seq_length={FLAGS.max_seq_length}",
              f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
              f"--dupe_factor={FLAGS.dupe_factor}", f"--random_seed={FLAGS.random_seed}"]
    outputs = {name: os.path.join(work_dir, "out", name) for name in
               ("reference", "ours", "ours_files_w1", "ours_files_w2")}
    shutil.rmtree(os.path.join(work_dir, "out"), ignore_errors=True)
    for folder in outputs.values():
        os.makedirs(folder)
    one_core = dict(ENVIRONMENT, RAYON_NUM_THREADS="1")
    runs = {
        "startup_reference": ([sys.executable, "-c", STARTUP["reference"]], ENVIRONMENT),
        "startup_ours": ([sys.executable, "-c", STARTUP["ours"]], ENVIRONMENT),
        "reference": ([sys.executable, "-m", "bert.create_pretraining_data",
                       f"--input_file={corpus}",
                       f"--output_file={outputs['reference']}/train.tfrecord", *common],
                      ENVIRONMENT),
        "ours": ([sys.executable, "-m", "data_prep.create_pretraining_data",
                  f"--input_file={corpus}", f"--output_file={outputs['ours']}/train.tfrecord",
                  *common], one_core),
        "ours_files_w1": ([sys.executable, "-m", "data_prep.create_pretraining_data",
                           f"--input_file={os.path.dirname(parts[0])}/part-*.txt",
                           f"--output_file={outputs['ours_files_w1']}/train.tfrecord",
                           "--num_workers=1", *common], one_core),
        "ours_files_w2": ([sys.executable, "-m", "data_prep.create_pretraining_data",
                           f"--input_file={os.path.dirname(parts[0])}/part-*.txt",
                           f"--output_file={outputs['ours_files_w2']}/train.tfrecord",
                           "--num_workers=2", *common], one_core),
    }
    best = {name: (float("inf"), float("inf")) for name in runs}
    instances = {}
    cpu = ChildTimes()
    for round_index in range(FLAGS.rounds):
        for name, (command, environment) in runs.items():
            cpu()
            output, wall = timed(command, environment)
            seconds = cpu()
            best[name] = (min(best[name][0], wall), min(best[name][1], seconds))
            if not name.startswith("startup"):
                match = INSTANCES["reference" if name == "reference" else "ours"].search(
                    output)
                instances[name] = int(match.group(1).replace(",", ""))
            print(f"round {round_index + 1} {name:14} wall {wall:6.2f} s  CPU {seconds:6.2f} s"
                  + (f"  {instances[name]:,} instances" if name in instances else ""),
                  flush=True)

    same = compare(outputs)
    startup = {"reference": best["startup_reference"][1], "ours": best["startup_ours"][1]}
    rows, rates = [], {}
    labels = {
        "reference": ("google-research/bert (bert-tensorflow 1.0.4)", "1", "1"),
        "ours": ("ours", "1", "1"),
        "ours_files_w1": ("ours", str(FLAGS.num_files), "1"),
        "ours_files_w2": ("ours", str(FLAGS.num_files), "2"),
    }
    for name, (tool, files, workers) in labels.items():
        wall, seconds = best[name]
        count = instances[name]
        own_startup = startup["reference" if name == "reference" else "ours"]
        rates[name] = (count / seconds, count / max(seconds - own_startup, 1e-9))
        rows.append(f"| {tool} | {files} | {workers} | {count:,} | {wall:.1f} | "
                    f"{seconds:.1f} | {rates[name][0]:,.0f} | {rates[name][1]:,.0f} | "
                    f"{count / wall:,.0f} |")
    end_to_end = rates["ours"][0] / rates["reference"][0]
    less_startup = rates["ours"][1] / rates["reference"][1]
    workers_speedup = best["ours_files_w1"][0] / best["ours_files_w2"][0]
    print(f"per core, ours / reference: {end_to_end:.2f}x end to end, {less_startup:.2f}x "
          f"less start-up ({startup['reference']:.1f} and {startup['ours']:.1f} CPU s)")
    publish_section("create_pretraining_benchmark", "Making pre-training instances from "
                    "text (`data_prep.create_pretraining_data`) against "
                    "google-research/bert's tool", "\n".join([
        *section_header(f"Dupe factor {FLAGS.dupe_factor}", flags_shown=SHOWN_FLAGS),
        f"The builtin corpus ({num_documents:,} documents, {megabytes:.2f} MB of Python's "
        f"docs), a {FLAGS.vocab_size}-token WordPiece vocabulary trained on it, the same "
        "flags and seed for both tools. Each command run as a user runs it, one process "
        f"at a time, interleaved over {FLAGS.rounds} rounds (fastest of each); CPU s is "
        "the CPU time of the process and its children, so instances per CPU second is "
        "the rate per core. \"Less start-up\" subtracts the CPU time of a process that "
        "only imports what the tool imports before any work: its module (TensorFlow "
        f"among its imports) for the reference ({startup['reference']:.1f} s), our module "
        "for ours "
        f"({startup['ours']:.1f} s; it imports TensorFlow only for files that are not "
        "local). The reference is `python -m bert.create_pretraining_data` from the "
        "`bert-tensorflow` package (1.0.4), unmodified. Ours runs `tokenizers` on one "
        "thread (`RAYON_NUM_THREADS=1`).",
        "",
        "| tool | input files | workers | instances | wall s | CPU s | instances/s per "
        "core | per core, less start-up | instances/s (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows, "",
        f"Ours / reference, per core: **{end_to_end:.2f}x** end to end, "
        f"**{less_startup:.2f}x** less start-up. Same instances as the reference (one input "
        f"file, records read back and compared): {same['reference']}. "
        f"`--num_workers=2` on {FLAGS.num_files} files: the same bytes as one worker: "
        f"{same['workers']}; wall time of 1 worker / 2 workers: {workers_speedup:.2f} "
        "(2 cores, shared with other work while this ran; each spawned worker imports "
        "numpy and `tokenizers` and sends its arrays back).",
        "",
        "What matches the reference, and what does not "
        "(`tests/data_prep/test_reference_bert_equivalence.py`): tokenization is "
        "identical (`tokenizers`' BertNormalizer, BertPreTokenizer and WordPiece with "
        "BERT's 200-character word limit against `BasicTokenizer` + "
        "`WordpieceTokenizer`); on one input file the instances are identical for any "
        "seed (tokens, segment ids, `is_random_next`, masked positions and labels, and "
        "the round-robin split into output files): our loop makes the same draws from "
        "the same `random.Random` in the same order. The package predates "
        "google-research/bert's `--do_whole_word_mask`; our whole-word masking gives its "
        "instances on text whose words do not split into pieces (where google-research/"
        "bert's whole-word masking makes the draws of its piece masking); elsewhere it "
        "is tested for what it must do (every piece of a masked word masked). "
        "On several input files they differ by design: we make instances per file "
        "(file i seeded `random_seed + i`, random next segments from its own documents) "
        "so that `--num_workers` cannot change the output, then put all files' "
        "instances in one order seeded by `--random_seed`; the reference draws from one "
        "pool of all files with one generator (and runs a file's last document on into "
        "the next file when the file does not end with a blank line). Each file's "
        "instances are exactly the reference's run on that file alone with seed "
        "`random_seed + i`. The record bytes differ: the reference writes each "
        "Example's features in insertion order, we write them in sorted key order (as "
        "`SerializeToString(deterministic=True)`); the parsed records are equal.",
        "",
        "Where the time goes (ours, `cProfile` and timings of each phase): making "
        "instances is about 23 us an instance, about 40 % of it the Fisher-Yates "
        "shuffle of each instance's candidate positions, whose draws (one "
        "`getrandbits` per position, with rejections: about 150 an instance) must be "
        "the reference's to give its instances. The masker shuffles only as far as the "
        "positions it masks (the same draws, fewer moves), `randint`'s draws take one "
        "Python call, values are gathered in lists (extending an `array.array` "
        "converts int by int) and the cyclic garbage collector is paused meanwhile; "
        "fetching the random words in batches (`getrandbits(32 * m)`) is slower in "
        "Python (shifting each 32-bit word costs as much as a call). Arrays from the "
        "instances about 0.1 s; tokenization about 0.7 s per pass over this text; "
        "encoding and writing about 2.3 us an instance (the C extension). The "
        "reference makes each instance in Python too, then builds and writes a "
        "`tf.train.Example` for each, tokenizes the text once in pure Python, and "
        "imports TensorFlow (its start-up above). The ratio therefore falls as "
        "--dupe_factor grows (the "
        "passes over the same tokenized text are where the two are closest).",
    ]), subsection=configuration(CONFIGURATION_FLAGS))


def compare(outputs) -> dict:
    """Whether the reference's instances equal ours, and the worker runs' bytes agree."""
    from packed_bert_tf.data.records import record_files
    from packed_bert_tf.data.records.record_format import RecordFormat

    record_format = RecordFormat.unpacked(FLAGS.max_seq_length,
                                          FLAGS.max_predictions_per_seq)
    theirs = record_files.read_arrays(os.path.join(outputs["reference"], "train.tfrecord"),
                                      record_format)
    ours = record_files.read_arrays(os.path.join(outputs["ours"], "train.tfrecord"),
                                    record_format)
    same_instances = all(np.array_equal(theirs[name], ours[name]) for name in theirs)

    def data(name):
        with open(os.path.join(outputs[name], "train.tfrecord"), "rb") as reader:
            return reader.read()

    return {"reference": "yes" if same_instances else "NO",
            "workers": "yes" if data("ours_files_w1") == data("ours_files_w2") else "NO"}


if __name__ == "__main__":
    app.run(main)
