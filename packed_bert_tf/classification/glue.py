r"""GLUE and XNLI tasks: their labels, metrics and TSV files -> `InputExample`s.

The files are read as google-research/bert ``run_classifier.py`` reads them
(``DataProcessor._read_tsv``: ``csv.reader(f, delimiter="\t",
quotechar=None)``, so a quote is an ordinary character: MNLI and QQP have
unbalanced ones), one record per line. The texts are returned exactly as in
the file; tokenisation is the caller's.

Where each task's files come from and which columns are read (0-based;
``-1`` the last column; "row" is the record's 0-based position in the file,
the header being row 0 where there is one)::

  task   split  file (in data_dir)                 header  text_a text_b label  guid
  cola   train  train.tsv                          no      3      -      1      train-<row>
  cola   dev    dev.tsv                            no      3      -      1      dev-<row>
  cola   test   test.tsv                           yes     1      -      -      test-<row>
  mnli   train  train.tsv                          yes     8      9      -1     train-<column 0>
  mnli   dev    dev_matched.tsv                    yes     8      9      -1     dev_matched-<column 0>
  mnli   test   test_matched.tsv                   yes     8      9      -      test-<column 0>
  mrpc   all    {train,dev,test}.tsv               yes     3      4      0      <split>-<row>
  xnli   train  multinli/multinli.train.<lang>.tsv yes     0      1      2      train-<row>
  xnli   dev    xnli.dev.tsv (column 0 == lang)    yes     6      7      1      dev-<row>
  xnli   test   xnli.test.tsv (column 0 == lang)   yes     6      7      -      test-<row>
  sst-2  train  train.tsv, dev.tsv                 yes     0      -      1      <split>-<row>
  sst-2  test   test.tsv                           yes     1      -      -      test-<row>
  qqp    train  train.tsv, dev.tsv                 yes     3      4      5      <split>-<column 0>
  qqp    test   test.tsv                           yes     1      2      -      test-<column 0>
  qnli   all    {train,dev,test}.tsv               yes     1      2      -1     <split>-<column 0>
  rte    all    {train,dev,test}.tsv               yes     1      2      -1     <split>-<column 0>
  sts-b  all    {train,dev,test}.tsv               yes     7      8      -1     <split>-<column 0>

CoLA, MNLI, MRPC and XNLI train/dev are google-research/bert's
``ColaProcessor``, ``MnliProcessor``, ``MrpcProcessor`` and ``XnliProcessor``
(commit 6045470). The reference has no XNLI test set; ours is that of
Hugging Face transformers' ``XnliProcessor`` (``xnli.test.tsv`` filtered by
language, guid ``test-<row>``), with the reference's folder layout (the
files directly in data_dir, ``multinli/`` beside them). SST-2, QQP, QNLI, RTE
and STS-B follow transformers' ``data/processors/glue.py``.

Differences from the references, all on bad input:

* test sets have ``label=None`` (the reference puts a dummy label there);
* every row must have as many columns as the header (CoLA train/dev, which
  have none: 4), every text must be non-blank, every label one of the task's
  (STS-B: a number in [0, 5]); otherwise a ValueError says ``path:line:
  ...`` (1-based line numbers, as an editor shows them). The reference
  raises an IndexError or a KeyError later, or reads a wrong column;
* QQP train and dev only: a row with a wrong column count or an empty
  question is skipped, as transformers' ``QqpProcessor`` skips the rows it
  cannot index, and logged with its line numbers (in the test set it is an
  error: the GLUE submission needs a prediction for every row). GLUE's QQP ``train.tsv`` holds a few such
  rows (nyu-mll/GLUE-baselines issue 5: line 97,931 has 3 columns, not 6).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Iterator

from absl import logging

from packed_bert_tf import filesystem
from packed_bert_tf.data.text_files import utf8_lines

SPLITS = ("train", "dev", "test")

# google-research/bert's XnliProcessor and XNLI 1.0's 15 languages.
XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th",
                  "tr", "ur", "vi", "zh")
XNLI_DEFAULT_LANGUAGE = "zh"

# STS-B's gold scores are means of annotators' 0..5 ratings.
STSB_SCORE_RANGE = (0.0, 5.0)


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One example as google-research/bert's processors make it.

    Attributes:
      guid: ``"<split>-<row or id>"``, e.g. ``"train-12"``, ``"dev_matched-3"``
        (see the module docstring).
      text_a: the (first) text, as in the file.
      text_b: the second text, None for single-sentence tasks (CoLA, SST-2).
      label: the label string, the float score for STS-B, None in test sets.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """A task's label set and the metrics GLUE reports for it.

    Attributes:
      name: canonical lowercase name (a key of `TASKS`).
      labels: the label strings in the order of their ids (google-research/
        bert's ``get_labels``); ``()`` for regression (STS-B).
      metric_names: keys of `metrics.glue_metrics`'s result.
      is_regression: STS-B: one float output, mean squared error.
    """

    name: str
    labels: tuple[str, ...]
    metric_names: tuple[str, ...]
    is_regression: bool

    def __post_init__(self):
        if self.is_regression == bool(self.labels):
            raise ValueError(f"task {self.name}: a regression task has no labels, a "
                             f"classification task needs some (got {self.labels})")

    @property
    def num_labels(self) -> int:
        """Outputs of the classifier: 1 for regression, else len(labels)."""
        return 1 if self.is_regression else len(self.labels)

    def label_id(self, label) -> int | float:
        """The id of a label string (its index in `labels`); the float score
        for regression. ValueError for a label outside the task's."""
        if self.is_regression:
            try:
                score = float(label)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name} score {label!r} is not a number") from None
            if not math.isfinite(score):
                raise ValueError(f"{self.name} score {label!r} is not finite")
            return score
        try:
            return self.labels.index(label)
        except ValueError:
            raise ValueError(f"label {label!r} is not one of {self.name}'s labels "
                             f"{_quoted(self.labels)}") from None

    def label_name(self, prediction) -> str:
        """The string the GLUE submission wants for a prediction: the label of
        an id (a Python or numpy integer), or the score with 3 decimals
        (regression; not clipped to [0, 5])."""
        if self.is_regression:
            try:
                score = float(prediction)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name} prediction {prediction!r} is not a number"
                                 ) from None
            if not math.isfinite(score):
                raise ValueError(f"{self.name} prediction {prediction!r} is not finite")
            text = f"{score:.3f}"
            # A score that rounds to zero from below is 0, not "-0.000".
            return "0.000" if text == "-0.000" else text
        if isinstance(prediction, bool) or not hasattr(prediction, "__index__"):
            raise ValueError(f"{self.name} prediction {prediction!r} is not an integer "
                             f"label id")
        index = prediction.__index__()
        if not 0 <= index < len(self.labels):
            raise ValueError(f"{self.name} prediction {index} is not a label id in "
                             f"[0, {len(self.labels)})")
        return self.labels[index]


@dataclasses.dataclass(frozen=True)
class _TsvFormat:
    """Where one split of a task lies and which columns hold what.

    ``label``/``text_b`` None: the file has none. ``num_columns``: the exact
    count for a file without a header (with one, the header's count rules).
    ``guid_column`` None: the guid holds the record's row (header = row 0).
    """

    file_name: str
    guid_prefix: str
    text_a: int
    text_b: int | None
    label: int | None
    header: bool = True
    num_columns: int | None = None
    guid_column: int | None = 0
    language_column: int | None = None
    label_aliases: tuple[tuple[str, str], ...] = ()
    skip_malformed_rows: bool = False

    def used_columns(self) -> list[int]:
        return [c for c in (self.text_a, self.text_b, self.label, self.guid_column,
                            self.language_column) if c is not None]


_NLI_LABELS = ("contradiction", "entailment", "neutral")
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")

TASKS: dict[str, GlueTask] = {task.name: task for task in (
    GlueTask("cola", _BINARY, ("matthews_corrcoef",), False),
    GlueTask("mnli", _NLI_LABELS, ("accuracy",), False),
    GlueTask("mrpc", _BINARY, ("accuracy", "f1"), False),
    GlueTask("xnli", _NLI_LABELS, ("accuracy",), False),
    GlueTask("sst-2", _BINARY, ("accuracy",), False),
    GlueTask("qqp", _BINARY, ("accuracy", "f1"), False),
    GlueTask("qnli", _ENTAILMENT, ("accuracy",), False),
    GlueTask("rte", _ENTAILMENT, ("accuracy",), False),
    GlueTask("sts-b", (), ("pearson", "spearman"), True),
)}


def _row_guid(file_name: str, prefix: str, text_a: int, text_b: int | None,
              label: int | None, **kwargs) -> _TsvFormat:
    return _TsvFormat(file_name, prefix, text_a, text_b, label, guid_column=None, **kwargs)


def _pair_with_index(split: str) -> _TsvFormat:
    # QNLI, RTE, STS-B train/dev/test: index, texts..., [label]; transformers.
    return _TsvFormat(f"{split}.tsv", split, 1, 2, None if split == "test" else -1)


_FORMATS: dict[str, dict[str, _TsvFormat]] = {
    "cola": {
        "train": _row_guid("train.tsv", "train", 3, None, 1, header=False, num_columns=4),
        "dev": _row_guid("dev.tsv", "dev", 3, None, 1, header=False, num_columns=4),
        "test": _row_guid("test.tsv", "test", 1, None, None),
    },
    "mnli": {
        "train": _TsvFormat("train.tsv", "train", 8, 9, -1),
        "dev": _TsvFormat("dev_matched.tsv", "dev_matched", 8, 9, -1),
        "test": _TsvFormat("test_matched.tsv", "test", 8, 9, None),
    },
    "mrpc": {split: _row_guid(f"{split}.tsv", split, 3, 4, None if split == "test" else 0)
             for split in SPLITS},
    "xnli": {
        "train": _row_guid(os.path.join("multinli", "multinli.train.{language}.tsv"),
                           "train", 0, 1, 2,
                           label_aliases=(("contradictory", "contradiction"),)),
        "dev": _row_guid("xnli.dev.tsv", "dev", 6, 7, 1, language_column=0),
        "test": _row_guid("xnli.test.tsv", "test", 6, 7, None, language_column=0),
    },
    "sst-2": {
        "train": _row_guid("train.tsv", "train", 0, None, 1),
        "dev": _row_guid("dev.tsv", "dev", 0, None, 1),
        "test": _row_guid("test.tsv", "test", 1, None, None),
    },
    "qqp": {
        "train": _TsvFormat("train.tsv", "train", 3, 4, 5, skip_malformed_rows=True),
        "dev": _TsvFormat("dev.tsv", "dev", 3, 4, 5, skip_malformed_rows=True),
        # Not the test set: a submission needs every row, in order (its
        # index is the row's; a skipped row would shift all that follow).
        "test": _TsvFormat("test.tsv", "test", 1, 2, None),
    },
    "qnli": {split: _pair_with_index(split) for split in SPLITS},
    "rte": {split: _pair_with_index(split) for split in SPLITS},
    "sts-b": {split: dataclasses.replace(_pair_with_index(split), text_a=7, text_b=8)
              for split in SPLITS},
}


def _quoted(names) -> str:
    return ", ".join(repr(name) for name in names)


def _normalised(name: str) -> str:
    return name.strip().lower().replace("-", "").replace("_", "")


def get_task(task_name: str) -> GlueTask:
    """The task of a name, case-insensitive, with or without its hyphen
    (``"SST-2"``, ``"sst2"``, ``"sts_b"``). ValueError listing the known names
    for any other."""
    wanted = _normalised(task_name)
    for name, task in TASKS.items():
        if _normalised(name) == wanted:
            return task
    raise ValueError(f"unknown --task_name={task_name}; known tasks: {', '.join(TASKS)}")


def task_file(task: GlueTask, data_dir: str, split: str, *,
              language: str | None = None) -> str:
    """The path `read_examples` reads for ``split`` (see the module docstring)."""
    form, language = _split_format(task, split, language)
    return os.path.join(data_dir, form.file_name.format(language=language))


def _split_format(task: GlueTask, split: str, language: str | None
                  ) -> tuple[_TsvFormat, str | None]:
    if task.name not in _FORMATS:
        raise ValueError(f"task {task.name!r} has no files known; known tasks: "
                         f"{', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(SPLITS)}")
    if task.name == "xnli":
        language = XNLI_DEFAULT_LANGUAGE if language is None else language
        if language not in XNLI_LANGUAGES:
            raise ValueError(f"XNLI language {language!r} is not one of "
                             f"{', '.join(XNLI_LANGUAGES)}")
    elif language is not None:
        raise ValueError(f"a language ({language!r}) is for XNLI only, not {task.name}")
    return _FORMATS[task.name][split], language


def _records(path: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based line number, columns) of every line of a TSV file."""
    # Remote files (gs://...) through TensorFlow, as the reference reads all
    # of them; local ones without it.
    with filesystem.open_file(path, "rb") as handle:
        # quotechar=None: quoting off, as the reference; a record is a line
        # (lines as they are, "\r\n" included: csv's newline="").
        reader = csv.reader(utf8_lines(handle, path), delimiter="\t", quotechar=None)
        for columns in reader:
            yield reader.line_num, columns


def read_examples(task: GlueTask, data_dir: str, split: str, *,
                  language: str | None = None) -> list[InputExample]:
    """The examples of one split, in file order.

    Args:
      task: from `get_task`.
      data_dir: the folder holding the task's files (GLUE's ``glue_data/MRPC``
        ...; XNLI: the folder with ``xnli.dev.tsv`` and ``multinli/``).
      split: ``"train"``, ``"dev"`` or ``"test"`` (MNLI: the matched sets).
      language: XNLI only; default ``"zh"`` as the reference.

    Returns:
      The examples; ``label`` None for the test split.

    Raises:
      ValueError: an unknown split or language, a missing file (naming the
        path and task), or a bad row: ``"path:line: ..."``.
    """
    form, language = _split_format(task, split, language)
    path = task_file(task, data_dir, split, language=language)
    if not filesystem.isfile(path):
        raise ValueError(f"{path}: no such file (the {task.name} {split} set, "
                         f"{os.path.relpath(path, data_dir)} in {data_dir})")
    aliases = dict(form.label_aliases)
    needed = max(c for c in form.used_columns() if c >= 0) + 1
    num_columns = form.num_columns
    examples = []
    skipped = []
    line = 0
    for line, columns in _records(path):
        if form.header and line == 1:
            if len(columns) < needed:
                raise ValueError(f"{path}:1: the header has {len(columns)} columns, "
                                 f"{task.name}'s {split} file has at least {needed}")
            num_columns = len(columns)
            continue
        where = f"{path}:{line}"
        if len(columns) != num_columns:
            if form.skip_malformed_rows:
                skipped.append(line)
                continue
            raise ValueError(f"{where}: {len(columns)} columns, expected {num_columns}"
                             + (" as the header" if form.header else "")
                             + f" ({task.name} {split} set)")
        if form.language_column is not None and columns[form.language_column] != language:
            continue
        text_a = columns[form.text_a]
        text_b = None if form.text_b is None else columns[form.text_b]
        if not text_a.strip() or (text_b is not None and not text_b.strip()):
            if form.skip_malformed_rows:
                skipped.append(line)
                continue
            column = form.text_a if not text_a.strip() else form.text_b
            raise ValueError(f"{where}: empty text in column {column % num_columns + 1} "
                             f"({task.name} {split} set)")
        label = None
        if form.label is not None:
            label = columns[form.label]
            label = aliases.get(label, label)
            try:
                label_id = task.label_id(label)
            except ValueError as error:
                raise ValueError(f"{where}: {error}") from None
            if task.is_regression:
                label = label_id
                low, high = STSB_SCORE_RANGE
                if not low <= label <= high:
                    raise ValueError(f"{where}: {task.name} score {label:g} is outside "
                                     f"[{low:g}, {high:g}]")
        guid_key = line - 1 if form.guid_column is None else columns[form.guid_column]
        examples.append(InputExample(guid=f"{form.guid_prefix}-{guid_key}",
                                     text_a=text_a, text_b=text_b, label=label))
    if line == 0:
        raise ValueError(f"{path}: empty file ({task.name} {split} set)")
    if skipped:
        logging.warning("%s: skipped %d malformed rows (a wrong column count or an "
                        "empty text), as transformers' %s reader does: lines %s%s",
                        path, len(skipped), task.name,
                        ", ".join(map(str, skipped[:10])),
                        " ..." if len(skipped) > 10 else "")
    return examples
