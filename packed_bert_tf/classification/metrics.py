"""The scores GLUE reports, and its submission files.

Letters: N examples, L labels.

=========  ==========================  =====================================
task       metrics (`glue_metrics`)    what
=========  ==========================  =====================================
cola       matthews_corrcoef           Matthews correlation of label ids
mrpc, qqp  accuracy, f1                F1 of the positive class, id 1 ("1")
sts-b      pearson, spearman           correlations of scores with gold
others     accuracy                    fraction of ids equal to the gold
=========  ==========================  =====================================

The definitions are scikit-learn's ``accuracy_score``, ``f1_score`` (binary,
``pos_label=1``, 0 when there is no true positive), ``matthews_corrcoef``
(its multi-class form; 0 when undefined) and scipy's ``pearsonr`` and
``spearmanr`` (ties share their mean rank), which transformers'
``glue_compute_metrics`` calls. A correlation with a constant input is
undefined and returned as NaN (scipy's value, without its warning).

A submission file (`write_test_results`) is what the GLUE server reads,
e.g. for MNLI::

    index	prediction
    0	neutral
    1	contradiction

one line per test example in the test file's order (GLUE's test indices are
0..N-1 in that order), predictions as label strings; STS-B scores with 3
decimals. `SUBMISSION_FILE_NAMES` are the names the server wants in the zip.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from packed_bert_tf.classification.glue import GlueTask
from packed_bert_tf.json_files import write_text_atomically

# The file name of each task in a GLUE submission zip (MNLI: matched set).
SUBMISSION_FILE_NAMES = {"cola": "CoLA.tsv", "mnli": "MNLI-m.tsv", "mrpc": "MRPC.tsv",
                         "sst-2": "SST-2.tsv", "qqp": "QQP.tsv", "qnli": "QNLI.tsv",
                         "rte": "RTE.tsv", "sts-b": "STS-B.tsv"}


def _label_ids(values, what: str, num_labels: int | None = None) -> np.ndarray:
    """[N] int64 label ids from a list or array; ValueError quoting what is wrong."""
    array = np.asarray(values)
    if array.ndim != 1:
        hint = (" (take the argmax of [N, L] logits)" if array.ndim == 2 and
                array.shape[1] > 1 else "")
        raise ValueError(f"{what} has shape {array.shape}, expected [N] label ids{hint}")
    if array.size and not (np.issubdtype(array.dtype, np.integer)
                           and array.dtype != np.bool_):
        raise ValueError(f"{what} has dtype {array.dtype}, expected integer label ids")
    array = array.astype(np.int64)
    if num_labels is not None and array.size and (array.min() < 0
                                                  or array.max() >= num_labels):
        bad = array[(array < 0) | (array >= num_labels)][0]
        raise ValueError(f"{what} holds {bad}, not a label id in [0, {num_labels})")
    return array


def _scores(values, what: str) -> np.ndarray:
    """[N] float64 scores; ValueError for another shape or a non-finite score."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{what} has shape {array.shape}, expected [N] scores"
                         + (" (squeeze the last axis)" if array.shape[-1:] == (1,) else ""))
    try:
        array = array.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} has dtype {array.dtype}, expected numbers") from None
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} holds {array[~np.isfinite(array)][0]}, expected finite "
                         f"scores")
    return array


def _pair(predictions: np.ndarray, labels: np.ndarray) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not len(labels):
        raise ValueError("no examples to score")


def accuracy(predictions, labels) -> float:
    """The fraction of predicted ids ([N]) equal to the gold ids ([N])."""
    predictions, labels = _label_ids(predictions, "predictions"), _label_ids(labels, "labels")
    _pair(predictions, labels)
    return float(np.mean(predictions == labels))


def f1_score(predictions, labels, *, positive: int = 1) -> float:
    """F1 of the class ``positive``: 2 tp / (2 tp + fp + fn); 0 without a true
    positive (scikit-learn's ``zero_division=0``)."""
    predictions, labels = _label_ids(predictions, "predictions"), _label_ids(labels, "labels")
    _pair(predictions, labels)
    predicted, gold = predictions == positive, labels == positive
    true_positives = int(np.sum(predicted & gold))
    if true_positives == 0:
        return 0.0
    return 2 * true_positives / (int(np.sum(predicted)) + int(np.sum(gold)))


def matthews_corrcoef(predictions, labels) -> float:
    """Matthews correlation coefficient (Gorodkin's multi-class form, as
    scikit-learn): with C the L x L confusion matrix, s = N, c = trace(C),
    p_k / t_k the predicted / true counts of class k,

        (c s - p.t) / sqrt((s^2 - p.p) (s^2 - t.t)),

    which for two classes is (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)).
    0 when the denominator is 0 (one class predicted or present only)."""
    predictions, labels = _label_ids(predictions, "predictions"), _label_ids(labels, "labels")
    _pair(predictions, labels)
    if predictions.min() < 0 or labels.min() < 0:
        raise ValueError("label ids must not be negative")
    num_classes = int(max(predictions.max(), labels.max())) + 1
    # Python ints: s^2 overflows nothing however large N is.
    predicted = [int(n) for n in np.bincount(predictions, minlength=num_classes)]
    true = [int(n) for n in np.bincount(labels, minlength=num_classes)]
    correct = int(np.sum(predictions == labels))
    total = len(labels)
    covariance = correct * total - sum(p * t for p, t in zip(predicted, true))
    denominator = ((total * total - sum(p * p for p in predicted))
                   * (total * total - sum(t * t for t in true)))
    if denominator == 0:
        return 0.0
    return covariance / math.sqrt(denominator)


def _correlation(function, predictions, labels) -> float:
    predictions, labels = _scores(predictions, "predictions"), _scores(labels, "labels")
    _pair(predictions, labels)
    if len(labels) < 2 or np.ptp(predictions) == 0 or np.ptp(labels) == 0:
        return math.nan
    return float(function(predictions, labels)[0])


def pearson(predictions, labels) -> float:
    """Pearson's r of [N] scores; NaN when either is constant or N < 2."""
    return _correlation(stats.pearsonr, predictions, labels)


def spearman(predictions, labels) -> float:
    """Spearman's rho of [N] scores (Pearson's r of the ranks, ties at their
    mean rank); NaN when either is constant or N < 2."""
    return _correlation(stats.spearmanr, predictions, labels)


_METRICS = {"accuracy": accuracy, "f1": f1_score, "matthews_corrcoef": matthews_corrcoef,
            "pearson": pearson, "spearman": spearman}


def glue_metrics(task: GlueTask, predictions, labels) -> dict[str, float]:
    """The task's metrics (keys: ``task.metric_names``).

    Args:
      task: from `glue.get_task`.
      predictions: [N] label ids (ints in [0, L)) or, for regression, scores.
      labels: [N] gold label ids (`GlueTask.label_id`) or scores.

    Returns:
      ``{name: value}`` as Python floats.
    """
    if task.is_regression:
        predictions, labels = _scores(predictions, "predictions"), _scores(labels, "labels")
    else:
        predictions = _label_ids(predictions, "predictions", task.num_labels)
        labels = _label_ids(labels, "labels", task.num_labels)
    _pair(predictions, labels)
    return {name: _METRICS[name](predictions, labels) for name in task.metric_names}


def submission_text(task: GlueTask, predictions) -> str:
    """The text of a GLUE submission file for [N] predictions in test-file order."""
    if task.is_regression:
        values = _scores(predictions, "predictions")
    else:
        values = _label_ids(predictions, "predictions", task.num_labels)
    lines = ["index\tprediction"]
    lines.extend(f"{index}\t{task.label_name(value)}" for index, value in enumerate(values))
    return "\n".join(lines) + "\n"


def write_test_results(task: GlueTask, predictions, path: str) -> None:
    """Writes the GLUE submission file of [N] predictions (ids, or scores for
    STS-B), in test-file order, to ``path`` atomically (a temporary file
    renamed), so that a half-written file never looks complete."""
    write_text_atomically(path, submission_text(task, predictions))
