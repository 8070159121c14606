"""Masked-LM masking in TensorFlow ops: purity, counts, the 80/10/10 split, whole words."""

import doctest
import math

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs import dynamic_masking
from packed_bert_tf.data.inputs.dynamic_masking import DynamicMasker, MaskingOptions

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK = range(5)
WORDS = range(5, 25)  # ids of whole words
PIECES = range(25, 30)  # ids of "##" pieces
VOCAB = {token: index for index, token in enumerate(
    SPECIALS + [f"w{i}" for i in WORDS] + [f"##p{i}" for i in PIECES])}
V = len(VOCAB)
SEED = 12345
OUTPUT_NAMES = ["input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"]


def sequence(segment_a, segment_b, seq_length):
    """[CLS] A [SEP] B [SEP], 0-padded to seq_length, int32."""
    tokens = [CLS, *segment_a, SEP, *segment_b, SEP]
    assert len(tokens) <= seq_length
    return np.array(tokens + [PAD] * (seq_length - len(tokens)), np.int32)


def random_sequences(rng, num, seq_length, *, length=None, piece_share=0.0):
    """[num, S] sequences of random words (and pieces, at `piece_share`), of
    `length` tokens or a random length in [5, S]."""
    rows = []
    for _ in range(num):
        num_tokens = length or int(rng.integers(5, seq_length, endpoint=True))
        body = np.where(rng.random(num_tokens - 3) < piece_share,
                        rng.choice(PIECES, num_tokens - 3), rng.choice(WORDS, num_tokens - 3))
        len_a = int(rng.integers(1, num_tokens - 3))
        rows.append(sequence(body[:len_a], body[len_a:], seq_length))
    return np.stack(rows)


def mask_all(masker, sequences, *, seed=SEED, epoch=0, indices=None, parallel=False):
    """The masker's outputs for the rows of `sequences` [N, S] in tf.data, row
    n read as sequence `indices[n]` (default n); numpy arrays [N, ...]."""
    indices = np.arange(len(sequences)) if indices is None else np.asarray(indices)
    dataset = tf.data.Dataset.from_tensor_slices(
        (np.asarray(sequences, np.int32), indices.astype(np.int64), np.arange(len(indices))))

    def function(ids, index, row):
        return row, masker(ids, seed, tf.constant(epoch, tf.int64), index)

    dataset = (dataset.map(function, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
               if parallel else dataset.map(function))
    rows, outputs = [], {name: [] for name in OUTPUT_NAMES}
    for row, output in dataset.batch(512):
        rows.append(row.numpy())
        for name in OUTPUT_NAMES:
            outputs[name].append(output[name].numpy())
    order = np.argsort(np.concatenate(rows))  # parallel calls may finish out of order
    return {name: np.concatenate(values)[order] for name, values in outputs.items()}


def chosen_mask(outputs, seq_length):
    """[N, S] bool: the positions in use in masked_lm_positions."""
    num = len(outputs["masked_lm_weights"])
    chosen = np.zeros((num, seq_length), bool)
    rows, slots = np.nonzero(outputs["masked_lm_weights"])
    chosen[rows, outputs["masked_lm_positions"][rows, slots]] = True
    return chosen


def bert_words(ids):
    """google-research/bert's cand_indexes: position lists of the words."""
    words = []
    for position, token in enumerate(ids):
        if token in (PAD, CLS, SEP):
            continue
        if words and token in PIECES:
            words[-1].append(position)
        else:
            words.append([position])
    return words


def check_outputs(outputs, sequences, options):
    """The invariants of every masked sequence, checked row by row."""
    seq_length = sequences.shape[1]
    slots = options.max_predictions_per_seq
    assert outputs["input_ids"].dtype == np.int32 and outputs["input_ids"].shape == sequences.shape
    for name, dtype in [("masked_lm_positions", np.int32), ("masked_lm_ids", np.int32),
                        ("masked_lm_weights", np.float32)]:
        assert outputs[name].dtype == dtype and outputs[name].shape == (len(sequences), slots)
    chosen = chosen_mask(outputs, seq_length)
    for row, ids in enumerate(sequences):
        weights = outputs["masked_lm_weights"][row]
        num_masked = int(weights.sum())
        length = int(np.count_nonzero(ids))
        candidates = np.count_nonzero((ids != PAD) & (ids != CLS) & (ids != SEP))
        count = min(slots, max(1, round(length * options.masked_lm_prob)))
        # Weights 1 exactly on the first num_masked slots, the rest all 0.
        np.testing.assert_array_equal(weights, (np.arange(slots) < num_masked).astype(np.float32))
        positions = outputs["masked_lm_positions"][row]
        assert np.all(np.diff(positions[:num_masked]) > 0), positions
        assert not positions[num_masked:].any()
        assert not outputs["masked_lm_ids"][row][num_masked:].any()
        np.testing.assert_array_equal(outputs["masked_lm_ids"][row][:num_masked],
                                      ids[positions[:num_masked]])
        assert not np.isin(ids[positions[:num_masked]], [PAD, CLS, SEP]).any()
        # Outside the chosen positions nothing changes.
        np.testing.assert_array_equal(outputs["input_ids"][row][~chosen[row]], ids[~chosen[row]])
        if options.whole_word_masking:
            assert num_masked <= count
            for word in bert_words(ids):
                taken = chosen[row, word]
                assert taken.all() or not taken.any(), (ids, word, positions)
                # Greedy: a word left out did not fit in the room left at the end.
                if not taken.any():
                    assert len(word) > count - num_masked, (ids, word, positions)
        else:
            assert num_masked == min(count, candidates), (ids, positions)
    return chosen


@pytest.fixture(scope="module")
def masker():
    return DynamicMasker(VOCAB, MaskingOptions(max_predictions_per_seq=10))


def test_docstrings():
    assert doctest.testmod(dynamic_masking).failed == 0


def test_same_key_same_output_eager_tf_data_and_tf_function(masker):
    sequences = random_sequences(np.random.default_rng(0), 64, 48)
    indices = np.arange(64) * 1000 + 7
    in_order = mask_all(masker, sequences, epoch=3, indices=indices)
    # Parallel calls finishing out of order draw the same masks.
    np.testing.assert_equal(mask_all(masker, sequences, epoch=3, indices=indices, parallel=True),
                            in_order)
    # A resumed run that reads the stream from sequence 40 on draws what the
    # uninterrupted run drew there.
    resumed = mask_all(masker, sequences[40:], epoch=3, indices=indices[40:])
    np.testing.assert_equal(resumed, {name: values[40:] for name, values in in_order.items()})
    compiled = tf.function(masker)
    for row in (0, 1, 63):
        args = (tf.constant(SEED, tf.int64), tf.constant(3, tf.int64),
                tf.constant(indices[row], tf.int64))
        eager = masker(sequences[row], *args)
        graph = compiled(tf.constant(sequences[row]), *args)
        for name in OUTPUT_NAMES:
            assert eager[name].dtype == graph[name].dtype
            np.testing.assert_array_equal(eager[name].numpy(), in_order[name][row])
            np.testing.assert_array_equal(graph[name].numpy(), in_order[name][row])
    # A Python int seed and int32 epoch and index are the same key.
    python_key = masker(sequences[1], SEED, tf.constant(3, tf.int32),
                        tf.constant(indices[1], tf.int32))
    for name in OUTPUT_NAMES:
        np.testing.assert_array_equal(python_key[name].numpy(), in_order[name][1])


def test_static_shapes_in_tf_data():
    masker = DynamicMasker(VOCAB, MaskingOptions(7, whole_word_masking=True))
    dataset = tf.data.Dataset.range(3).map(
        lambda index: masker(tf.zeros([40], tf.int32), SEED, tf.constant(0, tf.int64), index))
    assert {name: (spec.shape.as_list(), spec.dtype)
            for name, spec in dataset.element_spec.items()} == {
        "input_ids": ([40], tf.int32), "masked_lm_positions": ([7], tf.int32),
        "masked_lm_ids": ([7], tf.int32), "masked_lm_weights": ([7], tf.float32)}


def hypergeometric_overlap_sigma(count, candidates, num):
    """Mean and standard error of the mean overlap of two independent random
    `count`-subsets of `candidates` items, over `num` pairs."""
    mean = count * count / candidates
    variance = (count * (count / candidates) * ((candidates - count) / candidates)
                * ((candidates - count) / (candidates - 1)))
    return mean, math.sqrt(variance / num)


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_other_epoch_index_or_seed_draws_another_mask(whole_word_masking):
    options = MaskingOptions(20, whole_word_masking=whole_word_masking)
    masker = DynamicMasker(VOCAB, options)
    num, seq_length = 500, 128
    # The same sequence everywhere: only the key changes.
    sequences = np.repeat(random_sequences(np.random.default_rng(1), 1, seq_length,
                                           length=seq_length), num, axis=0)
    base = chosen_mask(mask_all(masker, sequences), seq_length)
    others = {"epoch": chosen_mask(mask_all(masker, sequences, epoch=1), seq_length),
              "index": chosen_mask(mask_all(masker, sequences, indices=np.arange(num) + num),
                                   seq_length),
              "seed": chosen_mask(mask_all(masker, sequences, seed=SEED + 1), seq_length)}
    # 2,000 keys give (nearly) 2,000 different masks: no key repeats another's
    # draws, e.g. epoch 1 at index n those of epoch 0 at index n + 1.
    masks = np.concatenate([base, *others.values()])
    assert len({row.tobytes() for row in masks}) >= len(masks) - 2
    for what, chosen in others.items():
        assert (chosen != base).any(axis=1).mean() >= 0.99, what
        if not whole_word_masking:
            # Independent draws: the overlap of the two masks is hypergeometric.
            mean, sigma = hypergeometric_overlap_sigma(19, seq_length - 3, num)
            overlap = (chosen & base).sum(axis=1).mean()
            assert abs(overlap - mean) < 5 * sigma, (what, overlap, mean, sigma)


@pytest.mark.parametrize("length, masked_lm_prob, slots, expected", [
    (30, 0.15, 20, 4),   # 4.5: half to even, down
    (70, 0.15, 20, 10),  # 10.5: down
    (50, 0.15, 20, 8),   # 7.5: up
    (90, 0.15, 20, 14),  # 13.5: up
    (10, 0.15, 20, 2),   # 1.5
    (128, 0.15, 20, 19),  # 19.2
    (5, 0.1, 20, 1),     # 0.5 rounds to 0: max(1, ...)
    (6, 0.15, 20, 1),    # 0.9
    (128, 0.5, 20, 20),  # 64: min(P, ...)
    (9, 0.25, 3, 2),     # 2.25
    (7, 1.0, 20, 4),     # 7, but only 4 candidates: all of them
])
def test_exact_counts(length, masked_lm_prob, slots, expected):
    options = MaskingOptions(slots, masked_lm_prob)
    masker = DynamicMasker(VOCAB, options)
    sequences = random_sequences(np.random.default_rng(length), 300, 160, length=length)
    outputs = mask_all(masker, sequences)
    np.testing.assert_array_equal(outputs["masked_lm_weights"].sum(axis=1), expected)
    check_outputs(outputs, sequences, options)


def test_num_to_predict_is_pythons_round():
    for slots in (1, 20, 76):
        for masked_lm_prob in (0.1, 0.15, 0.2, 0.25, 1 / 3, 0.5, 1.0):
            options = MaskingOptions(slots, masked_lm_prob)
            for length in range(513):
                assert dynamic_masking.num_to_predict(length, options) == min(
                    slots, max(1, round(length * masked_lm_prob)))


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_invariants_over_random_sequences(whole_word_masking):
    options = MaskingOptions(12, 0.2, whole_word_masking=whole_word_masking)
    sequences = random_sequences(np.random.default_rng(2), 2000, 64, piece_share=0.4)
    check_outputs(mask_all(DynamicMasker(VOCAB, options), sequences), sequences, options)


def test_every_candidate_equally_likely():
    masker = DynamicMasker(VOCAB, MaskingOptions(10))
    num, seq_length = 4000, 48
    sequences = np.repeat(random_sequences(np.random.default_rng(3), 1, seq_length,
                                           length=40), num, axis=0)
    chosen = chosen_mask(mask_all(masker, sequences), seq_length)
    candidates = (sequences[0] != PAD) & (sequences[0] != CLS) & (sequences[0] != SEP)
    assert not chosen[:, ~candidates].any()
    share = 6 / candidates.sum()  # round(40 x 0.15) = 6 of 37
    sigma = math.sqrt(share * (1 - share) / num)
    frequencies = chosen[:, candidates].mean(axis=0)
    assert np.all(np.abs(frequencies - share) < 5 * sigma), frequencies


def test_80_10_10_split_and_random_ids_over_the_vocabulary():
    masker = DynamicMasker(VOCAB, MaskingOptions(10))
    sequences = random_sequences(np.random.default_rng(4), 2100, 64, length=64)
    outputs = mask_all(masker, sequences)
    rows, slots = np.nonzero(outputs["masked_lm_weights"])
    assert len(rows) >= 20_000
    original = outputs["masked_lm_ids"][rows, slots]
    new = outputs["input_ids"][rows, outputs["masked_lm_positions"][rows, slots]]
    num = len(new)
    # A random id may happen to be [MASK] or the original (1/V each).
    for what, observed, share in [("[MASK]", new == MASK, 0.8 + 0.1 / V),
                                  ("kept", new == original, 0.1 + 0.1 / V),
                                  ("random", (new != MASK) & (new != original), 0.1 * (V - 2) / V)]:
        sigma = math.sqrt(share * (1 - share) / num)
        assert abs(observed.mean() - share) < 5 * sigma, (what, observed.mean(), share, sigma)
    # Each id v is drawn with chance 0.1 / V at every position where it is
    # neither [MASK] nor the original (where it would not be seen as random).
    replaced = new[(new != MASK) & (new != original)]
    counts = np.bincount(replaced, minlength=V)
    assert len(counts) == V  # ids in [0, V)
    for v in range(V):
        expected = 0.1 / V * np.count_nonzero(original != v) * (v != MASK)
        assert abs(counts[v] - expected) <= 5 * math.sqrt(expected) + 1e-9, (v, counts[v], expected)


def test_vocab_size_is_the_largest_id_plus_one():
    vocab = {**VOCAB, "w99": 99}  # ids 30..98 unused
    masker = DynamicMasker(vocab, MaskingOptions(10, 1.0))
    assert masker.vocab_size == 100
    sequences = random_sequences(np.random.default_rng(5), 1000, 16, length=16)
    outputs = mask_all(masker, sequences)
    assert outputs["input_ids"].max() >= 90 and outputs["input_ids"].min() == PAD


def python_greedy(word_lengths, scores, count):
    """BERT's visit: words by decreasing score, taken while they still fit."""
    taken, total = set(), 0
    for word in sorted(range(len(word_lengths)), key=lambda w: -scores[w]):
        if total + word_lengths[word] <= count:
            taken.add(word)
            total += word_lengths[word]
    return taken


def random_word_sequence(rng, seq_length):
    """A sequence of words of 1 to 12 pieces, cut anywhere (so that A or B
    may start with a piece)."""
    body = []
    while len(body) < seq_length:
        num_pieces = int(rng.integers(1, 13)) if rng.random() < 0.3 else int(rng.integers(1, 3))
        body += [int(rng.choice(WORDS))] + [int(rng.choice(PIECES))] * (num_pieces - 1)
    start = int(rng.integers(0, 3))
    body = body[start:start + int(rng.integers(2, seq_length - 3, endpoint=True))]
    len_a = int(rng.integers(1, len(body)))
    return sequence(body[:len_a], body[len_a:], seq_length)


def test_whole_word_rounds_equal_the_greedy_visit():
    rng = np.random.default_rng(6)
    seq_length, cases = 40, []
    for _ in range(1500):
        cases.append((random_word_sequence(rng, seq_length),
                      rng.permutation(seq_length).astype(np.int64), int(rng.integers(1, 17))))
    ids, scores, counts = (np.stack(values) for values in zip(*cases))
    is_continuation = np.isin(ids, PIECES)
    is_candidate = ~np.isin(ids, [PAD, CLS, SEP])
    dataset = tf.data.Dataset.from_tensor_slices(
        (is_candidate, is_continuation, scores, counts.astype(np.int32))).map(
        dynamic_masking._choose_words)
    chosen = np.concatenate([batch.numpy() for batch in dataset.batch(512)])
    for row in range(len(cases)):
        words = bert_words(ids[row])
        expected = python_greedy([len(word) for word in words], scores[row], counts[row])
        expected_positions = sorted(p for w in expected for p in words[w])
        assert np.flatnonzero(chosen[row]).tolist() == expected_positions, (
            ids[row], scores[row], counts[row])


def test_whole_word_pieces_join_across_sep_and_a_leading_piece_starts_a_word():
    # Words as BERT's cand_indexes: {1}, {2, 3, 5} (## after [SEP] joins the
    # last word of A), {6}; in the second, the leading piece starts {1, 2}.
    options = MaskingOptions(5, 0.5, whole_word_masking=True)
    masker = DynamicMasker(VOCAB, options)
    rows = np.stack([sequence([5, 6, 25], [26, 7], 10), sequence([25, 26], [7, 8], 10)] * 200)
    outputs = mask_all(masker, rows)
    chosen = chosen_mask(outputs, 10)
    first, second = chosen[0::2], chosen[1::2]
    # count = round(8 x 0.5) = 4 and round(7 x 0.5) = 4 (half to even).
    np.testing.assert_array_equal(first[:, 2], first[:, 3])
    np.testing.assert_array_equal(first[:, 2], first[:, 5])
    np.testing.assert_array_equal(second[:, 1], second[:, 2])
    assert first[:, 2].any() and not first[:, 2].all()
    check_outputs(outputs, rows, options)


def test_whole_word_longer_than_count_is_never_taken():
    options = MaskingOptions(3, 1.0, whole_word_masking=True)
    masker = DynamicMasker(VOCAB, options)
    # A word of 4 pieces and three one-piece words, count 3.
    rows = np.stack([sequence([5, 25, 26, 27], [6, 7, 8], 10)] * 300)
    outputs = mask_all(masker, rows)
    chosen = chosen_mask(outputs, 10)
    assert not chosen[:, 1:5].any()
    np.testing.assert_array_equal(chosen[:, 6:9], True)
    check_outputs(outputs, rows, options)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_predictions_per_seq": 0}, "max_predictions_per_seq must be an integer >= 1, got 0"),
    ({"max_predictions_per_seq": 2.0},
     "max_predictions_per_seq must be an integer >= 1, got 2.0"),
    ({"max_predictions_per_seq": 20, "masked_lm_prob": 0.0},
     "masked_lm_prob must be a number in (0, 1], got 0.0"),
    ({"max_predictions_per_seq": 20, "masked_lm_prob": 1.5},
     "masked_lm_prob must be a number in (0, 1], got 1.5"),
    ({"max_predictions_per_seq": 20, "masked_lm_prob": float("nan")},
     "masked_lm_prob must be a number in (0, 1], got nan"),
    ({"max_predictions_per_seq": 20, "whole_word_masking": "yes"},
     "whole_word_masking must be True or False, got 'yes'"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError) as raised:
        MaskingOptions(**kwargs)
    assert str(raised.value) == message


@pytest.mark.parametrize("vocab, message", [
    ({token: index for token, index in VOCAB.items() if token != "[MASK]"},
     "vocabulary of 29 tokens has no [MASK] token (masking needs [CLS], [SEP], [MASK])"),
    ({**VOCAB, "bad": -1}, "vocabulary ids must be >= 0, got -1"),
])
def test_bad_vocabulary(vocab, message):
    with pytest.raises(ValueError) as raised:
        DynamicMasker(vocab, MaskingOptions(20))
    assert str(raised.value) == message


def test_input_must_be_one_sequence_of_static_length(masker):
    with pytest.raises(ValueError) as raised:
        masker(np.zeros([2, 8], np.int32), SEED, 0, 0)
    assert str(raised.value) == ("input_ids must be one sequence of static length [S], "
                                 "got shape (2, 8)")
    with pytest.raises(ValueError, match=r"got shape \(None,\)$"):
        tf.function(masker).get_concrete_function(
            tf.TensorSpec([None], tf.int32), SEED, tf.TensorSpec([], tf.int64),
            tf.TensorSpec([], tf.int64))


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_more_slots_than_tokens_and_empty_rows(whole_word_masking):
    options = MaskingOptions(10, 1.0, whole_word_masking=whole_word_masking)
    rows = np.stack([sequence([5, 25, 6], [7], 8), np.zeros(8, np.int32)] * 20)
    outputs = mask_all(DynamicMasker(VOCAB, options), rows)
    assert outputs["masked_lm_positions"].shape == (40, 10)
    # count = min(10, 7) = 7 but only 4 candidates; nothing in an empty row.
    np.testing.assert_array_equal(outputs["masked_lm_weights"].sum(axis=1), [4, 0] * 20)
    check_outputs(outputs, rows, options)
