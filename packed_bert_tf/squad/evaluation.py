"""SQuAD v1.1 evaluation, scored exactly as the official ``evaluate-v1.1.py``.

Answers are normalised (lower case, no punctuation, no articles, single
spaces) before comparison. Each question scores the best exact match and the
best token F1 over its gold answers; the dataset scores are the means over all
questions, in percent. A question without a prediction scores 0.

Note:
  Source: the SQuAD v1.1 evaluation script (Rajpurkar et al., 2016,
  https://rajpurkar.github.io/SQuAD-explorer/). Written from its specification;
  the normalisation order (lower -> punctuation -> articles -> whitespace) and
  the Counter-based token overlap are the official ones.

Example:
  >>> normalize_answer("The  U.S.A.!")
  'usa'
  >>> round(f1_score("the big red dog", "a red dog barked"), 4)
  0.6667
"""

import collections
import json
import re
import string

from absl import logging

EXPECTED_VERSION = "1.1"

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s):
    """Lower-case, drop punctuation and the articles a/an/the, fix whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_score(prediction, ground_truth):
    """Token-level F1 between normalised answers (multiset overlap).

    Returns 0 when the two share no token (so also when either is empty).
    """
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = (collections.Counter(prediction_tokens)
              & collections.Counter(ground_truth_tokens))
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match_score(prediction, ground_truth):
    """Whether the normalised answers are equal."""
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction, ground_truths):
    """The best ``metric_fn(prediction, gold)`` over the gold answers."""
    return max(metric_fn(prediction, ground_truth)
               for ground_truth in ground_truths)


def evaluate(dataset, predictions):
    """Exact match and F1, in percent, over every question of ``dataset``.

    Args:
      dataset: list of dict. The SQuAD JSON's ``data`` list: articles ->
        ``paragraphs`` -> ``qas``, each question with an ``id`` and
        ``answers`` (``[{"text": ...}]``).
      predictions: dict, question id -> predicted answer text. Questions
        missing here score 0 and are logged; predictions for unknown ids are
        ignored.

    Returns:
      A dict ``{"exact_match": float, "f1": float}``, both ``100 * mean`` over
      all questions (0.0 for a dataset with no questions).
    """
    exact_match = f1 = 0.0
    total = unanswered = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    logging.warning("Unanswered question %s will receive "
                                    "score 0.", qa["id"])
                    unanswered += 1
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += metric_max_over_ground_truths(
                    exact_match_score, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(
                    f1_score, prediction, ground_truths)
    if unanswered:
        logging.warning("%d of %d questions unanswered, scored 0.",
                        unanswered, total)
    if total == 0:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * exact_match / total,
            "f1": 100.0 * f1 / total}


def _load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} file {path!r} is not valid JSON: {e}") from e


def evaluate_files(dataset_path, predictions_path):
    """`evaluate` on a SQuAD v1.1 dataset file and a predictions file.

    Args:
      dataset_path: str. SQuAD JSON with ``version`` and ``data``. A version
        other than 1.1 is logged, not rejected (as the official script).
      predictions_path: str. JSON object mapping question id -> answer text.

    Raises:
      ValueError: for malformed JSON, a dataset without a ``data`` list, or
        predictions that are not a JSON object; the message names the file.
    """
    dataset_json = _load_json(dataset_path, "dataset")
    if not isinstance(dataset_json, dict):
        raise ValueError(f"dataset file {dataset_path!r} must hold a JSON "
                         f"object with a 'data' list, got "
                         f"{type(dataset_json).__name__}")
    if not isinstance(dataset_json.get("data"), list):
        raise ValueError(f"dataset file {dataset_path!r} has no 'data' list "
                         f"(keys: {sorted(dataset_json)})")
    version = dataset_json.get("version")
    if version != EXPECTED_VERSION:
        logging.warning("Evaluation expects v-%s, but got dataset with v-%s "
                        "(%s)", EXPECTED_VERSION, version, dataset_path)
    predictions = _load_json(predictions_path, "predictions")
    if not isinstance(predictions, dict):
        raise ValueError(f"predictions file {predictions_path!r} must hold a "
                         f"JSON object of id -> answer, got "
                         f"{type(predictions).__name__}")
    return evaluate(dataset_json["data"], predictions)
