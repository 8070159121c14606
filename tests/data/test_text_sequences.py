"""Unmasked pre-training sequences straight from text: both objectives, every
token once, the same sequences for the same (seed, epoch), replicas' shares."""

import collections

import numpy as np
import pytest

from packed_bert_tf.data.inputs.text_sequences import (
    TextSequenceOptions,
    check_text_files,
    epoch_files,
    text_sequences,
)
from packed_bert_tf.data.tokenization import SPECIAL_TOKENS, WordPieceTokenizer

WORDS = [f"w{i}" for i in range(40)]
S = 16


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Five files of random documents (1 to 6 sentences of 1 to 9 words, one
    sentence of 20 words: longer than a sequence), and the tokenizer."""
    folder = tmp_path_factory.mktemp("text")
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n")
    rng = np.random.default_rng(0)
    files = []
    for index in range(5):
        documents = []
        for _ in range(rng.integers(2, 6)):
            sentences = [" ".join(rng.choice(WORDS, rng.integers(1, 10)))
                         for _ in range(rng.integers(1, 7))]
            documents.append("\n".join(sentences))
        if index == 2:
            documents.append(" ".join(rng.choice(WORDS, 20)))
        path = folder / f"part-{index}.txt"
        path.write_text("\n\n".join(documents) + "\n")
        files.append(str(path))
    return files, WordPieceTokenizer(str(folder / "vocab.txt"))


def _sequences(corpus, objective, **kwargs):
    files, tokenizer = corpus
    options = TextSequenceOptions(objective, S, short_seq_prob=0.1)
    return list(text_sequences(files, tokenizer, options, **{"seed": 1, "epoch": 0,
                                                             **kwargs}))


def _tokens_in_file_order(corpus, order):
    """Every sentence's ids, file after file in ``order``, documents apart."""
    files, tokenizer = corpus
    documents = []
    for path in order:
        for document in open(path).read().strip().split("\n\n"):
            documents.append([tokenizer.encode(line) for line in document.split("\n")])
    return documents


@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_the_same_seed_and_epoch_give_the_same_sequences(corpus, objective):
    first, again = _sequences(corpus, objective), _sequences(corpus, objective)
    assert len(first) == len(again) > 10
    for (ids, segments, label), (ids2, segments2, label2) in zip(first, again):
        np.testing.assert_array_equal(ids, ids2)
        np.testing.assert_array_equal(segments, segments2)
        assert label == label2
    other = _sequences(corpus, objective, epoch=1)
    assert [ids.tolist() for ids, _, _ in other] != [ids.tolist() for ids, _, _ in first]


def test_mlm_sequences_hold_every_token_once_in_order(corpus):
    files, tokenizer = corpus
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    order, _ = epoch_files(files, seed=1, epoch=0, replica=0, num_replicas=1)
    sequences = _sequences(corpus, "mlm")
    read = []
    for ids, segments, label in sequences:
        length = int((ids != 0).sum())
        assert ids[0] == cls and ids[length - 1] == sep and length <= S
        assert not ids[length:].any() and not segments.any() and label == 0
        assert ids[length - 2] != sep  # no document separator at the end
        read.extend(ids[1:length - 1].tolist())
    want = []
    for document in _tokens_in_file_order(corpus, order):
        for sentence in document:
            want.extend(sentence)
    assert [token for token in read if token != sep] == want
    # Full sentences: a sequence ends where the next sentence would not fit,
    # so no sentence of at most S - 2 tokens is ever split.
    assert sum(1 for ids, _, _ in sequences if (ids != 0).sum() == S) >= 1


def test_nsp_sequences_are_sentence_pairs_of_the_text(corpus):
    files, tokenizer = corpus
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    sequences = _sequences(corpus, "nsp")
    labels = collections.Counter(label for _, _, label in sequences)
    assert set(labels) == {0, 1}
    for ids, segments, label in sequences:
        length = int((ids != 0).sum())
        assert 5 <= length <= S and ids[0] == cls and ids[length - 1] == sep
        (separators,) = np.nonzero(ids[:length] == sep)
        assert len(separators) == 2  # [CLS] A [SEP] B [SEP]
        np.testing.assert_array_equal(segments[:length],
                                      np.arange(length) > separators[0])
        assert not segments[length:].any()


@pytest.mark.parametrize("num_replicas", [2, 8])  # by file; by sequence (5 files)
@pytest.mark.parametrize("objective", ["nsp", "mlm"])
def test_replicas_share_the_sequences_of_one_epoch(corpus, objective, num_replicas):
    shares = [_sequences(corpus, objective, replica=replica, num_replicas=num_replicas)
              for replica in range(num_replicas)]
    alone = _sequences(corpus, objective)
    if num_replicas > 5 or objective == "nsp":
        # Each reads all and keeps one in R, or each file's pairs are drawn
        # alike whoever reads it: exactly the one stream's sequences.
        assert sorted(ids.tobytes() for share in shares for ids, _, _ in share) == \
            sorted(ids.tobytes() for ids, _, _ in alone)
    else:
        # Full sentences run on from file to file, so a replica's files cut
        # other sequences: the same tokens, each once.
        sep = corpus[1].sep_id

        def tokens(sequences):  # document separators aside
            return collections.Counter(token for ids, _, _ in sequences
                                       for token in ids[1:(ids != 0).sum() - 1].tolist()
                                       if token != sep)

        assert tokens(share for one in shares for share in one) == tokens(alone)


def test_a_file_that_is_not_utf8_or_holds_no_sentence_is_named(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("one sentence\n")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xff utf-8\n")
    with pytest.raises(ValueError, match=rf"^{bad}:2: not UTF-8 text \(invalid start byte "
                                         rf"at byte 4\)$"):
        check_text_files([str(good), str(bad)])
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(ValueError, match=rf"^{blank}: no sentence"):
        check_text_files([str(good), str(blank)])


def test_an_unknown_objective_is_one_line():
    with pytest.raises(ValueError, match=r"^--pretraining_objective='sop' is not one of "
                                         r"nsp, mlm$"):
        TextSequenceOptions("sop")


def test_the_same_text_elsewhere_gives_the_same_sequences(corpus, tmp_path):
    import shutil

    files, tokenizer = corpus
    moved = [shutil.copy(path, tmp_path / f"moved-{index}.txt")
             for index, path in enumerate(files)]
    options = TextSequenceOptions("nsp", S)
    here = list(text_sequences(files, tokenizer, options, seed=1, epoch=0))
    there = list(text_sequences(moved, tokenizer, options, seed=1, epoch=0))
    assert [ids.tolist() for ids, _, _ in here] == [ids.tolist() for ids, _, _ in there]
