"""create_pretraining_data against a port of google-research/bert's reference.

`benchmarks/reference_bert` is a port of google-research/bert's
``create_pretraining_data.py`` and its pure-Python ``tokenization.py``. Both
tools run here on the same small text with the same small vocabulary, flags
and seed, and must give the same instances: tokens (``input_ids``), segment
ids, ``is_random_next``, masked positions and labels, and the same rows in
each round-robin output file.

What matches and what does not:

* Tokenization: identical, sentence for sentence (`tokenizers`' BertNormalizer
  + BertPreTokenizer + WordPiece against BasicTokenizer + WordpieceTokenizer,
  with BERT's 200-character word limit); tested on text with accents,
  CJK, control characters, punctuation and long words.
* One input file: the same instances, row for row, for any seed, with and
  without whole-word masking, cased or not (our library makes the same draws
  from the same ``random.Random`` in the same order).
* Several input files: our tool makes instances per input file (so that
  ``--num_workers`` can split the files and the output still does not depend
  on the worker count); the reference makes them from one pool of all files'
  documents. File i is seeded ``random_seed + i``; its instances are exactly
  the reference's run on file i alone with that seed, and all files'
  instances are then merged in one seeded order. The reference's
  multi-file run picks random next segments from any file and shuffles
  everything with one generator, so its rows differ (tested: the multiset of
  rows equals the reference run once per file).
* The bytes differ: the reference writes the features of each
  ``tf.train.Example`` in insertion order, we write them in sorted key order
  (``SerializeToString(deterministic=True)``'s order); the parsed records are
  equal.
"""

import random

import numpy as np
import pytest

from benchmarks.reference_bert import create_pretraining_data as reference
from benchmarks.reference_bert import tokenization as reference_tokenization
from data_prep.create_pretraining_data import create_pretraining_data
from packed_bert_tf.data import features, pretraining_instances, record_files, tokenization

WORDS = ("the a of packing sequence token model train data set mask attention layer "
         "batch size length pack histogram strategy speed word sentence next random "
         "is are was and or but with for to from in on at by it this that").split()
# Unlisted words become several pieces or [UNK].
PIECES = ["##s", "##ed", "##ing", "##er", "##ly", "pre", "un", "##a", "##e", "##i",
          "##o", "##n", "##t", "##r", "cafe", "日", "本"]
ODD_WORDS = ["packed", "tokenizer", "Café", "naïve", "ÉCOLE", "日本語", "x\x00y",
             "tab\there", "a\u00a0b", "soft\u00adhyphen", "(brackets)", "don't",
             "e-mail", "$5.00", "ﬁne", "İstanbul", "straße", "un" + "able" * 40,
             "a" * 210, "\u200bzero", "Ⅻ", "ﬀ"]
FORMAT = features.RecordFormat.unpacked(48, 8)
OPTIONS = dict(max_seq_length=48, max_predictions_per_seq=8, masked_lm_prob=0.15,
               short_seq_prob=0.1, dupe_factor=3)


def _sentence(rng):
    words = [rng.choice(WORDS if rng.random() < 0.85 else ODD_WORDS)
             for _ in range(rng.randint(2, 14))]
    return " ".join(words).capitalize() + rng.choice([".", "!", "?", " ..."])


def _write_text(path, rng, num_documents):
    documents = ["\n".join(_sentence(rng) for _ in range(rng.randint(1, 9)))
                 for _ in range(num_documents)]
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("reference_bert")
    rng = random.Random(7)
    files = [_write_text(root / f"part-{i}.txt", rng, 12 + 4 * i) for i in range(3)]
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *WORDS, *PIECES, ".", "!",
                                "?", "(", ")", "'", "-", "$", "5", "0"]) + "\n",
                     encoding="utf-8")
    return root, files, str(vocab)


def _reference_arrays(input_files, vocab, output_files, *, random_seed,
                      do_lower_case=True, do_whole_word_mask=False):
    """The reference's instances, written by the reference and read back."""
    tokenizer = reference_tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
    instances = reference.create_training_instances(
        input_files, tokenizer, OPTIONS["max_seq_length"], OPTIONS["dupe_factor"],
        OPTIONS["short_seq_prob"], OPTIONS["masked_lm_prob"],
        OPTIONS["max_predictions_per_seq"], random.Random(random_seed),
        do_whole_word_mask)
    reference.write_instance_to_example_files(
        instances, tokenizer, OPTIONS["max_seq_length"],
        OPTIONS["max_predictions_per_seq"], output_files)
    return instances, [record_files.read_arrays(path, FORMAT) for path in output_files]


def _our_arrays(input_files, vocab, output_files, *, random_seed, do_lower_case=True,
                do_whole_word_mask=False, num_workers=1):
    create_pretraining_data(
        ",".join(input_files), output_files, vocab_file=vocab, vocab_size=None,
        do_lower_case=do_lower_case, do_whole_word_mask=do_whole_word_mask,
        random_seed=random_seed, num_workers=num_workers, **OPTIONS)
    return [record_files.read_arrays(path, FORMAT) for path in output_files]


def _assert_equal(ours, theirs):
    assert len(ours) == len(theirs)
    for our_file, their_file in zip(ours, theirs):
        assert list(our_file) == list(their_file) == list(features.UNPACKED_FEATURE_NAMES)
        for name in our_file:
            np.testing.assert_array_equal(our_file[name], their_file[name], err_msg=name)


def test_tokenization_is_identical(corpus):
    _, files, vocab = corpus
    lines = [sentence for document in pretraining_instances.read_text_documents(files)
             for sentence in document]
    lines += ODD_WORDS + [" ".join(ODD_WORDS), "Hello\u3000World", "\u2028line"]
    for do_lower_case in (True, False):
        theirs = reference_tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
        ours = tokenization.WordPieceTokenizer(vocab, do_lower_case=do_lower_case)
        assert ours.encode_batch(lines) == [
            theirs.convert_tokens_to_ids(theirs.tokenize(line)) for line in lines]
        assert any(ours.unk_id in ids for ids in ours.encode_batch(lines))


@pytest.mark.parametrize("random_seed, do_lower_case, do_whole_word_mask, num_outputs", [
    (12345, True, False, 1),
    (1, True, False, 3),
    (2, False, False, 2),
    (3, True, True, 2),
])
def test_one_input_file_gives_the_reference_instances(corpus, tmp_path, random_seed,
                                                      do_lower_case, do_whole_word_mask,
                                                      num_outputs):
    _, files, vocab = corpus
    options = dict(random_seed=random_seed, do_lower_case=do_lower_case,
                   do_whole_word_mask=do_whole_word_mask)
    instances, theirs = _reference_arrays(
        files[2:], vocab, [str(tmp_path / f"ref-{i}") for i in range(num_outputs)],
        **options)
    ours = _our_arrays(files[2:], vocab,
                       [str(tmp_path / f"ours-{i}") for i in range(num_outputs)], **options)
    _assert_equal(ours, theirs)
    # The test covers the interesting cases: random and actual next segments,
    # each replacement kind, [UNK]s.
    labels = np.concatenate([part["next_sentence_labels"] for part in ours])
    assert 0 < labels.sum() < len(labels)
    assert sum("[UNK]" in instance.tokens for instance in instances) > 0
    assert any(set(instance.masked_lm_labels) - {"[MASK]"} for instance in instances)


def _rows(arrays):
    """The rows of a file's arrays as sortable tuples."""
    return sorted(tuple(tuple(arrays[name][row].tolist())
                        for name in features.UNPACKED_FEATURE_NAMES)
                  for row in range(len(arrays["input_ids"])))


def test_several_input_files_give_the_reference_run_once_per_file(corpus, tmp_path):
    _, files, vocab = corpus
    (ours,) = _our_arrays(files, vocab, [str(tmp_path / "ours")], random_seed=5)
    theirs = {}
    for index, path in enumerate(files):
        _, (arrays,) = _reference_arrays([path], vocab, [str(tmp_path / f"ref-{index}")],
                                         random_seed=5 + index)
        theirs = {name: np.concatenate([theirs[name], values]) if theirs else values
                  for name, values in arrays.items()}
    assert _rows(ours) == _rows(theirs)
    # One pool of all files (the reference's multi-file run) is another draw.
    _, (pooled,) = _reference_arrays(files, vocab, [str(tmp_path / "pooled")],
                                     random_seed=5)
    assert _rows(pooled) != _rows(ours)
