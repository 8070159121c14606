"""SQuAD v1.1 evaluation: normalisation, EM/F1 on hand-computed cases, files."""

import json
import logging

import pytest

from packed_bert_tf.squad import (
    evaluate,
    evaluate_files,
    exact_match_score,
    f1_score,
    metric_max_over_ground_truths,
    normalize_answer,
)


@pytest.mark.parametrize("text, expected", [
    ("The cat", "cat"),
    ("U.S.A.", "usa"),
    ("Hello, world!", "hello world"),
    ("  many\t spaces \n here ", "many spaces here"),
    ("An apple a day", "apple day"),
    # Articles only as whole words: "theater", "another", "banana" stay.
    ("the theater another banana", "theater another banana"),
    # Punctuation goes before articles: "the-cat" -> "thecat" keeps its "the".
    ("the-cat", "thecat"),
    # ... and articles revealed by removing punctuation do go: "(a)" -> "".
    ("(a) dog", "dog"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("prediction, gold, expected", [
    ("The cat", "cat", True),
    ("U.S.A.", "USA", True),
    ("Hello, world!", "hello world", True),
    ("hello   world", " Hello world ", True),
    ("the big red dog", "a red dog barked", False),
    ("", "", True),
    ("cat", "cats", False),
])
def test_exact_match_score(prediction, gold, expected):
    assert exact_match_score(prediction, gold) is expected


@pytest.mark.parametrize("prediction, gold, expected", [
    ("The cat", "cat", 1.0),
    ("Hello, world!", "hello world", 1.0),
    # [big, red, dog] vs [red, dog, barked]: common 2, P = R = 2/3.
    ("the big red dog", "a red dog barked", 2 / 3),
    # Counter semantics: [x, x, y] & [x, y, y] = {x: 1, y: 1}, P = R = 2/3.
    ("x x y", "x y y", 2 / 3),
    # [x, x, x] vs [x]: common 1, P = 1/3, R = 1, F1 = 2 * (1/3) / (4/3).
    ("x x x", "x", 0.5),
    # [red, dog] vs [big, red, dog, barked]: P = 1, R = 1/2, F1 = 2/3.
    ("red dog", "big red dog barked", 2 / 3),
    ("", "cat", 0.0),
    ("cat", "", 0.0),
    ("the", "a", 0.0),  # both normalise to no tokens
    ("dog", "cat", 0.0),
])
def test_f1_score(prediction, gold, expected):
    assert f1_score(prediction, gold) == pytest.approx(expected)


def test_metric_max_over_ground_truths_takes_best_gold():
    golds = ["a red dog barked", "a dog", "Red Dog"]
    assert metric_max_over_ground_truths(
        exact_match_score, "the red dog", golds) is True
    # vs [dog]: P = 1/3, R = 1 -> 1/2; vs [red, dog, barked]: 2/3.
    assert metric_max_over_ground_truths(
        f1_score, "the big red dog", golds[:2]) == pytest.approx(2 / 3)


def _qa(qid, *answers):
    return {"id": qid, "question": "?",
            "answers": [{"text": a, "answer_start": 0} for a in answers]}


# Three questions in two articles.
DATA = [
    {"title": "One", "paragraphs": [
        {"context": "The cat sat.", "qas": [_qa("q1", "cat")]},
        {"context": "A red dog barked.",
         "qas": [_qa("q2", "a red dog barked", "a dog")]},
    ]},
    {"title": "Two", "paragraphs": [
        {"context": "Paris.", "qas": [_qa("q3", "Paris")]},
    ]},
]


def test_evaluate_small_dataset():
    predictions = {"q1": "The cat", "q2": "the big red dog", "q3": "Paris!"}
    # EM 1, 0, 1; F1 1, max(2/3, 1/2), 1.
    result = evaluate(DATA, predictions)
    assert result == {"exact_match": pytest.approx(200 / 3),
                      "f1": pytest.approx(100 * (2 + 2 / 3) / 3)}


def test_evaluate_unanswered_scores_zero(caplog):
    predictions = {"q1": "The cat", "q2": "the big red dog", "extra": "x"}
    with caplog.at_level(logging.WARNING):
        result = evaluate(DATA, predictions)
    # q3 missing: EM (1 + 0 + 0) / 3, F1 (1 + 2/3 + 0) / 3; "extra" ignored.
    assert result == {"exact_match": pytest.approx(100 / 3),
                      "f1": pytest.approx(500 / 9)}
    assert "Unanswered question q3 will receive score 0." in caplog.text
    assert "1 of 3 questions unanswered" in caplog.text


def test_evaluate_empty_prediction_and_no_questions():
    result = evaluate(DATA[1:], {"q3": ""})
    assert result == {"exact_match": 0.0, "f1": 0.0}
    assert evaluate([], {}) == {"exact_match": 0.0, "f1": 0.0}


def _write(path, content):
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_evaluate_files(tmp_path):
    dataset = _write(tmp_path / "dev.json", {"version": "1.1", "data": DATA})
    predictions = _write(tmp_path / "pred.json",
                         {"q1": "cat", "q2": "a dog", "q3": "Paris"})
    assert evaluate_files(dataset, predictions) == {"exact_match": 100.0,
                                                    "f1": 100.0}


def test_evaluate_files_version_mismatch_only_warns(tmp_path, caplog):
    dataset = _write(tmp_path / "dev.json", {"version": "2.0", "data": DATA})
    predictions = _write(tmp_path / "pred.json", {"q1": "cat"})
    with caplog.at_level(logging.WARNING):
        result = evaluate_files(dataset, predictions)
    assert result["exact_match"] == pytest.approx(100 / 3)
    assert "expects v-1.1, but got dataset with v-2.0" in caplog.text


@pytest.mark.parametrize("dataset, predictions, bad, match", [
    ("{not json", {}, "dev.json", "not valid JSON"),
    ({"version": "1.1"}, {}, "dev.json", "no 'data' list"),
    ([1, 2], {}, "dev.json", "got list"),
    ({"version": "1.1", "data": DATA}, "[oops", "pred.json", "not valid JSON"),
    ({"version": "1.1", "data": DATA}, ["cat"], "pred.json", "got list"),
])
def test_evaluate_files_errors_name_the_file(tmp_path, dataset, predictions,
                                             bad, match):
    dataset_path = _write(tmp_path / "dev.json", dataset)
    predictions_path = _write(tmp_path / "pred.json", predictions)
    with pytest.raises(ValueError, match=match) as error:
        evaluate_files(dataset_path, predictions_path)
    assert bad in str(error.value)
