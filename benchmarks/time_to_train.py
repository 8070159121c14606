r"""Time to train, packed vs unpacked, as MLPerf measures it.

    python benchmarks/time_to_train.py --write_markdown=BENCHMARKS.md

The data, built once into ``--work_dir`` (kept while the flags that make it
stay the same):

* the builtin corpus (``python -m data_prep.builtin_corpus``: Python's own
  documentation), split by document: every ``--heldout_every``-th document
  is held out for evaluation, less the sentences that the training text
  also has, the others are the training text;
* the training text -> a WordPiece vocabulary (the model's vocab_size) and
  pre-training records at ``--max_seq_length`` -> their packed copy
  (``data_prep.pack_pretraining_data``);
* the held-out text -> records with the same vocabulary -> MLPerf's
  evaluation set (``data_prep.pick_eval_samples``, ``--num_eval_samples``
  records evenly spaced through them) -> its packed copy.

Then ``run_pretraining.py`` twice, one process after the other, with the
same hyper-parameters, seed, sequences per update, evaluation interval (in
training sequences) and target: unpacked (``--batching=padded``, standard
BERT) and packed (the packed records with
``--packing_hyperparameter_adjustment=accumulation``: the micro-batches of
an update divided by the packing factor, so an update holds as many
sequences as the unpacked run's; the paper's setting). Both evaluate the
masked-LM accuracy of the same held-out sequences every
``--eval_interval_samples`` training sequences and stop at the first
evaluation that reaches ``--stop_threshold``; the packed run reads the
packed copy of them (``--pack_eval``; the accuracy is the same either way).

Each run writes MLPerf's log, and the figures come from it, as MLPerf reads
a result: time to train from ``run_start`` to ``run_stop`` (evaluations,
checkpoints and the first compilation included), samples to target the
``epoch_num`` of the last ``eval_accuracy``, the status that of
``run_stop`` (``success``: the target was reached); the time of the last
evaluation is shown beside it (what a run does between its last evaluation
and ``run_stop`` counts on MLPerf's clock). The paper's claim,
checked: the samples to target within 5 % of each other, and the packed
run's time at most 1 / (0.9 x packing factor) of the unpacked run's. A
plot (``--plot``) shows both runs' accuracy against samples and against
time; ``report.json`` in ``--work_dir`` holds the figures.
"""

import json
import os
import shutil
import sys

from absl import app, flags, logging

# Modules of benchmarks/, beside this script:
from common import (
    REPOSITORY,
    define_write_markdown,
    publish_section,
    run_tool,
    section_header,
)

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_time_to_train",
                    "The data (kept for the next run with the same data flags) and the "
                    "runs' folders, logs and report.json.")
define_write_markdown()
flags.DEFINE_string("plot", "benchmarks/time_to_train.png",
                    "PNG of accuracy against samples and time (relative paths: to the "
                    "repository).")
# Data.
flags.DEFINE_string("bert_config_file",
                    os.path.join("benchmarks", "time_to_train_bert_config.json"),
                    "The model (relative paths: to the repository; the default: 4 layers, "
                    "hidden size 256); its vocab_size is the size of the WordPiece "
                    "vocabulary trained on the corpus.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per record (S), data and runs.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked-LM slots per sequence (P).")
flags.DEFINE_integer("max_documents", None, "Documents of the builtin corpus (default: all).")
flags.DEFINE_integer("heldout_every", 10, "Every this-many-th document of the corpus is held "
                     "out for evaluation; the training records never see its sentences.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the training text (different masks).")
flags.DEFINE_integer("eval_dupe_factor", 2, "Passes over the held-out text: the pool the "
                     "evaluation set is picked from must hold --num_eval_samples.")
flags.DEFINE_integer("num_eval_samples", 500, "Evaluation sequences (MLPerf: 10,000), "
                     "picked evenly through the held-out records.")
flags.DEFINE_list("pack_beam_options", [],
                  "Beam pipeline options of the packing tool, comma-separated (default: "
                  "its own, the local runner with a process per core; "
                  "--direct_running_mode=in_memory packs in the tool's process, for a small "
                  "--max_documents). The data does not depend on them.")
flags.DEFINE_integer("data_seed", 12345, "create_pretraining_data's --random_seed of the "
                     "training records (the held-out records: + 1).")
# Runs.
flags.DEFINE_integer("train_batch_size", 8, "Rows per micro-batch, both runs (packed: packs).")
flags.DEFINE_integer("steps_per_update", 6,
                     "Unpacked micro-batches per update; the packed run takes this / the "
                     "packing factor, rounded (the default data's packing factor is 1.18: "
                     "6 -> 5, 1.8 % fewer sequences per update).")
flags.DEFINE_integer("num_train_steps", 9600, "Steps of both runs, as run_pretraining.py "
                     "counts them (unpacked micro-batches: a multiple of --steps_per_update; "
                     "the packed run makes as many updates): the learning-rate schedule's "
                     "end, and the stop where the target is not reached.")
flags.DEFINE_integer("num_warmup_steps", 480, "Linear warm-up, in the same steps.")
flags.DEFINE_float("learning_rate", 5e-3, "Peak learning rate (LAMB).")
flags.DEFINE_integer("seed", 0, "Seed of both runs (weights, dropout, data order).")
flags.DEFINE_integer("eval_interval_samples", 2000,
                     "Training sequences between evaluations, both runs.")
flags.DEFINE_float("stop_threshold", 0.14,
                   "Target masked-LM accuracy on the evaluation set (by default the unpacked "
                   "run needs about 24,000 samples and 14 minutes on 2 cores; the 2-layer "
                   "demo model levels off below 0.15).")
flags.DEFINE_integer("eval_batch_size", 64, "Rows per evaluation batch.")
flags.DEFINE_bool("jit_compile", True, "XLA, both runs (run_pretraining.py's flag).")
flags.DEFINE_bool("pack_eval", True, "The packed run evaluates on the packed copy of the "
                  "evaluation set (same sequences, same accuracy, fewer rows).")

SHOWN_FLAGS = ("bert_config_file", "max_seq_length", "max_predictions_per_seq",
               "max_documents", "heldout_every", "dupe_factor", "eval_dupe_factor",
               "num_eval_samples", "data_seed", "train_batch_size", "steps_per_update",
               "num_train_steps", "num_warmup_steps", "learning_rate", "seed",
               "eval_interval_samples", "stop_threshold", "eval_batch_size", "jit_compile",
               "pack_eval")
DATA_FLAGS = ("max_seq_length", "max_predictions_per_seq", "max_documents", "heldout_every",
              "dupe_factor", "eval_dupe_factor", "num_eval_samples", "data_seed")
RUNS = ("unpacked", "packed")
DATA_VERSION = 1  # of the data this script makes: a new one remakes the data kept
# The paper's claim: samples to target within this fraction of each other, and
# the packed time to target at most 1 / (this x packing factor) of the unpacked one.
SAMPLES_TOLERANCE = 0.05
THROUGHPUT_FRACTION = 0.9


def repository_path(path: str) -> str:
    """``path``, a relative one taken from the repository."""
    return os.path.join(REPOSITORY, path)


# ------------------------------------------------------------------ data
def split_documents(text: str, every: int) -> tuple[str, str]:
    r"""The documents-format text (one sentence a line, blank lines between
    documents) as (kept, held out): documents 0, every, 2 every, ... are held
    out, less any sentence that a kept document also has (the corpus repeats
    some text: help topics quote one another), and a held-out document left
    with fewer than two sentences is dropped.

    >>> split_documents("a.\nb.\nc.\n\nb.\nd.\n\ne.\nf.\n", 2)
    ('b.\nd.\n', 'a.\nc.\n\ne.\nf.\n')
    """
    documents = [document.strip("\n").split("\n") for document in text.split("\n\n")]
    documents = [document for document in documents if document != [""]]
    kept = [d for index, d in enumerate(documents) if index % every]
    seen = {sentence for document in kept for sentence in document}
    heldout = [[sentence for sentence in d if sentence not in seen]
               for index, d in enumerate(documents) if not index % every]
    heldout = [document for document in heldout if len(document) >= 2]
    return tuple("\n\n".join("\n".join(d) for d in part) + "\n" for part in (kept, heldout))


def vocab_size() -> int:
    with open(repository_path(FLAGS.bert_config_file)) as file:
        return int(json.load(file)["vocab_size"])


def build_data(folder: str) -> dict:
    """Training records, evaluation set, and their packed copies in ``folder``
    (kept when made with the same flags); the packed training data's stats."""
    spec = {name: FLAGS[name].value for name in DATA_FLAGS}
    spec.update(vocab_size=vocab_size(), version=DATA_VERSION)
    marker = os.path.join(folder, "data.json")
    stats_file = os.path.join(folder, "packed", "packing_stats.json")
    if os.path.exists(marker) and json.load(open(marker)) == spec:
        logging.info("data: reusing %s", folder)
        return json.load(open(stats_file))
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    python = sys.executable
    sizes = [f"--max_seq_length={FLAGS.max_seq_length}",
             f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}"]
    corpus = os.path.join(folder, "corpus.txt")
    logging.info("data: the builtin corpus, records at S = %d, the evaluation set, packing, "
                 "in %s", FLAGS.max_seq_length, folder)
    run_tool([python, "-m", "data_prep.builtin_corpus", f"--output_file={corpus}"]
        + ([f"--max_documents={FLAGS.max_documents}"] if FLAGS.max_documents else []),
        os.path.join(folder, "corpus.log"))
    kept, heldout = split_documents(open(corpus, encoding="utf-8").read(),
                                    FLAGS.heldout_every)
    for name, text in (("train.txt", kept), ("heldout.txt", heldout)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as file:
            file.write(text)
    run_tool([python, "-m", "data_prep.create_pretraining_data",
         f"--input_file={folder}/train.txt", f"--output_file={folder}/unpacked/train.tfrecord",
         f"--vocab_size={spec['vocab_size']}", f"--dupe_factor={FLAGS.dupe_factor}",
         f"--random_seed={FLAGS.data_seed}", *sizes], os.path.join(folder, "create.log"))
    run_tool([python, "-m", "data_prep.create_pretraining_data",
         f"--input_file={folder}/heldout.txt", f"--output_file={folder}/pool/pool.tfrecord",
         f"--vocab_file={folder}/unpacked/vocab.txt",
         f"--dupe_factor={FLAGS.eval_dupe_factor}",
         f"--random_seed={FLAGS.data_seed + 1}", *sizes],
        os.path.join(folder, "create_pool.log"))
    run_tool([python, "-m", "data_prep.pick_eval_samples",
         f"--input_tfrecord={folder}/pool/pool.tfrecord",
         f"--output_tfrecord={folder}/eval/eval.tfrecord",
         f"--num_examples_to_pick={FLAGS.num_eval_samples}", *sizes],
        os.path.join(folder, "pick.log"))
    for source, target in (("unpacked/train.tfrecord", "packed"),
                           ("eval/eval.tfrecord", "eval_packed")):
        run_tool([python, "-m", "data_prep.pack_pretraining_data",
             f"--input_file={folder}/{source}", f"--output_dir={folder}/{target}", *sizes,
             *FLAGS.pack_beam_options],
            os.path.join(folder, f"pack_{target}.log"))
    json.dump(spec, open(marker, "w"))
    return json.load(open(stats_file))


# ------------------------------------------------------------------ runs
def train(kind: str, data: str, folder: str) -> dict:
    """One run of run_pretraining.py; its output folder, MLPerf log and wall time."""
    output_dir = os.path.join(folder, kind)
    mlperf_log = os.path.join(folder, f"{kind}.mlperf.log")
    shutil.rmtree(output_dir, ignore_errors=True)
    os.makedirs(output_dir)
    if kind == "unpacked":
        inputs = [f"--input_file={data}/unpacked/train.tfrecord", "--batching=padded",
                  f"--eval_input_file={data}/eval/eval.tfrecord"]
    else:
        evaluation = "eval_packed/*.tfrecord" if FLAGS.pack_eval else "eval/eval.tfrecord"
        inputs = [f"--input_file={data}/packed/*.tfrecord",
                  "--packing_hyperparameter_adjustment=accumulation",
                  f"--eval_input_file={data}/{evaluation}"]
    logging.info("%s run: %s", kind, output_dir)
    seconds = run_tool([sys.executable, "run_pretraining.py",
                   f"--bert_config_file={repository_path(FLAGS.bert_config_file)}",
                   f"--output_dir={output_dir}", "--do_train", "--do_eval", *inputs,
                   f"--max_seq_length={FLAGS.max_seq_length}",
                   f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
                   f"--train_batch_size={FLAGS.train_batch_size}",
                   f"--steps_per_update={FLAGS.steps_per_update}",
                   f"--num_train_steps={FLAGS.num_train_steps}",
                   f"--num_warmup_steps={FLAGS.num_warmup_steps}",
                   f"--learning_rate={FLAGS.learning_rate}", f"--seed={FLAGS.seed}",
                   f"--eval_interval_samples={FLAGS.eval_interval_samples}",
                   f"--stop_threshold={FLAGS.stop_threshold}",
                   f"--eval_batch_size={FLAGS.eval_batch_size}",
                   f"--{'' if FLAGS.jit_compile else 'no'}jit_compile",
                   "--save_checkpoints_steps=0", f"--mlperf_log_file={mlperf_log}"],
                  os.path.join(folder, f"{kind}.log"))
    return dict(output_dir=output_dir, mlperf_log=mlperf_log, process_seconds=seconds)


def read_mlperf_log(path: str) -> list:
    """The ``:::MLLOG`` lines of a log, as dicts (key, value, time_ms, metadata)."""
    with open(path) as file:
        return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in file
                if line.startswith(":::MLLOG ")]


def mlperf_result(lines: list) -> dict:
    """What MLPerf reads off a run's log: its status, the time from ``run_start``
    to ``run_stop`` (s), the samples (``epoch_num``) and accuracy of the last
    evaluation, the evaluations in time order (seconds since ``run_start``),
    the time spent evaluating, and the batch the run logged."""
    events = {}
    for line in lines:
        events.setdefault(line["key"], []).append(line)
    (run_start,), (run_stop,) = events["run_start"], events["run_stop"]
    start_ms = run_start["time_ms"]
    evaluations = [{"samples": line["metadata"]["epoch_num"], "accuracy": line["value"],
                    "seconds": (line["time_ms"] - start_ms) / 1000}
                   for line in events.get("eval_accuracy", [])]
    evaluating = sum(stop["time_ms"] - begin["time_ms"] for begin, stop in
                     zip(events.get("eval_start", []), events.get("eval_stop", []))) / 1000
    values = {key: found[-1]["value"] for key, found in events.items()}
    return dict(
        status=run_stop["metadata"]["status"],
        seconds=(run_stop["time_ms"] - start_ms) / 1000,
        samples=evaluations[-1]["samples"] if evaluations else None,
        accuracy=evaluations[-1]["accuracy"] if evaluations else None,
        evaluations=evaluations, evaluation_seconds=evaluating,
        last_evaluation_seconds=evaluations[-1]["seconds"] if evaluations else None,
        global_batch_size=values["global_batch_size"],
        micro_batches_per_update=values["gradient_accumulation_steps"],
        packing_factor=values["packing_factor"])


def matching_steps_per_update(packing_factor: float) -> int:
    """The fewest unpacked micro-batches per update that the packed run's rounded
    ones match within 1 % in sequences (the packing adjustment ``accumulation``).

    >>> matching_steps_per_update(1.2009), matching_steps_per_update(1.7615)
    (6, 7)
    """
    for steps in range(1, 101):
        packed = max(1, round(steps / packing_factor))
        if abs(packed * packing_factor / steps - 1) <= 0.01:
            return steps
    return 100


def claims(results: dict) -> dict:
    """The paper's two claims, from both runs' `mlperf_result`."""
    unpacked, packed = results["unpacked"], results["packed"]
    reached = unpacked["status"] == packed["status"] == "success"
    samples_ratio = packed["samples"] / unpacked["samples"]
    time_ratio = packed["seconds"] / unpacked["seconds"]
    bound = 1 / (THROUGHPUT_FRACTION * packed["packing_factor"])
    return dict(both_reached=reached, samples_ratio=samples_ratio,
                samples_met=reached and abs(samples_ratio - 1) <= SAMPLES_TOLERANCE,
                time_ratio=time_ratio, time_bound=bound,
                time_met=reached and time_ratio <= bound,
                speed_up=unpacked["seconds"] / packed["seconds"],
                last_evaluation_time_ratio=(packed["last_evaluation_seconds"]
                                            / unpacked["last_evaluation_seconds"]),
                eval_interval_fraction=FLAGS.eval_interval_samples / unpacked["samples"])


# ------------------------------------------------------------------ report
def plot(results: dict, path: str) -> None:
    """Accuracy against samples (left) and against seconds since ``run_start``
    (right), both runs, the target dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from packed_bert_tf.plots import save_figure_atomically

    figure, panels = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for kind, result in results.items():
        evaluations = result["evaluations"]
        accuracy = [e["accuracy"] for e in evaluations]
        for panel, axis in zip(panels, ("samples", "seconds")):
            panel.plot([e[axis] for e in evaluations], accuracy, marker=".",
                       label=f"{kind} ({result['status']})")
    for panel, label in zip(panels, ("training samples (sequences)",
                                     "seconds since run_start")):
        panel.axhline(FLAGS.stop_threshold, color="black", linestyle="--", linewidth=1,
                      label=f"target {FLAGS.stop_threshold:g}")
        panel.set_xlabel(label)
        panel.grid(alpha=0.3)
        panel.legend(loc="lower right")
    panels[0].set_ylabel("evaluation masked-LM accuracy")
    panels[0].set_title("accuracy against samples")
    panels[1].set_title("accuracy against time (MLPerf's clock)")
    figure.tight_layout()
    try:
        save_figure_atomically(figure, path, dpi=110)
    finally:
        plt.close(figure)


def image_link(path: str) -> str:
    """The plot's path relative to the Markdown file (as given without one)."""
    if not FLAGS.write_markdown:
        return FLAGS.plot
    return os.path.relpath(path, os.path.dirname(os.path.abspath(FLAGS.write_markdown)))


def _met(flag: bool) -> str:
    return "met" if flag else "NOT met"


def markdown(results: dict, verdict: dict, stats: dict, plot_path: str) -> str:
    packing_factor = results["packed"]["packing_factor"]
    evaluation_records = ("the packed run on the packed copy of the evaluation set"
                          if FLAGS.pack_eval else "both on the unpacked evaluation records")
    lines = [
        *section_header(flags_shown=SHOWN_FLAGS),
        f"The builtin corpus, every {FLAGS.heldout_every}th document held out (less the "
        "sentences also in the training text): training "
        f"records at S = {FLAGS.max_seq_length}, P = {FLAGS.max_predictions_per_seq} "
        f"({stats['sequences_in']:,} sequences, packed into {stats['packs']:,} packs: packing "
        f"factor {packing_factor:.4f}); {FLAGS.num_eval_samples:,} evaluation sequences "
        "picked from the held-out documents (`pick_eval_samples`). "
        f"`run_pretraining.py` with `{FLAGS.bert_config_file}`, LAMB at "
        f"{FLAGS.learning_rate:g}, {FLAGS.train_batch_size} rows per micro-batch, "
        f"{FLAGS.steps_per_update} micro-batches per unpacked update "
        "(`--batching=padded`); the packed run with "
        "`--packing_hyperparameter_adjustment=accumulation` (the same sequences per "
        "update). Both evaluate every "
        f"{FLAGS.eval_interval_samples:,} training sequences "
        f"({evaluation_records})"
        f" and stop at masked-LM accuracy {FLAGS.stop_threshold:g}. Figures from the "
        "MLPerf logs: time from `run_start` to `run_stop`, samples the `epoch_num` of the "
        "last `eval_accuracy`.",
        "",
        "| run | status | sequences per update | micro-batches per update | evaluations | "
        "samples to target | time to target (s) | of which evaluating (s) | "
        "last evaluation at (s) | final accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, result in results.items():
        lines.append(
            f"| {kind} | {result['status']} | {result['sequences_per_update']:.2f} | "
            f"{result['micro_batches_per_update']} | {len(result['evaluations'])} | "
            f"{result['samples']:,} | {result['seconds']:.1f} | "
            f"{result['evaluation_seconds']:.1f} | {result['last_evaluation_seconds']:.1f} | "
            f"{result['accuracy']:.4f} |")
    lines += [
        "",
        f"Samples to target, packed / unpacked: **{verdict['samples_ratio']:.4f}** (claim: "
        f"within {SAMPLES_TOLERANCE:.0%}: {_met(verdict['samples_met'])}; one evaluation "
        f"interval is {verdict['eval_interval_fraction']:.1%} of the unpacked samples).  ",
        f"Time to target, packed / unpacked: **{verdict['time_ratio']:.4f}** (claim: <= 1 / "
        f"({THROUGHPUT_FRACTION} x {packing_factor:.4f}) = {verdict['time_bound']:.4f}: "
        f"{_met(verdict['time_met'])}); speed-up {verdict['speed_up']:.3f}x at packing "
        f"factor {packing_factor:.4f}. From `run_start` to the last `eval_accuracy` "
        f"instead of `run_stop`: {verdict['last_evaluation_time_ratio']:.4f}.",
    ]
    batches = [results[kind]["sequences_per_update"] for kind in RUNS]
    if abs(batches[1] / batches[0] - 1) > 0.02:
        lines += ["", f"The packed run's updates hold {batches[1] / batches[0] - 1:+.1%} "
                  "sequences against the unpacked run's (its micro-batches per update are "
                  f"rounded): --steps_per_update={matching_steps_per_update(packing_factor)} "
                  "would give the same within 1 %."]
    if not verdict["both_reached"]:
        missed = [kind for kind, result in results.items() if result["status"] != "success"]
        lines += ["", f"Not reached: the {' and the '.join(missed)} run stopped at "
                  f"--num_train_steps below the target {FLAGS.stop_threshold:g}; the "
                  "claims need both runs at the target."]
    lines += ["", f"![accuracy against samples and time]({image_link(plot_path)})"]
    return "\n".join(lines)


def main(argv):
    del argv
    from packed_bert_tf.plots import check_figure_path

    plot_path = repository_path(FLAGS.plot)
    try:  # before the data and the runs
        check_figure_path(plot_path)
    except ValueError as error:
        sys.exit(f"time_to_train: {error}")
    if FLAGS.num_train_steps % FLAGS.steps_per_update:
        sys.exit(f"time_to_train: --num_train_steps={FLAGS.num_train_steps} is not a "
                 f"multiple of --steps_per_update={FLAGS.steps_per_update}")
    work_dir = os.path.abspath(FLAGS.work_dir)  # the tools run in the repository
    os.makedirs(work_dir, exist_ok=True)
    data = os.path.join(work_dir, "data")
    stats = build_data(data)
    folder = os.path.join(work_dir, "runs")
    results = {}
    for kind in RUNS:
        paths = train(kind, data, folder)
        results[kind] = {**mlperf_result(read_mlperf_log(paths["mlperf_log"])), **paths}
        # The log's batch counts an update's rows at the nominal (whole) packing
        # factor; the sequences an update holds take the measured one.
        results[kind]["sequences_per_update"] = (
            FLAGS.train_batch_size * results[kind]["micro_batches_per_update"]
            * results[kind]["packing_factor"])
        logging.info("%s: %s after %s samples, %.1f s (accuracy %s)", kind,
                     results[kind]["status"], results[kind]["samples"],
                     results[kind]["seconds"], results[kind]["accuracy"])
    verdict = claims(results)
    with open(os.path.join(work_dir, "report.json"), "w") as file:
        json.dump({"runs": results, "claims": verdict, "packing_stats": stats}, file,
                  indent=1, sort_keys=True)
    plot(results, plot_path)
    publish_section("time_to_train", "Time to train, packed vs unpacked (MLPerf's log, CPU)",
                    markdown(results, verdict, stats, plot_path))


if __name__ == "__main__":
    app.run(main)
