"""Masked-LM masking in TensorFlow ops, drawn afresh each time a sequence is read.

Letters: S sequence length, P max_predictions_per_seq (masked-LM slots),
V vocabulary size (largest id + 1).

Pre-training straight from text masks every sequence again each epoch. The
mask is a pure function of ``(seed, epoch, index)``, where ``index`` is the
sequence's place in the epoch's stream: a run that is killed and re-reads the
stream draws exactly the masks the uninterrupted run drew. Only stateless
random ops are used, so `DynamicMasker` runs inside ``tf.data`` (``map``, the
``tf.data`` service) and eagerly with the same results, bit for bit.

The rules are google-research/bert's ``create_pretraining_data.py`` (the
offline `pretraining_instances` module draws them from Python's ``random``):

1. Candidates: every token except [CLS], [SEP] and the padding (id 0) after
   the sequence. The length counts the non-padding tokens, specials included.
2. ``n = min(P, max(1, round(length x masked_lm_prob)))`` with Python's
   ``round`` (half to even) of the float64 product: `num_to_predict`, made
   into a table of the S + 1 lengths.
3. Without whole-word masking, n candidates chosen uniformly at random (fewer
   when there are fewer candidates).
4. With whole-word masking, a candidate whose vocabulary entry starts with
   ``##`` joins the word of the candidate before it (the first candidate
   always starts a word). The words are visited in a random order and a word
   is taken when it still fits (``taken + len(word) <= n``); one that does not
   fit is skipped and the visit goes on, so a word is never split and a word
   longer than n is never taken.
5. Each chosen position is replaced by [MASK] 80 % of the time, kept 10 %, and
   replaced by an id drawn uniformly from [0, V) 10 %.
6. ``masked_lm_positions`` ascending, ``masked_lm_ids`` the original ids there,
   ``masked_lm_weights`` 1.0 on the used slots; unused slots hold 0.

The draws come from a different generator than the offline tool's, so the
masks are distributed as BERT's, not equal to them.

A worked example (S = 12, P = 3, masked_lm_prob = 0.25: 9 tokens, 2 masked;
`a`, `b` are pieces of the two segments, [CLS] = 2, [SEP] = 3, [MASK] = 4;
seed 1, epoch 0, index 16, the example of `DynamicMasker`)::

    tokens               [CLS] a1 a2 a3 [SEP] b1 b2 b3 [SEP]
    input_ids (read)         2 11 12 13     3 21 22 23     3  0  0  0
    input_ids (masked)       2 11 12  4     3 21  4 23     3  0  0  0
    masked_lm_positions      3  6  0
    masked_lm_ids           13 22  0
    masked_lm_weights       1. 1. 0.
"""

import dataclasses
import numbers
from typing import Mapping

import numpy as np
import tensorflow as tf

#: Scores are random bits below 2**62 with the index in the lowest bits, so
#: that no two are equal; -1 marks what is not to be chosen.
_SCORE_LIMIT_BITS = 62
#: Each chosen position draws a decile: [MASK] below 8, kept at 8, a random id
#: at 9 (80 %, 10 %, 10 %).
_MASK_DECILES = 8
_RANDOM_ID_DECILE = 9
_SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[MASK]")


@dataclasses.dataclass(frozen=True)
class MaskingOptions:
    """How sequences are masked: google-research/bert's flags of the same
    meaning. Checked on construction.

    Attributes:
      max_predictions_per_seq: P >= 1, the masked-LM slots of a sequence.
      masked_lm_prob: share of the tokens (special ones counted) to mask, in
        (0, 1].
      whole_word_masking: mask all pieces of a word together (BERT's
        ``do_whole_word_mask``).

    Raises:
      ValueError: quoting the value, for an option the masking cannot use.
    """

    max_predictions_per_seq: int
    masked_lm_prob: float = 0.15
    whole_word_masking: bool = False

    def __post_init__(self):
        predictions = self.max_predictions_per_seq
        if (isinstance(predictions, bool) or not isinstance(predictions, numbers.Integral)
                or predictions < 1):
            raise ValueError(f"max_predictions_per_seq must be an integer >= 1, got "
                             f"{predictions!r}")
        prob = self.masked_lm_prob
        # Written so that NaN fails too.
        if (isinstance(prob, bool) or not isinstance(prob, numbers.Real)
                or not 0.0 < prob <= 1.0):
            raise ValueError(f"masked_lm_prob must be a number in (0, 1], got {prob!r}")
        if not isinstance(self.whole_word_masking, bool):
            raise ValueError(f"whole_word_masking must be True or False, got "
                             f"{self.whole_word_masking!r}")


def num_to_predict(length: int, options: MaskingOptions) -> int:
    """How many tokens a sequence of `length` non-padding tokens has masked
    (at most; fewer when it has fewer candidates).

    ``min(P, max(1, round(length * masked_lm_prob)))``, with Python's round
    (half to even) of the float64 product, as google-research/bert.

    >>> num_to_predict(30, MaskingOptions(20, 0.15))  # 30 x 0.15 = 4.5
    4
    """
    return min(options.max_predictions_per_seq,
               max(1, int(round(length * options.masked_lm_prob))))


def _random_bits(seed, epoch, index, num_rows: int, seq_length: int):
    """[num_rows, S] int64 random bits, a pure function of (seed, epoch, index).

    Philox-4x32-10 (a counter-based generator) keyed by the seed, its 128-bit
    counter ``index * 2**64 + epoch * 2**32 + block``: one op, and disjoint
    counter ranges for every (epoch, index) of a seed, so the draws of
    different epochs and sequences are independent.
    """
    key = tf.bitcast(tf.reshape(tf.cast(seed, tf.int64), [1]), tf.uint64)  # [1]
    counter = tf.bitcast(tf.stack([tf.bitwise.left_shift(tf.cast(epoch, tf.int64), 32),
                                   tf.cast(index, tf.int64)]), tf.uint64)  # [2] (low, high)
    return tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=[num_rows, seq_length], key=key, counter=counter, alg=1,  # 1: Philox
        dtype=tf.int64)  # [num_rows, S]


class DynamicMasker:
    """Masks unpacked sequences in tf.data: a pure function of (seed, epoch, index).

    All draws of a sequence come from one Philox-4x32-10 op keyed by `seed`,
    with the 128-bit counter ``index * 2**64 + epoch * 2**32`` (plus the
    block drawn): every (epoch, index) of a seed reads its own counter range,
    so draws are independent across epochs and sequences (epochs are told
    apart modulo 2**32). The masks do not depend on the ``tf.data`` options
    (parallel calls, prefetching) or on what was read before.

    Args:
      vocab: token -> id, as `packed_bert_tf.data.tokenization.load_vocab`
        returns it; must hold [CLS], [SEP] and [MASK]. V = largest id + 1.
      options: how to mask.

    Raises:
      ValueError: naming the missing special token, or quoting a negative id.

    Example (the module's worked example), in ``tf.data``:

    >>> vocab = {t: i for i, t in enumerate(
    ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(25)])}
    >>> masker = DynamicMasker(vocab, MaskingOptions(max_predictions_per_seq=3,
    ...                                              masked_lm_prob=0.25))
    >>> ids = tf.constant([2, 11, 12, 13, 3, 21, 22, 23, 3, 0, 0, 0], tf.int32)
    >>> epoch = tf.constant(0, tf.int64)
    >>> dataset = tf.data.Dataset.range(17).map(lambda index: masker(ids, 1, epoch, index))
    >>> for name, value in list(dataset)[16].items():
    ...     print(f"{name:19}", value.numpy().tolist())
    input_ids           [2, 11, 12, 4, 3, 21, 4, 23, 3, 0, 0, 0]
    masked_lm_positions [3, 6, 0]
    masked_lm_ids       [13, 22, 0]
    masked_lm_weights   [1.0, 1.0, 0.0]
    """

    def __init__(self, vocab: Mapping[str, int], options: MaskingOptions):
        missing = [token for token in _SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise ValueError(f"vocabulary of {len(vocab)} tokens has no {missing[0]} "
                             f"token (masking needs {', '.join(_SPECIAL_TOKENS)})")
        smallest = min(vocab.values())
        if smallest < 0:
            raise ValueError(f"vocabulary ids must be >= 0, got {smallest}")
        self.options = options
        self.vocab_size = max(vocab.values()) + 1
        self.cls_id, self.sep_id, self.mask_id = (vocab[token] for token in _SPECIAL_TOKENS)
        # Tables by id: one gather per sequence instead of a comparison per
        # special token.
        is_candidate = np.ones(self.vocab_size, np.bool_)  # [V]
        is_candidate[[0, self.cls_id, self.sep_id]] = False
        self._is_candidate = tf.constant(is_candidate)  # [V]
        self._is_continuation = None
        if options.whole_word_masking:
            is_continuation = np.zeros(self.vocab_size, np.bool_)  # [V]
            is_continuation[[index for token, index in vocab.items()
                             if token.startswith("##")]] = True
            self._is_continuation = tf.constant(is_continuation)  # [V]

    def __call__(self, input_ids, seed, epoch, index) -> dict:
        """Masks one sequence.

        Args:
          input_ids: int [S], ``[CLS] A [SEP] B [SEP]`` then 0-padding, ids in
            [0, V). S must be static (as parsed records have it).
          seed: int64 scalar (or Python int), the run's seed.
          epoch: int64 scalar, the pass over the data.
          index: int64 scalar, the sequence's index within the epoch's stream.

        Returns:
          A dict: ``input_ids`` int32 [S] (masked), ``masked_lm_positions``
          int32 [P], ``masked_lm_ids`` int32 [P] and ``masked_lm_weights``
          float32 [P], with static shapes.

        Raises:
          ValueError: quoting the shape, when `input_ids` is not one sequence of
            static length.
        """
        input_ids = tf.convert_to_tensor(input_ids)
        if input_ids.shape.rank != 1 or input_ids.shape[0] is None:
            raise ValueError(f"input_ids must be one sequence of static length [S], got "
                             f"shape {input_ids.shape}")
        input_ids = tf.cast(input_ids, tf.int32)  # [S]
        seq_length = input_ids.shape[0]
        slots = self.options.max_predictions_per_seq
        score_bits, decile_bits, random_id_bits = tf.unstack(
            _random_bits(seed, epoch, index, 3, seq_length))  # 3 x [S]

        is_candidate = tf.gather(self._is_candidate, input_ids)  # [S]
        # By table, so that the count is Python's to the bit.
        count = tf.gather(
            [num_to_predict(length, self.options) for length in range(seq_length + 1)],
            tf.math.count_nonzero(input_ids))
        scores = _unique_scores(score_bits)  # [S]
        if self._is_continuation is None:
            chosen = _choose_tokens(is_candidate, scores, count, slots)  # [S]
        else:
            chosen = _choose_words(is_candidate,
                                   tf.gather(self._is_continuation, input_ids),
                                   scores, count)  # [S]

        # The chosen positions in ascending order: the largest S - position
        # first (0 for the rest). top_k is cheaper here than scatter_nd.
        reversed_positions, _ = tf.math.top_k(
            tf.where(chosen, tf.range(seq_length, 0, -1), 0),
            k=min(slots, seq_length))  # [min(P, S)]
        used = reversed_positions > 0  # [min(P, S)]
        masked_lm_positions = tf.where(used, seq_length - reversed_positions, 0)
        masked_lm_ids = tf.where(used, tf.gather(input_ids, masked_lm_positions), 0)
        masked_lm_weights = tf.cast(used, tf.float32)
        if slots > seq_length:  # more slots than tokens
            padding = [[0, slots - seq_length]]
            masked_lm_positions, masked_lm_ids, masked_lm_weights = (
                tf.pad(values, padding) for values in
                (masked_lm_positions, masked_lm_ids, masked_lm_weights))  # [P]

        # One draw per position (not per slot): no gather or scatter needed.
        # The modulo biases are below 2**-40.
        decile = tf.math.floormod(decile_bits, 10)  # [S]
        random_ids = tf.cast(tf.math.floormod(random_id_bits, self.vocab_size), tf.int32)  # [S]
        masked_ids = tf.where(
            chosen & (decile < _MASK_DECILES), self.mask_id,
            tf.where(chosen & tf.equal(decile, _RANDOM_ID_DECILE), random_ids,
                     input_ids))  # [S]
        return {"input_ids": masked_ids,
                "masked_lm_positions": masked_lm_positions,
                "masked_lm_ids": masked_lm_ids,
                "masked_lm_weights": masked_lm_weights}


def _unique_scores(bits):
    """Random scores in [0, 2**62), all different: random bits above, the
    index below.

    Args:
      bits: [S] int64, random.

    Returns:
      [S] int64. Order by score is a uniform random permutation but for ties
      of the random part, which the index breaks (at S = 512 the random part
      has 53 bits: one sequence in about 2**36 has a tie).
    """
    seq_length = bits.shape[0]
    index_bits = max(1, (seq_length - 1).bit_length())
    random_part = tf.bitwise.bitwise_and(bits, 2**(_SCORE_LIMIT_BITS - index_bits) - 1)  # [S]
    return tf.bitwise.bitwise_or(tf.bitwise.left_shift(random_part, index_bits),
                                 tf.range(seq_length, dtype=tf.int64))  # [S]


def _choose_tokens(is_candidate, scores, count, slots: int):
    """The `count` candidates of highest score, loop-free.

    Args:
      is_candidate: [S] bool.
      scores: [S] int64 >= 0, all different.
      count: int32 scalar in [1, min(slots, S)].
      slots: P.

    Returns:
      [S] bool, min(count, candidates) positions set.
    """
    seq_length = is_candidate.shape[0]
    scores = tf.where(is_candidate, scores, -1)  # [S]
    top_scores, _ = tf.math.top_k(scores, k=min(slots, seq_length))  # [min(P, S)]
    # The count-th score; -1 when there are fewer candidates: all are taken.
    threshold = tf.gather(top_scores, count - 1)
    return is_candidate & (scores >= threshold)  # [S]


def _choose_words(is_candidate, is_continuation, scores, count):
    """Whole words, visited in the order of `scores`, each taken if it still fits.

    The greedy visit (``if taken + length <= count: take``) runs in rounds,
    each vectorised over the words. A round looks at the words after the one
    that last failed and no longer than the room left (longer ones would be
    skipped anyway: the room only shrinks), takes the longest prefix of them
    that fits, and stops at the first that does not. Each round takes a word,
    and the word that fails is shorter each round, so there are at most
    min(count, longest word) + 1 rounds: one or two on text.

    Args:
      is_candidate: [S] bool.
      is_continuation: [S] bool, the token is a ``##`` piece.
      scores: [S] int64 >= 0, all different, word w's score at index w.
      count: int32 scalar.

    Returns:
      [S] bool, at most `count` positions set, whole words only.
    """
    seq_length = is_candidate.shape[0]
    candidate_int = tf.cast(is_candidate, tf.int32)  # [S]
    # As BERT's cand_indexes: a piece joins the previous candidate's word, the
    # first candidate starts one whatever it is.
    is_first = is_candidate & tf.equal(tf.cumsum(candidate_int), 1)  # [S]
    starts = is_candidate & (is_first | ~is_continuation)  # [S]
    word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32)) - 1, 0)  # [S], W words
    word_length = tf.math.unsorted_segment_sum(candidate_int, word, seq_length)  # [S]
    # Words in a random order; the indexes W.. (no word, length 0) come last
    # and are made too long ever to be looked at.
    _, order = tf.math.top_k(tf.where(word_length > 0, scores, -1), k=seq_length)  # [S]
    length = tf.gather(word_length, order)  # [S]
    length = tf.where(length > 0, length, seq_length + 1)  # [S]
    visit = tf.range(seq_length)  # [S]

    def round_(taken, room, start, _):
        looked_at = (visit >= start) & (length <= room)  # [S]
        total = tf.cumsum(tf.where(looked_at, length, 0))  # [S]
        fits = looked_at & (total <= room)  # [S]
        fails = looked_at & (total > room)  # [S]
        room -= tf.reduce_sum(tf.where(fits, length, 0))
        start = tf.argmax(tf.cast(fails, tf.int32), output_type=tf.int32) + 1
        return taken | fits, room, start, tf.reduce_any(fails) & (room > 0)

    taken, _, _, _ = tf.while_loop(
        lambda taken, room, start, more: more, round_,
        (tf.zeros([seq_length], tf.bool), count, tf.constant(0), tf.constant(True)))
    visited_at = tf.math.invert_permutation(order)  # [S] by word index
    return is_candidate & tf.gather(taken, tf.gather(visited_at, word))  # [S]
