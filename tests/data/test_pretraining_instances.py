"""google-research/bert's instance creation: structure, masking, next sentences, seeds."""

import doctest
import random
import time

import numpy as np
import pytest

from packed_bert_tf.data.preparation import pretraining_instances
from packed_bert_tf.data.preparation.pretraining_instances import (
    InstanceOptions,
    create_training_instances,
)
from packed_bert_tf.data.records import record_files, record_format
from tests.reference_bert import create_pretraining_data

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
WORDS_PER_DOCUMENT = 10_000


def make_corpus(num_documents, sentences_per_document, sentence_lengths, seed=0):
    """Documents whose token ids say where they come from: document d holds
    ids 5 + d * WORDS_PER_DOCUMENT + k, k increasing through the document."""
    rng = np.random.default_rng(seed)
    vocab = {token: index for index, token in enumerate(
        SPECIALS + [f"d{d}w{k}" for d in range(num_documents)
                    for k in range(WORDS_PER_DOCUMENT)])}
    documents = []
    for d in range(num_documents):
        next_id = 5 + d * WORDS_PER_DOCUMENT
        sentences = []
        for _ in range(int(rng.integers(*sentences_per_document, endpoint=True))):
            length = int(rng.integers(*sentence_lengths, endpoint=True))
            sentences.append(list(range(next_id, next_id + length)))
            next_id += length
        assert next_id <= 5 + (d + 1) * WORDS_PER_DOCUMENT
        documents.append(sentences)
    return documents, vocab


def document_of(token_ids):
    return (np.asarray(token_ids) - 5) // WORDS_PER_DOCUMENT


def unmasked(arrays):
    """input_ids with the original tokens put back at the masked positions."""
    ids = arrays["input_ids"].astype(np.int64)
    rows, slots = np.nonzero(arrays["masked_lm_weights"])
    ids[rows, arrays["masked_lm_positions"][rows, slots]] = \
        arrays["masked_lm_ids"][rows, slots]
    return ids


def check_instances(arrays, *, max_seq_length, max_predictions_per_seq, masked_lm_prob,
                    vocab_size):
    """Every instance is [CLS] A [SEP] B [SEP] with consistent features."""
    lengths = record_format.RecordFormat.unpacked(
        max_seq_length, max_predictions_per_seq).feature_lengths()
    assert list(arrays) == list(record_format.UNPACKED_FEATURE_NAMES)
    num = len(arrays["input_ids"])
    assert num > 0
    for name, width in lengths.items():
        assert arrays[name].shape == (num, width), name
        assert arrays[name].dtype == (np.float32 if name == "masked_lm_weights"
                                      else np.int32), name
    original = unmasked(arrays)
    inputs = arrays["input_ids"]
    columns = np.arange(max_seq_length)
    for row in range(num):
        length = int(arrays["input_mask"][row].sum())
        assert 5 <= length <= max_seq_length
        np.testing.assert_array_equal(arrays["input_mask"][row], columns < length)
        tokens = original[row, :length]
        assert (original[row, length:] == PAD).all() and (inputs[row, length:] == 0).all()
        assert tokens[0] == CLS and (tokens == CLS).sum() == 1
        separators = np.flatnonzero(tokens == SEP)
        assert len(separators) == 2 and separators[1] == length - 1
        middle = separators[0]
        assert 2 <= middle <= length - 3  # A and B each have a token
        assert not np.isin(tokens, [PAD, MASK]).any()
        np.testing.assert_array_equal(
            arrays["segment_ids"][row],
            (columns > middle) & (columns < length))
        count = int(arrays["masked_lm_weights"][row].sum())
        np.testing.assert_array_equal(arrays["masked_lm_weights"][row],
                                      np.arange(max_predictions_per_seq) < count)
        positions = arrays["masked_lm_positions"][row]
        assert (positions[count:] == 0).all()
        assert (arrays["masked_lm_ids"][row, count:] == 0).all()
        positions = positions[:count]
        assert (np.diff(positions) > 0).all()
        assert (positions >= 1).all() and (positions < length - 1).all()
        assert middle not in positions
        wanted = min(max_predictions_per_seq,
                     max(1, int(round(length * masked_lm_prob))))
        assert count == min(wanted, length - 3)  # length - 3 candidates
        unmasked_positions = np.setdiff1d(np.arange(length), positions)
        np.testing.assert_array_equal(inputs[row, unmasked_positions],
                                      tokens[unmasked_positions])
        shown = inputs[row, positions]
        assert ((shown >= 0) & (shown < vocab_size)).all()
    assert set(np.unique(arrays["next_sentence_labels"])) <= {0, 1}


@pytest.mark.parametrize("max_seq_length, max_predictions_per_seq, masked_lm_prob", [
    (128, 20, 0.15), (32, 5, 0.15), (8, 3, 0.5), (5, 1, 0.15), (64, 80, 1.0)])
def test_instances_are_well_formed(max_seq_length, max_predictions_per_seq,
                                   masked_lm_prob):
    documents, vocab = make_corpus(12, (1, 40), (1, 15))
    arrays = create_training_instances(
        documents, vocab, InstanceOptions(
            max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
            masked_lm_prob=masked_lm_prob, dupe_factor=2, random_seed=7))
    check_instances(arrays, max_seq_length=max_seq_length,
                    max_predictions_per_seq=max_predictions_per_seq,
                    masked_lm_prob=masked_lm_prob, vocab_size=len(vocab))


def test_segments_are_real_text_and_the_label_says_whether_b_follows_a():
    documents, vocab = make_corpus(20, (2, 30), (1, 20), seed=1)
    arrays = create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=48, max_predictions_per_seq=8, masked_lm_prob=0.15,
        dupe_factor=3, random_seed=3))
    original = unmasked(arrays)
    labels = arrays["next_sentence_labels"][:, 0]
    assert 0 < labels.sum() < len(labels)
    for row, tokens in enumerate(original):
        length = int(arrays["input_mask"][row].sum())
        middle = int(np.flatnonzero(tokens[:length] == SEP)[0])
        segment_a, segment_b = tokens[1:middle], tokens[middle + 1:length - 1]
        # Each segment is a run of one document's text, in order (truncation
        # only cuts ends).
        for segment in (segment_a, segment_b):
            assert len(set(document_of(segment))) == 1
            assert (np.diff(segment) > 0).all()
        if labels[row] == 0:   # actual next: B continues A in A's document
            assert document_of(segment_a[:1]) == document_of(segment_b[:1])
            assert segment_b[0] > segment_a[-1]
        else:                  # random next: B from another document
            assert document_of(segment_a[:1]) != document_of(segment_b[:1])


def test_the_80_10_10_replacement():
    documents, vocab = make_corpus(30, (20, 60), (3, 20), seed=2)
    arrays = create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15,
        dupe_factor=8, random_seed=5))
    rows, slots = np.nonzero(arrays["masked_lm_weights"])
    assert len(rows) > 20_000
    shown = arrays["input_ids"][rows, arrays["masked_lm_positions"][rows, slots]]
    labels = arrays["masked_lm_ids"][rows, slots]
    as_mask = np.mean(shown == MASK)
    kept = np.mean(shown == labels)
    random_token = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.015
    assert abs(kept - 0.1) < 0.012
    assert abs(random_token - 0.1) < 0.012
    # Random replacements are drawn from the whole vocabulary.
    replaced = shown[(shown != MASK) & (shown != labels)]
    assert len(np.unique(document_of(replaced[replaced >= 5]))) > 20


def test_about_half_of_the_next_sentences_are_random():
    documents, vocab = make_corpus(40, (60, 120), (2, 12), seed=3)
    arrays = create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15,
        dupe_factor=6, random_seed=11))
    labels = arrays["next_sentence_labels"][:, 0]
    assert len(labels) > 1800
    # A little above one half: a chunk of one sentence always takes a random B,
    # and the sentences a random B leaves unused make further instances.
    assert 0.47 < labels.mean() < 0.6


def test_a_seed_gives_identical_arrays_and_bytes_and_other_seeds_differ(tmp_path):
    documents, vocab = make_corpus(10, (1, 30), (1, 15), seed=4)
    options = dict(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15,
                   dupe_factor=2)
    first = create_training_instances(documents, vocab,
                                      InstanceOptions(random_seed=42, **options))
    again = create_training_instances(documents, vocab,
                                      InstanceOptions(random_seed=42, **options))
    other = create_training_instances(documents, vocab,
                                      InstanceOptions(random_seed=43, **options))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert any(first[name].shape != other[name].shape
               or not np.array_equal(first[name], other[name]) for name in first)
    paths = [tmp_path / name for name in ("first", "again", "other")]
    for path, arrays in zip(paths, (first, again, other)):
        record_files.write_arrays(str(path), arrays)
    assert paths[0].read_bytes() == paths[1].read_bytes() != paths[2].read_bytes()


def test_the_input_documents_are_not_changed():
    documents, vocab = make_corpus(5, (1, 10), (1, 9), seed=5)
    before = [[list(sentence) for sentence in document] for document in documents]
    create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=16, max_predictions_per_seq=4, masked_lm_prob=0.3,
        dupe_factor=2))
    assert documents == before


def test_dupe_factor_and_short_seq_prob():
    documents, vocab = make_corpus(20, (10, 40), (2, 15), seed=6)

    def run(**options):
        return create_training_instances(documents, vocab, InstanceOptions(
            max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15,
            random_seed=1, **options))

    once, thrice = run(dupe_factor=1), run(dupe_factor=3)
    assert 2.6 < len(thrice["input_ids"]) / len(once["input_ids"]) < 3.4
    full = run(dupe_factor=2, short_seq_prob=0.0)["input_mask"].sum(1).mean()
    short = run(dupe_factor=2, short_seq_prob=1.0)["input_mask"].sum(1).mean()
    assert short < 0.8 * full


def test_one_document_pairs_with_itself():
    documents, vocab = make_corpus(1, (5, 5), (3, 3))
    arrays = create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=16, max_predictions_per_seq=3, masked_lm_prob=0.15,
        dupe_factor=4))
    check_instances(arrays, max_seq_length=16, max_predictions_per_seq=3,
                    masked_lm_prob=0.15, vocab_size=len(vocab))
    assert arrays["next_sentence_labels"].sum() > 0


def test_whole_word_masking_masks_every_piece_of_a_word():
    words = [["un", "##aff", "##able"], ["run", "##ning"], ["the"], ["cat", "##s"],
             ["a"], ["pack", "##ed", "##ness"]]
    vocab = {token: index for index, token in enumerate(
        SPECIALS + sorted({piece for word in words for piece in word}))}
    rng = random.Random(0)
    documents = [[[vocab[piece] for _ in range(rng.randint(2, 6))
                   for piece in rng.choice(words)] for _ in range(rng.randint(2, 12))]
                 for _ in range(30)]
    continuation = np.array([token.startswith("##") for token in vocab])
    arrays = create_training_instances(documents, vocab, InstanceOptions(
        max_seq_length=40, max_predictions_per_seq=12, masked_lm_prob=0.2,
        dupe_factor=3, do_whole_word_mask=True))
    original = unmasked(arrays)
    whole_words = 0
    for row, tokens in enumerate(original):
        length = int(arrays["input_mask"][row].sum())
        count = int(arrays["masked_lm_weights"][row].sum())
        positions = set(arrays["masked_lm_positions"][row, :count].tolist())
        assert count <= min(12, max(1, round(length * 0.2)))
        # Candidates in order, [CLS] and [SEP] left out: a masked piece's word
        # is masked from its first piece to its last.
        candidates = [i for i in range(1, length - 1) if tokens[i] != SEP]
        for before, after in zip(candidates, candidates[1:]):
            if continuation[tokens[after]]:
                assert (before in positions) == (after in positions)
                whole_words += after in positions
    assert whole_words > 100


def test_truncate_seq_pair_cuts_the_longer_segment_at_both_ends():
    rng = random.Random(0)
    fronts = backs = 0
    for _ in range(200):
        a, b = list(range(10)), list(range(100, 104))
        pretraining_instances.truncate_seq_pair(a, b, 9, rng)
        assert len(a) + len(b) == 9 and b == [100, 101, 102, 103]
        assert a == list(range(a[0], a[0] + 5))
        fronts += a[0] > 0
        backs += a[-1] < 9
    assert fronts > 50 and backs > 50
    a, b = [1, 2], [3, 4]
    pretraining_instances.truncate_seq_pair(a, b, 3, random.Random(0))
    assert a == [1, 2] and len(b) == 1   # B on ties


def test_truncate_seq_pair_is_the_reference_draw_for_draw():
    # google-research/bert's own function, from bert-tensorflow.
    reference = create_pretraining_data()
    sizes = random.Random(1)
    for trial in range(300):
        a = list(range(sizes.randint(1, 300)))
        b = list(range(1000, 1000 + sizes.randint(1, 300)))
        limit = sizes.randint(2, 400)
        ours, ours_rng = (a.copy(), b.copy()), random.Random(trial)
        theirs, their_rng = (a.copy(), b.copy()), random.Random(trial)
        pretraining_instances.truncate_seq_pair(*ours, limit, ours_rng)
        reference.truncate_seq_pair(*theirs, limit, their_rng)
        assert ours == theirs, trial
        assert ours_rng.random() == their_rng.random()  # as many draws


def test_a_long_one_line_document_takes_linear_time():
    # One sentence of 400,000 tokens, paired with itself: the reference's
    # truncation (deleting from the front of a list) takes minutes here.
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    line = list(range(1000, 401_000))  # ids need not be in the vocabulary
    start = time.process_time()  # CPU, not wall-clock: the machine may be shared
    arrays = create_training_instances(
        [[line]], vocab, InstanceOptions(
            max_seq_length=128, max_predictions_per_seq=20, masked_lm_prob=0.15,
            short_seq_prob=0.0, dupe_factor=2, random_seed=7))
    assert time.process_time() - start < 10
    assert arrays["input_ids"].shape == (2, 128)
    assert (arrays["input_mask"].sum(axis=1) == 128).all()
    for tokens in unmasked(arrays):  # A and B: each a run of the line
        first_b = list(tokens).index(vocab["[SEP]"]) + 1
        for segment in (tokens[1:first_b - 1], tokens[first_b:-1]):
            assert (np.diff(segment) == 1).all() and segment[0] >= 1000
        assert (first_b - 2, 128 - first_b - 1) == (63, 62)  # B cut first on ties


@pytest.mark.parametrize("options, message", [
    (dict(max_seq_length=4), "max_seq_length must be >= 5"),
    (dict(max_predictions_per_seq=0), "max_predictions_per_seq must be >= 1, got 0"),
    (dict(masked_lm_prob=0.0), r"masked_lm_prob must be in \(0, 1\], got 0.0"),
    (dict(masked_lm_prob=1.5), r"masked_lm_prob must be in \(0, 1\], got 1.5"),
    (dict(short_seq_prob=-0.1), r"short_seq_prob must be in \[0, 1\]"),
    (dict(dupe_factor=0), "dupe_factor must be >= 1, got 0"),
])
def test_bad_options_are_quoted(options, message):
    documents, vocab = make_corpus(2, (2, 3), (2, 3))
    arguments = dict(max_seq_length=16, max_predictions_per_seq=2, masked_lm_prob=0.15,
                     dupe_factor=1)
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        create_training_instances(documents, vocab, InstanceOptions(**arguments))


def test_no_documents_or_no_special_tokens_is_an_error():
    _, vocab = make_corpus(1, (1, 1), (1, 1))
    options = dict(max_seq_length=16, max_predictions_per_seq=2, masked_lm_prob=0.15)
    with pytest.raises(ValueError, match="no documents"):
        create_training_instances([[], [[]]], vocab, InstanceOptions(**options))
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        create_training_instances([[[5, 6]]], {"[CLS]": 0, "[SEP]": 1, "a": 5},
                                  InstanceOptions(**options))


def test_reading_documents(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("One.\n  Two.  \n\n\n \nThree.\n\nFour.\n", encoding="utf-8")
    second.write_text("Five.\n\nSix.\nSeven.\n\n", encoding="utf-8")
    # As BERT reads: a file without a final blank line runs on into the next.
    assert pretraining_instances.read_text_documents([str(first), str(second)]) == [
        ["One.", "Two."], ["Three."], ["Four.", "Five."], ["Six.", "Seven."]]


@pytest.mark.parametrize("content, message", [
    (b"", "no documents"),
    (b"\n \n\t\n", "no documents"),
    (b"Fine.\nAlso fine.\nBad \xff byte.\n", ":3: not UTF-8 text"),
])
def test_unreadable_input_names_the_file(tmp_path, content, message):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("A sentence.\n", encoding="utf-8")
    bad.write_bytes(content)
    with pytest.raises(ValueError) as error:
        pretraining_instances.read_text_documents([str(good), str(bad)])
    assert str(error.value).startswith(str(bad))
    assert message in str(error.value)


def test_tokenize_documents_drops_empty_sentences_and_documents():
    def encode_batch(texts):
        return [[len(word) for word in text.split() if word != "x"] for text in texts]

    documents = [["ab c", "x"], ["x", "x"], ["abc"]]
    assert pretraining_instances.tokenize_documents(documents, encode_batch,
                                                    batch_size=2) == [[[2, 1]], [[3]]]


def test_split_round_robin():
    arrays = {"input_ids": np.arange(14).reshape(7, 2),
              "next_sentence_labels": np.arange(7).reshape(7, 1)}
    parts = pretraining_instances.split_round_robin(arrays, 3)
    assert [part["next_sentence_labels"][:, 0].tolist() for part in parts] == [
        [0, 3, 6], [1, 4], [2, 5]]
    assert parts[1]["input_ids"].tolist() == [[2, 3], [8, 9]]


def test_docstring_examples():
    results = doctest.testmod(pretraining_instances)
    assert results.attempted > 0 and results.failed == 0


@pytest.mark.parametrize("size", [0, 1, 2, 3, 5, 129, 4096, 4097, 10_000])
def test_shuffle_is_random_shuffle_draw_for_draw(size):
    ours, theirs = list(range(size)), list(range(size))
    our_rng, their_rng = random.Random(size), random.Random(size)
    pretraining_instances.shuffle(ours, our_rng)
    their_rng.shuffle(theirs)
    assert ours == theirs
    assert our_rng.getstate() == their_rng.getstate()


def test_shuffled_prefix_is_random_shuffle_draw_for_draw():
    # Every size a masker shuffles (S = 128 gives at most 125 candidates) and
    # more; counts below, at and above the size.
    for size in [*range(0, 301), 4096, 4097, 5000]:
        for count in {0, 1, 2, size // 3, 20, max(size - 1, 0), size, size + 5}:
            for seed in range(3):
                our_rng, their_rng = random.Random(seed), random.Random(seed)
                theirs = list(range(size))
                their_rng.shuffle(theirs)
                prefix = pretraining_instances.shuffled_prefix(list(range(size)), count,
                                                               our_rng)
                assert prefix == theirs[:count], (size, count, seed)
                assert our_rng.getstate() == their_rng.getstate(), (size, count, seed)


def test_shuffle_is_random_shuffle_for_many_sizes_and_seeds():
    for size in range(0, 301):
        for seed in range(5):
            our_rng, their_rng = random.Random(seed), random.Random(seed)
            ours, theirs = list(range(size)), list(range(size))
            pretraining_instances.shuffle(ours, our_rng)
            their_rng.shuffle(theirs)
            assert ours == theirs and our_rng.getstate() == their_rng.getstate()


def test_randbelow_is_randint_draw_for_draw():
    sizes = random.Random(3)
    bounds = [1, 2, 3, 4, 5, 7, 8, 9, 125, 126, 127, 128, 129, 8000, 2**31, 2**32 + 1,
              *(sizes.randint(1, 10**6) for _ in range(200))]
    for n in bounds:
        for low in (0, 1, 2):
            our_rng, their_rng = random.Random(n), random.Random(n)
            getrandbits = our_rng.getrandbits
            ours = [low + pretraining_instances.randbelow(getrandbits, n)
                    for _ in range(20)]
            theirs = [their_rng.randint(low, low + n - 1) for _ in range(20)]
            assert ours == theirs, n
            assert our_rng.getstate() == their_rng.getstate(), n


def test_instance_buffer_flushes_give_the_same_arrays(monkeypatch):
    documents, vocab = make_corpus(12, (2, 9), (3, 40))
    kwargs = dict(max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15,
                  dupe_factor=3, random_seed=5)
    unflushed = create_training_instances(documents, vocab, InstanceOptions(**kwargs))
    # Flushing into int32 chunks after (about) every instance and a few instances.
    for flush_tokens in (1, 100):
        monkeypatch.setattr(pretraining_instances._InstanceBuffer, "FLUSH_TOKENS",
                            flush_tokens)
        flushed = create_training_instances(documents, vocab, InstanceOptions(**kwargs))
        assert list(flushed) == list(unflushed)
        for name, values in unflushed.items():
            assert flushed[name].dtype == values.dtype, name
            np.testing.assert_array_equal(flushed[name], values, err_msg=name)


def test_cyclic_gc_is_paused_while_making_instances_and_restored():
    import gc

    seen = []
    original = pretraining_instances._instances_from_document

    def spy(*args):
        seen.append(gc.isenabled())
        return original(*args)

    documents, vocab = make_corpus(3, (2, 4), (3, 10))
    was_enabled = gc.isenabled()
    try:
        pretraining_instances._instances_from_document = spy
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            create_training_instances(documents, vocab, InstanceOptions(
                max_seq_length=32, max_predictions_per_seq=4, masked_lm_prob=0.15,
                dupe_factor=1))
            assert gc.isenabled() == enabled
        assert seen and not any(seen)
    finally:
        pretraining_instances._instances_from_document = original
        (gc.enable if was_enabled else gc.disable)()
    assert seen and not any(seen)
