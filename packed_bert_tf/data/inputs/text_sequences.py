"""Unmasked pre-training sequences straight from text files, one epoch at a time.

Letters: S = max_seq_length.

The text is read as google-research/bert's ``create_pretraining_data.py``
reads it: one sentence per line, a blank line between documents, lines
stripped. Each file is tokenized as it is read (`WordPieceTokenizer`, on a
``vocab.txt`` or a Hugging Face ``tokenizer.json``) and cut into sequences for
one of two objectives:

* ``nsp``: BERT's sentence pairs with next-sentence prediction, made by the
  algorithm of ``create_pretraining_data`` (`pretraining_instances`) over the
  documents of one file (the random next segment comes from another document
  of that file): ``[CLS] A [SEP] B [SEP]``, segment ids 0 then 1, the label 1
  when B is the random segment;
* ``mlm``: RoBERTa's full sentences for masked LM alone: whole sentences read
  on, across document and file boundaries, until the next would pass S - 2
  tokens (``[CLS] ... [SEP]``); a [SEP] is put between documents, and a
  sentence longer than a sequence is cut into sequences of its own.

The masks are not drawn here: they are drawn afresh each time a sequence is
read (`packed_bert_tf.data.inputs.dynamic_masking`). Everything here is a pure
function of (seed, epoch, replica): the files' order, the pairs' random draws
and the shuffle of an epoch come from ``random.Random`` seeded with them (not
from TensorFlow's seeds, which also depend on the global seed), so a resumed
run reads exactly the sequences the interrupted run read.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Iterable, Iterator, Sequence

import numpy as np

from packed_bert_tf.data.preparation import pretraining_instances
from packed_bert_tf.data.text_files import utf8_lines
from packed_bert_tf.data.tokenization import WordPieceTokenizer

OBJECTIVES = ("nsp", "mlm")
#: Lines tokenized in one call of the Rust tokenizer.
_LINES_PER_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class TextSequenceOptions:
    """How sequences are cut from text.

    Attributes:
      objective: one of `OBJECTIVES`.
      max_seq_length: S, >= 5.
      short_seq_prob: ``nsp``: the probability of a shorter random target
        length (``create_pretraining_data``'s flag).
    """

    objective: str = "nsp"
    max_seq_length: int = 128
    short_seq_prob: float = 0.1

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"--pretraining_objective={self.objective!r} is not one of "
                             f"{', '.join(OBJECTIVES)}")
        if self.max_seq_length < 5:
            raise ValueError(f"--max_seq_length must be >= 5 for text, got "
                             f"{self.max_seq_length}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob must be in [0, 1], got "
                             f"{self.short_seq_prob}")


def check_text_files(files: Sequence[str]) -> None:
    """Reads every file once: each must be UTF-8 and hold a sentence.

    Raises:
      ValueError: ``"PATH:LINE: not UTF-8 text (...)"``, or naming a file
        without a sentence.
    """
    for path in files:
        with open(path, "rb") as reader:
            # Every line decoded (no early stop): a bad byte anywhere is named now.
            sentences = sum(bool(line.strip()) for line in utf8_lines(reader, path))
            if not sentences:
                raise ValueError(f"{path}: no sentence (expected one sentence per line "
                                 f"and a blank line between documents, got an empty or "
                                 f"blank file)")


def epoch_files(files: Sequence[str], *, seed: int, epoch: int, replica: int,
                num_replicas: int) -> tuple[list[str], int | None]:
    """The files one replica reads in one epoch, in their order, and which
    sequences of them it keeps.

    The files are shuffled by (seed, epoch). With at least as many files as
    replicas, replica r reads files r, r + R, ... of that order (returns
    None: it keeps every sequence); else every replica reads every file and
    keeps sequences r, r + R, ... (returns r), as records are shared.
    """
    order = sorted(files)
    random.Random(f"{seed}:{epoch}:files").shuffle(order)
    if len(order) >= num_replicas:
        return order[replica::num_replicas], None
    return order, replica


def _documents(path: str, tokenizer: WordPieceTokenizer) -> list[list[list[int]]]:
    """The file's documents, each a list of sentences of token ids (empty ones
    dropped, as google-research/bert drops them)."""
    documents: list[list[str]] = [[]]
    with open(path, "rb") as reader:
        for line in utf8_lines(reader, path):
            line = line.strip()
            if line:
                documents[-1].append(line)
            elif documents[-1]:
                documents.append([])
    return pretraining_instances.tokenize_documents(
        [document for document in documents if document], tokenizer.encode_batch,
        batch_size=_LINES_PER_BATCH)


class _NoMasks:
    """The masker `pretraining_instances` calls, drawing no mask (and no random
    number): the masks are drawn as the sequences are read."""

    def __init__(self, tokenizer: WordPieceTokenizer):
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id

    def __call__(self, tokens, len_a, rng):
        del tokens, len_a, rng
        return [], []


def _pairs(documents, options: TextSequenceOptions, tokenizer, rng: random.Random):
    """``nsp``: (tokens, len_a, is_random_next) of one file's documents."""
    pairs = []

    def append(tokens, len_a, positions, labels, is_random_next):
        del positions, labels
        pairs.append((tokens, len_a, is_random_next))

    masker = _NoMasks(tokenizer)
    pretraining_instances.shuffle(documents, rng)
    for index in range(len(documents)):
        pretraining_instances._instances_from_document(
            documents, index, options.max_seq_length, options.short_seq_prob, masker,
            rng, append)
    pretraining_instances.shuffle(pairs, rng)
    return pairs


class _FullSentences:
    """``mlm``: sentences gathered into sequences of at most S - 2 tokens, across
    documents and files (the state carries over from file to file)."""

    def __init__(self, options: TextSequenceOptions, tokenizer: WordPieceTokenizer):
        self.limit = options.max_seq_length - 2
        self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
        self.current: list[int] = []

    def add(self, documents) -> Iterator[list[int]]:
        """The sequences completed by these documents ([CLS] ... [SEP])."""
        for document in documents:
            if self.current:  # a document boundary inside a sequence
                yield from self._add([self.sep_id])
            for sentence in document:
                yield from self._add(sentence)

    def _add(self, tokens: list[int]) -> Iterator[list[int]]:
        if self.current and len(self.current) + len(tokens) > self.limit:
            yield self._wrap(self.current)
            self.current = []
        if not self.current and tokens == [self.sep_id]:
            return  # no document separator at the start of a sequence
        while len(tokens) > self.limit:  # a sentence longer than a sequence
            yield self._wrap(tokens[:self.limit])
            tokens = tokens[self.limit:]
        self.current = self.current + tokens

    def _wrap(self, tokens: list[int]) -> list[int]:
        if tokens[-1] == self.sep_id:  # a document separator the next did not follow
            tokens = tokens[:-1]
        return [self.cls_id, *tokens, self.sep_id]

    def finish(self) -> Iterator[list[int]]:
        """The last, partial sequence."""
        if self.current:
            yield self._wrap(self.current)
            self.current = []


def shuffled(items: Iterable, buffer_size: int, rng: random.Random) -> Iterator:
    """``items`` shuffled through a buffer of ``buffer_size`` (as
    ``tf.data.Dataset.shuffle`` does), every draw from ``rng``: O(1) a
    step, the order a pure function of the items and the seed."""
    buffer = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        index = rng.randrange(buffer_size)
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


def text_sequences(files: Sequence[str], tokenizer: WordPieceTokenizer,
                   options: TextSequenceOptions, *, seed: int, epoch: int,
                   replica: int = 0, num_replicas: int = 1, shuffle_buffer_size: int = 1
                   ) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
    """The unmasked sequences one replica reads in one epoch.

    Args:
      files: the text files, all of them (`epoch_files` picks this replica's).
      tokenizer: the `WordPieceTokenizer`.
      options: the objective and sizes.
      seed: what the order and the draws are a function of, with ``epoch``.
      epoch: the pass over the text (from 0).
      replica: this replica.
      num_replicas: all the replicas.
      shuffle_buffer_size: the sequences are shuffled through a buffer of this
        many (`shuffled`; 1: in the order they are made).

    Yields:
      (input_ids int32 [S], segment_ids int32 [S], next_sentence_label int),
      0-padded after the sequence.

    Raises:
      ValueError: text that is not UTF-8, naming the file and line.
    """
    made = _sequences(files, tokenizer, options, seed=seed, epoch=epoch, replica=replica,
                      num_replicas=num_replicas)
    if shuffle_buffer_size <= 1:
        return made
    return shuffled(made, shuffle_buffer_size,
                    random.Random(f"{seed}:{epoch}:{replica}:sequences"))


def _sequences(files, tokenizer, options, *, seed, epoch, replica, num_replicas):
    """`text_sequences` before the shuffle."""
    mine, keep = epoch_files(files, seed=seed, epoch=epoch, replica=replica,
                             num_replicas=num_replicas)
    length = options.max_seq_length
    full_sentences = (_FullSentences(options, tokenizer) if options.objective == "mlm"
                      else None)
    count = 0

    def sequence(tokens, len_a, label):
        input_ids = np.zeros(length, np.int32)
        input_ids[:len(tokens)] = tokens
        segment_ids = np.zeros(length, np.int32)
        if len_a is not None:  # [CLS] A [SEP] is segment 0, B [SEP] segment 1
            segment_ids[len_a + 2:len(tokens)] = 1
        return input_ids, segment_ids, int(label)

    def kept(made):
        nonlocal count
        for item in made:
            count += 1
            if keep is None or (count - 1) % num_replicas == keep:
                yield item

    # A file's draws are keyed by its place among all the files, not by its
    # path: the same text gives the same sequences wherever it is stored.
    rank = {path: index for index, path in enumerate(sorted(files))}
    for path in mine:
        documents = _documents(path, tokenizer)
        if full_sentences is not None:
            yield from kept(sequence(tokens, None, 0)
                            for tokens in full_sentences.add(documents))
        elif documents:
            rng = random.Random(f"{seed}:{epoch}:{rank[path]}")
            yield from kept(sequence(tokens, len_a, is_random_next)
                            for tokens, len_a, is_random_next
                            in _pairs(documents, options, tokenizer, rng))
    if full_sentences is not None:
        yield from kept(sequence(tokens, None, 0) for tokens in full_sentences.finish())


__all__ = ["OBJECTIVES", "TextSequenceOptions", "check_text_files", "epoch_files",
           "shuffled", "text_sequences"]
