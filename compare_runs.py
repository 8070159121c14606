r"""Compares finished training runs: throughput, occupancy, final loss, loss curves.

    python compare_runs.py --runs=out/train_unpacked,out/train_packed \
        --labels=unpacked,packed --plot=out/loss_curves.png

Reads each run's train_summary.json (written by run_pretraining.py), prints a
table with sequences and tokens per second, occupancy, packing factor, final
loss and the speed-up over the first run, and plots the loss curves against
sequences seen.
"""

import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    flags.DEFINE_list("runs", None, "Output folders of finished runs.")
    flags.DEFINE_list("labels", None, "A label per run (default: the folder names).")
    flags.DEFINE_string("plot", None, "PNG of the loss curves against sequences seen.")
    flags.mark_flag_as_required("runs")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    import os

    from packed_bert_tf.plots import check_figure_path, plot_loss_curves
    from packed_bert_tf.pretraining.comparison import comparison_table, load_summary

    labels = FLAGS.labels or [os.path.basename(os.path.normpath(r)) for r in FLAGS.runs]
    try:
        if len(labels) != len(FLAGS.runs):
            raise ValueError(f"{len(labels)} --labels for {len(FLAGS.runs)} --runs")
        if len(set(labels)) != len(labels):
            raise ValueError(f"--labels (or the run folders' names) repeat: "
                             f"{','.join(labels)}; give --labels")
        if FLAGS.plot:
            check_figure_path(FLAGS.plot)
        summaries = {label: load_summary(run) for label, run in zip(labels, FLAGS.runs)}
    except ValueError as error:
        sys.exit(f"compare_runs: {error}")
    print(comparison_table(summaries))
    if FLAGS.plot:
        plot_loss_curves({label: s["train"]["history"] for label, s in summaries.items()},
                         FLAGS.plot, title="packed vs unpacked pre-training")
        print(f"loss curves: {FLAGS.plot}")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags, quiet_native_logs

    quiet_native_logs()
    define_flags()
    app.run(main, flags_parser=parse_flags)
