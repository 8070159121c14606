r"""Proves that packed pre-training records hold every unpacked sequence once.

    python -m data_prep.verify_packing --unpacked='data/unpacked/part-*' \
        --packed='data/packed/part-*'

Checks every packed record against the format (sequence indices 1..D in
order, positions restarting at 0 in each sequence, next-sentence positions at
each [CLS], masked-LM weights equal to the sequence index of their token, ...)
and then that the packed sequences (tokens, segment ids, masked positions
relocated back, masked ids, next-sentence labels) are exactly the unpacked
ones, each once. Exits non-zero with the first mismatch otherwise. The record
sizes are read off the files. A wildcard skips the side files beside records
(``packing_stats.json``, ``vocab.txt``, unfinished ``*.tmp-*``): ``packed/*``
means the shards.
"""

import os
import sys

from absl import app, flags

from data_prep import tool_output

FLAGS = flags.FLAGS


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    flags.DEFINE_string("unpacked", None,
                        "Unpacked TFRecords: a glob or comma-separated globs.")
    flags.DEFINE_string("packed", None,
                        "Packed TFRecords: a glob or comma-separated globs.")
    flags.mark_flags_as_required(["unpacked", "packed"])


@tool_output.one_line_on_interrupt("verify_packing")
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    tool_output.quiet_unless_verbose()
    import tensorflow as tf

    from packed_bert_tf import filesystem
    from packed_bert_tf.data.records import packing_verification
    from packed_bert_tf.tool_progress import Progress

    skipped = []
    try:
        unpacked = filesystem.expand_file_patterns(FLAGS.unpacked, flag="unpacked",
                                                   skipped=skipped)
        packed = filesystem.expand_file_patterns(FLAGS.packed, flag="packed",
                                                 skipped=skipped)
        if skipped:
            print(f"skipped {', '.join(os.path.basename(p) for p in skipped)} (not "
                  f"records)")
        print(f"reading {len(unpacked)} unpacked and {len(packed)} packed files ...",
              flush=True)
        sizes = {path: tf.io.gfile.stat(path).length / 1e6 for path in unpacked + packed}
        with Progress("verifying", total=sum(sizes.values()), unit="MB") as progress:
            report = packing_verification.verify_packing(
                unpacked, packed, file_read=lambda path: progress.advance(sizes[path]))
    except ValueError as error:  # VerificationError and RecordError included
        sys.exit(f"verify_packing: {error}")
    print(f"OK: {report.packed_sequences:,} sequences in {report.packed_records:,} packs "
          f"({report.packed_files} files) are exactly the {report.unpacked_sequences:,} "
          f"unpacked sequences ({report.unpacked_files} files); efficiency "
          f"{100 * report.efficiency:.3f} %")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags

    define_flags()
    app.run(main, flags_parser=parse_flags)
