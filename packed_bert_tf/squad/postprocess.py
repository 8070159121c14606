"""Per-feature logits -> answer texts: google-research/bert's n-best search.

For every example, over all its features (windows): the ``n_best_size``
highest start and end logits of each feature; a (start, end) pair is a
candidate when both are context tokens, the start's window is its max-context
window, ``end >= start`` and the span has at most ``max_answer_length``
tokens. Candidates are ranked by start + end logit; the n-best list keeps the
first ``n_best_size`` distinct texts, with their softmax probabilities, and
the best one is the prediction ("empty" when there is no candidate).

Two departures, both for exactness: the top logits are taken over the
feature's own tokens (the reference also ranks the padding's meaningless
logits, which then only crowd out candidates; a packed row has another
feature's tokens there), and the text is the context's characters between
the tokens' offsets, runs of white space made one space (the reference maps
its de-tokenised text back onto the words with ``get_final_text``, which
falls back to whole words when the normalisation changes lengths).

Pure Python and numpy; writes ``predictions.json`` (id -> text) and
``nbest_predictions.json`` (id -> list of ``text``, ``probability``,
``start_logit``, ``end_logit``) atomically.
"""

from __future__ import annotations

import collections
import math
import os
from typing import Sequence

import numpy as np

from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.squad.features import collapse_whitespace

PREDICTIONS_FILE = "predictions.json"
NBEST_PREDICTIONS_FILE = "nbest_predictions.json"
EVAL_RESULTS_FILE = "eval_results.json"


def best_indexes(logits: np.ndarray, n_best_size: int) -> np.ndarray:
    """Indices of the `n_best_size` largest logits, largest first, ties by index."""
    return np.argsort(-np.asarray(logits, np.float64), kind="stable")[:n_best_size]


def _softmax(scores: Sequence[float]) -> list[float]:
    """The reference's ``_compute_softmax`` (in float64)."""
    if not scores:
        return []
    largest = max(scores)
    exps = [math.exp(score - largest) for score in scores]
    total = sum(exps)
    return [value / total for value in exps]


def compute_predictions(examples: Sequence, features, logits, *, n_best_size: int = 20,
                        max_answer_length: int = 30):
    """Answer texts of every example.

    Args:
      examples: the `SquadExample` list the features were made from.
      features: `SquadFeatures` (``example_index``, ``length``,
        ``token_is_max_context``, ``token_char_start``, ``token_char_end``).
      logits: `FeatureLogits`, one entry per feature, in feature order.
      n_best_size: candidates per feature side and entries per n-best list.
      max_answer_length: longest answer, in tokens.

    Returns:
      (predictions: ordered dict id -> text, nbest: ordered dict id -> list of
      dicts ``text``, ``probability``, ``start_logit``, ``end_logit``), in
      example order.
    """
    if len(logits) != len(features):
        raise ValueError(f"logits for {len(logits)} features, expected {len(features)}")
    if n_best_size < 1 or max_answer_length < 1:
        raise ValueError(f"n_best_size ({n_best_size}) and max_answer_length "
                         f"({max_answer_length}) must be >= 1")
    features_of = collections.defaultdict(list)
    for feature_index, example_index in enumerate(features.example_index.tolist()):
        features_of[example_index].append(feature_index)

    predictions = collections.OrderedDict()
    all_nbest = collections.OrderedDict()
    for example_index, example in enumerate(examples):
        candidates = []  # (score, start logit, end logit, char start, char end)
        for feature_index in features_of.get(example_index, ()):
            start_logits, end_logits = logits[feature_index]
            char_start = features.token_char_start[feature_index]
            char_end = features.token_char_end[feature_index]
            is_context = char_end > 0  # context tokens have a non-empty span
            is_max = features.token_is_max_context[feature_index] > 0
            ends = best_indexes(end_logits, n_best_size).tolist()
            for start in best_indexes(start_logits, n_best_size).tolist():
                if not (is_context[start] and is_max[start]):
                    continue
                for end in ends:
                    if not is_context[end] or end < start or \
                            end - start + 1 > max_answer_length:
                        continue
                    start_logit, end_logit = float(start_logits[start]), \
                        float(end_logits[end])
                    candidates.append((start_logit + end_logit, start_logit, end_logit,
                                       int(char_start[start]), int(char_end[end])))
        # Stable: equal scores keep feature, start, end order (as the reference).
        candidates.sort(key=lambda candidate: candidate[0], reverse=True)
        nbest, seen = [], set()
        for _, start_logit, end_logit, begin, finish in candidates:
            if len(nbest) >= n_best_size:
                break
            text = collapse_whitespace(example.context_text[begin:finish])
            if text in seen:
                continue
            seen.add(text)
            nbest.append((text, start_logit, end_logit))
        if not nbest:
            nbest.append(("empty", 0.0, 0.0))
        probabilities = _softmax([start + end for _, start, end in nbest])
        entries = [collections.OrderedDict(text=text, probability=probability,
                                           start_logit=start, end_logit=end)
                   for (text, start, end), probability in zip(nbest, probabilities)]
        predictions[example.qas_id] = entries[0]["text"]
        all_nbest[example.qas_id] = entries
    return predictions, all_nbest


def write_predictions(predictions, nbest, output_dir: str) -> tuple[str, str]:
    """Writes ``predictions.json`` and ``nbest_predictions.json``; returns their paths."""
    return (write_json_atomically(os.path.join(output_dir, PREDICTIONS_FILE),
                                  predictions, indent=4),
            write_json_atomically(os.path.join(output_dir, NBEST_PREDICTIONS_FILE),
                                  nbest, indent=4))


def write_eval_results(results: dict, output_dir: str) -> str:
    """``eval_results.json`` (exact match and F1, in percent) in ``output_dir``."""
    return write_json_atomically(os.path.join(output_dir, EVAL_RESULTS_FILE), results,
                                 indent=4)


def postprocess_and_evaluate(examples: Sequence, features, logits, *, predict_file: str,
                             output_dir: str, n_best_size: int = 20,
                             max_answer_length: int = 30) -> dict:
    """The prediction stage after the model: answers, their files, their scores.

    `compute_predictions`, then ``predictions.json`` and
    ``nbest_predictions.json``, then exact match and F1 against
    ``predict_file`` (the official SQuAD 1.1 scoring,
    `packed_bert_tf.squad.evaluation`) written to ``eval_results.json``.

    Returns:
      ``{"exact_match": float, "f1": float}`` in percent.
    """
    from packed_bert_tf.squad.evaluation import evaluate_files

    predictions, nbest = compute_predictions(
        examples, features, logits, n_best_size=n_best_size,
        max_answer_length=max_answer_length)
    predictions_path, _ = write_predictions(predictions, nbest, output_dir)
    results = evaluate_files(predict_file, predictions_path)
    write_eval_results(results, output_dir)
    return results
