"""SQuAD JSON -> examples -> features: the reference's rules, exact character spans,
the cache, and clear errors for bad input."""

import json
import logging

import numpy as np
import pytest

from packed_bert_tf.squad import features as squad_features
from packed_bert_tf.squad.features import (
    SquadFormatError,
    convert_examples_to_features,
    improve_answer_span,
    load_or_create_features,
    max_context_spans,
    read_squad_examples,
    whitespace_words,
)
from tests.reference_bert import run_squad
from tests.squad import squad_data

SHAPES = dict(max_seq_length=32, doc_stride=8, max_query_length=10)


@pytest.fixture
def squad_file(tmp_path):
    return squad_data.write_json(tmp_path / "train.json", squad_data.default_dataset())


def _features(path, tokenizer, *, is_training=True, **shapes):
    examples, _ = read_squad_examples(path, is_training=is_training)
    features, stats = convert_examples_to_features(examples, tokenizer,
                                                   is_training=is_training,
                                                   **(shapes or SHAPES))
    return examples, features, stats


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_answers_map_to_token_spans_and_back_to_the_exact_text(tmp_path, squad_file,
                                                               do_lower_case):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset(),
                                         do_lower_case=do_lower_case)
    examples, features, stats = _features(squad_file, tokenizer)
    assert len(examples) == 10
    windows_with_answer = np.zeros(len(examples), int)
    for f in range(len(features)):
        example = examples[features.example_index[f]]
        start, end = features.start_position[f], features.end_position[f]
        if start == 0:
            assert end == 0
            continue
        windows_with_answer[features.example_index[f]] += 1
        assert features.segment_ids[f, start] == features.segment_ids[f, end] == 1
        text = example.context_text[features.token_char_start[f, start]:
                                    features.token_char_end[f, end]]
        assert text == example.orig_answer_text, (example.qas_id, text)
    # Every answer is found, several of them in more than one window.
    assert (windows_with_answer >= 1).all()
    assert (windows_with_answer >= 2).sum() >= 3
    assert np.bincount(features.example_index).max() >= 4  # many windows per example
    assert stats.num_answers_outside_window > 0


def test_lower_casing_strips_accents_and_cased_keeps_them(tmp_path, squad_file):
    for do_lower_case, expected in [(True, "besancon"), (False, "Besançon")]:
        tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset(),
                                             do_lower_case=do_lower_case)
        examples, features, _ = _features(squad_file, tokenizer)
        start = features.start_position[0]
        assert tokenizer.convert_ids_to_tokens([features.input_ids[0, start]]) == [expected]
        assert examples[0].orig_answer_text == "Besançon"


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("shapes", [SHAPES, dict(max_seq_length=24, doc_stride=3,
                                                 max_query_length=5),
                                    dict(max_seq_length=128, doc_stride=128,
                                         max_query_length=64)])
def test_matches_the_reference_feature_creation(tmp_path, squad_file, do_lower_case,
                                                is_training, shapes):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset(),
                                         do_lower_case=do_lower_case)
    examples, features, _ = _features(squad_file, tokenizer, is_training=is_training,
                                      **shapes)
    reference_squad = run_squad()
    reference_examples = reference_squad.read_squad_examples(str(squad_file), is_training)
    reference = []
    reference_squad.convert_examples_to_features(
        reference_examples, tokenizer, shapes["max_seq_length"], shapes["doc_stride"],
        shapes["max_query_length"], is_training, output_fn=reference.append)
    assert len(features) == len(reference)
    for f, want in enumerate(reference):
        length = sum(want.input_mask)  # the reference pads to max_seq_length
        assert features.length[f] == length
        np.testing.assert_array_equal(features.input_ids[f], want.input_ids)
        np.testing.assert_array_equal(features.segment_ids[f], want.segment_ids)
        assert features.example_index[f] == want.example_index
        assert features.doc_span_index[f] == want.doc_span_index
        # The reference gives no positions for prediction (None): ours are 0.
        assert features.start_position[f] == (want.start_position or 0)
        assert features.end_position[f] == (want.end_position or 0)
        # token_to_orig_map: the word holding each context token's first character.
        context = examples[want.example_index].context_text
        _, _, char_to_word = whitespace_words(context)
        is_context = features.token_char_end[f] > 0
        assert set(np.flatnonzero(is_context)) == set(want.token_to_orig_map)
        for position, word in want.token_to_orig_map.items():
            assert char_to_word[features.token_char_start[f, position]] == word
            assert bool(features.token_is_max_context[f, position]) == \
                want.token_is_max_context[position]


def test_every_context_token_has_exactly_one_max_context_window(tmp_path, squad_file):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    examples, features, _ = _features(squad_file, tokenizer, is_training=False)
    for example_index in range(len(examples)):
        rows = np.flatnonzero(features.example_index == example_index)
        starts = np.concatenate([features.token_char_start[r][
            features.token_is_max_context[r] > 0] for r in rows])
        everything = np.concatenate([features.token_char_start[r][
            features.token_char_end[r] > 0] for r in rows])
        assert sorted(starts) == sorted(set(everything))


def test_improve_answer_span_narrows_to_the_answer_tokens():
    # Word "(1895-1943)" is tokens ( 1895 - 1943 ); the answer "1943" is one of them.
    doc = np.array([5, 7, 8, 9, 10, 11, 6])
    assert improve_answer_span(doc, 1, 5, [10]) == (4, 4)
    assert improve_answer_span(doc, 1, 5, [8, 9, 10]) == (2, 4)
    assert improve_answer_span(doc, 1, 5, [99]) == (1, 5)  # not found: unchanged
    assert improve_answer_span(doc, 1, 5, []) == (1, 5)


def test_max_context_prefers_the_most_centred_window():
    # Windows (0, 4) and (2, 4) over 6 tokens: tokens 0-1 only in the first,
    # 2 scores 2.04 vs 0.04 -> first, 3 scores 0.04 vs 1.04 -> second.
    np.testing.assert_array_equal(max_context_spans([(0, 4), (2, 4)], 6),
                                  [0, 0, 0, 1, 1, 1])


def test_characters_dropped_by_the_normaliser_stay_with_their_token(tmp_path):
    context = "Cafe\u0301 au lait"  # a decomposed accent: "e" + U+0301
    dataset = {"version": "1.1", "data": [{"paragraphs": [{"context": context, "qas": [
        {"id": "a", "question": "what", "answers": [{"text": "Cafe\u0301",
                                                     "answer_start": 0}]}]}]}]}
    path = squad_data.write_json(tmp_path / "accent.json", dataset)
    tokenizer = squad_data.tokenizer_for(tmp_path, dataset)
    examples, features, _ = _features(path, tokenizer)
    start, end = features.start_position[0], features.end_position[0]
    assert context[features.token_char_start[0, start]:
                   features.token_char_end[0, end]] == "Cafe\u0301"


def test_whitespace_words():
    starts, ends, char_to_word = whitespace_words(" ab\u202fc\td ")
    np.testing.assert_array_equal(starts, [1, 4, 6])
    np.testing.assert_array_equal(ends, [3, 5, 7])
    np.testing.assert_array_equal(char_to_word, [-1, 0, 0, 0, 1, 1, 2, 2])


# --------------------------------------------------------------------------
# The cache


def test_cache_is_reused_and_keyed_by_the_arguments(tmp_path, squad_file):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    cache = tmp_path / "out"
    first = load_or_create_features(squad_file, tokenizer, cache_dir=str(cache),
                                    is_training=True, **SHAPES)
    second = load_or_create_features(squad_file, tokenizer, cache_dir=str(cache),
                                     is_training=True, **SHAPES)
    assert not first.from_cache and second.from_cache
    assert first.cache_path == second.cache_path
    for name, value in first.features.arrays().items():
        np.testing.assert_array_equal(second.features.arrays()[name], value, err_msg=name)
        assert second.features.arrays()[name].dtype == value.dtype
    assert second.feature_stats == first.feature_stats
    other = load_or_create_features(squad_file, tokenizer, cache_dir=str(cache),
                                    is_training=True, **dict(SHAPES, doc_stride=5))
    predict = load_or_create_features(squad_file, tokenizer, cache_dir=str(cache),
                                      is_training=False, **SHAPES)
    assert len({first.cache_path, other.cache_path, predict.cache_path}) == 3
    assert not other.from_cache and not predict.from_cache


def test_a_corrupt_cache_is_rebuilt(tmp_path, squad_file, caplog):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    first = load_or_create_features(squad_file, tokenizer, cache_dir=str(tmp_path),
                                    is_training=True, **SHAPES)
    with open(first.cache_path, "r+b") as file:
        file.seek(40)
        file.write(b"garbage")
    with caplog.at_level(logging.WARNING):
        again = load_or_create_features(squad_file, tokenizer, cache_dir=str(tmp_path),
                                        is_training=True, **SHAPES)
    assert not again.from_cache and "feature cache unusable" in caplog.text
    np.testing.assert_array_equal(again.features.input_ids, first.features.input_ids)


# --------------------------------------------------------------------------
# Bad input


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"version": "1.1", "data": [', encoding="utf-8")
    with pytest.raises(SquadFormatError, match=r"broken\.json: not valid JSON.*line 1"):
        read_squad_examples(str(path), is_training=True)


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"version": "1.1",\n "data": [{"title": "Caf\u00e9"}]}'
                     .encode("latin-1"))
    with pytest.raises(SquadFormatError, match=r"latin1\.json:2: not UTF-8 text \(invalid "
                                               r"continuation byte at byte 24\)"):
        read_squad_examples(str(path), is_training=True)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("data"), r"missing key 'data'"),
    (lambda d: d["data"][0]["paragraphs"][1].pop("context"),
     r"data\[0\]\.paragraphs\[1\]: missing key 'context'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][2].pop("question"),
     r"paragraphs\[0\]\.qas\[2\] \(id p0q2\): missing key 'question'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1]["answers"][0].update(
        answer_start="12"), r"qas\[1\] \(id p0q1\)\.answers\[0\]: 'answer_start' must be "
                            r"an integer, got str"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"].append(
        {"text": "x", "answer_start": 0}), r"\(id p0q0\): a training question needs "
                                            r"exactly 1 answer, got 2"),
])
def test_missing_keys_and_wrong_types_name_the_place(tmp_path, edit, message):
    dataset = squad_data.default_dataset()
    edit(dataset)
    path = squad_data.write_json(tmp_path / "bad.json", dataset)
    with pytest.raises(SquadFormatError, match=r"bad\.json: .*" + message):
        read_squad_examples(path, is_training=True)


def test_prediction_ignores_the_answers(tmp_path):
    dataset = squad_data.default_dataset()
    dataset["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    path = squad_data.write_json(tmp_path / "dev.json", dataset)
    examples, stats = read_squad_examples(path, is_training=False)
    assert len(examples) == stats.num_questions == 10
    assert examples[0].orig_answer_text is None


def test_answers_not_at_their_offset_are_skipped_and_counted(tmp_path, caplog):
    dataset = squad_data.default_dataset()
    qas = dataset["data"][0]["paragraphs"][0]["qas"]
    qas[0]["answers"][0]["text"] = "London"  # "Besançon" is at that offset
    qas[3]["answers"][0]["answer_start"] = 10_000  # past the end of the context
    path = squad_data.write_json(tmp_path / "train.json", dataset)
    with caplog.at_level(logging.WARNING):
        examples, stats = read_squad_examples(path, is_training=True)
    assert stats.skipped_answer_ids == ("p0q0", "p0q3") and stats.num_skipped == 2
    assert stats.skip_reasons == ("answer text not at answer_start",
                                  "answer outside the context")
    assert stats.skipped_by_reason() == {"answer outside the context": 1,
                                         "answer text not at answer_start": 1}
    assert len(examples) == 8 and stats.num_questions == 10
    assert "answer text not at answer_start: answer 'London', answer_start=" in caplog.text
    assert ("skipped 2 of 10 training questions (1 answer outside the context, 1 answer "
            "text not at answer_start)") in caplog.text


@pytest.mark.parametrize("space", ["\u00a0", "\u3000", "\u2009"])
def test_answers_with_unicode_spaces_at_their_offset_are_kept(tmp_path, space):
    # No-break, ideographic and thin spaces are not the reference's word
    # separators: "10<space>km" is one word of the context, found by
    # normalising both sides as the official evaluation normalises answers.
    context = f"The race is 10{space}km long and ends at noon."
    answer = f"10{space}km"
    dataset = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
        "context": context, "qas": [
            {"id": "q0", "question": "How long?", "answers": [
                {"text": answer, "answer_start": context.index(answer)}]},
            {"id": "q1", "question": "When?", "answers": [
                {"text": f"at{space}noon", "answer_start": context.index("at noon")}]}]}]}]}
    path = squad_data.write_json(tmp_path / "train.json", dataset)
    examples, stats = read_squad_examples(path, is_training=True)
    assert [e.qas_id for e in examples] == ["q0", "q1"] and stats.num_skipped == 0
    assert (examples[0].start_position, examples[0].end_position) == (3, 3)
    assert (examples[1].start_position, examples[1].end_position) == (7, 8)


def test_long_questions_are_truncated_with_a_counted_warning(tmp_path, caplog):
    dataset = squad_data.default_dataset()
    dataset["data"][0]["paragraphs"][0]["qas"][0]["question"] = "where " * 40
    path = squad_data.write_json(tmp_path / "train.json", dataset)
    tokenizer = squad_data.tokenizer_for(tmp_path, dataset)
    with caplog.at_level(logging.WARNING):
        examples, features, stats = _features(path, tokenizer)
    assert stats.num_truncated_questions >= 1
    assert "questions longer than max_query_length=10 tokens were truncated" in caplog.text
    first = np.flatnonzero(features.example_index == 0)[0]
    assert features.segment_ids[first, :12].tolist() == [0] * 12  # [CLS] + 10 + [SEP]
    assert features.segment_ids[first, 12] == 1


@pytest.mark.parametrize("shapes, message", [
    (dict(max_seq_length=13, doc_stride=8, max_query_length=10),
     r"max_seq_length \(13\) must be greater than max_query_length \(10\) \+ 3"),
    (dict(max_seq_length=32, doc_stride=0, max_query_length=10),
     r"doc_stride must be a positive integer, got 0"),
])
def test_impossible_arguments_are_refused_up_front(tmp_path, squad_file, shapes, message):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    with pytest.raises(ValueError, match=message):
        load_or_create_features(squad_file, tokenizer, cache_dir=None, is_training=True,
                                **shapes)


def test_an_empty_context_gives_no_features(tmp_path):
    dataset = squad_data.default_dataset()
    dataset["data"][0]["paragraphs"].append(
        {"context": "   ", "qas": [{"id": "empty", "question": "who", "answers": []}]})
    path = squad_data.write_json(tmp_path / "dev.json", dataset)
    tokenizer = squad_data.tokenizer_for(tmp_path, dataset)
    examples, features, stats = _features(path, tokenizer, is_training=False)
    assert stats.num_examples_without_features == 1
    assert len(examples) - 1 not in set(features.example_index.tolist())


def test_feature_files_round_trip_and_foreign_files_are_refused(tmp_path, squad_file):
    tokenizer = squad_data.tokenizer_for(tmp_path, squad_data.default_dataset())
    _, features, _ = _features(squad_file, tokenizer)
    path = str(tmp_path / "features.tfrecord")
    assert squad_features.write_features(path, features) == len(features)
    back = squad_features.read_features(path, SHAPES["max_seq_length"])
    for name, value in features.arrays().items():
        np.testing.assert_array_equal(back.arrays()[name], value)
    with pytest.raises(SquadFormatError, match="features.tfrecord: not a SQuAD feature "
                                               "file of max_seq_length=16"):
        squad_features.read_features(path, 16)
    with pytest.raises(SquadFormatError, match="nothing.tfrecord: no such file"):
        squad_features.read_features(str(tmp_path / "nothing.tfrecord"), 32)
    json.loads(json.dumps(squad_features.feature_cache_key(
        squad_file, tokenizer, is_training=True, **SHAPES)))  # JSON-able
