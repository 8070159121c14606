r"""Packing benchmark: pack counts and solve times against the targets.

    python benchmarks/packing_benchmark.py --write_markdown=BENCHMARKS.md

Runs on the paper's histograms (``wikipedia_512``, ``squad_1_1_384``; see
``packed_bert_tf.packing.histograms`` for where they are looked up), then on
long-context histograms (2048 to 8192 tokens) synthesised from the document
lengths of the builtin corpus (`histograms.split_documents`), each of those
in a process of its own so that its peak memory is its own. Prints tables
and, with --write_markdown, replaces the subsection of each part it ran
(--sections) in this benchmark's section of that file.
Times are wall-clock (the fastest of --repeats) on whatever machine runs it;
the ratio to NNLSHP, measured in the same run, is the figure to compare
across machines.
"""

import json
import os
import re
import resource
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

from packed_bert_tf import packing
from packed_bert_tf.packing import optimal

# Modules of benchmarks/, beside this script:
from common import (
    define_write_markdown,
    publish_section,
    section_header,
)

FLAGS = flags.FLAGS
define_write_markdown()
# This script's section of BENCHMARKS.md; each part of --sections is a subsection.
SECTION, TITLE = "packing_benchmark", "Packing plans: pack counts and solve times"
flags.DEFINE_integer("repeats", 3, "Solve each case this many times; report the fastest.")
flags.DEFINE_list("long_context_lengths", ["1536", "2048", "4096", "8192"],
                  "max_sequence_length of the long-context cases (none: skip them).")
flags.DEFINE_list("long_context_caps", ["3", "4"],
                  "max_sequences_per_pack of the long-context cases.")
flags.DEFINE_integer("long_context_documents", 1_000_000,
                     "Documents drawn for each long-context histogram.")
flags.DEFINE_list("sections", ["paper", "long_context", "unseen", "mixes"],
                  "Which parts to run, a subsection each: paper (the paper's "
                  "histograms), long_context (the optimal plan from 1536 to 8192 "
                  "tokens), unseen (every algorithm "
                  "at 8192 tokens on length distributions the shortcuts were not "
                  "tuned on), mixes (the optimal plan against best-fit decreasing on "
                  "families of length mixes, S from 512 to 32,768, caps 2 to 16).")
flags.DEFINE_list("mix_lengths", ["512", "2048", "8192", "32768"],
                  "max_sequence_length of the mixes section's cases.")
flags.DEFINE_list("mix_caps", ["2", "4", "8", "16"],
                  "max_sequences_per_pack of the mixes section's cases.")
flags.DEFINE_list("mix_names", None,
                  "Only these of the mixes section's mixes (their names in MIXES, "
                  "e.g. zipf); default all.")
flags.DEFINE_integer("mix_sequences", 1_000_000,
                     "Sequence lengths drawn for each histogram of the mixes section.")
flags.DEFINE_string("mix_resume_file", None,
                    "JSON lines of the mixes section's finished cases: each case is "
                    "appended as it finishes, and cases already there are not run "
                    "again (a long run that stopped picks up where it was).")
flags.DEFINE_float("mix_time_floor", 1.0,
                   "The mixes section's time target is max(20 x best-fit decreasing's "
                   "time, this many seconds).")
flags.DEFINE_string("long_context_case", None,
                    "Internal: LENGTH,CAP[,cg] of one long-context case to run and print "
                    "as JSON (the script runs each case so, in a process of its own); "
                    "cg: column generation alone (certified_gap=None).")

# (histogram, algorithm, cap, the target, check on (packs, seconds)).
# The targets: Wikipedia cap 3 in 0.5 s, SQuAD in 0.2 s; caps 2 and 4 no
# worse than column generation without the shortcuts (10,099,081 and
# 8,135,728 packs; 40,195 on SQuAD).
CASES = [
    ("wikipedia_512", "spfhp", None, "= 8,166,708 (reference)", lambda p, s: p == 8_166_708),
    ("wikipedia_512", "lpfhp", 12, "= 8,149,619 (reference)", lambda p, s: p == 8_149_619),
    ("wikipedia_512", "nnlshp", 3, "8,155,059 +- 0.01 %",
     lambda p, s: abs(p - 8_155_059) <= 0.0001 * 8_155_059),
    ("wikipedia_512", "optimal", 2, "<= 10,099,081", lambda p, s: p <= 10_099_081),
    ("wikipedia_512", "optimal", 3, "<= 8,143,900 in <= 0.5 s",
     lambda p, s: p <= 8_143_900 and s <= 0.5),
    ("wikipedia_512", "optimal", 4, "<= 8,135,728", lambda p, s: p <= 8_135_728),
    ("squad_1_1_384", "spfhp", 3, "", None),
    ("squad_1_1_384", "lpfhp", 3, "", None),
    ("squad_1_1_384", "nnlshp", 3, "", None),
    ("squad_1_1_384", "optimal", 2, "", None),
    ("squad_1_1_384", "optimal", 3, "<= 40,200 in <= 0.2 s",
     lambda p, s: p <= 40_200 and s <= 0.2),
    ("squad_1_1_384", "optimal", 4, "<= 40,195", lambda p, s: p <= 40_195),
]


def run_cases(repeats: int):
    histograms = {}
    rows = []
    for name, algorithm, cap, target, check in CASES:
        if name not in histograms:
            histograms[name] = packing.load_histogram(name)
        histogram = histograms[name]
        times, plan = [], None
        for _ in range(repeats):
            plan = packing.pack_histogram(histogram.counts, histogram.max_sequence_length,
                                          cap, algorithm)
            times.append(plan.solve_time_seconds)
        rows.append(dict(histogram=name, algorithm=algorithm,
                         cap="none" if cap is None else str(cap), plan=plan,
                         seconds=min(times), target=target,
                         met="" if check is None else
                         ("yes" if check(plan.num_packs, min(times)) else "NO")))
        print(f"{name:14} {algorithm:8} cap {rows[-1]['cap']:>4}: {plan.num_packs:,} packs, "
              f"{100 * plan.efficiency:.3f} %, {min(times):.2f} s  {rows[-1]['met']}",
              flush=True)
    return histograms, rows


def time_assignment(histogram, plan):
    """Seconds to assign every sequence of the histogram to the plan's packs."""
    lengths = np.random.default_rng(0).permutation(
        np.repeat(np.arange(1, histogram.max_sequence_length + 1), histogram.counts))
    start = time.perf_counter()
    packs = packing.assign_sequences(lengths, plan, seed=0)
    return time.perf_counter() - start, len(packs)


def markdown(rows, assignment) -> str:
    by_key = {(r["histogram"], r["algorithm"], r["cap"]): r for r in rows}
    lines = [*section_header("The paper's histograms"),
             "| histogram | algorithm | cap | packs | efficiency % | LP bound | gap | "
             "time s | time / NNLSHP | target | met |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        plan = r["plan"]
        nnlshp = by_key.get((r["histogram"], "nnlshp", "3"))
        ratio = f"{r['seconds'] / nnlshp['seconds']:.2f}" if nnlshp else ""
        bound = by_key.get((r["histogram"], "optimal", r["cap"]))
        bound_packs = bound["plan"].lp_lower_bound_packs if bound else None
        lines.append(
            f"| {r['histogram']} | {r['algorithm']} | {r['cap']} | {plan.num_packs:,} | "
            f"{100 * plan.efficiency:.3f} | "
            f"{'' if bound_packs is None else f'{bound_packs:,}'} | "
            f"{'' if bound_packs is None else f'{plan.num_packs - bound_packs:,}'} | "
            f"{r['seconds']:.3f} | {ratio} | {r['target']} | {r['met']} |")
    seconds, packs, sequences = assignment
    lines += ["", f"`assign_sequences` on the whole Wikipedia histogram "
              f"({sequences:,} sequences into {packs:,} packs of the optimal cap-3 plan): "
              f"{seconds:.2f} s."]
    return "\n".join(lines)


def peak_memory_mib() -> float:
    """This process's peak resident set (VmHWM: unlike ru_maxrss, not
    inherited from the parent across fork and exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_context_case(max_sequence_length: int, cap: int, num_documents: int,
                      column_generation_only: bool = False) -> dict:
    """One long-context plan, measured in this process (run in its own)."""
    documents = packing.load_histogram("builtin_corpus_documents")
    counts = packing.histograms.split_documents(documents.counts, max_sequence_length,
                                                num_documents=num_documents, seed=0)
    options = dict(certified_gap=None) if column_generation_only else {}
    before = peak_memory_mib()
    cpu = time.process_time()
    plan = packing.pack_histogram(counts, max_sequence_length, cap, "optimal", **options)
    cpu = time.process_time() - cpu
    peak = peak_memory_mib()
    quick_bound = packing.optimal.simple_bound(counts, max_sequence_length, cap)
    # Exact-fill rows report the bound they were certified against, the quick
    # bound (column generation's own bound is at least that).
    shortcut = None
    if not column_generation_only and plan.lp_lower_bound == quick_bound and (
            packing.exact_fill.eligible(counts, max_sequence_length, cap)):
        shortcut = "exact fill"
    return dict(length=max_sequence_length, cap=cap, sequences=int(counts.sum()),
                lengths=int((counts > 0).sum()), packs=plan.num_packs,
                strategies=plan.num_strategies, bound=plan.lp_lower_bound, bound_packs=plan.lp_lower_bound_packs,
                shortcut=shortcut,
                efficiency=plan.efficiency, wall=plan.solve_time_seconds, cpu=cpu,
                rss_before_mib=before, rss_peak_mib=peak)


def _run_case(length, cap, *extra) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, f"--long_context_case={','.join([length, cap, *extra])}",
         f"--long_context_documents={FLAGS.long_context_documents}"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def run_long_context() -> list[dict]:
    results = []
    for length in FLAGS.long_context_lengths:
        if length == "none":
            return []
        for cap in FLAGS.long_context_caps:
            result = _run_case(length, cap)
            # Where a shortcut's plan was certified against a weaker bound,
            # column generation alone gives the LP bound (the
            # yardstick) and the plan the shortcut replaces.
            result["column_generation"] = (_run_case(length, cap, "cg")
                                           if result["shortcut"] else None)
            lp_bound = (result["column_generation"] or result)["bound"]
            gap = 100 * (result["packs"] / lp_bound - 1)
            result["gap_to_lp"] = gap
            result["met"] = "yes" if gap <= 0.05 and result["rss_peak_mib"] <= 2048 else "NO"
            print(f"S = {length}, cap {cap}: {result['sequences']:,} sequences, "
                  f"{result['packs']:,} packs, {gap:.4f} % above the LP bound, "
                  f"{result['wall']:.2f} s, peak {result['rss_peak_mib']:.0f} MiB "
                  f"{result['met']}", flush=True)
            results.append(result)
    return results


def long_context_markdown(results) -> str:
    lines = [*section_header("Long contexts: the optimal plan at 1536 to 8192 tokens"),
             f"Histograms synthesised by `packing.histograms.split_documents`: "
             f"{FLAGS.long_context_documents:,} documents drawn from the token lengths of "
             "the builtin corpus's 487 documents (`builtin_corpus_documents`, shipped "
             "with the package; median 339 tokens, longest 8,506), each scaled by "
             "exp(N(0, 0.25)), cut into sequences of at most S - 2 tokens plus [CLS] "
             "and [SEP]. Each case runs in a process of its own; peak memory is that "
             "process's peak resident set (Python, numpy and scipy included), the "
             "target being at most 2 GiB.", "",
             "'Bound' is the lower bound the plan proves: where column generation "
             "planned the whole histogram, the LP optimum or a bound within 0.01 % of "
             "it (a level of length classes is planned when its LP is within "
             f"{100 * optimal.CLASS_PLAN_TOLERANCE:g} % of the bound its duals prove "
             "for the real lengths); where exact-fill rows "
             "were certified (`certified_gap`, 0.05 %), the quick bound "
             "(`packing.optimal.simple_bound`: the token, count and long-sequence "
             "bounds; *, `packing.exact_fill`). For those, the last columns give column "
             "generation alone on the same histogram (`certified_gap=None`), whose "
             "bound the gap is measured against.", "",
             "| S | cap | sequences | lengths present | packs | distinct packs | bound | "
             "above LP bound % | "
             "efficiency % | time s | CPU s | peak MiB | column generation alone: packs, "
             "LP bound, time s, distinct packs | exact, <= 0.05 %, <= 2 GiB |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        alone = r["column_generation"]
        lines.append(
            f"| {r['length']} | {r['cap']} | {r['sequences']:,} | {r['lengths']:,} | "
            f"{r['packs']:,} | {r['strategies']:,} | {r['bound']:,.2f}"
            f"{' *' if r['shortcut'] == 'exact fill' else ''} | "
            f"{r['gap_to_lp']:.4f} | {100 * r['efficiency']:.3f} | "
            f"{r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_peak_mib']:.0f} | "
            + (f"{alone['packs']:,}, {alone['bound']:,.2f}, {alone['wall']:.2f}, "
               f"{alone['strategies']:,} | "
               if alone else " | ")
            + f"{r['met']} |")
    return "\n".join(lines)


#: Length distributions of the 'unseen' section: (name, description, draw).
UNSEEN = (
    ("log-normal", "log-normal, median 665 tokens (exp N(6.5, 1.2))",
     lambda rng, n: rng.lognormal(6.5, 1.2, n)),
    ("short and long", "70 % short documents (exp N(5.0, 0.8), median 148 tokens) "
     "and 30 % long ones (exp N(8.3, 0.5), median 4,024)",
     lambda rng, n: np.concatenate([rng.lognormal(5.0, 0.8, n - 3 * n // 10),
                                    rng.lognormal(8.3, 0.5, 3 * n // 10)])),
)
UNSEEN_LENGTH = 8192
UNSEEN_TARGET_SECONDS = 10.0


def unseen_histogram(draw, num_sequences: int) -> np.ndarray:
    """A histogram of ``num_sequences`` lengths drawn (seed 0), rounded and cut
    to 1..8192 tokens."""
    lengths = np.clip(np.round(draw(np.random.default_rng(0), num_sequences)), 1,
                      UNSEEN_LENGTH).astype(np.int64)
    return packing.api.histogram_from_lengths(lengths, UNSEEN_LENGTH)


def run_unseen(num_sequences: int) -> list[dict]:
    """Every algorithm on each `UNSEEN` distribution, 3 and 4 per pack."""
    results = []
    for name, _, draw in UNSEEN:
        counts = unseen_histogram(draw, num_sequences)
        for cap in (3, 4):
            for algorithm in packing.ALGORITHMS:
                row = dict(distribution=name, cap=cap, algorithm=algorithm,
                           lengths=int((counts > 0).sum()))
                try:
                    plan = packing.pack_histogram(counts, UNSEEN_LENGTH, cap, algorithm)
                except ValueError as error:  # nnlshp: too many strategies to list
                    strategies = re.search(r"(\d+) of them", str(error))
                    row.update(packs=None, wall=None, met="refused", note=(
                        f"refused: {int(strategies[1]):,} strategies to list"
                        if strategies else f"refused: {error}"))
                else:
                    row.update(packs=plan.num_packs, wall=plan.solve_time_seconds,
                               bound=plan.lp_lower_bound, note="",
                               met="yes" if plan.solve_time_seconds
                               <= UNSEEN_TARGET_SECONDS else "NO")
                print(f"{name}, cap {cap}, {algorithm}: {row['packs']} packs, "
                      f"{row['wall']} s {row['met']}", flush=True)
                results.append(row)
    return results


def unseen_markdown(results, num_sequences: int) -> str:
    lines = [*section_header("Every algorithm at 8192 tokens on lengths the shortcuts "
                             "never saw"),
             f"{num_sequences:,} sequence lengths drawn (numpy, seed 0), rounded and cut "
             f"to 1..{UNSEEN_LENGTH} tokens, from two distributions that neither "
             "shortcut of `optimal` was tuned on:", "",
             *[f"- {name}: {description}" for name, description, _ in UNSEEN], "",
             f"The target: every algorithm plans in at most {UNSEEN_TARGET_SECONDS:.0f} "
             "s. `nnlshp` lists every exact-fill strategy, which it refuses above "
             "100,000 (billions here): a clear error, not a plan. `packing_report` "
             "computes the LP bound only with `--lp_bound` or when `optimal` is "
             "among its algorithms.", "",
             "| distribution | cap | algorithm | lengths present | packs | time s | "
             "LP bound | <= 10 s |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for r in results:
        packs = f"{r['packs']:,}" if r["packs"] is not None else r["note"]
        wall = f"{r['wall']:.2f}" if r["wall"] is not None else "-"
        bound = f"{r['bound']:,.2f}" if r.get("bound") is not None else "-"
        lines.append(f"| {r['distribution']} | {r['cap']} | {r['algorithm']} | "
                     f"{r['lengths']:,} | {packs} | {wall} | {bound} | {r['met']} |")
    return "\n".join(lines)


#: Length mixes of the 'mixes' section: (name, description, draw(rng, S, n)),
#: lengths then rounded and cut to 1..S.
MIXES = (
    ("lognormal-6", "log-normal, median S / 6, sigma 1 (the cap binds more than "
     "the length)", lambda rng, s, n: rng.lognormal(np.log(s / 6), 1.0, n)),
    ("lognormal-32", "log-normal, median S / 32, sigma 1.5 (many short, a long tail)",
     lambda rng, s, n: rng.lognormal(np.log(s / 32), 1.5, n)),
    ("lognormal-3", "log-normal, median S / 3, sigma 0.5",
     lambda rng, s, n: rng.lognormal(np.log(s / 3), 0.5, n)),
    ("short-long", "70 % short (log-normal, median S / 40, sigma 0.8) and 30 % long "
     "(median S / 2, sigma 0.5)",
     lambda rng, s, n: np.concatenate([rng.lognormal(np.log(s / 40), 0.8, n - 3 * n // 10),
                                       rng.lognormal(np.log(s / 2), 0.5, 3 * n // 10)])),
    ("uniform", "uniform on S / 8 .. S / 2",
     lambda rng, s, n: rng.uniform(s / 8, s / 2, n)),
    ("zipf", "Zipf-like: k x S / 512 tokens, k Zipf-distributed (exponent 1.5)",
     lambda rng, s, n: rng.zipf(1.5, n) * max(1, s // 512)),
    ("spikes", "20 % at exactly S, the rest log-normal (median S / 8, sigma 1)",
     lambda rng, s, n: np.concatenate([np.full(n // 5, s),
                                       rng.lognormal(np.log(s / 8), 1.0, n - n // 5)])),
)
#: The mixes section's target: within this fraction of the bound, in at most
#: MIX_TIME_FACTOR times best-fit decreasing's time (or --mix_time_floor).
MIX_GAP, MIX_TIME_FACTOR = 5e-4, 20


def mix_histogram(draw, max_sequence_length: int, num_sequences: int) -> np.ndarray:
    """A histogram of ``num_sequences`` lengths drawn (seed 0), rounded and cut
    to 1..S tokens."""
    lengths = np.clip(np.round(draw(np.random.default_rng(0), max_sequence_length,
                                    num_sequences)), 1, max_sequence_length).astype(np.int64)
    return packing.histogram_from_lengths(lengths, max_sequence_length)


def run_mixes() -> list[dict]:
    """The optimal plan and best-fit decreasing on each mix, S and cap: BFD
    first, then `optimal` with a time limit of the target time."""
    results, done = [], {}
    if FLAGS.mix_resume_file and os.path.exists(FLAGS.mix_resume_file):
        with open(FLAGS.mix_resume_file, encoding="utf-8") as rows:
            for line in rows:
                row = json.loads(line)
                done[row["mix"], row["length"], row["cap"]] = row
    for name, _, draw in MIXES:
        if FLAGS.mix_names and name not in FLAGS.mix_names:
            continue
        for length in map(int, FLAGS.mix_lengths):
            counts = None
            for cap in map(int, FLAGS.mix_caps):
                if (name, length, cap) in done:
                    results.append(done[name, length, cap])
                    continue
                if counts is None:
                    counts = mix_histogram(draw, length, FLAGS.mix_sequences)
                bfd = packing.pack_histogram(counts, length, cap, "bfd")
                target = max(MIX_TIME_FACTOR * bfd.solve_time_seconds, FLAGS.mix_time_floor)
                plan = packing.pack_histogram(counts, length, cap, "optimal",
                                              time_limit=target)
                gap = plan.num_packs / plan.lp_lower_bound - 1
                row = dict(mix=name, length=length, cap=cap,
                           lengths=int((counts > 0).sum()), bfd_packs=bfd.num_packs,
                           bfd_wall=bfd.solve_time_seconds, packs=plan.num_packs,
                           bound=plan.lp_lower_bound, gap=gap,
                           wall=plan.solve_time_seconds, target=target,
                           optimal=plan.proven_optimal,
                           stopped=plan.time_limit_reached)
                # A plan the limit stopped meets the target too when its gap to
                # the bound proven by then is within it.
                row["met"] = "yes" if (gap <= MIX_GAP
                                       and plan.solve_time_seconds <= target) else "NO"
                print(f"{name}, S = {length}, cap {cap}: BFD {bfd.num_packs:,} in "
                      f"{bfd.solve_time_seconds:.3f} s; optimal {plan.num_packs:,}, "
                      f"{100 * gap:.4f} % above the bound, {plan.solve_time_seconds:.2f} s "
                      f"(target {target:.2f} s) {row['met']}", flush=True)
                results.append(row)
                if FLAGS.mix_resume_file:
                    with open(FLAGS.mix_resume_file, "a", encoding="utf-8") as rows:
                        rows.write(json.dumps(row) + "\n")
    return results


def mixes_markdown(results) -> str:
    lines = [*section_header("The optimal plan on families of length mixes, against "
                             "best-fit decreasing"),
             f"{FLAGS.mix_sequences:,} sequence lengths drawn (numpy, seed 0) from each "
             "mix below, rounded and cut to 1..S tokens; the same histogram is packed "
             "by best-fit decreasing (`bfd`), then by `optimal` with a time limit of "
             "the target time, in the same process:", "",
             *[f"- {name}: {description}" for name, description, _ in MIXES
               if any(r["mix"] == name for r in results)], "",
             f"The target: within {100 * MIX_GAP:.2f} % of the bound, in at most "
             f"{MIX_TIME_FACTOR} times best-fit decreasing's time on the same histogram "
             f"(at least {FLAGS.mix_time_floor:g} s: the floor, where best-fit "
             "decreasing takes milliseconds). 'Bound' is the lower bound the plan "
             "proves (the LP optimum, a bound within 0.01 % of it, or the quick bound "
             "`packing.optimal.simple_bound` (the token, count and long-sequence bounds) "
             "where that certifies the plan: exchange fill, exact-fill rows); the gap is "
             "to it. 'Stopped' marks a plan the time limit stopped (the best so far, "
             "which meets the target when its gap is within it).",
             "",
             "| mix | S | cap | lengths present | BFD packs | BFD s | packs | bound | "
             "above bound % | time s | time / BFD | target s | proven optimal | "
             "stopped | met |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['mix']} | {r['length']} | {r['cap']} | {r['lengths']:,} | "
            f"{r['bfd_packs']:,} | {r['bfd_wall']:.3f} | {r['packs']:,} | "
            f"{r['bound']:,.1f} | {100 * r['gap']:.4f} | {r['wall']:.2f} | "
            f"{r['wall'] / max(r['bfd_wall'], 1e-9):.1f} | {r['target']:.2f} | "
            f"{'yes' if r['optimal'] else 'no'} | {'yes' if r['stopped'] else ''} | "
            f"{r['met']} |")
    met = sum(r["met"] == "yes" for r in results)
    lines += ["", f"Target met in {met} of {len(results)} cases."]
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.long_context_case:
        length, cap, *mode = FLAGS.long_context_case.split(",")
        print(json.dumps(long_context_case(int(length), int(cap),
                                           FLAGS.long_context_documents, mode == ["cg"])))
        return
    rows, long_context, unseen, mixes = [], [], [], []
    if "paper" in FLAGS.sections:
        histograms, rows = run_cases(FLAGS.repeats)
        wiki_plan = next(r["plan"] for r in rows
                         if r["histogram"] == "wikipedia_512"
                         and r["algorithm"] == "optimal" and r["cap"] == "3")
        seconds, packs = time_assignment(histograms["wikipedia_512"], wiki_plan)
        print(f"assign_sequences: {wiki_plan.num_sequences:,} sequences in "
              f"{seconds:.2f} s")
        publish_section(SECTION, TITLE,
                        markdown(rows, (seconds, packs, wiki_plan.num_sequences)),
                        subsection="paper")
    if "long_context" in FLAGS.sections:
        long_context = run_long_context()
        if long_context:
            publish_section(SECTION, TITLE, long_context_markdown(long_context),
                            subsection="long_context")
    if "unseen" in FLAGS.sections:
        unseen = run_unseen(FLAGS.long_context_documents)
        publish_section(SECTION, TITLE,
                        unseen_markdown(unseen, FLAGS.long_context_documents),
                        subsection="unseen")
    if "mixes" in FLAGS.sections:
        mixes = run_mixes()
        publish_section(SECTION, TITLE, mixes_markdown(mixes), subsection="mixes")
    if any(r["met"] == "NO" for r in rows + long_context + unseen + mixes):
        sys.exit("some targets were missed")


if __name__ == "__main__":
    app.run(main)
