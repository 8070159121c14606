"""What the benchmarks share: the machine, the shared flags, BENCHMARKS.md's sections.

Each benchmark script owns one ``##`` section of a Markdown file
(BENCHMARKS.md), named after the script's file, between HTML-comment markers.
Inside it each run writes a subsection of its own, keyed by what distinguishes
the run: its configuration (`configuration`: the flags set off their
defaults; ``default`` when none is, or for a script with one configuration)
or the part of the script that ran (``speed``, ``convergence``). A rerun of
the same key replaces its subsection (`publish_section`, `replace_subsection`):

    <!-- peer_benchmark:begin -->
    ## Packed BERT against keras-hub's BertMaskedLM, step time (CPU)

    <!-- peer_benchmark/default:begin -->
    ### float32, XLA, dropout 0.1, layers 2/4/8     (none for a script's one configuration)

    Command: `python benchmarks/peer_benchmark.py --write_markdown=BENCHMARKS.md`
    Flags in effect: `--num_layers=2,4,8 --hidden_size=256 ...`   (where the script names some)
    Machine: 2 cores, AMD EPYC, Python 3.11.7, TensorFlow 2.21.0, Keras 3.15.1
    Date: 2026-12-01

    ... the run's figures ...
    <!-- peer_benchmark/default:end -->

    <!-- peer_benchmark/mixed_precision=bf16:begin -->
    ...
    <!-- peer_benchmark/mixed_precision=bf16:end -->

    Notes written by hand, kept as they are.
    <!-- peer_benchmark:end -->

The subsection opens with the same header in every script (`section_header`).
The file's list of sections between ``<!-- contents:begin -->`` and
``<!-- contents:end -->`` is rewritten with each subsection (`table_of_contents`).

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


def _flag_value(name: str):
    """A flag's value as written on a command line (lists comma-joined)."""
    flag = FLAGS[name].value
    return ",".join(map(str, flag)) if isinstance(flag, list) else flag


def flags_in_effect(names: Sequence[str]) -> str:
    """``--name=value`` of each named flag, defaults included (lists comma-joined)."""
    return " ".join(f"--{name}={_flag_value(name)}" for name in names)


def configuration(names: Sequence[str]) -> str:
    """The key of this run's subsection: what makes its configuration.

    Args:
      names: the flags that make a configuration of the script (not those
        that only repeat or place the measurement, such as --repetitions or
        --work_dir).

    Returns:
      ``name=value`` of each flag of `names` whose value is not its default,
      in the order of `names`, space-separated (lists comma-joined);
      ``default`` when every one has its default.
    """
    changed = [name for name in names if FLAGS[name].value != FLAGS[name].default]
    return " ".join(f"{name}={_flag_value(name)}" for name in changed) or "default"


def section_header(title: str | None = None, *,
                   flags_shown: Sequence[str] = ()) -> list[str]:
    """The lines that open a run's subsection, a blank line last.

    The subsection's title (none: no title line, for a script's one
    configuration), the command as run, the flags in effect (those in
    `flags_shown`; none: no such line), the machine and today's date. The
    trailing two spaces are Markdown line breaks.
    """
    lines = [f"### {title}", ""] if title else []
    lines.append(f"Command: `{command_as_run()}`  ")
    if flags_shown:
        lines.append(f"Flags in effect: `{flags_in_effect(flags_shown)}`  ")
    return lines + [f"Machine: {machine()}  ", f"Date: {datetime.date.today().isoformat()}",
                    ""]


# ------------------------------------------------------------------ sections
# A new file's header: its title and the place of its list of sections.
NEW_FILE = "# Benchmarks\n\n<!-- contents:begin -->\n<!-- contents:end -->\n"


def publish_section(section: str, title: str, text: str, *,
                    subsection: str = "default") -> None:
    """Prints a run's subsection; with --write_markdown, also writes it to that file.

    Args:
      section: the script's name (``peer_benchmark``): its one ``##`` section.
      title: the section's title (the ``##`` line, rewritten on every run).
      text: the subsection, opened by `section_header`.
      subsection: the run's configuration (`configuration`, or the part of
        the script that ran): the subsection it replaces, or adds.
    """
    print(text)
    if FLAGS.write_markdown:
        replace_section(FLAGS.write_markdown, section, title, subsection, text)
        logging.info("wrote %s/%s of %s", section, subsection, FLAGS.write_markdown)


def replace_section(path: str, section: str, title: str, subsection: str,
                    body: str) -> None:
    """`replace_subsection` on a Markdown file (a new one: `NEW_FILE`), then its
    list of sections rewritten (`table_of_contents`)."""
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else NEW_FILE
    text = table_of_contents(replace_subsection(text, section, title, subsection, body))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _markers(name: str) -> tuple[str, str]:
    """The comments that open and close section or subsection `name`."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_subsection(text: str, section: str, title: str, subsection: str,
                       body: str) -> str:
    """Markdown `text` with `body` as subsection `subsection` of section `section`.

    The subsection, between ``<!-- SECTION/SUBSECTION:begin -->`` and
    ``<!-- SECTION/SUBSECTION:end -->``, replaces its namesake; a new one goes
    after the section's last subsection (notes after it stay last). A new
    section, ``## title`` and the subsection between ``<!-- SECTION:begin -->``
    and ``<!-- SECTION:end -->``, goes at the end. The ``##`` line is
    `title`; the rest of the text is left as it is.

    Args:
      text: the Markdown file's text.
      section: the section's name, letters, digits and underscores.
      title: the section's title.
      subsection: the subsection's key, one line without ``-->``.
      body: the subsection's text.

    Returns:
      The new text.
    """
    if not re.fullmatch(r"\w+", section):
        raise ValueError(f"section {section!r}: letters, digits and underscores only")
    if not subsection or "\n" in subsection or "-->" in subsection:
        raise ValueError(f"subsection {subsection!r}: one line, without '-->'")
    begin, end = _markers(section)
    sub_begin, sub_end = _markers(f"{section}/{subsection}")
    block = f"{sub_begin}\n{body.strip()}\n{sub_end}"
    heading = f"## {title}"
    if begin not in text:
        return f"{text.rstrip()}\n\n{begin}\n{heading}\n\n{block}\n{end}\n"
    start = text.index(begin) + len(begin)
    stop = text.find(end, start)
    if stop < 0:
        raise ValueError(f"{begin} without {end}")
    inside = text[start:stop]
    if re.match(r"\n## [^\n]*", inside):  # the title as the script now gives it
        inside = re.sub(r"\A\n## [^\n]*", lambda _: f"\n{heading}", inside)
    else:
        inside = f"\n{heading}\n{inside}"
    if sub_begin in inside:
        first = inside.index(sub_begin)
        last = inside.find(sub_end, first)
        if last < 0:
            raise ValueError(f"{sub_begin} without {sub_end}")
        inside = inside[:first] + block + inside[last + len(sub_end):]
    else:
        ends = [m.end() for m in re.finditer(
            re.escape(f"<!-- {section}/") + r"[^\n]*?:end -->", inside)]
        at = ends[-1] if ends else len(f"\n{heading}")
        inside = f"{inside[:at]}\n\n{block}{inside[at:]}"
    return text[:start] + inside + text[stop:]


def anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces
    as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def table_of_contents(text: str) -> str:
    """Markdown `text` with its list of sections, between ``<!-- contents:begin -->``
    and ``<!-- contents:end -->`` (none: `text` as it is), one line per section:
    its title, linked, and its script."""
    begin, end = _markers("contents")
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return text
    lines = [f"- [{title}](#{anchor(title)}): `benchmarks/{name}.py`"
             for name, title in re.findall(r"<!-- (\w+):begin -->\n## ([^\n]*)", text)]
    return "\n".join([text[:start] + begin, *lines, text[stop:]])


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
