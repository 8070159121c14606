"""create_pretraining_data against google-research/bert's tool.

The reference is google-research/bert's ``create_pretraining_data.py`` and its
pure-Python ``tokenization.py`` as the `bert-tensorflow` package ships them
(the ``reference`` extra; `benchmarks.google_bert` imports them in this
process). Both tools run here on the same small text with the same small
vocabulary, flags and seed, and must give the same instances: tokens
(``input_ids``), segment ids, ``is_random_next``, masked positions and
labels, and the same rows in each round-robin output file.

What matches and what does not:

* Tokenization: identical, sentence for sentence (`tokenizers`' BertNormalizer
  + BertPreTokenizer + WordPiece against BasicTokenizer + WordpieceTokenizer,
  with BERT's 200-character word limit); tested on text with accents,
  CJK, control characters, punctuation and long words.
* One input file: the same instances, row for row, for any seed, cased or
  not (our library makes the same draws from the same ``random.Random`` in
  the same order).
* Whole-word masking: the package predates google-research/bert's
  ``--do_whole_word_mask`` (it masks word pieces independently), and the
  package index has no release of the tool with it (tf-models-official's
  descendant masks n-grams, with other draws). Our whole-word instances are
  therefore compared with the reference only where google-research/bert's
  whole-word masking makes the draws of its piece masking: on text in which
  no word splits into pieces (each word is then one candidate of one token).
  On text with pieces the test checks what whole-word masking must do (every
  piece of a masked word masked) and that it masks otherwise than pieces.
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

from benchmarks.google_bert import reference_modules
from data_prep.create_pretraining_data import create_pretraining_data
from packed_bert_tf.data import tokenization
from packed_bert_tf.data.preparation import pretraining_instances
from packed_bert_tf.data.preparation.pretraining_instances import InstanceOptions
from packed_bert_tf.data.records import record_files, record_format

pytestmark = pytest.mark.slow

try:
    reference, reference_tokenization = reference_modules()
except ImportError as error:  # bert-tensorflow: the reference extra
    pytest.skip(f"{error}: pip install -e '.[reference]'", allow_module_level=True)

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
# Listed words with a suffix: mostly two pieces ("token" "##s").
SUFFIXED_WORDS = [word + suffix for word in WORDS for suffix in ("s", "ed", "ing", "er")]
FORMAT = record_format.RecordFormat.unpacked(48, 8)
OPTIONS = dict(max_seq_length=48, max_predictions_per_seq=8, masked_lm_prob=0.15,
               short_seq_prob=0.1, dupe_factor=3)


def _sentence(rng, odd_fraction, odd_words):
    words = [rng.choice(odd_words if rng.random() < odd_fraction else WORDS)
             for _ in range(rng.randint(2, 14))]
    return " ".join(words).capitalize() + rng.choice([".", "!", "?", " ..."])


def _write_text(path, rng, num_documents, odd_fraction=0.15, odd_words=ODD_WORDS):
    documents = ["\n".join(_sentence(rng, odd_fraction, odd_words) for _ in range(rng.randint(1, 9)))
                 for _ in range(num_documents)]
    path.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Three files of text with odd words (word pieces, [UNK]s), one of listed
    words only (no word splits into pieces), one with many words of several
    pieces, and the vocabulary."""
    root = tmp_path_factory.mktemp("reference_bert")
    rng = random.Random(7)
    files = [_write_text(root / f"part-{i}.txt", rng, 12 + 4 * i) for i in range(3)]
    whole_words = _write_text(root / "whole-words.txt", rng, 20, odd_fraction=0)
    pieces = _write_text(root / "pieces.txt", rng, 20, odd_fraction=0.5,
                         odd_words=SUFFIXED_WORDS)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *WORDS, *PIECES, ".", "!",
                                "?", "(", ")", "'", "-", "$", "5", "0"]) + "\n",
                     encoding="utf-8")
    return dict(files=files, whole_words=whole_words, pieces=pieces, vocab=str(vocab))


def _reference_arrays(input_files, vocab, output_files, *, random_seed,
                      do_lower_case=True):
    """The reference's instances, written by the reference and read back."""
    tokenizer = reference_tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
    instances = reference.create_training_instances(
        input_files, tokenizer, OPTIONS["max_seq_length"], OPTIONS["dupe_factor"],
        OPTIONS["short_seq_prob"], OPTIONS["masked_lm_prob"],
        OPTIONS["max_predictions_per_seq"], random.Random(random_seed))
    reference.write_instance_to_example_files(
        instances, tokenizer, OPTIONS["max_seq_length"],
        OPTIONS["max_predictions_per_seq"], output_files)
    return instances, [record_files.read_arrays(path, FORMAT) for path in output_files]


def _our_arrays(input_files, vocab, output_files, *, random_seed, do_lower_case=True,
                do_whole_word_mask=False, num_workers=1):
    create_pretraining_data(
        ",".join(input_files), output_files, vocab_file=vocab, vocab_size=None,
        do_lower_case=do_lower_case, num_workers=num_workers,
        instance_options=InstanceOptions(random_seed=random_seed,
                                         do_whole_word_mask=do_whole_word_mask, **OPTIONS))
    return [record_files.read_arrays(path, FORMAT) for path in output_files]


def _assert_equal(ours, theirs):
    assert len(ours) == len(theirs)
    for our_file, their_file in zip(ours, theirs):
        assert list(our_file) == list(their_file) == list(record_format.UNPACKED_FEATURE_NAMES)
        for name in our_file:
            np.testing.assert_array_equal(our_file[name], their_file[name], err_msg=name)


def _masked(arrays):
    """Per row: (masked positions, the tokens before masking)."""
    rows = []
    for row in range(len(arrays["input_ids"])):
        count = int(arrays["masked_lm_weights"][row].sum())
        positions = arrays["masked_lm_positions"][row, :count]
        tokens = arrays["input_ids"][row].copy()
        tokens[positions] = arrays["masked_lm_ids"][row, :count]
        rows.append((positions, tokens))
    return rows


def test_tokenization_is_identical(corpus):
    files, vocab = corpus["files"], corpus["vocab"]
    lines = [sentence for document in pretraining_instances.read_text_documents(files)
             for sentence in document]
    lines += ODD_WORDS + [" ".join(ODD_WORDS), "Hello\u3000World", "\u2028line"]
    for do_lower_case in (True, False):
        theirs = reference_tokenization.FullTokenizer(vocab, do_lower_case=do_lower_case)
        ours = tokenization.WordPieceTokenizer(vocab, do_lower_case=do_lower_case)
        assert ours.encode_batch(lines) == [
            theirs.convert_tokens_to_ids(theirs.tokenize(line)) for line in lines]
        assert any(ours.unk_id in ids for ids in ours.encode_batch(lines))


@pytest.mark.parametrize("random_seed, do_lower_case, num_outputs", [
    (12345, True, 1),
    (1, True, 3),
    (2, False, 2),
])
def test_one_input_file_gives_the_reference_instances(corpus, tmp_path, random_seed,
                                                      do_lower_case, num_outputs):
    files, vocab = corpus["files"], corpus["vocab"]
    options = dict(random_seed=random_seed, do_lower_case=do_lower_case)
    instances, theirs = _reference_arrays(
        files[2:], vocab, [str(tmp_path / f"ref-{i}") for i in range(num_outputs)],
        **options)
    ours = _our_arrays(files[2:], vocab,
                       [str(tmp_path / f"ours-{i}") for i in range(num_outputs)], **options)
    _assert_equal(ours, theirs)
    # The test covers the interesting cases: random and actual next segments,
    # [UNK]s, and each replacement of a masked token ([MASK], itself, a random
    # token).
    labels = np.concatenate([part["next_sentence_labels"] for part in ours])
    assert 0 < labels.sum() < len(labels)
    assert sum("[UNK]" in instance.tokens for instance in instances) > 0
    mask_id = reference_tokenization.load_vocab(vocab)["[MASK]"]
    replacements = {"mask": 0, "kept": 0, "random": 0}
    for part in ours:
        for row, (positions, tokens) in enumerate(_masked(part)):
            for position in positions:
                given = part["input_ids"][row, position]
                kind = ("mask" if given == mask_id else
                        "kept" if given == tokens[position] else "random")
                replacements[kind] += 1
    assert min(replacements.values()) > 0, replacements


@pytest.mark.parametrize("random_seed", [3, 4])
def test_whole_word_masking_without_word_pieces_gives_the_reference_instances(
        corpus, tmp_path, random_seed):
    # google-research/bert's --do_whole_word_mask makes each word one
    # candidate: a word without continuation pieces ("##...") is one token,
    # and its draws are then those of masking each piece (the reference).
    whole_words, vocab = corpus["whole_words"], corpus["vocab"]
    _, theirs = _reference_arrays([whole_words], vocab,
                                  [str(tmp_path / "ref-0"), str(tmp_path / "ref-1")],
                                  random_seed=random_seed)
    ours = _our_arrays([whole_words], vocab,
                       [str(tmp_path / "ours-0"), str(tmp_path / "ours-1")],
                       random_seed=random_seed, do_whole_word_mask=True)
    _assert_equal(ours, theirs)
    continuation = [token.startswith("##") for token in
                    reference_tokenization.load_vocab(vocab)]
    assert not any(continuation[token] for part in ours
                   for _, tokens in _masked(part) for token in tokens)
    assert sum(len(part["input_ids"]) for part in ours) > 100


def test_whole_word_masking_with_word_pieces_masks_whole_words(corpus, tmp_path):
    # What the reference cannot show: where words split into pieces, every
    # piece of a masked word is masked, and the masks differ from piece
    # masking (ours, the reference's instances by the tests above).
    pieces, vocab = corpus["pieces"], corpus["vocab"]
    (ours,) = _our_arrays([pieces], vocab, [str(tmp_path / "ours")], random_seed=3,
                          do_whole_word_mask=True)
    (by_piece,) = _our_arrays([pieces], vocab, [str(tmp_path / "by-piece")],
                              random_seed=3)
    assert not np.array_equal(ours["masked_lm_positions"],
                              by_piece["masked_lm_positions"])
    vocab_ids = reference_tokenization.load_vocab(vocab)
    continuation = [token.startswith("##") for token in vocab_ids]
    whole_words = 0
    for row, (positions, tokens) in enumerate(_masked(ours)):
        masked = set(positions.tolist())
        length = int(ours["input_mask"][row].sum())
        assert len(masked) <= min(OPTIONS["max_predictions_per_seq"],
                                  max(1, round(length * OPTIONS["masked_lm_prob"])))
        # Candidates in order, [CLS] and [SEP] left out (a piece that starts
        # segment B after truncation joins the last word of A, as in
        # google-research/bert): a masked piece's word is masked whole.
        candidates = [i for i in range(1, length - 1) if tokens[i] != vocab_ids["[SEP]"]]
        for before, after in zip(candidates, candidates[1:]):
            if continuation[tokens[after]]:
                assert (before in masked) == (after in masked)
                whole_words += after in masked
    assert whole_words > 100


def _rows(arrays):
    """The rows of a file's arrays as sortable tuples."""
    return sorted(tuple(tuple(arrays[name][row].tolist())
                        for name in record_format.UNPACKED_FEATURE_NAMES)
                  for row in range(len(arrays["input_ids"])))


def test_several_input_files_give_the_reference_run_once_per_file(corpus, tmp_path):
    files, vocab = corpus["files"], corpus["vocab"]
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
