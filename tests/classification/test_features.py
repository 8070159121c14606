"""The features equal google-research/bert's convert_single_example (unpadded).

The reference is ``bert.run_classifier`` from `bert-tensorflow` (the
``reference`` extra, `tests.reference_bert`), called with our tokenizer: its
``tokenize`` and ``convert_tokens_to_ids`` stand for ``FullTokenizer``'s, so
the check is of the conversion alone.
"""

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
from tests.reference_bert import run_classifier


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = write_classifier_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")
    return WordPieceTokenizer(path, do_lower_case=True)


def _check_against_reference(examples, task, tokenizer, max_seq_length):
    reference = run_classifier()
    features = convert_examples_to_features(examples, task, tokenizer, max_seq_length)
    padded_ids, padded_segments = features.padded("input_ids"), features.padded(
        "segment_ids")
    for index, example in enumerate(examples):
        expected = reference.convert_single_example(index, example, task.labels,
                                                    max_seq_length, tokenizer)
        np.testing.assert_array_equal(padded_ids[index], expected.input_ids,
                                      err_msg=example.guid)
        np.testing.assert_array_equal(padded_segments[index], expected.segment_ids)
        assert features.length[index] == sum(expected.input_mask)
        assert features.label_ids[index] == expected.label_id
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
    reference = run_classifier()
    for length_a in range(0, 14):
        for length_b in range(0, 14):
            for max_length in range(0, 20):
                a, b = list(range(length_a)), list(range(length_b))
                reference._truncate_seq_pair(a, b, max_length)
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
