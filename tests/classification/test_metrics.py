import math
import os

import numpy as np
import pytest

from packed_bert_tf.classification import metrics
from packed_bert_tf.classification.glue import get_task

# A 2x2 confusion matrix worked by hand: tp 3, fn 1, fp 1, tn 5.
LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
PREDICTIONS = [1, 1, 1, 0, 1, 0, 0, 0, 0, 0]


def test_binary_metrics_of_a_confusion_matrix_worked_by_hand():
    assert metrics.accuracy(PREDICTIONS, LABELS) == 0.8
    # 2 tp / (2 tp + fp + fn) = 6 / 8
    assert metrics.f1_score(PREDICTIONS, LABELS) == 0.75
    # (tp tn - fp fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = 14 / sqrt(4 4 6 6) = 14 / 24
    assert metrics.matthews_corrcoef(PREDICTIONS, LABELS) == pytest.approx(14 / 24,
                                                                            abs=1e-15)
    # As GLUE's MRPC/QQP: F1 of class 1 only; of class 0: 2 5 / (10 + 1 + 1).
    assert metrics.f1_score(PREDICTIONS, LABELS, positive=0) == pytest.approx(10 / 12)


def test_a_second_matrix_and_the_undefined_cases():
    # tp 2, tn 1, fp 3, fn 0: (2 - 0) / sqrt(5 2 4 1) = 0.31622776601683794
    labels, predictions = [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]
    assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(
        0.31622776601683794, abs=1e-15)
    assert metrics.f1_score(predictions, labels) == pytest.approx(4 / 7)
    # One class predicted: MCC undefined -> 0 as scikit-learn; no true positive -> F1 0.
    assert metrics.matthews_corrcoef([0, 0, 0], [0, 1, 1]) == 0.0
    assert metrics.f1_score([0, 0, 0], [0, 1, 1]) == 0.0
    assert metrics.f1_score([0, 0], [0, 0]) == 0.0
    # Perfect and inverted predictions.
    assert metrics.matthews_corrcoef([0, 1, 1], [0, 1, 1]) == 1.0
    assert metrics.matthews_corrcoef([1, 0, 0], [0, 1, 1]) == -1.0


def test_multi_class_matthews_by_hand():
    # s 6, c 3, p (3, 1, 2), t (2, 2, 2): (18 - 12) / sqrt((36 - 14)(36 - 12)) = 6/sqrt(528)
    value = metrics.matthews_corrcoef([0, 2, 1, 0, 0, 2], [0, 1, 2, 0, 1, 2])
    assert value == pytest.approx(0.2611164839335468, abs=1e-15)


def test_matthews_and_f1_match_their_binary_formulas_on_random_data():
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, size=int(rng.integers(5, 60)))
        predictions = np.where(rng.random(labels.size) < 0.7, labels, 1 - labels)
        tp = float(np.sum((predictions == 1) & (labels == 1)))
        tn = float(np.sum((predictions == 0) & (labels == 0)))
        fp = float(np.sum((predictions == 1) & (labels == 0)))
        fn = float(np.sum((predictions == 0) & (labels == 1)))
        denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        expected = (tp * tn - fp * fn) / denominator if denominator else 0.0
        assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(expected,
                                                                                abs=1e-12)
        precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
        expected_f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
        assert metrics.f1_score(predictions, labels) == pytest.approx(expected_f1, abs=1e-12)


def test_pearson_and_spearman_by_hand():
    # dx (-1, 0, 1), dy (-5/3, -2/3, 7/3): r = 4 / sqrt(2 * 26/3) = sqrt(12/13)
    assert metrics.pearson([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(
        math.sqrt(12 / 13), abs=1e-12)
    # Ties share their mean rank: ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4):
    # 4.5 / sqrt(4.5 * 5) = sqrt(0.9)
    assert metrics.spearman([1.0, 2.0, 2.0, 3.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(
        math.sqrt(0.9), abs=1e-12)
    assert metrics.spearman([1.0, 2.0, 3.0], [1.0, 2.0, 5.0]) == pytest.approx(1.0)
    assert metrics.pearson([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)
    # Constant inputs: undefined, NaN (scipy's value).
    assert math.isnan(metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))
    assert math.isnan(metrics.spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]))


def _ranks(values):
    # Mean rank of ties, 1-based, without scipy.
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        ranks[values == value] = ranks[values == value].mean()
    return ranks


def test_correlations_match_their_formulas_on_random_data():
    rng = np.random.default_rng(1)
    for _ in range(10):
        labels = np.round(rng.uniform(0, 5, size=30), 1)   # rounded: ties
        predictions = np.round(labels + rng.normal(0, 1, size=30), 1)
        x, y = predictions - predictions.mean(), labels - labels.mean()
        assert metrics.pearson(predictions, labels) == pytest.approx(
            np.sum(x * y) / math.sqrt(np.sum(x * x) * np.sum(y * y)), abs=1e-12)
        rx, ry = _ranks(predictions), _ranks(labels)
        rx, ry = rx - rx.mean(), ry - ry.mean()
        assert metrics.spearman(predictions, labels) == pytest.approx(
            np.sum(rx * ry) / math.sqrt(np.sum(rx * rx) * np.sum(ry * ry)), abs=1e-12)


def test_glue_metrics_returns_the_tasks_metrics():
    assert metrics.glue_metrics(get_task("mrpc"), PREDICTIONS, LABELS) == {
        "accuracy": 0.8, "f1": 0.75}
    assert metrics.glue_metrics(get_task("qqp"), np.array(PREDICTIONS),
                                np.array(LABELS)) == {"accuracy": 0.8, "f1": 0.75}
    cola = metrics.glue_metrics(get_task("cola"), PREDICTIONS, LABELS)
    assert list(cola) == ["matthews_corrcoef"]
    assert cola["matthews_corrcoef"] == pytest.approx(14 / 24)
    assert metrics.glue_metrics(get_task("mnli"), [0, 1, 2, 2], [0, 1, 1, 2]) == {
        "accuracy": 0.75}
    sts = metrics.glue_metrics(get_task("sts-b"), np.array([1.0, 2.0, 2.0, 3.0], np.float32),
                               [1.0, 3.0, 2.0, 4.0])
    assert list(sts) == ["pearson", "spearman"]
    assert sts["spearman"] == pytest.approx(math.sqrt(0.9))
    # x (-1, 0, 0, 1), y (-1.5, .5, -.5, 1.5): 3 / sqrt(2 * 5)
    assert sts["pearson"] == pytest.approx(3 / math.sqrt(10))
    assert all(type(value) is float for value in sts.values())


@pytest.mark.parametrize("task_name, predictions, labels, message", [
    ("mnli", np.zeros((4, 3), np.float32), [0, 1, 2, 0],
     "predictions has shape (4, 3), expected [N] label ids (take the argmax of [N, L] "
     "logits)"),
    ("mnli", [0.0, 1.0], [0, 1], "predictions has dtype float64, expected integer label ids"),
    ("mnli", [0, 3], [0, 1], "predictions holds 3, not a label id in [0, 3)"),
    ("rte", [0, 1], [0, -1], "labels holds -1, not a label id in [0, 2)"),
    ("mrpc", [0, 1, 1], [0, 1], "3 predictions for 2 labels"),
    ("mrpc", [], [], "no examples to score"),
    ("sts-b", np.zeros((3, 1)), [1.0, 2.0, 3.0],
     "predictions has shape (3, 1), expected [N] scores (squeeze the last axis)"),
    ("sts-b", [1.0, float("nan")], [1.0, 2.0], "predictions holds nan, expected finite scores"),
])
def test_bad_predictions_say_what_is_wrong(task_name, predictions, labels, message):
    with pytest.raises(ValueError) as error:
        metrics.glue_metrics(get_task(task_name), predictions, labels)
    assert str(error.value) == message


def test_submission_files_have_the_glue_format(tmp_path):
    path = str(tmp_path / "out" / "MNLI-m.tsv")
    metrics.write_test_results(get_task("mnli"), np.array([2, 0, 1, 1]), path)
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == ("index\tprediction\n0\tneutral\n1\tcontradiction\n"
                                 "2\tentailment\n3\tentailment\n")
    path = str(tmp_path / "STS-B.tsv")
    metrics.write_test_results(get_task("sts-b"), [3.14159, 0.0, 4.9996, 2.0006], path)
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == "index\tprediction\n0\t3.142\n1\t0.000\n2\t5.000\n3\t2.001\n"
    assert metrics.submission_text(get_task("cola"), [1, 0]) == (
        "index\tprediction\n0\t1\n1\t0\n")
    assert sorted(os.listdir(tmp_path)) == ["STS-B.tsv", "out"]


def test_bad_predictions_leave_an_existing_submission_alone(tmp_path):
    path = tmp_path / "RTE.tsv"
    path.write_text("index\tprediction\n0\tentailment\n")
    with pytest.raises(ValueError, match=r"predictions holds 2, not a label id in \[0, 2\)"):
        metrics.write_test_results(get_task("rte"), [0, 2], str(path))
    assert path.read_text() == "index\tprediction\n0\tentailment\n"
    assert os.listdir(tmp_path) == ["RTE.tsv"]


def test_submission_file_names():
    assert metrics.SUBMISSION_FILE_NAMES == {
        "cola": "CoLA.tsv", "mnli": "MNLI-m.tsv", "mrpc": "MRPC.tsv", "sst-2": "SST-2.tsv",
        "qqp": "QQP.tsv", "qnli": "QNLI.tsv", "rte": "RTE.tsv", "sts-b": "STS-B.tsv"}
