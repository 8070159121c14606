"""The n-best answer search on hand-made logits, and the files it writes."""

import json

import numpy as np
import pytest

from packed_bert_tf.squad.features import convert_examples_to_features, read_squad_examples
from packed_bert_tf.squad.packing import FeatureLogits
from packed_bert_tf.squad.postprocess import (
    best_indexes,
    compute_predictions,
    postprocess_and_evaluate,
    write_predictions,
)
from tests.squad import squad_data

SHAPES = dict(max_seq_length=32, doc_stride=8, max_query_length=10)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("squad")
    path = squad_data.write_json(tmp_path / "dev.json", squad_data.default_dataset())
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    examples, _ = read_squad_examples(path, is_training=False)
    features, _ = convert_examples_to_features(examples, tokenizer, is_training=False,
                                               **SHAPES)
    return path, examples, features


def _noise(features, seed=0):
    """Small distinct logits everywhere: no candidate stands out."""
    rng = np.random.default_rng(seed)
    total = int(features.length.sum())
    row_splits = np.concatenate([[0], np.cumsum(features.length)]).astype(np.int64)
    return FeatureLogits(rng.uniform(-0.1, 0.1, total).astype(np.float32),
                         rng.uniform(-0.1, 0.1, total).astype(np.float32), row_splits)


def _token(features, feature, char_start):
    return int(np.flatnonzero((features.token_char_start[feature] == char_start)
                              & (features.token_char_end[feature] > 0))[0])


def _end_token(features, feature, char_end):
    return int(np.flatnonzero(features.token_char_end[feature] == char_end)[0])


def _max_context_feature(features, example_index, char_start):
    """The window where the token starting at char_start has its max context."""
    for f in np.flatnonzero(features.example_index == example_index):
        hits = (features.token_char_start[f] == char_start) & \
            (features.token_char_end[f] > 0) & (features.token_is_max_context[f] > 0)
        if hits.any():
            return int(f)
    raise AssertionError("no max-context window")


def _set(logits, feature, start=None, end=None, value=5.0):
    begin = logits.row_splits[feature]
    if start is not None:
        logits.start_logits[begin + start] = value
    if end is not None:
        logits.end_logits[begin + end] = value


def test_best_indexes_largest_first_ties_by_position():
    assert best_indexes([0.5, 2.0, 0.5, 3.0, 2.0], 4).tolist() == [3, 1, 4, 0]


def test_the_highest_scoring_valid_span_is_the_answer(data):
    _, examples, features = data
    context = examples[0].context_text
    logits = _noise(features)
    where = context.index("Besançon")
    f = _max_context_feature(features, 0, where)
    _set(logits, f, start=_token(features, f, where), end=_token(features, f, where))
    predictions, nbest = compute_predictions(examples, features, logits)
    assert predictions["p0q0"] == "Besançon"
    entries = nbest["p0q0"]
    assert entries[0]["text"] == "Besançon" and len(entries) == 20
    assert sum(entry["probability"] for entry in entries) == pytest.approx(1.0)
    scores = [entry["start_logit"] + entry["end_logit"] for entry in entries]
    assert scores == sorted(scores, reverse=True)
    assert len({entry["text"] for entry in entries}) == 20
    assert list(predictions) == [example.qas_id for example in examples]


def test_multi_word_answers_keep_the_context_text_with_one_space(data):
    _, examples, features = data
    example_index = [e.qas_id for e in examples].index("p1q0")
    context = examples[example_index].context_text
    assert context.startswith("The  Rhône\n")
    f = _max_context_feature(features, example_index, 0)
    logits = _noise(features)
    _set(logits, f, start=_token(features, f, 0),
         end=_end_token(features, f, context.index("Rhône") + len("Rhône")))
    predictions, _ = compute_predictions(examples, features, logits)
    assert predictions["p1q0"] == "The Rhône"


def test_spans_too_long_reversed_or_off_max_context_are_not_candidates(data):
    _, examples, features = data
    context = examples[0].context_text
    logits = _noise(features)
    first, last = context.index("Zoë"), context.index("Besançon")  # 10 tokens
    f = _max_context_feature(features, 0, first)
    _set(logits, f, start=_token(features, f, first),
         end=_end_token(features, f, last + len("Besançon")), value=50.0)
    predictions, _ = compute_predictions(examples, features, logits, max_answer_length=30)
    assert predictions["p0q0"] == context[first:last + len("Besançon")]
    predictions, _ = compute_predictions(examples, features, logits, max_answer_length=3)
    assert predictions["p0q0"] != context[first:last + len("Besançon")]

    # The start token in a window that is not its max context: never a candidate.
    where = context.index("Paris")
    windows = [f for f in np.flatnonzero(features.example_index == 0)
               if ((features.token_char_start[f] == where)
                   & (features.token_is_max_context[f] == 0)
                   & (features.token_char_end[f] > 0)).any()]
    assert windows
    logits = _noise(features)
    for f in windows:
        _set(logits, f, start=_token(features, f, where), end=_token(features, f, where),
             value=50.0)
    predictions, nbest = compute_predictions(examples, features, logits)
    assert "Paris" not in [entry["text"] for entry in nbest["p0q0"]]


def test_the_same_text_twice_is_listed_once(data):
    _, examples, features = data
    example_index = [e.qas_id for e in examples].index("p1q1")
    context = examples[example_index].context_text
    logits = _noise(features)
    for where in (context.index("Lyon"), context.rindex("Lyon")):
        f = _max_context_feature(features, example_index, where)
        _set(logits, f, start=_token(features, f, where), end=_token(features, f, where))
    _, nbest = compute_predictions(examples, features, logits, n_best_size=5)
    texts = [entry["text"] for entry in nbest["p1q1"]]
    assert texts[0] == "Lyon" and texts.count("Lyon") == 1 and len(texts) == 5


def test_no_candidate_gives_empty(data):
    _, examples, features = data
    only_first = type(features)(**{name: value[:1]
                                   for name, value in features.arrays().items()})
    predictions, nbest = compute_predictions(examples, only_first, _noise(only_first),
                                             n_best_size=1)
    assert predictions["p0q1"] == "empty"
    assert nbest["p0q1"] == [{"text": "empty", "probability": 1.0, "start_logit": 0.0,
                              "end_logit": 0.0}]


def test_predictions_files_and_evaluation(tmp_path, data):
    path, examples, features = data
    logits = _noise(features)
    for example_index, example in enumerate(examples):  # the gold answers
        dataset_qa = [qa for article in squad_data.default_dataset()["data"]
                      for paragraph in article["paragraphs"] for qa in paragraph["qas"]
                      if qa["id"] == example.qas_id][0]
        answer = dataset_qa["answers"][0]
        begin = answer["answer_start"]
        finish = begin + len(answer["text"])
        f = _max_context_feature(features, example_index, begin)
        _set(logits, f, start=_token(features, f, begin),
             end=_end_token(features, f, finish))
    results = postprocess_and_evaluate(examples, features, logits, predict_file=path,
                                       output_dir=str(tmp_path / "out"))
    assert results == {"exact_match": 100.0, "f1": 100.0}
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert predictions["p0q4"] == "École Normale"
    nbest = json.loads((tmp_path / "out" / "nbest_predictions.json").read_text())
    assert set(nbest) == set(predictions)
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text()) == results
    assert not list((tmp_path / "out").glob("*.tmp-*"))

    # A second write replaces the files whole.
    write_predictions({"x": "y"}, {"x": []}, str(tmp_path / "out"))
    assert json.loads((tmp_path / "out" / "predictions.json").read_text()) == {"x": "y"}


def test_logits_must_match_the_features(data):
    _, examples, features = data
    short = FeatureLogits(np.zeros(3, np.float32), np.zeros(3, np.float32),
                          np.array([0, 3]))
    with pytest.raises(ValueError, match=f"logits for 1 features, expected {len(features)}"):
        compute_predictions(examples, features, short)
