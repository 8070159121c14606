"""Masked-LM / next-sentence training instances, as google-research/bert makes them.

The algorithm of google-research/bert's ``create_pretraining_data.py`` (the
one MLPerf's BERT data is made with), with the same random draws from the same
``random.Random(seed)`` in the same order, so the same token ids and seed give
the same instances. Instances come out as arrays in the unpacked record format
(`record_format.UNPACKED_FEATURE_NAMES`), ready for `record_files.RecordWriter`.

Letters: N instances, S = max_seq_length, P = max_predictions_per_seq.

Input: documents, each a list of sentences, each a list of token ids (a text
file has one sentence per line and a blank line between documents).

For each of ``dupe_factor`` passes over the (shuffled) documents, each
document is cut into instances:

1. The target length is ``max_num_tokens = S - 3`` (room for [CLS] and two
   [SEP]), or with probability ``short_seq_prob`` a random length in
   ``[2, max_num_tokens]``.
2. Sentences are gathered until they reach the target length (or the
   document ends). A random number of them, at least one, form segment A.
3. With probability 0.5, or always when only one sentence was gathered,
   segment B is a random span of sentences from another random document (up
   to the remaining target length) and the sentences gathered but not used are
   put back; otherwise B is the rest of the gathered sentences.
4. The pair is cut to ``max_num_tokens``, one token at a time from the longer
   segment (B on ties), from its front or back at random.
5. ``[CLS] A [SEP] B [SEP]`` with segment ids 0 (through the first [SEP]) then 1.
6. Masked LM: ``n = min(P, max(1, round(length x masked_lm_prob)))`` of the
   tokens other than [CLS] and [SEP], chosen at random (length counts the
   special tokens), each replaced by [MASK] 80 % of the time, kept 10 %, and
   replaced by a random vocabulary entry 10 %. Positions are sorted.

All instances are then shuffled. ``next_sentence_labels`` is 1 when B is the
random next segment (``is_random_next``), 0 when it is the actual next.

A worked example (S = 12, P = 3, masked_lm_prob = 0.25: 9 tokens, 2 masked;
`a`, `b` are pieces of A and B, `M` = [MASK] = 4, [CLS] = 2, [SEP] = 3)::

    tokens               [CLS] a1 a2  M [SEP] b1  M b3 [SEP]
    input_ids                2 11 12  4     3 21  4 23     3  0  0  0
    input_mask               1  1  1  1     1  1  1  1     1  0  0  0
    segment_ids              0  0  0  0     0  1  1  1     1  0  0  0
    masked_lm_positions      3  6  0
    masked_lm_ids           13 22  0        (a3 and b2, the original ids)
    masked_lm_weights       1. 1. 0.
    next_sentence_labels     0              (B is A's actual next sentence)
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from packed_bert_tf.data.records.record_format import UNPACKED_FEATURE_NAMES
from packed_bert_tf.data.text_files import utf8_lines
from packed_bert_tf.garbage_collection import cyclic_gc_paused

#: A document: sentences, each a list of token ids.
Document = list[list[int]]


def read_text_documents(input_files: Sequence[str]) -> list[list[str]]:
    """Documents of text files: one sentence per line, blank lines between documents.

    Read as google-research/bert reads them: lines are stripped, a blank line
    ends a document, documents without a line are dropped, and a file that
    does not end with a blank line continues its last document into the next
    file.

    Raises:
      ValueError: naming the file and line of text that is not UTF-8, or a
        file that holds no sentence at all.
      OSError: when a file cannot be read.
    """
    documents: list[list[str]] = [[]]
    for path in input_files:
        num_sentences = 0
        with open(path, "rb") as reader:
            for line in utf8_lines(reader, path):
                line = line.strip()
                if line:
                    documents[-1].append(line)
                    num_sentences += 1
                elif documents[-1]:
                    documents.append([])
        if not num_sentences:
            raise ValueError(
                f"{path}: no documents (expected one sentence per line and a blank "
                f"line between documents, got an empty or blank file)")
    return [document for document in documents if document]


def tokenize_documents(documents: Sequence[Sequence[str]], encode_batch, *,
                       batch_size: int = 8192) -> list[Document]:
    """Token ids of each sentence, dropping sentences and documents left empty.

    `encode_batch` maps a list of strings to a list of id lists, e.g.
    `tokenization.WordPieceTokenizer.encode_batch`.
    """
    flat = [sentence for document in documents for sentence in document]
    ids: list[list[int]] = []
    for start in range(0, len(flat), batch_size):
        ids.extend(encode_batch(flat[start:start + batch_size]))
    tokenized: list[Document] = []
    position = 0
    for document in documents:
        sentences = [sentence for sentence in ids[position:position + len(document)]
                     if sentence]
        position += len(document)
        if sentences:
            tokenized.append(sentences)
    return tokenized


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are made: google-research/bert's ``create_pretraining_data.py``
    flags of the same names (and its defaults). Checked on construction:
    ValueError, quoting the value, for options the algorithm cannot use.

    Attributes:
      max_seq_length: S, >= 5.
      max_predictions_per_seq: P, the most masked tokens per instance.
      masked_lm_prob: share of the tokens (special ones counted) to mask, in
        (0, 1].
      short_seq_prob: probability of a shorter random target length.
      dupe_factor: passes over the data, each with new random pairs and masks.
      random_seed: seed of the one `random.Random` all draws come from.
      do_whole_word_mask: mask all pieces of a word together.
    """

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    random_seed: int = 12345
    do_whole_word_mask: bool = False

    def __post_init__(self):
        if self.max_seq_length < 5:
            raise ValueError(f"max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with "
                             f"a token in A and in B), got {self.max_seq_length}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got "
                             f"{self.max_predictions_per_seq}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be >= 1, got {self.dupe_factor}")


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random) -> None:
    """Cuts the pair in place to ``max_num_tokens`` tokens, one token at a time
    from the front or back (at random) of the longer list (B on ties).

    Note:
      google-research/bert's ``truncate_seq_pair``, draw for draw: one
      ``rng.random()`` per token cut, in the same order. Which list loses the
      next token depends on the lengths only and the draw only picks its end,
      so counting the cuts at each end and slicing once gives the same lists
      in O(len(A) + len(B)) (deleting from the front of a list one token at a
      time is quadratic: hours on a one-line document of megabytes).
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    front_a = front_b = 0
    draw = rng.random
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            len_a -= 1
            front_a += draw() < 0.5
        else:
            len_b -= 1
            front_b += draw() < 0.5
    tokens_a[:] = tokens_a[front_a:front_a + len_a]
    tokens_b[:] = tokens_b[front_b:front_b + len_b]


class _Masker:
    """The masked-LM step of one run: vocabulary facts and options."""

    def __init__(self, vocab: Mapping[str, int], masked_lm_prob: float,
                 max_predictions_per_seq: int, do_whole_word_mask: bool,
                 max_seq_length: int):
        self.cls_id, self.sep_id, self.mask_id = (
            vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"])
        # BERT's vocab_words: every entry in file order (special tokens too).
        self.vocab_ids = list(vocab.values())
        # n for each length of [CLS] A [SEP] B [SEP] (at most max_seq_length).
        self.num_to_predict = [
            min(max_predictions_per_seq, max(1, int(round(length * masked_lm_prob))))
            for length in range(max_seq_length + 1)]
        # Candidate lists are sliced from this (cheaper than building ranges).
        self.positions = list(range(max_seq_length))
        self.continuation_ids = (frozenset(index for token, index in vocab.items()
                                           if token.startswith("##"))
                                 if do_whole_word_mask else None)

    def __call__(self, tokens: list[int], len_a: int, rng: random.Random
                 ) -> tuple[list[int], list[int]]:
        """Masks `tokens` ([CLS] A [SEP] B [SEP]) in place.

        Returns the sorted masked positions and the original ids there.
        """
        num_tokens = len(tokens)
        num_to_predict = self.num_to_predict[num_tokens]
        # Every position except [CLS] (0), the middle [SEP] and the last.
        if self.continuation_ids is None:
            # Candidates of one position each, none twice: the masked ones are
            # the first num_to_predict after the shuffle.
            positions = self.positions
            chosen = shuffled_prefix(
                positions[1:len_a + 1] + positions[len_a + 2:num_tokens - 1],
                num_to_predict, rng)
        else:  # word pieces join the word before, as BERT's do_whole_word_mask
            cand_indexes: list[list[int]] = []
            continuation_ids = self.continuation_ids
            for i in (*range(1, len_a + 1), *range(len_a + 2, num_tokens - 1)):
                if cand_indexes and tokens[i] in continuation_ids:
                    cand_indexes[-1].append(i)
                else:
                    cand_indexes.append([i])
            shuffle(cand_indexes, rng)
            chosen = []
            for index_set in cand_indexes:  # indexes are never covered twice here
                if len(chosen) >= num_to_predict:
                    break
                if len(chosen) + len(index_set) <= num_to_predict:
                    chosen.extend(index_set)

        # BERT sorts its (position, label) pairs; positions are distinct, so
        # sorting the positions and reading the labels before masking is the same.
        masked_positions = sorted(chosen)
        labels = [tokens[index] for index in masked_positions]
        # BERT draws for each masked position in turn, in the shuffled order
        # (the choice above draws nothing, so drawing afterwards gives the
        # same numbers).
        draw, getrandbits = rng.random, rng.getrandbits
        mask_id, vocab_ids = self.mask_id, self.vocab_ids
        for index in chosen:
            if draw() < 0.8:
                tokens[index] = mask_id
            elif draw() >= 0.5:  # else kept
                # rng.randint(0, len(vocab_ids) - 1)
                tokens[index] = vocab_ids[randbelow(getrandbits, len(vocab_ids))]
        return masked_positions, labels


def randbelow(getrandbits, n: int) -> int:
    """``rng._randbelow(n)``, a uniform int in [0, n), with the same draws:
    ``getrandbits(k)`` for k = n.bit_length(), again while not below n.

    ``getrandbits`` is the generator's bound method. CPython's
    ``rng.randint(a, b)`` is ``a + rng._randbelow(b - a + 1)`` (through
    ``randrange``): one Python call here instead of three. Tested equal to
    ``randint`` in results and generator state.
    """
    bits = n.bit_length()
    value = getrandbits(bits)
    while value >= n:
        value = getrandbits(bits)
    return value


#: (i + 1).bit_length() for the shuffles of up to this many items by table.
_BIT_LENGTHS = [(i + 1).bit_length() for i in range(4096)]


def shuffle(items: list, rng: random.Random) -> None:
    """``rng.shuffle(items)``, the same draws, about twice as fast.

    CPython's Fisher-Yates written out: for i from the last index down to 1,
    ``j = rng._randbelow(i + 1)`` (``getrandbits(k)`` of k = (i + 1).bit_length()
    bits, drawn again while above i), then swap. Calling ``getrandbits``
    directly saves a Python function call per item (the masker uses
    `shuffled_prefix`, the same loop). Fetching the 32-bit words in batches
    (``getrandbits(32 * m)``) is slower in Python: shifting each word, an int
    above 256, costs as much as the call. Tested equal to
    ``random.Random.shuffle``.
    """
    num_items = len(items)
    if num_items < 2:
        return
    getrandbits = rng.getrandbits
    steps = range(num_items - 1, 0, -1)
    bit_lengths = (_BIT_LENGTHS[num_items - 1:0:-1] if num_items <= len(_BIT_LENGTHS)
                   else [(i + 1).bit_length() for i in steps])
    for i, bits in zip(steps, bit_lengths):
        j = getrandbits(bits)
        while j > i:
            j = getrandbits(bits)
        items[i], items[j] = items[j], items[i]


def shuffled_prefix(items: list, count: int, rng: random.Random) -> list:
    """``items[:count]`` after ``rng.shuffle(items)``, the same draws, less work.

    `shuffle`'s Fisher-Yates, except that a step i >= `count` only moves the
    value at i to j: position i is final there and outside the prefix, so
    it is never read again. `items` is left in no particular order. Tested
    equal to ``random.Random.shuffle`` in result and generator state.
    """
    num_items = len(items)
    getrandbits = rng.getrandbits
    bit_lengths = (_BIT_LENGTHS if num_items <= len(_BIT_LENGTHS)
                   else [(i + 1).bit_length() for i in range(num_items)])
    last_swap = min(count, num_items) - 1  # steps above it only move a value
    for i in range(num_items - 1, max(last_swap, 0), -1):
        bits = bit_lengths[i]
        j = getrandbits(bits)
        while j > i:
            j = getrandbits(bits)
        items[j] = items[i]
    for i in range(last_swap, 0, -1):
        bits = bit_lengths[i]
        j = getrandbits(bits)
        while j > i:
            j = getrandbits(bits)
        items[i], items[j] = items[j], items[i]
    return items[:count]


class _InstanceBuffer:
    """Instances as flat int32 arrays, turned into the record arrays at the end.

    Values are gathered in Python lists (extending a list copies references;
    extending an ``array.array`` converts int by int, several times slower)
    and moved into int32 arrays every `FLUSH_TOKENS` tokens, so that they
    take 4 bytes each, not a list entry's 8.
    """

    FLUSH_TOKENS = 1 << 20
    _NAMES = ("tokens", "lengths", "lengths_a", "positions", "labels", "num_masked",
              "is_random_next")

    def __init__(self):
        self.tokens: list[int] = []
        self.lengths: list[int] = []
        self.lengths_a: list[int] = []
        self.positions: list[int] = []
        self.labels: list[int] = []
        self.num_masked: list[int] = []
        self.is_random_next: list[bool] = []
        self._chunks: dict[str, list[np.ndarray]] = {name: [] for name in self._NAMES}
        self._num_flushed = 0

    def append(self, tokens, len_a, positions, labels, is_random_next):
        self.tokens += tokens
        self.lengths.append(len(tokens))
        self.lengths_a.append(len_a)
        self.positions += positions
        self.labels += labels
        self.num_masked.append(len(positions))
        self.is_random_next.append(is_random_next)
        if len(self.tokens) >= self.FLUSH_TOKENS:
            self._flush()

    def _flush(self):
        self._num_flushed += len(self.lengths)
        for name in self._NAMES:
            values = getattr(self, name)
            if values:
                # fromiter: fewer steps per int than np.array's type discovery.
                self._chunks[name].append(np.fromiter(values, np.int32, len(values)))
                values.clear()

    def __len__(self):
        return self._num_flushed + len(self.lengths)

    def to_arrays(self, order: Sequence[int], max_seq_length: int,
                  max_predictions_per_seq: int) -> dict[str, np.ndarray]:
        """Arrays of the unpacked format, rows in `order`."""
        self._flush()
        (tokens, lengths, lengths_a, positions, labels, num_masked, is_random_next) = (
            np.concatenate(self._chunks[name] or [np.zeros(0, np.int32)])
            for name in self._NAMES)
        order = np.asarray(order, np.int64)
        num = len(order)
        # The values of each row are left-aligned: a boolean mask of the used
        # slots, row-major, places the flat values in one assignment; the
        # rows are then put in order.
        input_ids = np.zeros((num, max_seq_length), np.int32)  # [N, S]
        input_ids[np.arange(max_seq_length) < lengths[:, None]] = tokens
        masked_lm_positions = np.zeros((num, max_predictions_per_seq), np.int32)
        masked_lm_ids = np.zeros((num, max_predictions_per_seq), np.int32)
        masked = np.arange(max_predictions_per_seq) < num_masked[:, None]  # [N, P]
        masked_lm_positions[masked] = positions
        masked_lm_ids[masked] = labels
        lengths, lengths_a, num_masked = lengths[order], lengths_a[order], num_masked[order]
        input_mask = np.arange(max_seq_length) < lengths[:, None]  # [N, S]
        # Segment A is [CLS] A [SEP]: len_a + 2 tokens; B and its [SEP] follow.
        segment_ids = (np.arange(max_seq_length) >= lengths_a[:, None] + 2) & input_mask
        arrays = {"input_ids": input_ids[order],
                  "input_mask": input_mask.astype(np.int32),
                  "segment_ids": segment_ids.astype(np.int32),
                  "masked_lm_positions": masked_lm_positions[order],
                  "masked_lm_ids": masked_lm_ids[order],
                  "masked_lm_weights": (np.arange(max_predictions_per_seq)
                                        < num_masked[:, None]).astype(np.float32),
                  "next_sentence_labels": is_random_next[order, None]}
        return {name: arrays[name] for name in UNPACKED_FEATURE_NAMES}


def _instances_from_document(all_documents: Sequence[Document], document_index: int,
                             max_seq_length: int, short_seq_prob: float,
                             masker: _Masker, rng: random.Random, append) -> None:
    """Makes the instances of one document, calling
    ``append(tokens, len_a, positions, labels, is_random_next)`` for each."""
    document = all_documents[document_index]
    num_sentences = len(document)
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    draw, getrandbits = rng.random, rng.getrandbits
    # Usually fill the whole sequence; sometimes (short_seq_prob) aim shorter
    # to lessen the mismatch with short fine-tuning inputs. A soft target:
    # max_seq_length is the hard limit.
    target_seq_length = max_num_tokens
    if draw() < short_seq_prob:
        # rng.randint(2, max_num_tokens)
        target_seq_length = 2 + randbelow(getrandbits, max_num_tokens - 1)

    # Segments A and B are made of whole sentences of the input (a split at a
    # random token would make next sentence prediction too easy).
    current_chunk: list[list[int]] = []
    current_length = 0
    i = 0
    while i < num_sentences:
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == num_sentences - 1 or current_length >= target_seq_length:
            # a_end: how many sentences of current_chunk (never empty here) go
            # into A: rng.randint(1, len(current_chunk) - 1) of two or more.
            num_chunk = len(current_chunk)
            a_end = 1 if num_chunk == 1 else 1 + randbelow(getrandbits, num_chunk - 1)
            tokens_a: list[int] = []
            for sentence in current_chunk[:a_end]:
                tokens_a += sentence
            tokens_b: list[int] = []
            if num_chunk == 1 or draw() < 0.5:
                is_random_next = True
                target_b_length = target_seq_length - len(tokens_a)
                # Rarely more than one try in a large corpus; a corpus of
                # one document uses that document. rng.randint(0, n - 1) is
                # randbelow(n).
                for _ in range(10):
                    random_document_index = randbelow(getrandbits, len(all_documents))
                    if random_document_index != document_index:
                        break
                random_document = all_documents[random_document_index]
                for j in range(randbelow(getrandbits, len(random_document)),
                               len(random_document)):
                    tokens_b += random_document[j]
                    if len(tokens_b) >= target_b_length:
                        break
                # Put the unused sentences back for the next instance.
                i -= num_chunk - a_end
            else:
                is_random_next = False
                for sentence in current_chunk[a_end:]:
                    tokens_b += sentence
            if len(tokens_a) + len(tokens_b) > max_num_tokens:
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            assert tokens_a and tokens_b, "empty segment after truncation"

            tokens = [masker.cls_id, *tokens_a, masker.sep_id, *tokens_b, masker.sep_id]
            positions, labels = masker(tokens, len(tokens_a), rng)
            append(tokens, len(tokens_a), positions, labels, is_random_next)
            current_chunk = []
            current_length = 0
        i += 1


def create_training_instances(
        documents: Iterable[Sequence[Sequence[int]]], vocab: Mapping[str, int],
        options: InstanceOptions, *,
        progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Training instances of tokenized documents, in the unpacked record format.

    Args:
      documents: each a sequence of sentences, each a sequence of token ids.
        Empty sentences and documents are dropped (as BERT's reader does).
      vocab: token -> id in vocabulary order (`tokenization.load_vocab`):
        gives the ids of [CLS], [SEP] and [MASK], the random replacement
        tokens (every entry, as BERT's ``vocab_words``) and, for whole-word
        masking, the ``##`` pieces.
      options: S, P, the masking and pairing probabilities, the passes, the
        seed and whole-word masking (`InstanceOptions`).
      progress: called as ``progress(done, total)`` after each document of
        each duplication (``total`` = dupe_factor x documents): a tool's
        display.

    Returns:
      A dict, `record_format.UNPACKED_FEATURE_NAMES` -> arrays: int32 [N, S]
      ``input_ids``, ``input_mask``, ``segment_ids``; int32 [N, P]
      ``masked_lm_positions``, ``masked_lm_ids``; float32 [N, P]
      ``masked_lm_weights``; int32 [N, 1] ``next_sentence_labels``. Padding
      is 0 everywhere.

    Raises:
      ValueError: for a vocabulary without [CLS], [SEP] or [MASK], or no
        non-empty document (options out of range fail when `InstanceOptions`
        is made).

    Note:
      google-research/bert ``create_pretraining_data.py`` (Devlin et al.
      2018), draw for draw; working on ids instead of strings changes
      nothing, since text never tokenizes to [CLS] or [SEP].
      O(dupe_factor x tokens) Python steps; about 40,000 instances per second
      at S = 128 (the shuffle of each instance's candidate positions, about
      150 ``getrandbits`` draws, is about 40 % of it).

    Example:
      >>> vocab = {t: i for i, t in enumerate(
      ...     ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"])}
      >>> documents = [[[5, 6], [7, 5, 6]], [[6, 6, 7], [5]]]
      >>> arrays = create_training_instances(documents, vocab, InstanceOptions(
      ...     max_seq_length=10, max_predictions_per_seq=2, masked_lm_prob=0.15,
      ...     dupe_factor=1, random_seed=2))
      >>> arrays["input_ids"]
      array([[2, 4, 6, 3, 7, 5, 6, 3, 0, 0],
             [2, 6, 6, 7, 3, 4, 3, 0, 0, 0]], dtype=int32)
      >>> arrays["segment_ids"]
      array([[0, 0, 0, 0, 1, 1, 1, 1, 0, 0],
             [0, 0, 0, 0, 0, 1, 1, 0, 0, 0]], dtype=int32)
      >>> arrays["masked_lm_positions"], arrays["masked_lm_ids"]
      (array([[1, 0],
             [5, 0]], dtype=int32), array([[5, 0],
             [5, 0]], dtype=int32))
      >>> arrays["next_sentence_labels"][:, 0]
      array([0, 0], dtype=int32)
    """
    missing = [token for token in ("[CLS]", "[SEP]", "[MASK]") if token not in vocab]
    if missing:
        raise ValueError(f"the vocabulary has no {' '.join(missing)}")
    all_documents: list[Document] = []
    for document in documents:
        sentences = [list(sentence) for sentence in document if len(sentence)]
        if sentences:
            all_documents.append(sentences)
    if not all_documents:
        raise ValueError("no documents: every document is empty")

    rng = random.Random(options.random_seed)
    shuffle(all_documents, rng)
    masker = _Masker(vocab, options.masked_lm_prob, options.max_predictions_per_seq,
                     options.do_whole_word_mask, options.max_seq_length)
    buffer = _InstanceBuffer()
    total = options.dupe_factor * len(all_documents)
    with cyclic_gc_paused():
        for dupe in range(options.dupe_factor):
            for document_index in range(len(all_documents)):
                _instances_from_document(all_documents, document_index,
                                         options.max_seq_length, options.short_seq_prob,
                                         masker, rng, buffer.append)
                if progress is not None:
                    progress(dupe * len(all_documents) + document_index + 1, total)
    # BERT shuffles its list of instances; shuffling their indices draws the
    # same numbers and gives the same order.
    order = list(range(len(buffer)))
    shuffle(order, rng)
    return buffer.to_arrays(order, options.max_seq_length,
                            options.max_predictions_per_seq)


def split_round_robin(arrays: Mapping[str, np.ndarray], num_files: int
                      ) -> list[dict[str, np.ndarray]]:
    """The rows each of `num_files` files gets when instances are written to
    them in turn (instance k to file k mod num_files), as BERT writes them."""
    return [{name: values[index::num_files] for name, values in arrays.items()}
            for index in range(num_files)]
