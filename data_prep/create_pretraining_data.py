r"""Masked-LM / next-sentence pre-training records from text, as google-research/bert.

The flags and their meanings are those of google-research/bert's
``create_pretraining_data.py``, and so is the output: TFRecords of
``tf.train.Example`` in the unpacked format (see
``packed_bert_tf/data/records/record_format.py``), instances written round-robin to the
comma-separated ``--output_file`` list.

    python -m data_prep.create_pretraining_data \
        --input_file=corpus/*.txt --output_file=out/train.tfrecord \
        --vocab_file=uncased_L-12_H-768_A-12/vocab.txt \
        --max_seq_length=128 --max_predictions_per_seq=20 --masked_lm_prob=0.15 \
        --random_seed=12345 --dupe_factor=10

Input files hold one sentence per line and a blank line between documents
(``python -m data_prep.builtin_corpus`` writes one from Python's own docs).
Without ``--vocab_file``, ``--vocab_size`` trains a WordPiece vocabulary on
the input and writes it as ``vocab.txt`` beside the first output file.

Instances are made per input file, as the reference makes them for a run on
that file alone: file i (in sorted glob order) with its own
``random.Random(random_seed + i)``, its random next segments from its own
documents, its instances shuffled by that generator. With several files, all
files' instances are then put in one order by ``random.Random(random_seed)``
(one file: its order, so a one-file run is the reference's, instance for
instance). ``--num_workers`` processes make the files' instances in parallel;
the output is the same bytes for any number of workers. Differences from the
reference on several files: its one pool lets a random next segment come from
any file and a file's last document run on into the next file when the file
does not end with a blank line.

Files are written under temporary names and renamed when all are complete,
the trained vocabulary with the records, so a failed or interrupted run
leaves no file that looks finished and never records of one run beside the
vocabulary of another. An output that is also an input (the corpus,
``--vocab_file``) or another output is refused before any work, and so is a
second run writing the same files while the first one runs. Local output files are
written without TensorFlow (`packed_bert_tf.data.records.record_files`, by the C codec:
the same bytes, without TensorFlow's seconds of start-up); for other file systems (``gs://``, ...)
TensorFlow is imported, after the flags and the vocabulary are checked, so
mistakes there are reported at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import random
import signal
import sys
import time
from typing import Callable, NamedTuple

import numpy as np
from absl import app, flags, logging

from data_prep import tool_output
from packed_bert_tf import filesystem
from packed_bert_tf import output_files as output_files_module
from packed_bert_tf.data import tokenization
from packed_bert_tf.data.preparation import pretraining_instances
from packed_bert_tf.data.preparation.pretraining_instances import InstanceOptions
from packed_bert_tf.data.records.record_files import RecordWriter
from packed_bert_tf.tool_progress import Progress

#: Records serialised per batch.
WRITE_BATCH_SIZE = 4096
#: Instances shown in the log (BERT shows 20).
NUM_LOGGED_INSTANCES = 3
#: What writes the vocabulary that --vocab_size trains, in error lines.
TRAINED_VOCAB = "the vocabulary --vocab_size trains"


def define_flags():
    """Defines the tool's flags (only when run as a program, so importing the
    module defines nothing)."""
    # Required.
    flags.DEFINE_string(
        "input_file", None,
        "Input raw text file (or comma-separated list of files, globs allowed): "
        "one sentence per line, blank lines between documents.")
    flags.DEFINE_string(
        "output_file", None,
        "Output TF example file (or comma-separated list of files; instances "
        "are written to them in turn).")
    # Vocabulary: one of the two.
    flags.DEFINE_string("vocab_file", None,
                        "The vocabulary file that the BERT model was trained on.")
    flags.DEFINE_integer(
        "vocab_size", None,
        "Without --vocab_file: train a WordPiece vocabulary of this many tokens on "
        "the input and write it as vocab.txt beside the (first) output file. "
        "The model's vocab_size must match it.")
    # Other.
    flags.DEFINE_bool(
        "do_lower_case", True,
        "Whether to lower case the input text. Should be True for uncased models "
        "and False for cased models.")
    flags.DEFINE_bool("do_whole_word_mask", False,
                      "Whether to mask all of a word's WordPiece tokens together.")
    flags.DEFINE_integer(
        "max_seq_length", 128,
        "Maximum sequence length. Must match the training's max_seq_length.")
    flags.DEFINE_integer(
        "max_predictions_per_seq", 20,
        "Maximum number of masked LM predictions per sequence. Must match the "
        "training's max_predictions_per_seq.")
    flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
    flags.DEFINE_integer(
        "dupe_factor", 10,
        "Number of times to duplicate the input data (with different masks).")
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_float(
        "short_seq_prob", 0.1,
        "Probability of creating sequences which are shorter than the maximum "
        "length.")
    flags.DEFINE_integer(
        "num_workers", 1,
        "Processes that make instances, input files split among them (at most one "
        "per file). The output does not depend on it: input file i is always "
        "seeded random_seed + i.")
    flags.mark_flags_as_required(["input_file", "output_file"])


def create_pretraining_data(input_patterns: str, output_files: list[str], *,
                            vocab_file: str | None, vocab_size: int | None,
                            do_lower_case: bool, instance_options: InstanceOptions,
                            num_workers: int = 1,
                            report: Callable[[str], None] = logging.info) -> dict:
    """Reads, tokenizes, makes instances and writes them; returns a summary.

    Instances are made per input file by `num_workers` processes, as
    `instance_options` says, file ``index`` seeded ``random_seed + index``;
    see the module docstring. ``report`` gets a line when the long work
    starts (the tool prints it).

    Raises ValueError or OSError naming the flag or file at fault, before any
    work when an output is also an input or another output, or when another
    run holds one of the outputs (`output_files.output_lock`). A failure or an
    interrupt leaves no output file behind: every output, the trained
    vocabulary included, gets its name at the end, all together.
    """
    _check_arguments(output_files, vocab_file, vocab_size, num_workers)
    tokenizer = (tokenization.WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)
                 if vocab_file else None)
    input_files, megabytes = _input_files(input_patterns, output_files)
    trained_vocab = (None if tokenizer else
                     os.path.join(os.path.dirname(output_files[0]), "vocab.txt"))
    outputs = {"--output_file": output_files}
    if trained_vocab:
        outputs[TRAINED_VOCAB] = [trained_vocab]
    inputs = {"--input_file": input_files, "--vocab_file": [vocab_file] if tokenizer else []}
    output_files_module.check_outputs_apart(outputs, inputs)
    # Everything written from here on gets its name at the end, together, under
    # the outputs' locks (two runs into one place would mix their files).
    with contextlib.ExitStack() as stack:
        stack.enter_context(output_files_module.lock_outputs(outputs))
        logging.info("*** Reading from %d input files ***", len(input_files))
        for input_file in input_files:
            logging.info("  %s", input_file)
        report(f"reading {len(input_files)} input files ({megabytes:,.1f} MB) ...")
        if trained_vocab:
            # Read under its temporary name (by the workers too) until the end.
            vocab_file = stack.enter_context(output_files_module.renamed_at_exit(
                trained_vocab))
            tokenizer = _train_vocabulary(input_files, vocab_size, vocab_file,
                                          do_lower_case)

        start = time.perf_counter()
        seed = instance_options.random_seed
        tasks = [_FileTask(index, path, vocab_file, do_lower_case,
                           dataclasses.replace(instance_options, random_seed=seed + index))
                 for index, path in enumerate(input_files)]
        results = _make_instances(tasks, num_workers)
        if not sum(result.num_documents for result in results):
            raise ValueError(f"--input_file: no sentence of {', '.join(input_files)} "
                             f"has a token")
        arrays = merge_file_instances([result.arrays for result in results if
                                       result.arrays is not None], seed)
        seconds = time.perf_counter() - start
        _log_instances(arrays, tokenizer)
        _write_records(stack, output_files, arrays)
        # Every output gets its name now, in one step that an interrupt cannot split.
        with tool_output.completing([*output_files, *outputs.get(TRAINED_VOCAB, [])]):
            stack.close()
    return _summary(len(input_files), results, arrays, seconds,
                    trained_vocab or vocab_file, output_files)


def _check_arguments(output_files: list[str], vocab_file: str | None,
                     vocab_size: int | None, num_workers: int) -> None:
    """ValueError, naming the flag, for arguments that cannot go together."""
    if num_workers < 1:
        raise ValueError(f"--num_workers must be >= 1, got {num_workers}")
    if not output_files:
        raise ValueError("--output_file is empty")
    if vocab_file and vocab_size is not None:
        raise ValueError("give --vocab_file or --vocab_size, not both")
    if not vocab_file and vocab_size is None:
        raise ValueError("give --vocab_file (a BERT vocab.txt) or --vocab_size (to "
                         "train a vocabulary on the input)")


def _input_files(input_patterns: str, output_files: list[str]) -> tuple[list[str], float]:
    """The input files and their megabytes; makes the outputs' folders, so that an
    unwritable place fails before the work.

    Local outputs need no TensorFlow (seconds of start-up); for others it is
    imported only now that the flags and the vocabulary are good.
    """
    if all(map(filesystem.is_local, output_files)):
        input_files = filesystem.expand_file_patterns_with_glob(input_patterns, glob=glob.glob,
                                                                flag="input_file")
        folders = [path for path in input_files if os.path.isdir(path)]
        if folders:
            raise ValueError(f"--input_file: {folders[0]} is a folder (give its files)")
        megabytes = sum(os.path.getsize(path) for path in input_files) / 1e6
        try:
            for output_file in output_files:
                os.makedirs(os.path.dirname(output_file) or ".", exist_ok=True)
        except OSError as error:
            raise OSError(f"--output_file: {error.filename}: {error.strerror}") from None
        return input_files, megabytes
    import tensorflow as tf

    input_files = filesystem.expand_file_patterns(input_patterns, flag="input_file")
    megabytes = sum(tf.io.gfile.stat(path).length for path in input_files) / 1e6
    try:
        for output_file in output_files:
            filesystem.make_parent_dirs(output_file)
    except tf.errors.OpError as error:
        raise OSError(f"--output_file: {error.message}") from None
    return input_files, megabytes


def _write_records(stack: contextlib.ExitStack, output_files: list[str],
                   arrays: dict) -> None:
    """The instances, round-robin, into writers that `stack` completes."""
    logging.info("*** Writing to %d output files ***", len(output_files))
    for output_file in output_files:
        logging.info("  %s", output_file)
    writers = [stack.enter_context(RecordWriter(path)) for path in output_files]
    for writer, part in zip(writers, pretraining_instances.split_round_robin(
            arrays, len(output_files))):
        try:
            for begin in range(0, len(part["input_ids"]), WRITE_BATCH_SIZE):
                writer.write_arrays({name: values[begin:begin + WRITE_BATCH_SIZE]
                                     for name, values in part.items()})
        except OSError as error:
            raise OSError(f"--output_file: {writer.path}: "
                          f"{getattr(error, 'strerror', None) or error}") from None


def _summary(num_input_files: int, results: list["_FileInstances"], arrays: dict,
             seconds: float, vocab_file: str, output_files: list[str]) -> dict:
    """What `create_pretraining_data` returns."""
    num_instances = len(arrays["input_ids"])
    num_tokens = int(arrays["input_mask"].sum())
    return {"input_files": num_input_files,
            "documents": sum(result.num_documents for result in results),
            "sentences": sum(result.num_sentences for result in results),
            "instances": num_instances,
            "tokens": num_tokens,
            "mean_length": num_tokens / max(num_instances, 1),
            "masked_tokens": int(arrays["masked_lm_weights"].sum()),
            "random_next": int(arrays["next_sentence_labels"].sum()),
            "instances_per_second": num_instances / max(seconds, 1e-9),
            "vocab_file": vocab_file,
            "output_files": output_files}


def _train_vocabulary(input_files: list[str], vocab_size: int, vocab_file: str,
                      do_lower_case: bool) -> tokenization.WordPieceTokenizer:
    """Trains a WordPiece vocabulary on the input, writes it to ``vocab_file`` and
    returns its tokenizer."""
    start = time.perf_counter()
    text_documents = pretraining_instances.read_text_documents(input_files)
    vocab = tokenization.train_wordpiece_vocab(
        [sentence for document in text_documents for sentence in document],
        vocab_size, vocab_file, do_lower_case=do_lower_case)
    del text_documents
    logging.info("Trained a vocabulary of %d tokens in %.1f s", len(vocab),
                 time.perf_counter() - start)
    if len(vocab) != vocab_size:
        logging.warning("The vocabulary has %d tokens, not --vocab_size=%d",
                        len(vocab), vocab_size)
    return tokenization.WordPieceTokenizer(vocab_file, do_lower_case=do_lower_case)


def _make_instances(tasks: list["_FileTask"], num_workers: int) -> list["_FileInstances"]:
    """Each input file's instances, by ``num_workers`` processes, with a progress
    display (`tool_progress`): documents of one file, else files."""
    num_workers = min(num_workers, len(tasks))
    if len(tasks) == 1:
        with Progress("making instances", unit="documents") as progress:
            return [_instances_of_file(tasks[0], progress.update)]
    with Progress("making instances", total=len(tasks), unit="files") as progress:
        if num_workers == 1:
            results = []
            for task in tasks:
                results.append(_instances_of_file(task))
                progress.advance()
            return results
        # Imported here: a one-worker run has no use for it (start-up time).
        import multiprocessing

        with contextlib.ExitStack() as stack:
            # An interrupt waits until the pool has started, so that the pool
            # is always stopped: one that escaped its start would leave its
            # thread restarting workers while the interpreter shuts down.
            with tool_output.interrupts_held():
                # 'spawn': the workers start clean (this process has
                # TensorFlow's threads, which 'fork' would copy half-way); they
                # import no TensorFlow.
                pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(
                    num_workers, initializer=_start_worker,
                    initargs=(set(tokenization.REPORTED_REPEATS),)))
            results = []
            for result in pool.imap(_instances_of_file, tasks, chunksize=1):
                results.append(result)
                progress.advance()
            return results


class _FileTask(NamedTuple):
    """What a worker needs to make one input file's instances (``options``: with
    the file's own seed)."""
    index: int
    path: str
    vocab_file: str
    do_lower_case: bool
    options: InstanceOptions


class _FileInstances(NamedTuple):
    """One input file's instances (None: no sentence has a token)."""
    arrays: dict | None
    num_documents: int
    num_sentences: int


def _start_worker(reported_repeats: set[str]) -> None:
    """A worker tokenizes on its own core (`tokenizers` would use all of them),
    and says nothing of a vocabulary's repeated tokens that the tool has
    warned about."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    tokenization.REPORTED_REPEATS.update(reported_repeats)
    # Ctrl-C reaches the workers too; the tool stops them (SIGTERM), so that
    # none dies on its own and gets restarted by the pool meanwhile.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _instances_of_file(task: _FileTask, progress=None) -> _FileInstances:
    """Reads, tokenizes and makes the instances of one input file, as the
    reference does for a run on that file alone with ``task.options``
    (``progress``: `create_training_instances`'s)."""
    tokenizer = tokenization.WordPieceTokenizer(task.vocab_file,
                                                do_lower_case=task.do_lower_case)
    documents = pretraining_instances.tokenize_documents(
        pretraining_instances.read_text_documents([task.path]), tokenizer.encode_batch)
    if not documents:
        return _FileInstances(None, 0, 0)
    arrays = pretraining_instances.create_training_instances(
        documents, tokenizer.vocab, task.options, progress=progress)
    return _FileInstances(arrays, len(documents),
                          sum(len(document) for document in documents))


def merge_file_instances(parts: list[dict], random_seed: int) -> dict:
    """The instances of several files in one order: one part as it is; more
    concatenated in file order, then shuffled by ``random.Random(random_seed)``
    (stable across Python versions, unlike numpy's Generator streams)."""
    if len(parts) == 1:
        return parts[0]
    order = list(range(sum(len(part["input_ids"]) for part in parts)))
    random.Random(random_seed).shuffle(order)
    return {name: np.concatenate([part[name] for part in parts])[order]
            for name in parts[0]}


def _log_instances(arrays, tokenizer) -> None:
    """Logs the first instances, as BERT's tool does."""
    for row in range(min(NUM_LOGGED_INSTANCES, len(arrays["input_ids"]))):
        length = int(arrays["input_mask"][row].sum())
        num_masked = int(arrays["masked_lm_weights"][row].sum())
        logging.info("*** Example ***")
        logging.info("tokens: %s", " ".join(
            tokenizer.convert_ids_to_tokens(arrays["input_ids"][row, :length])))
        logging.info("masked_lm_positions: %s", " ".join(
            map(str, arrays["masked_lm_positions"][row, :num_masked])))
        logging.info("masked_lm_labels: %s", " ".join(tokenizer.convert_ids_to_tokens(
            arrays["masked_lm_ids"][row, :num_masked])))
        logging.info("next_sentence_labels: %d", arrays["next_sentence_labels"][row, 0])


@tool_output.one_line_on_interrupt("create_pretraining_data")
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    tool_output.quiet_unless_verbose()
    options = flags.FLAGS
    start = time.perf_counter()
    try:
        summary = create_pretraining_data(
            options.input_file,
            [name.strip() for name in options.output_file.split(",") if name.strip()],
            vocab_file=options.vocab_file, vocab_size=options.vocab_size,
            do_lower_case=options.do_lower_case,
            instance_options=InstanceOptions(**{
                field.name: getattr(options, field.name)
                for field in dataclasses.fields(InstanceOptions)}),
            num_workers=options.num_workers, report=lambda line: print(line, flush=True))
    except (ValueError, OSError) as error:
        sys.exit(f"create_pretraining_data: {error}")
    instances = summary["instances"]
    print(f"{summary['documents']:,} documents ({summary['sentences']:,} sentences) "
          f"from {summary['input_files']} input files -> {instances:,} instances, "
          f"{summary['tokens']:,} tokens, mean length {summary['mean_length']:.1f} of "
          f"{options.max_seq_length}")
    print(f"{summary['masked_tokens']:,} masked tokens "
          f"({summary['masked_tokens'] / max(instances, 1):.2f} per instance), "
          f"{summary['random_next'] / max(instances, 1):.1%} random next; "
          f"instances made at {summary['instances_per_second']:,.0f}/s, "
          f"{time.perf_counter() - start:.1f} s in all")
    print(f"vocabulary {summary['vocab_file']}")
    print(f"wrote {', '.join(summary['output_files'])}")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags

    define_flags()
    app.run(main, flags_parser=parse_flags)
