r"""Time to train, packed vs unpacked, as MLPerf measures it, over several seeds.

    python benchmarks/time_to_train.py --setting=s128 --write_markdown=BENCHMARKS.md
    python benchmarks/time_to_train.py --setting=s512 --write_markdown=BENCHMARKS.md

The paper's claim, "the same accuracy in less time", checked per setting
(`SETTINGS`, ``--setting``):

* ``s128``: the 4-layer model (``time_to_train_bert_config.json``) at
  S = 128, P = 20; the builtin corpus packs at a packing factor of about 1.18.
* ``s512``: the same model at S = 512, P = 76: the builtin corpus's documents
  as they are (``create_pretraining_data``'s default ``short_seq_prob`` 0.1)
  pack at a packing factor of about 1.74 (the training records: 33,107
  sequences into 19,022 packs of at most 3), nearer Wikipedia's length mix.
  7 unpacked micro-batches per update, 4 packed ones (0.5 % fewer sequences).

The data of a setting, built once into ``--work_dir/SETTING/data`` (kept while
the flags that make it stay the same):

* the builtin corpus (``python -m data_prep.builtin_corpus``: Python's own
  documentation), split by document: every ``--heldout_every``-th document
  is held out for evaluation, less the sentences that the training text
  also has, the others are the training text;
* the training text -> a WordPiece vocabulary (the model's vocab_size) and
  pre-training records at ``--max_seq_length`` -> their packed copy
  (``data_prep.pack_pretraining_data``);
* the held-out text -> records with the same vocabulary, ``--eval_dupe_factor``
  passes (different masks: one pass gives about 440 sequences at S = 128 and
  190 at S = 512) -> MLPerf's evaluation set (``data_prep.pick_eval_samples``,
  ``--num_eval_samples`` records evenly spaced through them) -> its packed copy.

Then, for every seed of ``--seeds``, ``run_pretraining.py`` twice, one process
after the other, with the same hyper-parameters, seed, sequences per update,
evaluation interval (in training sequences) and target: unpacked
(``--batching=padded``, standard BERT) and packed (the packed records with
``--packing_hyperparameter_adjustment=accumulation``: the micro-batches of an
update divided by the packing factor, so an update holds as many sequences as
the unpacked run's; the paper's setting). Both evaluate the masked-LM
accuracy of the same held-out sequences every ``--eval_interval_samples``
training sequences and stop at the first evaluation that reaches
``--stop_threshold``; the packed run reads the packed copy of them
(``--pack_eval``; the accuracy is the same either way).

Each run writes MLPerf's log, and the figures come from it, as MLPerf reads
a result: time to train from ``run_start`` to ``run_stop`` (evaluations,
checkpoints and the first compilation included), MLPerf's samples the
``epoch_num`` of the last ``eval_accuracy`` (the first evaluation at the
target), the status that of ``run_stop`` (``success``: the target was
reached). MLPerf's samples are counted in steps of one evaluation interval
(about 7 % of the run at s128): runs that reach the target between the same
two evaluations get the same figure, up to where those evaluations fall.
Samples to target for the claim are therefore where the accuracy crosses
the target (`interpolated_samples`): linearly interpolated, in samples,
between the last evaluation below the target and the first at or above it;
from 0 accuracy at 0 samples (`START_ACCURACY`) when the first evaluation
already reaches it.

The claim, over the seeds at which both arms reached the target
(`ratio_of_means`, `claims`): samples to target (interpolated), packed over
unpacked, the ratio of the mean samples with Fieller's 95 % interval for
paired data (the t-interval, n - 1 degrees of freedom, of the per-seed
differences ``packed - ratio x unpacked``; with 3 seeds t = 4.30, so the
interval is wide), and the same for the time to target. It holds when the
samples interval contains 1 and lies within [0.95, 1.05], and the time ratio
is at most 1 / (0.9 x packing factor). The ratio of MLPerf's samples, and
one evaluation interval as a fraction of the samples to target (the step in
which MLPerf's samples are counted), are reported beside it. A plot
(``--plot``) shows every seed's accuracy against samples and against time,
both arms; ``report.json`` in the setting's folder holds the figures.

The targets. ``s128``: 0.12. The unpacked seed-0 run of the earlier
single-seed benchmark (500 evaluation sequences, same model and data) rose
almost linearly from 0.067 at 2,000 samples to 0.135 at 18,000 and then
flattened (0.139 at 20,000, 0.144 at 24,000): its old target 0.14 sat where a
step of one evaluation's noise moves samples to target by a whole interval.
0.12, about three quarters of the way up the rise, is reached at about 14,000
samples, where the curve still climbs about 0.0033 per 1,000 samples: 2,000
evaluation sequences (an evaluation's standard error about 0.002) then move
samples to target by about 600, and the evaluation interval, 1,000 samples,
is about 7 % of it. ``s512``: 0.12 as well, on the rise of the unpacked
seed-0 curve: 0.079 at 6,000 samples, 0.097 at 8,000, 0.102 at 10,000, 0.116
at 12,000 and 0.125 at 14,000 (crossed at about 12,900), so the evaluation
interval, 2,000 samples, is about 16 % of the samples to target. That run
took 49 minutes alone on two CPU cores: about 5.9 training sequences per
second (its progress lines), and 60 to 80 s per evaluation of the 2,000
sequences (a 2,000-sample interval took 400 to 420 s).

Resuming: each (setting, seed, arm) run has a folder of its own,
``--work_dir/SETTING/seedN/ARM``, with the run's flags (``run.json``). A run
whose MLPerf log ends with ``run_stop`` is complete and is read again, not
rerun; a run whose folder holds checkpoints (every
``--save_checkpoints_steps``) but no ``run_stop`` is started again with the
same flags, and ``run_pretraining.py`` resumes it from its last checkpoint,
appending to its MLPerf log; any other run starts afresh, as does one whose
process failed after logging ``run_stop``. The time to target
of a resumed run leaves out the time when no process ran it (from its log's
last line before the restart to the restart), and its table row says so.
A run made with other flags (hyper-parameters, target, data) is not reused:
the benchmark refuses, naming the flags, or with ``--redo_changed_runs``
runs it again.
"""

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import time

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
# The flags' defaults are those of the setting s128; the other settings
# replace the ones they name unless given on the command line.
flags.DEFINE_enum("setting", "s128", ["s128", "s512"],
                  "Named preset (see the module docstring): s128 (S = 128, packing "
                  "factor about 1.18) or s512 (S = 512, P = 76, packing factor about "
                  "1.74). Flags given on the command line replace its values.")
flags.DEFINE_string("work_dir", "/tmp/packed_bert_tf_time_to_train",
                    "The data (kept for the next run with the same data flags), the runs' "
                    "folders and logs, and report.json, under a folder per setting.")
define_write_markdown()
flags.DEFINE_string("plot", "benchmarks/time_to_train_{setting}.png",
                    "PNG of every seed's accuracy against samples and time ({setting}: the "
                    "setting's name; relative paths: to the repository).")
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
flags.DEFINE_integer("eval_dupe_factor", 5, "Passes over the held-out text: the pool the "
                     "evaluation set is picked from must hold --num_eval_samples.")
flags.DEFINE_integer("num_eval_samples", 2000, "Evaluation sequences (MLPerf: 10,000), "
                     "picked evenly through the held-out records.")
flags.DEFINE_list("pack_beam_options", [],
                  "Beam pipeline options of the packing tool, comma-separated (default: "
                  "its own, the local runner with a process per core; "
                  "--direct_running_mode=in_memory packs in the tool's process, for a small "
                  "--max_documents). The data does not depend on them.")
flags.DEFINE_integer("data_seed", 12345, "create_pretraining_data's --random_seed of the "
                     "training records (the held-out records: + 1).")
# Runs.
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (weights, dropout, data order): each "
                  "runs both arms.")
flags.DEFINE_integer("train_batch_size", 8, "Rows per micro-batch, both runs (packed: packs).")
flags.DEFINE_integer("steps_per_update", 6,
                     "Unpacked micro-batches per update; the packed run takes this / the "
                     "packing factor, rounded (s128's packing factor 1.18: 6 -> 5, 1.8 % "
                     "fewer sequences per update; s512's 1.74: 7 -> 4, 0.5 % fewer).")
flags.DEFINE_integer("num_train_steps", 9600, "Steps of both runs, as run_pretraining.py "
                     "counts them (unpacked micro-batches: a multiple of --steps_per_update; "
                     "the packed run makes as many updates): the learning-rate schedule's "
                     "end, and the stop where the target is not reached.")
flags.DEFINE_integer("num_warmup_steps", 480, "Linear warm-up, in the same steps.")
flags.DEFINE_float("learning_rate", 5e-3, "Peak learning rate (LAMB).")
flags.DEFINE_integer("eval_interval_samples", 1000,
                     "Training sequences between evaluations, both runs.")
flags.DEFINE_float("stop_threshold", 0.12,
                   "Target masked-LM accuracy on the evaluation set, on the rise of the "
                   "curve (how the settings' targets were chosen: the module docstring).")
flags.DEFINE_integer("eval_batch_size", 64, "Rows per evaluation batch.")
flags.DEFINE_bool("jit_compile", True, "XLA, both runs (run_pretraining.py's flag).")
flags.DEFINE_bool("pack_eval", True, "The packed run evaluates on the packed copy of the "
                  "evaluation set (same sequences, same accuracy, fewer rows).")
flags.DEFINE_integer("save_checkpoints_steps", 300,
                     "Checkpoint every this many steps (run_pretraining.py's flag): what a "
                     "stopped benchmark loses of a run at most. It does not change a run's "
                     "trajectory, only its clock a little (both arms checkpoint).")
flags.DEFINE_bool("redo_changed_runs", False,
                  "Run again, from the start, the runs whose folder holds a run made with "
                  "other flags (default: refuse, naming them).")

#: Each setting's values of the flags it changes from the flags' defaults (s128's).
SETTINGS = {
    "s128": {},
    "s512": dict(max_seq_length=512, max_predictions_per_seq=76, dupe_factor=20,
                 eval_dupe_factor=14, steps_per_update=7, num_train_steps=9800,
                 num_warmup_steps=490, eval_interval_samples=2000),
}
SETTING_TITLES = {"s128": "S = 128, packing factor about 1.18",
                  "s512": "S = 512, packing factor about 1.74"}
SHOWN_FLAGS = ("bert_config_file", "max_seq_length", "max_predictions_per_seq",
               "max_documents", "heldout_every", "dupe_factor", "eval_dupe_factor",
               "num_eval_samples", "data_seed", "seeds", "train_batch_size",
               "steps_per_update", "num_train_steps", "num_warmup_steps", "learning_rate",
               "eval_interval_samples", "stop_threshold", "eval_batch_size", "jit_compile",
               "pack_eval", "save_checkpoints_steps")
DATA_FLAGS = ("max_seq_length", "max_predictions_per_seq", "max_documents", "heldout_every",
              "dupe_factor", "eval_dupe_factor", "num_eval_samples", "data_seed")
RUNS = ("unpacked", "packed")
DATA_VERSION = 1  # of the data this script makes: a new one remakes the data kept
# The paper's claim: the samples interval within these bounds (and around 1), and
# the packed time to target at most 1 / (this x packing factor) of the unpacked one.
SAMPLES_BOUNDS = (0.95, 1.05)
THROUGHPUT_FRACTION = 0.9
CONFIDENCE = 0.95
# The accuracy taken at 0 samples where a run's first evaluation already reaches
# the target: an untrained model's masked-LM accuracy is about 1 / vocab_size.
START_ACCURACY = 0.0
# run_pretraining.py's flags that a run may change when resumed (not in its record).
UNRECORDED_FLAGS = ("save_checkpoints_steps",)
RUN_RECORD = "run.json"
MLPERF_LOG = "mlperf.log"
OUTPUT_DIR = "output"
_CHECKPOINT_INDEX = re.compile(r"ckpt-\d+\.index")


def repository_path(path: str) -> str:
    """``path``, a relative one taken from the repository."""
    return os.path.join(REPOSITORY, path)


def apply_setting(name: str) -> None:
    """Gives the flags that setting ``name`` changes its values, where the
    command line does not give them."""
    for flag, value in SETTINGS[name].items():
        if not FLAGS[flag].present:
            FLAGS[flag].value = value


def subsection_key() -> str:
    """The setting's name, and ``flag=value`` for each flag shown whose value is
    not the setting's (a run off the preset gets a subsection of its own)."""
    preset = {name: FLAGS[name].default for name in SHOWN_FLAGS}
    preset.update({k: v for k, v in SETTINGS[FLAGS.setting].items() if k in preset})
    changed = [f"{name}={','.join(FLAGS[name].value) if name == 'seeds' else FLAGS[name].value}"
               for name in SHOWN_FLAGS if FLAGS[name].value != preset[name]]
    return " ".join([FLAGS.setting, *changed])


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
    spec = data_spec()
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
def data_spec() -> dict:
    """What makes a setting's data: its flags, the vocabulary size, this
    script's data version."""
    spec = {name: FLAGS[name].value for name in DATA_FLAGS}
    spec.update(vocab_size=vocab_size(), version=DATA_VERSION)
    return spec


@dataclasses.dataclass(frozen=True)
class Run:
    """One (setting, seed, arm) run: its folder and run_pretraining.py's flags
    (less the folder's own paths)."""

    name: str  # seedN/ARM
    folder: str
    flags: tuple

    @property
    def record_path(self) -> str:
        return os.path.join(self.folder, RUN_RECORD)

    @property
    def mlperf_log(self) -> str:
        return os.path.join(self.folder, MLPERF_LOG)

    @property
    def output_dir(self) -> str:
        return os.path.join(self.folder, OUTPUT_DIR)

    def identity(self) -> dict:
        """What must be the same for a run in the folder to be reused: the
        flags (but those that leave its trajectory alone) and the data's."""
        found = dict(flag[2:].split("=", 1) if "=" in flag else (flag[2:], "")
                     for flag in self.flags)
        for name in UNRECORDED_FLAGS:
            found.pop(name, None)
        found.update({f"data:{name}": value for name, value in data_spec().items()})
        return found


def run_flags(kind: str, seed: int, data: str) -> tuple:
    """run_pretraining.py's flags of one arm at one seed, but its output paths."""
    if kind == "unpacked":
        inputs = [f"--input_file={data}/unpacked/train.tfrecord", "--batching=padded",
                  f"--eval_input_file={data}/eval/eval.tfrecord"]
    else:
        evaluation = "eval_packed/*.tfrecord" if FLAGS.pack_eval else "eval/eval.tfrecord"
        inputs = [f"--input_file={data}/packed/*.tfrecord",
                  "--packing_hyperparameter_adjustment=accumulation",
                  f"--eval_input_file={data}/{evaluation}"]
    return (f"--bert_config_file={repository_path(FLAGS.bert_config_file)}",
            "--do_train", "--do_eval", *inputs,
            f"--max_seq_length={FLAGS.max_seq_length}",
            f"--max_predictions_per_seq={FLAGS.max_predictions_per_seq}",
            f"--train_batch_size={FLAGS.train_batch_size}",
            f"--steps_per_update={FLAGS.steps_per_update}",
            f"--num_train_steps={FLAGS.num_train_steps}",
            f"--num_warmup_steps={FLAGS.num_warmup_steps}",
            f"--learning_rate={FLAGS.learning_rate}", f"--seed={seed}",
            f"--eval_interval_samples={FLAGS.eval_interval_samples}",
            f"--stop_threshold={FLAGS.stop_threshold}",
            f"--eval_batch_size={FLAGS.eval_batch_size}",
            f"--jit_compile={str(FLAGS.jit_compile).lower()}",
            f"--save_checkpoints_steps={FLAGS.save_checkpoints_steps}")


def planned_runs(setting_dir: str, seeds: list) -> list:
    """Every (seed, arm) run of the setting, seed by seed, unpacked first."""
    data = os.path.join(setting_dir, "data")
    return [Run(f"seed{seed}/{kind}", os.path.join(setting_dir, f"seed{seed}", kind),
                run_flags(kind, seed, data)) for seed in seeds for kind in RUNS]


def read_record(run: Run) -> dict | None:
    if not os.path.exists(run.record_path):
        return None
    with open(run.record_path) as file:
        return json.load(file)


def write_record(run: Run, record: dict) -> None:
    with open(run.record_path + ".tmp", "w") as file:
        json.dump(record, file, indent=1)
    os.replace(run.record_path + ".tmp", run.record_path)


def changed_flags(recorded: dict, current: dict) -> list:
    """``NAME: recorded -> current`` for each flag (or data item) that differs.

    >>> changed_flags({"seed": "0", "a": "1"}, {"seed": "0", "b": "2"})
    ['a: 1 -> (none)', 'b: (none) -> 2']
    """
    return [f"{name}: {recorded.get(name, '(none)')} -> {current.get(name, '(none)')}"
            for name in sorted(set(recorded) | set(current))
            if recorded.get(name) != current.get(name)]


def check_recorded_flags(runs: list, redo: bool) -> None:
    """Refuses (one line, exit 1) when a run's folder holds a run made with other
    flags; with ``redo``, removes such folders instead."""
    for run in runs:
        record = read_record(run)
        if record is None:
            continue
        changes = changed_flags(record["flags"], run.identity())
        if changes and redo:
            logging.info("%s: made with other flags (%s): redone", run.name,
                         "; ".join(changes))
            shutil.rmtree(run.folder)
        elif changes:
            sys.exit(f"time_to_train: {run.folder} holds a run made with other flags "
                     f"({'; '.join(changes)}): pass --redo_changed_runs to run it again, "
                     "or another --work_dir")


def mllog_lines(path: str) -> list:
    """The ``:::MLLOG`` lines of a log, as dicts (key, value, time_ms, metadata);
    none when there is no log."""
    if not os.path.exists(path):
        return []
    with open(path) as file:
        return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in file
                if line.startswith(":::MLLOG ")]


def has_checkpoints(output_dir: str) -> bool:
    folder = os.path.join(output_dir, "checkpoints")
    return os.path.isdir(folder) and any(map(_CHECKPOINT_INDEX.fullmatch, os.listdir(folder)))


def run_state(run: Run) -> str:
    """``complete`` (its log ends with ``run_stop``, from a process that did not
    fail), ``resume`` (checkpoints, no ``run_stop``) or ``start``."""
    record = read_record(run)
    if record is None or record.get("failed"):
        return "start"
    lines = mllog_lines(run.mlperf_log)
    if lines and lines[-1]["key"] == "run_stop":
        return "complete"
    return "resume" if has_checkpoints(run.output_dir) else "start"


def execute(run: Run) -> str:
    """Brings ``run`` to its end: read as it is, resumed or started; its state
    before."""
    state = run_state(run)
    if state == "complete":
        logging.info("%s: complete, read from %s", run.name, run.mlperf_log)
        return state
    if state == "start":
        shutil.rmtree(run.folder, ignore_errors=True)
        os.makedirs(run.folder)
        record = dict(flags=run.identity(), attempts=[])
    else:
        record = read_record(run)
    # Where the log stood when this process started: a resumed run's clock
    # leaves out the time from that line to the restart.
    record["attempts"].append(dict(started=time.time(),
                                   log_lines=len(mllog_lines(run.mlperf_log))))
    write_record(run, record)
    attempt = len(record["attempts"])
    logging.info("%s: %s (attempt %d) in %s", run.name, "resumed" if state == "resume"
                 else "started", attempt, run.folder)
    try:
        run_tool([sys.executable, "run_pretraining.py", *run.flags,
                  f"--output_dir={run.output_dir}", f"--mlperf_log_file={run.mlperf_log}"],
                 os.path.join(run.folder, f"run.{attempt}.log"))
    except RuntimeError:
        lines = mllog_lines(run.mlperf_log)
        if lines and lines[-1]["key"] == "run_stop":  # a failure, not an interruption
            record["failed"] = True
            write_record(run, record)
        raise
    lines = mllog_lines(run.mlperf_log)
    if not lines or lines[-1]["key"] != "run_stop":
        raise RuntimeError(f"{run.name}: run_pretraining.py ended without run_stop in "
                           f"{run.mlperf_log}")
    return state


# ------------------------------------------------------------------ figures
def mlperf_result(lines: list, attempts: list) -> dict:
    """What MLPerf reads off a run's log, the time when no process ran it left out.

    Args:
      lines: the log's ``:::MLLOG`` lines (`mllog_lines`), ending with ``run_stop``.
      attempts: the processes that wrote it, in order: ``started`` (Unix
        seconds) and ``log_lines`` (lines in the log when it started).

    Returns:
      Its status, the seconds from ``run_start`` to ``run_stop`` (``seconds``:
      less the pauses before restarts; ``clock_seconds``: as they are), the
      samples (``epoch_num``) and accuracy of the last evaluation, the
      evaluations by samples (an evaluation done again after a restart: its
      last one), the time spent evaluating, the restarts, and the batch the
      run logged.
    """
    # Seconds to leave out of each line's time: the pause before each restart,
    # from the log's last line then to the restart.
    paused = [0.0] * len(lines)
    for attempt in attempts[1:]:
        count = attempt["log_lines"]
        if count:
            pause = max(0.0, attempt["started"] - lines[count - 1]["time_ms"] / 1000)
            paused[count:] = [seconds + pause for seconds in paused[count:]]
    index = {key: [i for i, line in enumerate(lines) if line["key"] == key]
             for key in ("run_start", "run_stop")}
    (start,), (stop,) = index["run_start"], index["run_stop"]

    def seconds(i: int) -> float:
        return (lines[i]["time_ms"] - lines[start]["time_ms"]) / 1000 - (
            paused[i] - paused[start])

    evaluations, evaluating, began = {}, 0.0, None
    for i, line in enumerate(lines):
        if line["key"] == "eval_start":
            began = i
        elif line["key"] == "eval_stop" and began is not None:
            evaluating += seconds(i) - seconds(began)
            began = None
        elif line["key"] == "eval_accuracy":
            samples = line["metadata"]["epoch_num"]
            evaluations[samples] = dict(samples=samples, accuracy=line["value"],
                                        seconds=seconds(i))
    evaluations = [evaluations[samples] for samples in sorted(evaluations)]
    values = {line["key"]: line["value"] for line in lines}
    last = evaluations[-1] if evaluations else {}
    return dict(
        status=lines[stop]["metadata"]["status"], seconds=seconds(stop),
        clock_seconds=(lines[stop]["time_ms"] - lines[start]["time_ms"]) / 1000,
        restarts=len(attempts) - 1, samples=last.get("samples"),
        accuracy=last.get("accuracy"), evaluations=evaluations,
        evaluation_seconds=evaluating, last_evaluation_seconds=last.get("seconds"),
        global_batch_size=values["global_batch_size"],
        micro_batches_per_update=values["gradient_accumulation_steps"],
        packing_factor=values["packing_factor"])


def interpolated_samples(evaluations: list, target: float,
                         start_accuracy: float = START_ACCURACY) -> float | None:
    """The samples at which a run's accuracy crosses ``target``, linearly
    interpolated between the last evaluation below it and the first at or
    above it: not counted in evaluation intervals, as MLPerf's samples are.

    Args:
      evaluations: the run's evaluations by samples (`mlperf_result`'s
        ``evaluations``: ``samples``, ``accuracy``).
      target: the accuracy to reach.
      start_accuracy: the accuracy at 0 samples, the point before the first
        evaluation.

    Returns:
      The samples (a float), 0.0 when ``start_accuracy`` already reaches
      ``target``; None when no evaluation reaches it.

    Example:
      >>> interpolated_samples([dict(samples=1000, accuracy=0.25),
      ...                       dict(samples=2000, accuracy=0.5)], 0.3125)
      1250.0
    """
    before = (0, start_accuracy)
    if start_accuracy >= target:
        return 0.0
    for evaluation in evaluations:
        samples, accuracy = evaluation["samples"], evaluation["accuracy"]
        if accuracy >= target:
            return before[0] + (target - before[1]) / (accuracy - before[1]) * (
                samples - before[0])
        before = (samples, accuracy)
    return None


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


def ratio_of_means(numerators, denominators, confidence: float = CONFIDENCE) -> dict:
    """mean(numerators) / mean(denominators), paired, with Fieller's interval.

    The interval holds every ratio r at which the paired t-test of
    ``numerator - r x denominator`` (n - 1 degrees of freedom) does not reject
    a zero mean at level 1 - ``confidence``: the roots of
    ``(n̄ - r d̄)² = t² (s_nn - 2 r s_nd + r² s_dd) / n``. Exact for normal
    pairs, and defined for any spread, also none (the interval is then the
    ratio itself).

    Args:
      numerators: sequence of float, e.g. the packed runs' samples to target.
      denominators: sequence of float, the same length, the paired values
        (the unpacked runs' at the same seeds).
      confidence: the interval's coverage.

    Returns:
      ``ratio``, ``low``, ``high`` (None with fewer than two pairs; -inf and
      inf when the denominators' mean is not clearly away from zero), ``n``.

    Example:
      >>> ratio_of_means([11.0, 11.0], [10.0, 10.0])
      {'ratio': 1.1, 'low': 1.1, 'high': 1.1, 'n': 2}
    """
    from scipy import stats

    n = len(numerators)
    if n != len(denominators) or n == 0:
        raise ValueError(f"{n} numerators and {len(denominators)} denominators: expected "
                         "the same number, at least one")
    mean_n, mean_d = sum(numerators) / n, sum(denominators) / n
    ratio = mean_n / mean_d
    if n < 2:
        return dict(ratio=ratio, low=None, high=None, n=n)

    def covariance(xs, mean_x, ys, mean_y) -> float:
        return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / (n - 1)

    s_nn = covariance(numerators, mean_n, numerators, mean_n)
    s_dd = covariance(denominators, mean_d, denominators, mean_d)
    s_nd = covariance(numerators, mean_n, denominators, mean_d)
    g = float(stats.t.ppf((1 + confidence) / 2, n - 1)) ** 2 / n
    # a r² - 2 b r + c <= 0
    a, b, c = mean_d ** 2 - g * s_dd, mean_n * mean_d - g * s_nd, mean_n ** 2 - g * s_nn
    if a <= 0:
        return dict(ratio=ratio, low=-math.inf, high=math.inf, n=n)
    root = math.sqrt(max(0.0, b * b - a * c))
    low, high = (b - root) / a, (b + root) / a
    # No spread: the roots are the ratio, up to rounding.
    return dict(ratio=ratio, low=min(low, ratio), high=max(high, ratio), n=n)


def per_seed(results: dict) -> list:
    """Per seed, both arms' samples to target (``ARM_samples``: interpolated;
    ``ARM_mlperf_samples``: MLPerf's, at the evaluation), time to target, and
    whether both reached the target.

    Args:
      results: seed -> arm -> `mlperf_result`, with ``interpolated_samples``
        (`interpolated_samples`; None: the target not reached).
    """
    rows = []
    for seed, arms in results.items():
        rows.append(dict(
            seed=seed, reached=all(arms[kind]["status"] == "success"
                                   and arms[kind]["interpolated_samples"] is not None
                                   for kind in RUNS),
            **{f"{kind}_{figure}": arms[kind][key] for kind in RUNS
               for figure, key in (("samples", "interpolated_samples"),
                                   ("mlperf_samples", "samples"), ("seconds", "seconds"))}))
    return rows


def claims(rows: list, packing_factor: float, eval_interval_samples: int) -> dict:
    """The paper's claim from `per_seed` rows, over the seeds at which both arms
    reached the target.

    The samples claim holds when every seed reached the target in both arms
    and the ratio of the interpolated samples to target (``ARM_samples``) has
    an interval that contains 1 and lies within `SAMPLES_BOUNDS`; the time
    claim when every seed reached it and the time ratio is at most
    1 / (`THROUGHPUT_FRACTION` x ``packing_factor``). The ratio of MLPerf's
    samples (``mlperf_samples``, at the evaluations) is reported, not judged.
    """
    reached = [row for row in rows if row["reached"]]
    all_reached = bool(rows) and len(reached) == len(rows)
    figures = dict(seeds=len(rows), seeds_reached=len(reached), all_reached=all_reached,
                   time_bound=1 / (THROUGHPUT_FRACTION * packing_factor),
                   packing_factor=packing_factor, samples=None, mlperf_samples=None,
                   time=None, eval_interval_fraction=None, samples_met=False,
                   time_met=False)
    if not reached:
        return figures

    def ratio(figure: str) -> dict:
        return ratio_of_means([r[f"packed_{figure}"] for r in reached],
                              [r[f"unpacked_{figure}"] for r in reached])

    samples, seconds = ratio("samples"), ratio("seconds")
    low, high = samples["low"], samples["high"]
    mean_unpacked = sum(r["unpacked_samples"] for r in reached) / len(reached)
    figures.update(
        samples=samples, mlperf_samples=ratio("mlperf_samples"), time=seconds,
        eval_interval_fraction=eval_interval_samples / mean_unpacked,
        samples_met=all_reached and low is not None
        and SAMPLES_BOUNDS[0] <= low <= 1 <= high <= SAMPLES_BOUNDS[1],
        time_met=all_reached and seconds["ratio"] <= figures["time_bound"])
    return figures


# ------------------------------------------------------------------ report
# Line styles of the seeds, in turn (the target is black and dashed).
SEED_STYLES = ("-", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)))


def plot(results: dict, path: str) -> None:
    """Accuracy against samples (left) and against seconds since ``run_start``
    (right), every seed (a line style each) of both arms (a colour each), the
    target dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from packed_bert_tf.plots import save_figure_atomically

    colours = dict(zip(RUNS, ("tab:blue", "tab:orange")))
    figure, panels = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for number, (seed, arms) in enumerate(results.items()):
        for kind, result in arms.items():
            evaluations = result["evaluations"]
            accuracy = [e["accuracy"] for e in evaluations]
            for panel, axis in zip(panels, ("samples", "seconds")):
                panel.plot([e[axis] for e in evaluations], accuracy, marker=".",
                           markersize=3, color=colours[kind],
                           linestyle=SEED_STYLES[number % len(SEED_STYLES)],
                           label=f"{kind}, seed {seed} ({result['status']})")
    for panel, label in zip(panels, ("training samples (sequences)",
                                     "seconds since run_start")):
        panel.axhline(FLAGS.stop_threshold, color="black", linestyle="--", linewidth=1,
                      label=f"target {FLAGS.stop_threshold:g}")
        panel.set_xlabel(label)
        panel.grid(alpha=0.3)
    panels[1].legend(loc="lower right", fontsize="small")
    panels[0].set_ylabel("evaluation masked-LM accuracy")
    panels[0].set_title(f"{FLAGS.setting}: accuracy against samples")
    panels[1].set_title(f"{FLAGS.setting}: accuracy against time (MLPerf's clock)")
    figure.tight_layout()
    try:
        save_figure_atomically(figure, path, dpi=110)
    finally:
        plt.close(figure)


def image_link(path: str) -> str:
    """The plot's path relative to the Markdown file (as given without one)."""
    if not FLAGS.write_markdown:
        return path
    return os.path.relpath(path, os.path.dirname(os.path.abspath(FLAGS.write_markdown)))


def _met(flag: bool) -> str:
    return "met" if flag else "NOT met"


def _interval(ratio: dict | None) -> str:
    if ratio is None:
        return "n/a (no seed reached the target in both arms)"
    if ratio["low"] is None:
        return f"**{ratio['ratio']:.4f}** (one seed: no interval)"
    return (f"**{ratio['ratio']:.4f}**, {CONFIDENCE:.0%} interval "
            f"[{ratio['low']:.4f}, {ratio['high']:.4f}] over {ratio['n']} seeds")


def markdown(results: dict, verdict: dict, stats: dict, plot_link: str) -> str:
    packing_factor = verdict["packing_factor"]
    evaluation_records = ("the packed runs on the packed copy of the evaluation set"
                          if FLAGS.pack_eval else "both on the unpacked evaluation records")
    lines = [
        *section_header(f"{SETTING_TITLES[FLAGS.setting]} ({FLAGS.setting})",
                        flags_shown=SHOWN_FLAGS),
        f"The builtin corpus, every {FLAGS.heldout_every}th document held out (less the "
        "sentences also in the training text): training "
        f"records at S = {FLAGS.max_seq_length}, P = {FLAGS.max_predictions_per_seq} "
        f"({stats['sequences_in']:,} sequences, packed into {stats['packs']:,} packs: packing "
        f"factor {packing_factor:.4f}); {FLAGS.num_eval_samples:,} evaluation sequences "
        f"picked from {FLAGS.eval_dupe_factor} passes over the held-out documents "
        "(`pick_eval_samples`). "
        f"`run_pretraining.py` with `{FLAGS.bert_config_file}`, LAMB at "
        f"{FLAGS.learning_rate:g}, {FLAGS.train_batch_size} rows per micro-batch, "
        f"{FLAGS.steps_per_update} micro-batches per unpacked update "
        "(`--batching=padded`); the packed runs with "
        "`--packing_hyperparameter_adjustment=accumulation` (the same sequences per "
        f"update). Seeds {', '.join(map(str, results))}, both arms each. All evaluate every "
        f"{FLAGS.eval_interval_samples:,} training sequences ({evaluation_records}) and stop "
        f"at masked-LM accuracy {FLAGS.stop_threshold:g}. Figures from the MLPerf logs: "
        "time from `run_start` to `run_stop`; MLPerf's samples, the `epoch_num` of the "
        "last `eval_accuracy` (the first evaluation at the target); samples to target, "
        "where the accuracy crosses the target, interpolated linearly in samples between "
        "the last evaluation below the target and the first at or above it (from "
        f"accuracy {START_ACCURACY:g} at 0 samples where the first evaluation reaches it): "
        "MLPerf's samples move only in steps of an evaluation interval.",
        "",
        "| seed | run | status | restarts | micro-batches per update | evaluations | "
        "samples at the last evaluation (MLPerf) | samples to target (interpolated) | "
        "time to target (s) | of which evaluating (s) | final accuracy |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for seed, arms in results.items():
        for kind, result in arms.items():
            samples, accuracy = result["samples"], result["accuracy"]  # None: no evaluation
            crossing = result["interpolated_samples"]  # None: the target not reached
            lines.append(
                f"| {seed} | {kind} | {result['status']} | {result['restarts']} | "
                f"{result['micro_batches_per_update']} | {len(result['evaluations'])} | "
                f"{'-' if samples is None else f'{samples:,}'} | "
                f"{'-' if crossing is None else f'{crossing:,.0f}'} | "
                f"{result['seconds']:.1f} | {result['evaluation_seconds']:.1f} | "
                f"{'-' if accuracy is None else f'{accuracy:.4f}'} |")
    lines += [
        "",
        f"Samples to target (interpolated), packed / unpacked (ratio of the means, "
        f"Fieller's interval for paired seeds): {_interval(verdict['samples'])} (claim: "
        f"the interval contains 1 and lies within [{SAMPLES_BOUNDS[0]}, "
        f"{SAMPLES_BOUNDS[1]}]: {_met(verdict['samples_met'])}).  ",
        f"MLPerf's samples, packed / unpacked: {_interval(verdict['mlperf_samples'])} "
        "(not judged: counted in evaluation intervals).  ",
        f"Time to target, packed / unpacked: {_interval(verdict['time'])} (claim: the "
        f"ratio <= 1 / ({THROUGHPUT_FRACTION} x {packing_factor:.4f}) = "
        f"{verdict['time_bound']:.4f}: {_met(verdict['time_met'])}).",
    ]
    if verdict["eval_interval_fraction"] is not None:
        lines += ["", f"One evaluation interval, the step of MLPerf's samples, is "
                  f"{verdict['eval_interval_fraction']:.1%} of the unpacked runs' mean "
                  "samples to target."]
    if any(result["restarts"] for arms in results.values() for result in arms.values()):
        lines += ["", "A restarted run's time leaves out the pause before each restart; "
                  "the steps after its last checkpoint were trained again and count."]
    if not verdict["all_reached"]:
        lines += ["", f"Only {verdict['seeds_reached']} of {verdict['seeds']} seeds reached "
                  f"the target {FLAGS.stop_threshold:g} in both arms within "
                  "--num_train_steps: the claim needs them all."]
    batches = [results[next(iter(results))][kind] for kind in RUNS]
    sequences = [FLAGS.train_batch_size * run["micro_batches_per_update"]
                 * run["packing_factor"] for run in batches]
    if abs(sequences[1] / sequences[0] - 1) > 0.02:
        lines += ["", f"The packed runs' updates hold {sequences[1] / sequences[0] - 1:+.1%} "
                  "sequences against the unpacked runs' (their micro-batches per update are "
                  f"rounded): --steps_per_update={matching_steps_per_update(packing_factor)} "
                  "would give the same within 1 %."]
    lines += ["", f"![every seed's accuracy against samples and time]({plot_link})"]
    return "\n".join(lines)


def parse_seeds() -> list:
    try:
        seeds = [int(seed) for seed in FLAGS.seeds]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        sys.exit(f"time_to_train: --seeds={','.join(FLAGS.seeds)}: expected distinct "
                 "non-negative integers")
    return seeds


def main(argv):
    del argv
    from packed_bert_tf.plots import check_figure_path

    apply_setting(FLAGS.setting)
    seeds = parse_seeds()
    plot_path = repository_path(FLAGS.plot.replace("{setting}", FLAGS.setting))
    try:  # before the data and the runs
        check_figure_path(plot_path)
    except ValueError as error:
        sys.exit(f"time_to_train: {error}")
    if FLAGS.num_train_steps % FLAGS.steps_per_update:
        sys.exit(f"time_to_train: --num_train_steps={FLAGS.num_train_steps} is not a "
                 f"multiple of --steps_per_update={FLAGS.steps_per_update}")
    if FLAGS.save_checkpoints_steps < 1:
        sys.exit(f"time_to_train: --save_checkpoints_steps={FLAGS.save_checkpoints_steps}: "
                 "expected >= 1 (a stopped benchmark resumes its runs from checkpoints)")
    # The tools run in the repository: absolute paths.
    setting_dir = os.path.join(os.path.abspath(FLAGS.work_dir), FLAGS.setting)
    runs = planned_runs(setting_dir, seeds)
    check_recorded_flags(runs, FLAGS.redo_changed_runs)  # before any work
    stats = build_data(os.path.join(setting_dir, "data"))
    results = {seed: {} for seed in seeds}
    for seed, run in zip((seed for seed in seeds for _ in RUNS), runs):
        execute(run)
        kind = run.name.split("/")[1]
        result = mlperf_result(mllog_lines(run.mlperf_log), read_record(run)["attempts"])
        result["interpolated_samples"] = interpolated_samples(result["evaluations"],
                                                              FLAGS.stop_threshold)
        results[seed][kind] = dict(result, output_dir=run.output_dir,
                                   mlperf_log=run.mlperf_log)
        crossed, accuracy = result["interpolated_samples"], result["accuracy"]
        logging.info("%s: %s after %s samples (the target crossed at %s), %.1f s "
                     "(accuracy %s)", run.name, result["status"], result["samples"],
                     "none" if crossed is None else f"{crossed:,.0f}", result["seconds"],
                     "none" if accuracy is None else f"{accuracy:.4f}")
    packing_factor = sum(arms["packed"]["packing_factor"] for arms in results.values()) / len(
        results)
    rows = per_seed(results)
    verdict = claims(rows, packing_factor, FLAGS.eval_interval_samples)
    with open(os.path.join(setting_dir, "report.json"), "w") as file:
        json.dump({"setting": FLAGS.setting, "runs": {str(s): r for s, r in results.items()},
                   "per_seed": rows, "claims": verdict, "packing_stats": stats}, file,
                  indent=1, sort_keys=True)
    plot(results, plot_path)
    publish_section("time_to_train", "Time to train, packed vs unpacked (MLPerf's log, CPU)",
                    markdown(results, verdict, stats, image_link(plot_path)),
                    subsection=subsection_key())


if __name__ == "__main__":
    app.run(main)
