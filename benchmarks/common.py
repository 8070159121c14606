"""What the benchmarks share: the machine, the shared flags, BENCHMARKS.md's sections.

Each benchmark owns sections of a Markdown file (BENCHMARKS.md), between
HTML-comment markers (`replace_section`), and opens each with the same
header (`section_header`):

    ## Title

    Command: `python benchmarks/model_benchmark.py --write_markdown=BENCHMARKS.md`
    Flags in effect: `--num_layers=4 --hidden_size=256 ...`   (where the script names some)
    Machine: 2 cores, AMD EPYC, Python 3.11.7, TensorFlow 2.21.0, Keras 3.15.1
    Date: 2026-11-30

The scripts beside this module import it by name (``python benchmarks/X.py``
puts this folder first on ``sys.path``) and define their flags through it
(`define_write_markdown`, `define_model_size_flags`) with their own defaults.
"""

import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from absl import flags, logging

FLAGS = flags.FLAGS
# The flags this module defines belong to the script that asks for them (its --helpshort).
flags.disclaim_key_flags()

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# For the repository's tools run as subprocesses: the checkout importable,
# TensorFlow's C++ start-up chatter off (errors still show).
ENVIRONMENT = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPOSITORY)

# The flags of `define_model_size_flags`, in the order "Flags in effect" lists them.
MODEL_SIZE_FLAGS = ("num_layers", "hidden_size", "num_heads", "intermediate_size",
                    "vocab_size")
BERT_VOCAB_SIZE = 30522  # BERT's uncased WordPiece vocabulary
_MODEL_SIZE_HELP = {"num_layers": "transformer blocks (L).", "hidden_size": "hidden size (H).",
                    "num_heads": "attention heads (N).",
                    "intermediate_size": "feed-forward width (I).",
                    "vocab_size": "vocabulary (V)."}


def run_tool(command: Sequence[str], log_path: str) -> float:
    """Runs one of the repository's tools (``ENVIRONMENT``, from the repository),
    its output to ``log_path``; its wall time. Fails with the log's tail."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run(list(command), cwd=REPOSITORY, env=ENVIRONMENT, stdout=log,
                                stderr=subprocess.STDOUT)
    if result.returncode:
        tail = open(log_path).read()[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed:\n{tail}")
    return time.perf_counter() - start


# ------------------------------------------------------------------ flags
def define_write_markdown() -> None:
    """Defines --write_markdown (unset: the file is left alone)."""
    flags.DEFINE_string("write_markdown", None,
                        "Replace this benchmark's section(s) of this Markdown file.")


def define_model_size_flags(*, num_layers: int, hidden_size: int, num_heads: int,
                            intermediate_size: int, vocab_size: int | None = None,
                            model: str = "Model",
                            notes: Mapping[str, str] | None = None) -> None:
    """Defines the model-size flags with this script's defaults.

    Args:
      num_layers: int, default of --num_layers.
      hidden_size: int, default of --hidden_size.
      num_heads: int, default of --num_heads.
      intermediate_size: int, default of --intermediate_size.
      vocab_size: int, default of --vocab_size; ``vocab_size=None`` defines no
        --vocab_size (`model_size` then gives BERT's 30522).
      model: what the help calls the model ("Tiny BERT", "Speed model").
      notes: a mapping of flag name to str, optional. Text added to that
        flag's help.
    """
    defaults = dict(num_layers=num_layers, hidden_size=hidden_size, num_heads=num_heads,
                    intermediate_size=intermediate_size, vocab_size=vocab_size)
    notes = notes or {}
    unknown = set(notes) - set(defaults)
    if unknown:
        raise ValueError(f"notes for {sorted(unknown)}, expected some of {MODEL_SIZE_FLAGS}")
    for name, default in defaults.items():
        if default is not None:
            help_text = f"{model}: {_MODEL_SIZE_HELP[name]}"
            flags.DEFINE_integer(name, default, " ".join(filter(None, [help_text,
                                                                      notes.get(name)])))


def model_size() -> dict:
    """`BertConfig` arguments from the model-size flags (vocab_size: BERT's 30522
    where the script defines no --vocab_size)."""
    return dict(vocab_size=FLAGS.vocab_size if "vocab_size" in FLAGS else BERT_VOCAB_SIZE,
                hidden_size=FLAGS.hidden_size, num_hidden_layers=FLAGS.num_layers,
                num_attention_heads=FLAGS.num_heads, intermediate_size=FLAGS.intermediate_size)


# ------------------------------------------------------------------ header
def machine() -> str:
    """Cores, CPU model, Python; TensorFlow and Keras where the process imported TensorFlow.

    Example: ``2 cores, AMD EPYC, Python 3.11.7, TensorFlow 2.21.0, Keras 3.15.1``.
    """
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as file:
            cpu = re.search(r"model name\s*:\s*(.*)", file.read()).group(1)
    except (OSError, AttributeError):
        pass
    parts = [f"{os.cpu_count()} cores", cpu, f"Python {platform.python_version()}"]
    if "tensorflow" in sys.modules:  # never imported here for a line of text
        import keras
        import tensorflow as tf

        parts += [f"TensorFlow {tf.__version__}", f"Keras {keras.__version__}"]
    return ", ".join(parts)


def command_as_run() -> str:
    """This process's command line, the script relative to the repository:
    ``python benchmarks/X.py --flag=value ...`` whatever the working directory."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPOSITORY)
    return shlex.join(["python", script, *sys.argv[1:]])


def flags_in_effect(names: Sequence[str]) -> str:
    """``--name=value`` of each named flag, defaults included (lists comma-joined)."""
    def value(name):
        flag = FLAGS[name].value
        return ",".join(map(str, flag)) if isinstance(flag, list) else flag

    return " ".join(f"--{name}={value(name)}" for name in names)


def section_header(title: str, *, flags_shown: Sequence[str] = ()) -> list[str]:
    """The lines that open a benchmark's section, a blank line last.

    Title, the command as run, the flags in effect (those in `flags_shown`;
    none: no such line), the machine and today's date. The trailing two
    spaces are Markdown line breaks.
    """
    lines = [f"## {title}", "", f"Command: `{command_as_run()}`  "]
    if flags_shown:
        lines.append(f"Flags in effect: `{flags_in_effect(flags_shown)}`  ")
    return lines + [f"Machine: {machine()}  ", f"Date: {datetime.date.today().isoformat()}",
                    ""]


# ------------------------------------------------------------------ sections
def publish_section(name: str, text: str) -> None:
    """Prints a section; with --write_markdown, also makes it section `name` of that file."""
    print(text)
    if FLAGS.write_markdown:
        replace_section(FLAGS.write_markdown, name, text)
        logging.info("wrote section %s of %s", name, FLAGS.write_markdown)


def replace_section(path: str, name: str, body: str) -> None:
    """Writes `body` as section `name` of the Markdown file (added at the end once)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{body.strip()}\n{end}"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text,
                      flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def zero_packed_features(batch_size: int, sequence_length: int,
                         max_sequences_per_pack: int, max_predictions: int) -> dict:
    """Zeroed feature arrays of a packed pre-training batch, for a benchmark
    to fill: int32 everywhere, float32 masked-LM weights."""
    import numpy as np

    B, S, D, M = batch_size, sequence_length, max_sequences_per_pack, max_predictions
    features = {name: np.zeros(shape, np.int32) for name, shape in [
        ("input_ids", (B, S)), ("input_mask", (B, S)), ("segment_ids", (B, S)),
        ("positions", (B, S)), ("masked_lm_positions", (B, M)), ("masked_lm_ids", (B, M)),
        ("next_sentence_positions", (B, D)), ("next_sentence_labels", (B, D)),
        ("next_sentence_weights", (B, D))]}
    features["masked_lm_weights"] = np.zeros((B, M), np.float32)
    return features
