r"""MLPerf's BERT evaluation set: records picked evenly through unpacked records.

    python -m data_prep.pick_eval_samples --input_tfrecord=eval_intermediate \
        --output_tfrecord=eval_10k --num_examples_to_pick=10000 \
        --max_seq_length=512 --max_predictions_per_seq=76

The flags, their defaults and the records picked are those of MLPerf's BERT
``cleanup_scripts/pick_eval_samples.py``: of the T input records, the N picked
are records ``int(i * (T / N))`` for i = 0 .. N-1, in that order. The
quotient is taken first, in floating point, as MLPerf's script takes it, and
that is not always the exact ``floor(i * T / N)``: for T = 30 and N = 22 the
twelfth pick is record 14, not 15 (see `pick_indices`).

The output is one TFRecord file in the unpacked MLPerf format (the seven
features of ``packed_bert_tf/data/records/record_format.py``), each record the picked
input record's values, features that the format does not have left out, as
MLPerf's script writes them; ``python -m data_prep.pack_pretraining_data``
packs it like any other unpacked records. Local files are read and written
by the C codec, without TensorFlow, in the bytes that
``create_pretraining_data`` writes: a record it wrote comes out byte for
byte.

Every input record is read and checked against ``--max_seq_length`` and
``--max_predictions_per_seq`` before anything is written. More records asked
for than the input holds, a record of another length, a corrupt record: one
line naming the flag, file and record, exit status 1, no output. The output
is written under a temporary name and renamed when complete.

MLPerf's script reads one file. ``--input_tfrecord`` here also takes a glob or
comma-separated globs, whose files are read as one sequence of records in
sorted order (the pick of their concatenation); one file is MLPerf's case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import re
import sys

import numpy as np
from absl import app, flags

from data_prep import tool_output
from packed_bert_tf import filesystem, output_files
from packed_bert_tf.data.records.record_files import RecordError, RecordWriter, iter_array_batches
from packed_bert_tf.data.records.record_format import RecordFormat
from packed_bert_tf.tool_progress import Progress

FLAGS = flags.FLAGS
TOOL = "pick_eval_samples"

#: Records read per batch.
READ_BATCH_SIZE = 4096


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    # Required.
    flags.DEFINE_string(
        "input_tfrecord", None,
        "Input tfrecord path: unpacked pre-training records (create_pretraining_data's "
        "output). Also a glob or comma-separated globs, read as one sequence of "
        "records in sorted file order.")
    flags.DEFINE_string("output_tfrecord", None, "Output tfrecord path (one file).")
    # Other.
    flags.DEFINE_integer("num_examples_to_pick", 10000,
                         "Number of examples to pick (MLPerf's evaluation set: 10000).")
    flags.DEFINE_integer(
        "max_seq_length", 512,
        "The maximum number of tokens within a sequence. Must match data generation "
        "(create_pretraining_data's --max_seq_length).")
    flags.DEFINE_integer(
        "max_predictions_per_seq", 76,
        "The maximum number of predictions within a sequence. Must match data "
        "generation (create_pretraining_data's --max_predictions_per_seq).")
    flags.mark_flags_as_required(["input_tfrecord", "output_tfrecord"])


def pick_indices(num_records: int, num_to_pick: int) -> np.ndarray:
    """The records MLPerf's ``pick_eval_samples.py`` picks, in its order.

    The quotient ``T / N`` is a Python float and the product is truncated, as
    in MLPerf's script; the exact ``floor(i * T / N)`` differs where the
    rounded quotient falls just below the exact one (T = 30, N = 22, i = 11:
    14.999... -> 14). The picks stay distinct: the quotient is at least 1.

    Args:
      num_records: T, the records of the input.
      num_to_pick: N, 1 <= N <= T.

    Returns:
      np.ndarray, [N] int64, record ``int(i * (T / N))`` for i = 0 .. N-1:
      strictly increasing, the first 0.

    Raises:
      ValueError: N < 1, or N > T (naming both numbers).

    Example:
      >>> pick_indices(10, 4).tolist()
      [0, 2, 5, 7]
      >>> int(pick_indices(30, 22)[11])
      14
    """
    if num_to_pick < 1:
        raise ValueError(f"--num_examples_to_pick must be >= 1, got {num_to_pick}")
    if num_to_pick > num_records:
        raise ValueError(f"--num_examples_to_pick={num_to_pick} asks for more records "
                         f"than --input_tfrecord holds ({num_records})")
    ratio = num_records / num_to_pick
    return np.array([int(i * ratio) for i in range(num_to_pick)], np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class PickSummary:
    """What `pick_eval_samples` did.

    Attributes:
      input_files: the files read, in the order their records were numbered.
      num_records: T, the records of all of them.
      indices: [N] the records picked (`pick_indices`).
      output_file: where they were written.
    """

    input_files: tuple[str, ...]
    num_records: int
    indices: np.ndarray
    output_file: str


def pick_eval_samples(input_patterns: str, output_file: str, *, num_to_pick: int,
                      max_seq_length: int, max_predictions_per_seq: int,
                      report=lambda line: None) -> PickSummary:
    """Writes records ``pick_indices(T, num_to_pick)`` of the input to one file.

    Every input record is read and checked first (T is counted); the picked
    ones are then read again and written, under a temporary name renamed at
    the end, under a lock on the output (`output_files.output_lock`).
    ``report`` gets a line when the reading starts.

    Raises:
      ValueError: a flag out of range, an input pattern that matches nothing,
        an output that is an input, N > T, or a record that is not of the
        format (naming the file, the record and the flag), before anything is
        written; OSError when the output cannot be written.
    """
    for flag, value in (("max_seq_length", max_seq_length),
                        ("max_predictions_per_seq", max_predictions_per_seq)):
        if value < 1:
            raise ValueError(f"--{flag} must be >= 1, got {value}")
    if num_to_pick < 1:
        raise ValueError(f"--num_examples_to_pick must be >= 1, got {num_to_pick}")
    if not output_file:
        raise ValueError("--output_tfrecord is empty")
    record_format = RecordFormat.unpacked(max_seq_length, max_predictions_per_seq)
    input_files = _input_files(input_patterns)
    output_files.check_outputs_apart({"--output_tfrecord": [output_file]},
                                     {"--input_tfrecord": input_files})
    megabytes = {path: _size(path) / 1e6 for path in input_files}
    report(f"reading {len(input_files)} input file{'s' * (len(input_files) != 1)} "
           f"({sum(megabytes.values()):,.1f} MB) ...")
    with _named_flags(max_seq_length, max_predictions_per_seq):
        counts = _count_records(input_files, record_format, megabytes)
        indices = pick_indices(sum(counts), num_to_pick)
        _make_parent_folder(output_file)
        with contextlib.ExitStack() as stack:
            stack.enter_context(output_files.output_lock(output_file,
                                                         flag="--output_tfrecord"))
            writer = stack.enter_context(RecordWriter(output_file))
            _write_picked(writer, input_files, counts, indices, record_format,
                          megabytes)
            with tool_output.completing([output_file]):
                stack.close()
    return PickSummary(tuple(input_files), sum(counts), indices, output_file)


def _input_files(patterns: str) -> list[str]:
    """The files of --input_tfrecord, sorted (a wildcard skips side files)."""
    if not patterns:
        raise ValueError("--input_tfrecord is empty")
    if all(map(filesystem.is_local, patterns.split(","))):
        files = filesystem.expand_file_patterns_with_glob(patterns, glob=glob.glob,
                                                          flag="input_tfrecord", skipped=[])
        folders = [path for path in files if os.path.isdir(path)]
        if folders:
            raise ValueError(f"--input_tfrecord: {folders[0]} is a folder (give its "
                             f"files)")
        return files
    # Remote files: TensorFlow's glob, imported only then.
    return filesystem.expand_file_patterns(patterns, flag="input_tfrecord", skipped=[])


def _size(path: str) -> int:
    if filesystem.is_local(path):
        return os.path.getsize(path)
    import tensorflow as tf

    return tf.io.gfile.stat(path).length


def _make_parent_folder(path: str) -> None:
    try:
        filesystem.make_parent_dirs(path)
    except OSError as error:
        raise OSError(f"--output_tfrecord: {error.filename or path}: "
                      f"{error.strerror or error}") from None


#: A codec error about a feature's length, and the flag that sets each length.
_WRONG_LENGTH = re.compile(r"feature '(\w+)' has \d+ values, expected \d+$")
_LENGTH_FLAGS = {"input_ids": "max_seq_length", "input_mask": "max_seq_length",
                 "segment_ids": "max_seq_length",
                 "masked_lm_positions": "max_predictions_per_seq",
                 "masked_lm_ids": "max_predictions_per_seq",
                 "masked_lm_weights": "max_predictions_per_seq"}


@contextlib.contextmanager
def _named_flags(max_seq_length: int, max_predictions_per_seq: int):
    """A `RecordError` becomes a ValueError; one about a feature's length names
    the flag that sets it (``... expected 64 (--max_seq_length=64)``)."""
    try:
        yield
    except RecordError as error:
        message = str(error)
        wrong = _WRONG_LENGTH.search(message)
        flag = _LENGTH_FLAGS.get(wrong.group(1)) if wrong else None
        if flag:
            value = {"max_seq_length": max_seq_length,
                     "max_predictions_per_seq": max_predictions_per_seq}[flag]
            message += f" (--{flag}={value})"
        raise ValueError(message) from None


def _count_records(input_files: list[str], record_format: RecordFormat,
                   megabytes: dict) -> list[int]:
    """Each file's records, every record read and checked against the format."""
    counts = []
    with Progress("checking records", total=sum(megabytes.values()),
                  unit="MB") as progress:
        for path in input_files:
            count = 0
            for _, arrays in iter_array_batches(path, record_format,
                                                batch_size=READ_BATCH_SIZE,
                                                reuse_buffers=True):
                count += len(arrays["input_ids"])
            counts.append(count)
            progress.advance(megabytes[path])
    return counts


def _write_picked(writer: RecordWriter, input_files: list[str], counts: list[int],
                  indices: np.ndarray, record_format: RecordFormat,
                  megabytes: dict) -> None:
    """Writes the records at ``indices`` (numbered through all files), in order;
    reads no further than the last one."""
    first_of_file = np.cumsum([0, *counts])
    last = int(indices[-1])
    with Progress("picking", total=sum(megabytes.values()), unit="MB") as progress:
        for path, offset in zip(input_files, first_of_file):
            if offset > last:
                break
            for start, arrays in iter_array_batches(path, record_format,
                                                    batch_size=READ_BATCH_SIZE,
                                                    reuse_buffers=True):
                first = offset + start
                rows = indices[(indices >= first) &
                               (indices < first + len(arrays["input_ids"]))] - first
                if rows.size:
                    try:
                        writer.write_arrays({name: values[rows]
                                             for name, values in arrays.items()})
                    except OSError as error:
                        raise OSError(f"--output_tfrecord: {writer.path}: "
                                      f"{filesystem.write_error_reason(error)}"
                                      ) from None
            progress.advance(megabytes[path])


@tool_output.one_line_on_interrupt(TOOL)
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    tool_output.quiet_unless_verbose()
    try:
        summary = pick_eval_samples(
            FLAGS.input_tfrecord, FLAGS.output_tfrecord,
            num_to_pick=FLAGS.num_examples_to_pick, max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            report=lambda line: print(line, flush=True))
    except (ValueError, OSError) as error:
        sys.exit(f"{TOOL}: {error}")
    print(f"picked {len(summary.indices):,} of {summary.num_records:,} records (one in "
          f"{summary.num_records / len(summary.indices):.2f}, records 0 to "
          f"{int(summary.indices[-1]):,}); wrote {summary.output_file}")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags

    define_flags()
    app.run(main, flags_parser=parse_flags)
