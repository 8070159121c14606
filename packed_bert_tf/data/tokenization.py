"""BERT WordPiece tokenization through the `tokenizers` package.

`WordPieceTokenizer` is google-research/bert's ``FullTokenizer`` (basic
tokenization, then greedy longest-match-first WordPiece) on a ``vocab.txt``,
run by the Rust `tokenizers` library:

* ``BertNormalizer``: drops control characters and U+FFFD, maps white space
  to spaces, puts spaces around CJK characters, and with ``do_lower_case``
  lower-cases and strips accents (NFD, then drops combining marks), exactly as
  BERT's ``BasicTokenizer`` does;
* ``BertPreTokenizer``: splits at white space and around every punctuation
  character;
* ``WordPiece``: longest match first with ``##`` continuations; a word with no
  complete split, or longer than 200 characters (BERT's
  ``max_input_chars_per_word``; Hugging Face's ``BertTokenizer`` says 100),
  becomes one ``[UNK]``.

No special tokens are registered with the tokenizer, so text that reads
``[SEP]`` is split into ``[``, ``sep``, ``]`` like BERT's tokenizer does; the
special tokens only enter sequences where the data generator puts them.

`train_wordpiece_vocab` trains a vocabulary of a given size on text and writes
it as ``vocab.txt``: ``[PAD] [UNK] [CLS] [SEP] [MASK]`` first (``[PAD]`` = 0 as
in BERT's vocabularies), one token per line, line number = id.
"""

from __future__ import annotations

import collections
import json
from typing import Iterable, Sequence

import numpy as np
from absl import logging
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, trainers

from packed_bert_tf import filesystem
from packed_bert_tf.data.text_files import utf8_lines

#: The special tokens every vocabulary needs, in the order a trained one has them.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: `WordPieceTokenizer.encode_batch` joins texts without one by this ...
LINE_BREAK = "\n"
#: ... this many at a time.
LINES_PER_TEXT = 64
#: Prefix of WordPiece continuation pieces.
CONTINUATION_PREFIX = "##"
#: Words longer than this many characters become [UNK] (as in google-research/bert's
#: WordpieceTokenizer; Hugging Face's BertTokenizer uses 100).
MAX_INPUT_CHARS_PER_WORD = 200


def tokenizer_json_vocabulary(path: str) -> list[str]:
    """The tokens by id of a Hugging Face ``tokenizer.json`` with a WordPiece model.

    Raises:
      ValueError: naming the file: not JSON, a model that is not WordPiece, or
        ids that are not 0..n-1.
    """
    with open(path, encoding="utf-8") as file:
        try:
            tokenizer = json.load(file)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    if kind != "WordPiece":
        raise ValueError(f"{path}: model {kind!r} is not WordPiece")
    vocab = model.get("vocab") or {}
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{path}: model vocab ids are not 0..{len(vocab) - 1}")
    return sorted(vocab, key=vocab.get)


#: The vocabulary files whose repeated tokens this process has warned about
#: (`load_vocab` warns once a file; a tool's worker processes start with its set).
REPORTED_REPEATS: set[str] = set()


def load_vocab(vocab_file: str) -> dict[str, int]:
    """Token -> id of a BERT ``vocab.txt`` (one token per line, id = line index),
    or of a Hugging Face ``tokenizer.json`` (`tokenizer_json_vocabulary`).

    Read as google-research/bert reads it: each line stripped; a token that
    occurs twice keeps its last id (a warning, once a file in a process,
    names both lines: the first line's id is never used).

    Raises:
      ValueError: naming the file (and line) when a line is blank or not
        UTF-8, when a special token of `SPECIAL_TOKENS` is missing, or when
        ``[PAD]`` is not id 0 (records pad ``input_ids`` with 0).
      OSError: when the file cannot be read.
    """
    vocab: dict[str, int] = {}
    duplicates = []
    if vocab_file.endswith(".json"):
        vocab = {token: index for index, token in
                 enumerate(tokenizer_json_vocabulary(vocab_file))}
        return _check_special_tokens(vocab, vocab_file)
    with open(vocab_file, "rb") as reader:
        for index, line in enumerate(utf8_lines(reader, vocab_file)):
            token = line.strip()
            if not token:
                raise ValueError(f"{vocab_file}:{index + 1}: blank line in a vocabulary "
                                 f"(one token per line expected)")
            if token in vocab:
                duplicates.append((token, vocab[token], index))
            vocab[token] = index
    if duplicates and vocab_file not in REPORTED_REPEATS:
        # The reference's reading, kept so that ids match a model trained with
        # it; but a line whose id is never used is worth a word (once: a tool
        # reads its vocabulary more than once).
        REPORTED_REPEATS.add(vocab_file)
        shown = "; ".join(f"{token!r} on lines {first + 1} and {last + 1}: id {last} is "
                          f"used, id {first} never"
                          for token, first, last in duplicates[:3])
        more = f" (and {len(duplicates) - 3} more)" if len(duplicates) > 3 else ""
        logging.warning("%s: %d token%s twice, read as google-research/bert reads them "
                        "(the last line wins): %s%s", vocab_file, len(duplicates),
                        "s" if len(duplicates) > 1 else "", shown, more)
    return _check_special_tokens(vocab, vocab_file)


def _check_special_tokens(vocab: dict[str, int], vocab_file: str) -> dict[str, int]:
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise ValueError(
            f"{vocab_file}: not a BERT vocabulary: missing special token"
            f"{'s' if len(missing) > 1 else ''} {' '.join(missing)} (needs "
            f"{' '.join(SPECIAL_TOKENS)})")
    if vocab["[PAD]"] != 0:
        raise ValueError(f"{vocab_file}: [PAD] is id {vocab['[PAD]']} (line "
                         f"{vocab['[PAD]'] + 1}), expected id 0 (the first line)")
    return vocab


def _bert_normalizer(do_lower_case: bool) -> normalizers.BertNormalizer:
    # strip_accents=None follows lowercase, as BERT strips accents only when
    # lower-casing.
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=None, lowercase=do_lower_case)


class WordPieceTokenizer:
    """BERT's tokenizer on a ``vocab.txt``, run by `tokenizers`.

    Args:
      vocab_file: a BERT ``vocab.txt``; see `load_vocab` for the checks.
      do_lower_case: True for uncased models (lower-case and strip accents),
        False for cased.

    Attributes:
      vocab: dict, token -> id, in file order (``list(vocab)`` is BERT's
        ``vocab_words``).
      pad_id: int, id of the special token ``[PAD]``.
      unk_id: int, id of the special token ``[UNK]``.
      cls_id: int, id of the special token ``[CLS]``.
      sep_id: int, id of the special token ``[SEP]``.
      mask_id: int, id of the special token ``[MASK]``.

    Example:
      >>> tokenizer = WordPieceTokenizer("vocab.txt")        # doctest: +SKIP
      >>> tokenizer.tokenize("Unaffable café!")              # doctest: +SKIP
      ['una', '##ffa', '##ble', 'cafe', '!']
    """

    def __init__(self, vocab_file: str, *, do_lower_case: bool = True):
        self.vocab_file = vocab_file
        self.do_lower_case = do_lower_case
        self.vocab = load_vocab(vocab_file)
        self._inverse = {index: token for token, index in self.vocab.items()}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[token] for token in SPECIAL_TOKENS)
        tokenizer = Tokenizer(models.WordPiece(
            self.vocab, unk_token="[UNK]", continuing_subword_prefix=CONTINUATION_PREFIX,
            max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        tokenizer.normalizer = _bert_normalizer(do_lower_case)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tokenizer = tokenizer
        # For encode_batch: the same tokenizer with a line break as an added
        # token, so that many lines are encoded as one text and split at its id.
        self._lines_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self._lines_tokenizer.add_special_tokens(
            [AddedToken(LINE_BREAK, special=True, normalized=False)])
        self._line_break_id = self._lines_tokenizer.token_to_id(LINE_BREAK)
        if self._line_break_id in self._inverse:  # a vocabulary with holes
            self._lines_tokenizer = None

    @property
    def vocab_size(self) -> int:
        """Number of ids: one more than the largest."""
        return max(self.vocab.values()) + 1

    def tokenize(self, text: str) -> list[str]:
        """Word pieces of a text (no special tokens added)."""
        return self._tokenizer.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str) -> list[int]:
        """Ids of the word pieces of a text."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of the word pieces of each text (batched, in Rust).

        Texts without line breaks (sentences, say) are encoded
        `LINES_PER_TEXT` at a time, joined by line breaks that the tokenizer
        sees as an added token, and split at its id: the same ids (a line
        break splits words as any white space does), a third less time than
        an `Encoding` per text.
        """
        texts = list(texts)
        if self._lines_tokenizer is None or any(LINE_BREAK in text for text in texts):
            return [encoding.ids for encoding in
                    self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        joined = [LINE_BREAK.join(texts[start:start + LINES_PER_TEXT])
                  for start in range(0, len(texts), LINES_PER_TEXT)]
        line_break = self._line_break_id
        ids: list[list[int]] = []
        for encoding in self._lines_tokenizer.encode_batch_fast(joined,
                                                               add_special_tokens=False):
            pieces = np.array(encoding.ids, dtype=np.int64)
            first, *rest = np.split(pieces, np.flatnonzero(pieces == line_break))
            ids.append(first.tolist())
            ids.extend(part[1:].tolist() for part in rest)  # each after a line break
        return ids

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        vocab = self.vocab
        return [vocab[token] for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        inverse = self._inverse
        return [inverse[int(index)] for index in ids]


def _continuation_alphabet(lines: Sequence[str], do_lower_case: bool,
                           limit_alphabet: int) -> tuple[list[str], list[str]]:
    """The training alphabet and the characters that continue words.

    Returns the `limit_alphabet` most frequent characters of the normalised,
    pre-tokenised text (ties broken by character) and, of those, the ones
    that occur after a word's first character, both sorted by character.
    """
    normalizer = _bert_normalizer(do_lower_case)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    word_counts: collections.Counter = collections.Counter()
    for start in range(0, len(lines), 1000):  # fewer, longer calls into Rust
        text = normalizer.normalize_str(" ".join(lines[start:start + 1000]))
        word_counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(text))
    character_counts: collections.Counter = collections.Counter()
    continuing: set[str] = set()
    for word, count in word_counts.items():
        for character in word:
            character_counts[character] += count
        continuing.update(word[1:])
    ranked = sorted(character_counts.items(), key=lambda item: (-item[1], item[0]))
    alphabet = sorted(character for character, _ in ranked[:limit_alphabet])
    return alphabet, sorted(set(alphabet) & continuing)


def train_wordpiece_vocab(lines: Sequence[str], vocab_size: int, vocab_file: str, *,
                          do_lower_case: bool = True, min_frequency: int = 2,
                          limit_alphabet: int = 1000) -> dict[str, int]:
    """Trains a WordPiece vocabulary on text and writes it as ``vocab.txt``.

    Args:
      lines: the training text, e.g. the sentences of a corpus.
      vocab_size: number of tokens wanted, special tokens included. The
        vocabulary is smaller when the text has fewer distinct pieces, and
        larger when the special tokens and the alphabet alone exceed it.
      vocab_file: written atomically: one token per line, ``[PAD] [UNK] [CLS]
        [SEP] [MASK]`` first, then ``##`` + each character that continues
        words, the characters, and the learnt pieces in the order they were
        learnt.
      do_lower_case: normalise as the tokenizer that will use the vocabulary
        does.
      min_frequency: as `tokenizers.trainers.WordPieceTrainer` (default of
        ``BertWordPieceTokenizer``): pieces seen fewer times are not merged.
      limit_alphabet: as `tokenizers.trainers.WordPieceTrainer` (default of
        ``BertWordPieceTokenizer``): only the most frequent characters are
        kept.

    Returns:
      A dict, token -> id of the written vocabulary.

    Note:
      Training is `tokenizers`' WordPiece trainer (byte-pair merges on words
      with ``##`` continuation pieces). On its own it is not deterministic:
      the ids of the ``##`` pieces follow hash-map order and merges of equal
      counts are chosen by id (huggingface/tokenizers#1794). Here the alphabet
      and the ``##`` pieces are computed first, deterministically, and given
      to the trainer (as its initial alphabet and leading tokens), so equal
      input gives an identical vocabulary. Cost: one more pass over the text
      in Python.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be more than the {len(SPECIAL_TOKENS)} "
                         f"special tokens, got {vocab_size}")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise ValueError("no text to train a vocabulary on")
    alphabet, continuing = _continuation_alphabet(lines, do_lower_case, limit_alphabet)
    tokenizer = Tokenizer(models.WordPiece(
        unk_token="[UNK]", continuing_subword_prefix=CONTINUATION_PREFIX,
        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
    tokenizer.normalizer = _bert_normalizer(do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
        special_tokens=[*SPECIAL_TOKENS,
                        *(CONTINUATION_PREFIX + character for character in continuing)],
        limit_alphabet=len(alphabet), initial_alphabet=alphabet,
        continuing_subword_prefix=CONTINUATION_PREFIX)
    tokenizer.train_from_iterator(lines, trainer=trainer, length=len(lines))
    tokens = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    if [index for _, index in tokens] != list(range(len(tokens))):
        raise RuntimeError("the trained vocabulary's ids are not 0..n-1")
    if tuple(token for token, _ in tokens[:len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise RuntimeError("the trained vocabulary does not start with the special "
                           "tokens")
    with filesystem.open_atomically(vocab_file) as writer:
        writer.writelines(f"{token}\n" for token, _ in tokens)
    return {token: index for token, index in tokens}
