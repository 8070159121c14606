r"""Packing report: every packing algorithm on a length histogram, side by side.

Prints a table like Table 1 of Krell et al. (algorithm, packs, padding tokens,
efficiency, packing factor, time, gap to the LP lower bound) and optionally
writes a PNG and the plans' reports as JSON.

    python -m data_prep.packing_report --histogram=wikipedia_512 \
        --max_sequences_per_pack=3 --algorithms=all --plot=report.png

`--histogram` is a file (JSON ``counts`` list or bare list, .npy, or text;
``counts[i]`` = sequences of length i+1) or the name of one of the paper's
histograms (``wikipedia_512``, ``squad_1_1_384``, installed with the package),
or of a user's ``NAME.json`` in a folder of ``$PACKED_BERT_TF_HISTOGRAM_DIR``.
"""

import os
import sys

from absl import app, flags, logging

from data_prep import tool_output
from packed_bert_tf import output_files, packing
from packed_bert_tf.json_files import check_output_file, write_json_atomically
from packed_bert_tf.tool_progress import Progress

FLAGS = flags.FLAGS


def define_flags():
    """Defines the tool's flags (only when run as a program)."""
    # Required.
    flags.DEFINE_string(
        "histogram", None,
        "Length histogram: a file path or a name (wikipedia_512, squad_1_1_384).")

    # Other.
    flags.DEFINE_integer(
        "max_seq_length", None,
        "Tokens per pack. Default: the histogram file's max_sequence_length (or its "
        "number of bins).")
    flags.DEFINE_alias("max_sequence_length", "max_seq_length")
    flags.DEFINE_integer("max_sequences_per_pack", 3,
                         "Cap on sequences per pack (the paper's packing depth).")
    flags.DEFINE_list(
        "algorithms", ["all"],
        f"Comma-separated algorithms, or 'all' ({', '.join(packing.ALGORITHMS)}).")
    flags.DEFINE_integer("seed", 0,
                         "Seed of the random dataset order the greedy baseline packs.")
    flags.DEFINE_bool(
        "lp_bound", False,
        "Also compute the LP lower bound (the 'gap to LP bound' column) when no plan "
        "of --algorithms reports it (optimal does): column generation, seconds to "
        "minutes on histograms of thousands of lengths.")
    flags.DEFINE_float(
        "time_limit", packing.api.DEFAULT_TIME_LIMIT,
        "Seconds the optimal plan (and the LP bound of --lp_bound) may search; then "
        "the best plan found so far is reported with its gap to the bound proven so "
        "far (finishing it is left part of the limit, 0.25 s per million sequences). 0: the "
        "best-fit decreasing seed and the token, count or long-sequence bound, at once.",
        lower_bound=0)
    flags.DEFINE_string("plot", None,
                        "Write the report figure to this image file (PNG, or any "
                        "format matplotlib writes: .pdf, .svg, ...).")
    flags.DEFINE_string("output_json", None,
                        "Write every plan's report (not its strategies) to this JSON.")
    flags.mark_flag_as_required("histogram")


class _PlanProgress(Progress):
    """Progress of one optimal plan: its phase, its packs so far (or the LP's
    estimate of them) and their gap to the best bound proven so far."""

    def __init__(self, what, **kwargs):
        super().__init__(what, **kwargs)
        self.phase, self.packs, self.bound = "starting", None, None

    def report(self, phase, packs, bound):
        """`optimal`'s ``progress(phase, packs, bound)``."""
        self.phase = phase
        self.packs = packs if packs is not None else self.packs
        self.bound = bound if bound is not None else self.bound
        self.advance()

    def line(self, now=None):
        elapsed = (self.clock() if now is None else now) - self.started
        text = f"{self.what}: {self.phase}"
        if self.packs is not None and self.packs < float("inf"):
            text += f", {self.packs:,.0f} packs"
            if self.bound:
                text += (f", {100 * (self.packs / self.bound - 1):.3f} % above the "
                         f"bound {self.bound:,.1f}")
        return text + f", {elapsed:.0f} s"


def run_report(histogram_name_or_path, max_sequence_length, max_sequences_per_pack,
               algorithms, *, seed=0, lp_bound=False,
               time_limit=packing.api.DEFAULT_TIME_LIMIT):
    """Packs one histogram with each algorithm; returns (histogram, plans, the LP
    lower bound in packs: None unless a plan reports it or ``lp_bound``).
    `optimal` (and the bound) search at most `time_limit` seconds, showing
    their progress."""
    histogram = packing.load_histogram(histogram_name_or_path)
    max_sequence_length = max_sequence_length or histogram.max_sequence_length
    if algorithms == ["all"]:
        algorithms = list(packing.ALGORITHMS)
    unknown = [a for a in algorithms if a not in packing.ALGORITHMS]
    if unknown:
        raise ValueError(f"--algorithms: unknown {', '.join(unknown)}; expected "
                         f"'all' or some of {', '.join(packing.ALGORITHMS)}")
    plans = []
    with Progress("planning", total=len(algorithms), unit="plans") as progress:
        for algorithm in algorithms:
            options = {"seed": seed} if algorithm == "greedy" else {}
            logging.info("Packing %s with %s", histogram.name, algorithm)
            if algorithm == "optimal":
                with _PlanProgress("optimal plan", unit="rounds") as plan_progress:
                    plans.append(packing.pack_histogram(
                        histogram.counts, max_sequence_length, max_sequences_per_pack,
                        algorithm, time_limit=time_limit, progress=plan_progress.report))
            else:
                plans.append(packing.pack_histogram(
                    histogram.counts, max_sequence_length, max_sequences_per_pack,
                    algorithm, **options))
            progress.advance()
    known = [p.lp_lower_bound_packs for p in plans if p.lp_lower_bound_packs is not None]
    if known:
        return histogram, plans, max(known)
    if not lp_bound:
        return histogram, plans, None
    # The gap column needs the bound: the optimal solver computes it.
    print("computing the LP lower bound (--lp_bound) ...", flush=True)
    with _PlanProgress("LP bound", unit="rounds") as plan_progress:
        bound_plan = packing.pack_histogram(histogram.counts, max_sequence_length,
                                            max_sequences_per_pack, "optimal",
                                            time_limit=time_limit,
                                            progress=plan_progress.report)
    return histogram, plans, bound_plan.lp_lower_bound_packs


@tool_output.one_line_on_interrupt("packing_report")
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    tool_output.quiet_unless_verbose()
    try:
        # The outputs first: the packing takes seconds.
        output_files.check_outputs_apart(
            {"--output_json": [FLAGS.output_json] if FLAGS.output_json else [],
             "--plot": [FLAGS.plot] if FLAGS.plot else []},
            {"--histogram": [FLAGS.histogram] if os.path.isfile(FLAGS.histogram or "")
             else []})
        if FLAGS.output_json:
            check_output_file(FLAGS.output_json, flag="output_json")
        if FLAGS.plot:
            from packed_bert_tf.plots import check_figure_path
            check_figure_path(FLAGS.plot, flag="plot")
        tool_output.held_until_the_end(output_files.lock_outputs(
            {"--output_json": [FLAGS.output_json] if FLAGS.output_json else [],
             "--plot": [FLAGS.plot] if FLAGS.plot else []}))
        histogram, plans, lp_bound = run_report(
            FLAGS.histogram, FLAGS.max_seq_length, FLAGS.max_sequences_per_pack,
            FLAGS.algorithms, seed=FLAGS.seed, lp_bound=FLAGS.lp_bound,
            time_limit=FLAGS.time_limit)
    except FileNotFoundError as error:
        sys.exit(f"packing_report: --histogram: {error}")
    except ValueError as error:
        sys.exit(f"packing_report: {error}")

    first = plans[0]
    source = ("the paper's, installed with packed_bert_tf"
              if histogram.source.startswith(str(packing.histograms.PACKAGED_HISTOGRAM_DIR))
              else histogram.source)
    print(f"{histogram.name} ({source}): {first.num_sequences:,} sequences, "
          f"{first.real_tokens:,} tokens; max {first.max_sequence_length} tokens and "
          f"{first.max_sequences_per_pack} sequences per pack")
    lp_text = (f"{lp_bound:,} packs" if lp_bound is not None
               else "not computed (--lp_bound)")
    print(f"theoretical speed-up {first.theoretical_speedup:.4f}, token lower bound "
          f"{first.token_lower_bound:,} packs, LP lower bound {lp_text}\n")
    print(packing.format_plan_table(plans, lp_lower_bound_packs=lp_bound))
    for plan in plans:
        if plan.algorithm == "optimal":
            print(f"\n{packing.describe_certificate(plan)}")

    if FLAGS.output_json:
        document = {"histogram": histogram.name, "source": histogram.source,
                    "lp_lower_bound_packs": lp_bound,
                    "plans": [plan.summary() for plan in plans]}
        write_json_atomically(FLAGS.output_json, document)
        print(f"\nwrote {FLAGS.output_json}")
    if FLAGS.plot:
        from packed_bert_tf.plots import plot_packing_report
        plot_packing_report(histogram.name, plans, FLAGS.plot)
        print(f"wrote {FLAGS.plot}")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags

    define_flags()
    app.run(main, flags_parser=parse_flags)
