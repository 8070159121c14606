"""The features equal google-research/bert's convert_single_example (unpadded)."""

import numpy as np
import pytest

from packed_bert_tf.classification.features import (
    convert_examples_to_features,
    truncated_pair_lengths,
)
from packed_bert_tf.classification.glue import InputExample, get_task
from packed_bert_tf.data.tokenization import WordPieceTokenizer
from tests.classification.classifier_data import (
    TRUNCATION_TEXTS,
    random_examples,
    write_classifier_vocab,
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = write_classifier_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return WordPieceTokenizer(path, do_lower_case=True)


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
    """google-research/bert run_classifier.py, verbatim."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def reference_features(example, label_list, max_seq_length, tokenizer):
    """run_classifier.py's convert_single_example, transcribed (the tokenizer's
    tokenize/convert_tokens_to_ids stand for FullTokenizer's)."""
    label_map = {label: i for i, label in enumerate(label_list)}
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = None
    if example.text_b:
        tokens_b = tokenizer.tokenize(example.text_b)
    if tokens_b:
        _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        if len(tokens_a) > max_seq_length - 2:
            tokens_a = tokens_a[0:(max_seq_length - 2)]
    tokens = []
    segment_ids = []
    tokens.append("[CLS]")
    segment_ids.append(0)
    for token in tokens_a:
        tokens.append(token)
        segment_ids.append(0)
    tokens.append("[SEP]")
    segment_ids.append(0)
    if tokens_b:
        for token in tokens_b:
            tokens.append(token)
            segment_ids.append(1)
        tokens.append("[SEP]")
        segment_ids.append(1)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    while len(input_ids) < max_seq_length:
        input_ids.append(0)
        input_mask.append(0)
        segment_ids.append(0)
    return input_ids, input_mask, segment_ids, label_map[example.label]


def _check_against_reference(examples, task, tokenizer, max_seq_length):
    features = convert_examples_to_features(examples, task, tokenizer, max_seq_length)
    padded_ids, padded_segments = features.padded("input_ids"), features.padded(
        "segment_ids")
    for index, example in enumerate(examples):
        ids, mask, segments, label = reference_features(example, task.labels,
                                                        max_seq_length, tokenizer)
        np.testing.assert_array_equal(padded_ids[index], ids, err_msg=example.guid)
        np.testing.assert_array_equal(padded_segments[index], segments)
        assert features.length[index] == sum(mask)
        assert features.label_ids[index] == label
    return features


@pytest.mark.parametrize("max_seq_length", [8, 11, 16, 64])
def test_pairs_equal_the_reference_truncation_included(tokenizer, max_seq_length):
    examples = random_examples(40, 0, pairs=True)
    examples += [InputExample(f"x-{i}", a, b, "1") for i, (a, b) in enumerate(
        [(TRUNCATION_TEXTS[0], TRUNCATION_TEXTS[1]), (TRUNCATION_TEXTS[2], "x"),
         ("x", TRUNCATION_TEXTS[2]), (TRUNCATION_TEXTS[2], TRUNCATION_TEXTS[2]),
         # No word pieces in text_b: the reference makes a single-text example.
         (TRUNCATION_TEXTS[2], ""), (TRUNCATION_TEXTS[2], "  ")])]
    features = _check_against_reference(examples, get_task("mrpc"), tokenizer,
                                        max_seq_length)
    if max_seq_length <= 16:  # some pairs really were cut
        assert (features.length == max_seq_length).sum() > 10


@pytest.mark.parametrize("max_seq_length", [5, 9, 64])
def test_single_sentences_equal_the_reference(tokenizer, max_seq_length):
    examples = random_examples(30, 1, pairs=False)
    examples.append(InputExample("x-0", TRUNCATION_TEXTS[0], None, "0"))
    _check_against_reference(examples, get_task("sst-2"), tokenizer, max_seq_length)


def test_closed_form_truncation_equals_popping():
    for length_a in range(0, 14):
        for length_b in range(0, 14):
            for max_length in range(0, 20):
                a, b = list(range(length_a)), list(range(length_b))
                _truncate_seq_pair(a, b, max_length)
                kept = truncated_pair_lengths([length_a], [length_b], max_length)
                assert (kept[0][0], kept[1][0]) == (len(a), len(b)), \
                    (length_a, length_b, max_length)


def test_regression_targets_and_missing_labels(tokenizer):
    examples = random_examples(3, 2, pairs=True, regression=True)
    features = convert_examples_to_features(examples, get_task("sts-b"), tokenizer, 32)
    assert features.label_ids.dtype == np.float32
    np.testing.assert_allclose(features.label_ids, [float(e.label) for e in examples])
    test = [InputExample("test-0", "a film", "the plot", None)]
    assert convert_examples_to_features(test, get_task("mrpc"), tokenizer,
                                        32).label_ids.tolist() == [0]


def test_bad_label_and_no_room(tokenizer):
    with pytest.raises(ValueError, match="label 'maybe' is not one of"):
        convert_examples_to_features([InputExample("t-0", "a", "b", "maybe")],
                                     get_task("mrpc"), tokenizer, 32)
    with pytest.raises(ValueError, match="--max_seq_length=3 leaves no room"):
        convert_examples_to_features([InputExample("t-0", "a", "b", "1")],
                                     get_task("mrpc"), tokenizer, 3)
