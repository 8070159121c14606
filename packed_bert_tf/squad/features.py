r"""SQuAD v1.1 JSON -> examples -> fixed-length features, cached as TFRecords.

Letters: F features, S ``max_seq_length``, Q query tokens, N context tokens.

The rules are google-research/bert ``run_squad.py``'s:

* the context is split at white space (``" \t\r\n"`` and U+202F) into words,
  with ``char_to_word_offset`` mapping each character to its word;
* a training answer is the words from the one holding ``answer_start`` to
  the one holding its last character; when the whitespace-normalised answer
  text is not found in those words the question is skipped (counted and
  logged, as the reference does);
* WordPiece tokens of the answer's words, narrowed by `improve_answer_span`
  to the tokens that spell the tokenised answer;
* the question is truncated to ``max_query_length`` tokens (counted);
* windows ("doc spans") of ``S - Q - 3`` context tokens every ``doc_stride``
  tokens; a token's "max context" window is the one where it has the most
  context on its shorter side (`max_context_spans`);
* each window is one feature ``[CLS] question [SEP] window [SEP]`` with
  segment ids 0 then 1; a training answer outside the window labels the
  [CLS] (offset 0).

The tokens are `tokenizers`' WordPiece of the whole context at once, whose
character offsets replace the reference's ``token_to_orig_map`` and
``get_final_text``: each context token of a feature carries its character
span in the context, so a predicted token span maps back to the exact text.
A feature (S = 12, Q = 2, context "Zoë lives in Besançon")::

    tokens            [CLS] where ? [SEP] zoe lives in besancon [SEP] 0 0 0
    segment_ids           0     0 0     0   1     1  1        1     1 0 0 0
    token_char_start      0     0 0     0   0     4 10       13     0 0 0 0
    token_char_end        0     0 0     0   3     9 12       21     0 0 0 0

(start = end = 0 off the context). Features are written to a TFRecord file
whose name holds a digest of everything that determines them (input file
contents, vocabulary, lower-casing, S, stride, Q, training or not), with a
JSON description beside it; `load_or_create_features` reads them back when
they exist.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import unicodedata
from typing import Sequence

import numpy as np
from absl import logging

from packed_bert_tf.data.text_files import decode_utf8
from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.tool_progress import Progress

#: White space of the reference's ``read_squad_examples``.
REFERENCE_WHITESPACE = frozenset(" \t\r\n\u202f")
_WHITESPACE_CODES = np.array(sorted(ord(c) for c in REFERENCE_WHITESPACE), np.uint32)
#: Bump when the feature layout or the rules change: invalidates old caches.
CACHE_FORMAT_VERSION = 1
#: Features stored per token ([S] values) and per feature (one value).
TOKEN_FEATURES = ("input_ids", "segment_ids", "token_is_max_context",
                  "token_char_start", "token_char_end")
SCALAR_FEATURES = ("example_index", "doc_span_index", "length", "start_position",
                   "end_position")
_MAX_LOGGED = 10


class SquadFormatError(ValueError):
    """A SQuAD file that cannot be read; the message names the file and place."""


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on one paragraph.

    Attributes:
      qas_id: the question's ``id``.
      question_text: the question.
      context_text: the paragraph (shared by the paragraph's questions).
      paragraph_index: running index of the paragraph in the file.
      orig_answer_text: training: the answer text; None for prediction.
      start_position, end_position: training: indices of the first and last
        white-space word of the answer in the context; None for prediction.
    """
    qas_id: str
    question_text: str
    context_text: str
    paragraph_index: int
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None


@dataclasses.dataclass(frozen=True)
class ReadStats:
    """What `read_squad_examples` read and skipped.

    Attributes:
      num_questions: questions in the file.
      skipped_answer_ids: training questions skipped, in file order.
      skip_reasons: why each was skipped (`SKIP_REASONS`), in the same order.
    """
    num_questions: int
    skipped_answer_ids: tuple
    skip_reasons: tuple = ()

    @property
    def num_skipped(self) -> int:
        return len(self.skipped_answer_ids)

    def skipped_by_reason(self) -> dict[str, int]:
        """Reason -> questions skipped for it (every reason, 0 included)."""
        return {reason: self.skip_reasons.count(reason) for reason in SKIP_REASONS}


#: Why a training question is skipped (`ReadStats.skip_reasons`).
SKIP_REASONS = ("answer outside the context",  # empty, or offsets past the context
                "answer text not at answer_start")


@dataclasses.dataclass(frozen=True)
class FeatureStats:
    """What `convert_examples_to_features` made."""
    num_examples: int
    num_features: int
    num_truncated_questions: int  # longer than max_query_length tokens
    num_examples_without_features: int  # empty contexts
    num_answers_outside_window: int  # training features labelled at [CLS]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, eq=False)
class SquadFeatures:
    """Fixed-length features, one row per window, as numpy arrays.

    Attributes:
      input_ids: [F, S] int32, 0-padded.
      segment_ids: [F, S] int8.
      token_is_max_context: [F, S] int8, 1 where this window is the token's
        max-context window (context tokens only).
      token_char_start, token_char_end: [F, S] int32, each context token's
        character span ``[start, end)`` in the context; 0, 0 elsewhere.
      example_index: [F] int32, index of the example in the examples list.
      doc_span_index: [F] int32, the window's index within its example.
      length: [F] int32, tokens before the padding.
      start_position, end_position: [F] int32, training labels (offsets in
        the row; 0 = [CLS] when the answer is outside the window, and for
        prediction).
    """
    input_ids: np.ndarray
    segment_ids: np.ndarray
    token_is_max_context: np.ndarray
    token_char_start: np.ndarray
    token_char_end: np.ndarray
    example_index: np.ndarray
    doc_span_index: np.ndarray
    length: np.ndarray
    start_position: np.ndarray
    end_position: np.ndarray

    def __len__(self) -> int:
        return int(self.length.shape[0])

    @property
    def max_seq_length(self) -> int:
        return int(self.input_ids.shape[1])

    def arrays(self) -> dict[str, np.ndarray]:
        return {field.name: getattr(self, field.name)
                for field in dataclasses.fields(self)}


_DTYPES = {"input_ids": np.int32, "segment_ids": np.int8,
           "token_is_max_context": np.int8, "token_char_start": np.int32,
           "token_char_end": np.int32, "example_index": np.int32,
           "doc_span_index": np.int32, "length": np.int32, "start_position": np.int32,
           "end_position": np.int32}


# --------------------------------------------------------------------------
# JSON -> examples


def _type_name(kind) -> str:
    names = {str: "a string", int: "an integer", list: "a list", dict: "an object"}
    return names.get(kind, kind.__name__)


def _get(mapping, key, kind, where: str):
    if not isinstance(mapping, dict):
        raise SquadFormatError(f"{where}: expected a JSON object, got "
                               f"{type(mapping).__name__}")
    if key not in mapping:
        raise SquadFormatError(f"{where}: missing key {key!r} (keys: "
                               f"{', '.join(sorted(map(str, mapping))) or 'none'})")
    value = mapping[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SquadFormatError(f"{where}: {key!r} must be {_type_name(kind)}, got "
                               f"{type(value).__name__} {value!r:.40}")
    return value


def load_squad_json(input_file: str) -> list:
    """The ``data`` list of a SQuAD JSON file.

    Raises:
      SquadFormatError: naming the file, for malformed JSON or no ``data`` list.
      OSError: when the file cannot be read.
    """
    with open(input_file, "rb") as reader:
        raw = reader.read()
    try:
        dataset = json.loads(decode_utf8(raw, input_file))
    except json.JSONDecodeError as error:
        raise SquadFormatError(f"{input_file}: not valid JSON: {error.msg} at line "
                               f"{error.lineno} column {error.colno}") from None
    except ValueError as error:  # not UTF-8: the line to look at
        raise SquadFormatError(str(error)) from None
    data = _get(dataset, "data", list, input_file)
    version = dataset.get("version")
    if version != "1.1":
        logging.warning("%s: SQuAD version %r, expected '1.1'", input_file, version)
    return data


def whitespace_words(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's white-space words of a text, vectorised.

    Returns:
      (word_start [W], word_end [W]: each word's characters ``[start, end)``;
      char_to_word_offset [len(text)]: the word of each character, white
      space belonging to the word before it, -1 before the first word).
    """
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    is_space = np.isin(codes, _WHITESPACE_CODES)
    previous_space = np.concatenate([[True], is_space[:-1]])
    starts = ~is_space & previous_space
    ends = ~is_space & np.concatenate([is_space[1:], [True]])
    char_to_word_offset = np.cumsum(starts) - 1
    return (np.flatnonzero(starts), np.flatnonzero(ends) + 1,
            char_to_word_offset.astype(np.int64))


def read_squad_examples(input_file: str, *, is_training: bool
                        ) -> tuple[list[SquadExample], ReadStats]:
    """Reads a SQuAD v1.1 file into examples (the reference's ``read_squad_examples``).

    Args:
      input_file: SQuAD JSON (``data`` -> ``paragraphs`` -> ``context``,
        ``qas`` -> ``id``, ``question``, ``answers`` -> ``text``,
        ``answer_start``).
      is_training: parse the answers (exactly one per question) and skip the
        questions whose answer text is not found at ``answer_start`` (a
        counted warning); prediction ignores the answers.

    Returns:
      (examples in file order, `ReadStats`).

    Raises:
      SquadFormatError: naming the file and the place (``data[i].paragraphs[j]
        .qas[k]``) of a missing key or a value of the wrong type, or a
        training question without exactly one answer; a file with no
        question, or no usable training question.
    """
    data = load_squad_json(input_file)
    examples: list[SquadExample] = []
    skipped: list[str] = []
    reasons: list[str] = []
    num_questions = 0
    paragraph_index = -1
    for article_index, article in enumerate(data):
        where_article = f"{input_file}: data[{article_index}]"
        paragraphs = _get(article, "paragraphs", list, where_article)
        for index, paragraph in enumerate(paragraphs):
            where_paragraph = f"{where_article}.paragraphs[{index}]"
            context = _get(paragraph, "context", str, where_paragraph)
            qas = _get(paragraph, "qas", list, where_paragraph)
            paragraph_index += 1
            char_to_word_offset = word_start = word_end = None
            for qa_index, qa in enumerate(qas):
                where = f"{where_paragraph}.qas[{qa_index}]"
                qas_id = _get(qa, "id", str, where)
                where = f"{where} (id {qas_id})"
                question = _get(qa, "question", str, where)
                num_questions += 1
                if not is_training:
                    examples.append(SquadExample(qas_id, question, context,
                                                 paragraph_index))
                    continue
                if qa.get("is_impossible"):
                    raise SquadFormatError(f"{where}: is_impossible questions are "
                                           f"SQuAD 2.0, not supported")
                answers = _get(qa, "answers", list, where)
                if len(answers) != 1:
                    raise SquadFormatError(f"{where}: a training question needs "
                                           f"exactly 1 answer, got {len(answers)}")
                where_answer = f"{where}.answers[0]"
                answer_text = _get(answers[0], "text", str, where_answer)
                answer_start = _get(answers[0], "answer_start", int, where_answer)
                if char_to_word_offset is None:
                    word_start, word_end, char_to_word_offset = whitespace_words(context)
                answer_end = answer_start + len(answer_text) - 1
                reason = SKIP_REASONS[0]
                if answer_text and 0 <= answer_start and answer_end < len(context):
                    reason = SKIP_REASONS[1]
                    start_word = max(int(char_to_word_offset[answer_start]), 0)
                    end_word = int(char_to_word_offset[answer_end])
                    if end_word >= start_word:
                        # The reference: the answer's words, joined by one space,
                        # must contain the white-space-normalised answer text.
                        # Both sides normalised with all of Unicode's white
                        # space, as the official evaluation normalises answers:
                        # the reference normalises only the answer, and drops
                        # an answer with a no-break or ideographic space that
                        # is in the context as it is.
                        words = slice(start_word, end_word + 1)
                        actual_text = " ".join(context[s:e] for s, e in
                                               zip(word_start[words], word_end[words]))
                        cleaned = " ".join(answer_text.split())
                        if " ".join(actual_text.split()).find(cleaned) != -1:
                            reason = None
                if reason is not None:
                    skipped.append(qas_id)
                    reasons.append(reason)
                    if len(skipped) <= _MAX_LOGGED:
                        logging.warning(
                            "%s: %s: answer %r, answer_start=%d (context there: %r); "
                            "question skipped", where, reason, answer_text, answer_start,
                            context[max(answer_start, 0):][:len(answer_text)])
                    continue
                examples.append(SquadExample(qas_id, question, context, paragraph_index,
                                             answer_text, start_word, end_word))
    if not num_questions:
        raise SquadFormatError(f"{input_file}: no questions (data[].paragraphs[].qas[] "
                               f"are all empty)")
    stats = ReadStats(num_questions, tuple(skipped), tuple(reasons))
    if skipped:
        logging.warning("%s: skipped %d of %d training questions (%s)", input_file,
                        len(skipped), num_questions, ", ".join(
                            f"{count} {reason}" for reason, count in
                            stats.skipped_by_reason().items() if count))
    if not examples:
        raise SquadFormatError(f"{input_file}: none of its {num_questions} training "
                               f"questions has its answer text at answer_start")
    return examples, stats


def _reference_split(text: str) -> list[str]:
    """``text.split()`` on the reference's white space only."""
    words, current = [], []
    for character in text:
        if character in REFERENCE_WHITESPACE:
            if current:
                words.append("".join(current))
                current = []
        else:
            current.append(character)
    if current:
        words.append("".join(current))
    return words


def collapse_whitespace(text: str) -> str:
    """Runs of the reference's white space -> one space; ends stripped."""
    return " ".join(_reference_split(text))


# --------------------------------------------------------------------------
# examples -> features


def check_feature_arguments(max_seq_length: int, doc_stride: int,
                            max_query_length: int) -> None:
    """Raises ValueError, quoting the values, for arguments that cannot work."""
    for name, value in (("max_seq_length", max_seq_length), ("doc_stride", doc_stride),
                        ("max_query_length", max_query_length)):
        if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if max_seq_length <= max_query_length + 3:
        raise ValueError(f"max_seq_length ({max_seq_length}) must be greater than "
                         f"max_query_length ({max_query_length}) + 3, to leave room "
                         f"for [CLS], two [SEP] and the context")


def _encode_with_offsets(tokenizer, texts: Sequence[str]):
    """`tokenizers` encodings (ids, offsets in characters) of many texts, in Rust."""
    # The wrapped `tokenizers.Tokenizer`: WordPieceTokenizer exposes ids only.
    return tokenizer._tokenizer.encode_batch(list(texts), add_special_tokens=False)


def improve_answer_span(doc_ids: np.ndarray, start: int, end: int,
                        answer_ids: Sequence[int]) -> tuple[int, int]:
    """The reference's ``_improve_answer_span`` on token ids.

    The first sub-span of ``doc_ids[start:end + 1]`` (by start, then longest)
    whose tokens are the tokenised answer; ``(start, end)`` if there is none.
    For an answer "1895" in the word "(1895-1943)", the span narrows from
    the word's five tokens to the one "1895".
    """
    answer_ids = np.asarray(answer_ids)
    size = answer_ids.size
    if size == 0:
        return start, end
    for new_start in range(start, end - size + 2):
        if np.array_equal(doc_ids[new_start:new_start + size], answer_ids):
            return new_start, new_start + size - 1
    return start, end


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int
              ) -> list[tuple[int, int]]:
    """The reference's sliding windows: (start, length) over the context tokens."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_spans(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """[N] index of each token's max-context window (the reference's
    ``_check_is_max_context`` for all tokens at once).

    A token's score in a window is ``min(left context, right context) + 0.01
    * window length``; the first window with the highest score wins.
    """
    position = np.arange(num_tokens)
    best_score = np.full(num_tokens, -np.inf)
    best = np.full(num_tokens, -1, np.int64)
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        inside = (position >= start) & (position <= end)
        score = np.minimum(position - start, end - position) + 0.01 * length
        better = inside & (score > best_score)
        best_score = np.where(better, score, best_score)
        best = np.where(better, index, best)
    return best


def _is_dropped(character: str) -> bool:
    """Characters BERT's normaliser deletes: controls, U+FFFD, combining marks."""
    return (character == "\ufffd" or unicodedata.category(character) in ("Cc", "Cf", "Mn")
            ) and not character.isspace()


def _context_char_spans(encoding, context: str):
    """(ids [N], char start [N], char end [N], word [N]) of a context's tokens.

    A token's end also covers the characters the normaliser dropped right
    after it (a decomposed accent, a zero-width character), up to the next
    token or the end of its white-space word.
    """
    ids = np.asarray(encoding.ids, np.int64)
    offsets = np.asarray(encoding.offsets, np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1].copy()
    if not ids.size:
        return ids, starts, ends, np.zeros(0, np.int64)
    _, word_end, char_to_word_offset = whitespace_words(context)
    words = char_to_word_offset[starts]
    limit = np.where(np.concatenate([words[1:] == words[:-1], [False]]),
                     np.concatenate([starts[1:], [0]]), word_end[words])
    for token in np.flatnonzero(limit > ends):  # rare: only around dropped characters
        while ends[token] < limit[token] and _is_dropped(context[ends[token]]):
            ends[token] += 1
    return ids, starts, ends, words


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer, *,
                                 max_seq_length: int = 384, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool
                                 ) -> tuple[SquadFeatures, FeatureStats]:
    """Windows of every example as fixed-length features (see the module docstring).

    Args:
      examples: from `read_squad_examples` (with answers when `is_training`).
      tokenizer: a `packed_bert_tf.data.tokenization.WordPieceTokenizer`.
      max_seq_length: S.
      doc_stride: tokens between window starts.
      max_query_length: questions are cut to this many tokens (counted).
      is_training: compute the start/end labels.

    Returns:
      (`SquadFeatures`, `FeatureStats`).
    """
    check_feature_arguments(max_seq_length, doc_stride, max_query_length)
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    paragraphs: dict[int, str] = {}
    for example in examples:
        paragraphs.setdefault(example.paragraph_index, example.context_text)
    paragraph_ids = list(paragraphs)
    context_encodings = dict(zip(paragraph_ids, _encode_with_offsets(
        tokenizer, [paragraphs[i] for i in paragraph_ids])))
    contexts = {}
    question_ids = tokenizer.encode_batch([example.question_text for example in examples])
    answer_ids = tokenizer.encode_batch(
        [example.orig_answer_text or "" for example in examples]) if is_training else None

    rows: dict[str, list] = {name: [] for name in TOKEN_FEATURES + SCALAR_FEATURES}
    num_truncated = num_without = num_outside = 0
    progress = Progress("making features", total=len(examples), unit="questions")
    for example_index, example in enumerate(examples):
        progress.advance()
        if example.paragraph_index not in contexts:
            contexts[example.paragraph_index] = _context_char_spans(
                context_encodings[example.paragraph_index], example.context_text)
        ids, char_start, char_end, words = contexts[example.paragraph_index]
        query = question_ids[example_index]
        if len(query) > max_query_length:
            num_truncated += 1
            if num_truncated <= _MAX_LOGGED:
                logging.warning("question %s has %d tokens; truncated to "
                                "max_query_length=%d", example.qas_id, len(query),
                                max_query_length)
            query = query[:max_query_length]
        num_tokens = ids.size
        if is_training:
            if example.start_position is None:
                raise ValueError(f"example {example.qas_id} has no answer: training "
                                 f"needs examples read with is_training=True")
            # First token of the answer's first word, last of its last word.
            token_start = int(np.searchsorted(words, example.start_position, "left"))
            token_end = int(np.searchsorted(words, example.end_position, "right")) - 1
            token_start, token_end = improve_answer_span(
                ids, token_start, token_end, answer_ids[example_index])
        max_tokens_for_doc = max_seq_length - len(query) - 3
        spans = doc_spans(num_tokens, max_tokens_for_doc, doc_stride)
        if not spans:
            num_without += 1
            continue
        best_span = max_context_spans(spans, num_tokens)
        doc_offset = len(query) + 2
        for span_index, (start, length) in enumerate(spans):
            window = slice(start, start + length)
            total = doc_offset + length + 1
            input_ids = np.zeros(max_seq_length, np.int32)
            input_ids[0] = cls_id
            input_ids[1:doc_offset - 1] = query
            input_ids[doc_offset - 1] = sep_id
            input_ids[doc_offset:total - 1] = ids[window]
            input_ids[total - 1] = sep_id
            segment_ids = np.zeros(max_seq_length, np.int8)
            segment_ids[doc_offset:total] = 1
            is_max = np.zeros(max_seq_length, np.int8)
            is_max[doc_offset:total - 1] = best_span[window] == span_index
            starts = np.zeros(max_seq_length, np.int32)
            starts[doc_offset:total - 1] = char_start[window]
            ends = np.zeros(max_seq_length, np.int32)
            ends[doc_offset:total - 1] = char_end[window]
            start_position = end_position = 0
            if is_training:
                if start <= token_start and token_end <= start + length - 1:
                    start_position = token_start - start + doc_offset
                    end_position = token_end - start + doc_offset
                else:
                    num_outside += 1
            for name, value in (("input_ids", input_ids), ("segment_ids", segment_ids),
                                ("token_is_max_context", is_max),
                                ("token_char_start", starts), ("token_char_end", ends),
                                ("example_index", example_index),
                                ("doc_span_index", span_index), ("length", total),
                                ("start_position", start_position),
                                ("end_position", end_position)):
                rows[name].append(value)
    if num_truncated:
        logging.warning("%d of %d questions longer than max_query_length=%d tokens were "
                        "truncated", num_truncated, len(examples), max_query_length)
    if num_without:
        logging.warning("%d questions have an empty context and no features",
                        num_without)
    progress.close()
    features = SquadFeatures(**{
        name: (np.stack(rows[name]).astype(_DTYPES[name]) if rows[name] else
               np.zeros((0,) + ((max_seq_length,) if name in TOKEN_FEATURES else ()),
                        _DTYPES[name]))
        for name in TOKEN_FEATURES + SCALAR_FEATURES})
    stats = FeatureStats(len(examples), len(features), num_truncated, num_without,
                         num_outside)
    logging.info("%d examples -> %d features (max_seq_length=%d, doc_stride=%d, "
                 "max_query_length=%d)", len(examples), len(features), max_seq_length,
                 doc_stride, max_query_length)
    return features, stats


# --------------------------------------------------------------------------
# TFRecord cache


def write_features(path: str, features: SquadFeatures) -> int:
    """Writes the features to one TFRecord file atomically; returns records written."""
    from packed_bert_tf import filesystem
    from packed_bert_tf.data.records import record_files

    filesystem.make_parent_dirs(path)
    arrays = {name: np.asarray(value, np.int64) if value.ndim == 1 else value
              for name, value in features.arrays().items()}
    with record_files.RecordWriter(path) as writer:
        if len(features):
            for begin in range(0, len(features), 1024):
                writer.write_arrays({name: value[begin:begin + 1024]
                                     for name, value in arrays.items()})
    return len(features)


def read_features(path: str, max_seq_length: int, *, batch_size: int = 4096
                  ) -> SquadFeatures:
    """Reads features written by `write_features`.

    Raises:
      SquadFormatError: naming the file for a missing, corrupt or foreign file.
    """
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for name in TOKEN_FEATURES}
    spec.update({name: tf.io.FixedLenFeature([1], tf.int64) for name in SCALAR_FEATURES})
    dataset = (tf.data.TFRecordDataset(path).batch(batch_size)
               .map(lambda serialized: tf.io.parse_example(serialized, spec)))
    parts: dict[str, list] = {name: [] for name in spec}
    try:
        for batch in dataset:
            for name, value in batch.items():
                value = value.numpy().astype(_DTYPES[name])
                parts[name].append(value if name in TOKEN_FEATURES else value[:, 0])
    except tf.errors.NotFoundError:
        raise SquadFormatError(f"{path}: no such file") from None
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as error:
        message = error.message.splitlines()[0] if error.message else type(error).__name__
        raise SquadFormatError(f"{path}: not a SQuAD feature file of max_seq_length="
                               f"{max_seq_length} ({message})") from None
    return SquadFeatures(**{
        name: (np.concatenate(chunks) if chunks else
               np.zeros((0,) + ((max_seq_length,) if name in TOKEN_FEATURES else ()),
                        _DTYPES[name]))
        for name, chunks in parts.items()})


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as reader:
        for block in iter(lambda: reader.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def feature_cache_key(input_file: str, tokenizer, *, max_seq_length: int,
                      doc_stride: int, max_query_length: int, is_training: bool) -> dict:
    """Everything the features depend on (a JSON-able dict)."""
    return {"cache_format_version": CACHE_FORMAT_VERSION,
            "input_file_sha256": _file_digest(input_file),
            "vocab_file_sha256": _file_digest(tokenizer.vocab_file),
            "do_lower_case": bool(tokenizer.do_lower_case),
            "max_seq_length": int(max_seq_length), "doc_stride": int(doc_stride),
            "max_query_length": int(max_query_length), "is_training": bool(is_training)}


def feature_cache_path(input_file: str, cache_dir: str, key: dict) -> str:
    """``CACHE_DIR/NAME.{train|predict}.S_STRIDE_Q.DIGEST.tfrecord``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    stem = os.path.splitext(os.path.basename(input_file))[0]
    kind = "train" if key["is_training"] else "predict"
    return os.path.join(cache_dir, f"{stem}.{kind}.{key['max_seq_length']}_"
                                   f"{key['doc_stride']}_{key['max_query_length']}."
                                   f"{digest}.tfrecord")


@dataclasses.dataclass(frozen=True)
class SquadData:
    """Examples and features of one SQuAD file (`load_or_create_features`)."""
    examples: list
    features: SquadFeatures
    read_stats: ReadStats
    feature_stats: FeatureStats
    cache_path: str | None
    from_cache: bool


def load_or_create_features(input_file: str, tokenizer, *, cache_dir: str | None,
                            max_seq_length: int = 384, doc_stride: int = 128,
                            max_query_length: int = 64, is_training: bool) -> SquadData:
    """Examples of a SQuAD file and their features, from the cache when it has them.

    The examples are always read from `input_file` (post-processing needs
    their text); the features come from ``cache_dir`` when a file for the
    same key (`feature_cache_key`) is there, else they are made and written
    there (with a ``.json`` description beside them). ``cache_dir=None``
    never caches. A cache file that cannot be read is logged and rebuilt.

    Raises:
      SquadFormatError, ValueError: see `read_squad_examples`,
        `check_feature_arguments`.
    """
    check_feature_arguments(max_seq_length, doc_stride, max_query_length)
    examples, read_stats = read_squad_examples(input_file, is_training=is_training)
    kwargs = dict(max_seq_length=max_seq_length, doc_stride=doc_stride,
                  max_query_length=max_query_length, is_training=is_training)
    path = None
    if cache_dir is not None:
        key = feature_cache_key(input_file, tokenizer, **kwargs)
        path = feature_cache_path(input_file, cache_dir, key)
        description_path = path + ".json"
        if os.path.exists(path) and os.path.exists(description_path):
            try:
                with open(description_path, encoding="utf-8") as reader:
                    description = json.load(reader)
                features = read_features(path, max_seq_length)
                if description.get("key") != key or len(features) != \
                        description["feature_stats"]["num_features"]:
                    raise SquadFormatError(f"{path}: does not match its description")
                logging.info("%s: %d cached features", path, len(features))
                return SquadData(examples, features, read_stats,
                                 FeatureStats(**description["feature_stats"]), path, True)
            except (SquadFormatError, ValueError, KeyError, TypeError) as error:
                logging.warning("feature cache unusable, rebuilding it: %s", error)
    features, feature_stats = convert_examples_to_features(examples, tokenizer, **kwargs)
    if path is not None:
        write_features(path, features)
        write_json_atomically(path + ".json", {"key": key, "input_file": input_file,
                                                "feature_stats": feature_stats.to_dict()})
        logging.info("%s: wrote %d features", path, len(features))
    return SquadData(examples, features, read_stats, feature_stats, path, False)
