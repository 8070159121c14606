"""WordPiece tokenization (tokenizers) on BERT vocabularies, and vocabulary training."""

import pytest

from packed_bert_tf.data import tokenization

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "un", "##aff",
         "##able", "cafe", "café", "Hello", ",", "!", ".", "[", "]", "sep", "the", "##s",
         "run", "##ning", "日"]


def _write(path, lines):
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def vocab_file(tmp_path):
    return _write(tmp_path / "vocab.txt", VOCAB)


@pytest.mark.parametrize("text, tokens", [
    ("Hello, World!", ["hello", ",", "world", "!"]),
    ("unaffable", ["un", "##aff", "##able"]),
    ("Unaffable CAFÉ", ["un", "##aff", "##able", "cafe"]),   # accents stripped
    ("Café\u0301", ["cafe"]),                                 # combining marks too
    ("unaffx", ["[UNK]"]),                    # no complete split: the whole word
    ("hello xyz world", ["hello", "[UNK]", "world"]),
    # Text that reads like a special token is text.
    ("[SEP] the [MASK]", ["[", "sep", "]", "the", "[", "[UNK]", "]"]),
    ("runnings", ["run", "##ning", "##s"]),
    ("hello\x00\x07\tworld\u00a0.", ["hello", "world", "."]),  # control chars dropped
    ("日本", ["日", "[UNK]"]),                   # every CJK character is a word
    ("  ", []),
    ("a" * 201, ["[UNK]"]),                   # words over 200 characters
    # 200 characters or fewer: split as any word (as google-research/bert).
    ("unaff" + "able" * 36, ["un", "##aff"] + ["##able"] * 36),
    ("unaff" + "able" * 49, ["[UNK]"]),       # 201 characters
])
def test_uncased_tokenization(vocab_file, text, tokens):
    tokenizer = tokenization.WordPieceTokenizer(vocab_file, do_lower_case=True)
    assert tokenizer.tokenize(text) == tokens
    ids = tokenizer.encode(text)
    assert ids == tokenizer.convert_tokens_to_ids(tokens)
    assert tokenizer.convert_ids_to_tokens(ids) == tokens


def test_cased_tokenization_keeps_case_and_accents(vocab_file):
    tokenizer = tokenization.WordPieceTokenizer(vocab_file, do_lower_case=False)
    assert tokenizer.tokenize("Hello café hello Cafe") == ["Hello", "café", "hello",
                                                          "[UNK]"]


def test_batch_encoding_equals_one_at_a_time(vocab_file):
    tokenizer = tokenization.WordPieceTokenizer(vocab_file)
    texts = ["Hello, world!", "", "unaffable cafés", "xyz", "the [SEP]"] * 50
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]


def test_special_token_ids_and_vocab(vocab_file):
    tokenizer = tokenization.WordPieceTokenizer(vocab_file)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert list(tokenizer.vocab) == VOCAB
    assert tokenizer.vocab_size == len(VOCAB)


def test_load_vocab_keeps_the_last_id_of_a_repeated_token(tmp_path, caplog):
    path = _write(tmp_path / "vocab.txt", [*tokenization.SPECIAL_TOKENS, "a", " b ", "a"])
    assert tokenization.load_vocab(path) == {
        "[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 7, "b": 6}
    assert [record.getMessage() for record in caplog.records] == [
        f"{path}: 1 token twice, read as google-research/bert reads them (the last line "
        f"wins): 'a' on lines 6 and 8: id 7 is used, id 5 never"]


def test_a_repeated_token_is_warned_about_once_a_file(tmp_path, caplog):
    # A tool reads its vocabulary more than once (once per input file).
    path = _write(tmp_path / "vocab.txt", [*tokenization.SPECIAL_TOKENS, "a", "a"])
    other = _write(tmp_path / "other.txt", [*tokenization.SPECIAL_TOKENS, "b", "b"])
    for name in (path, path, other, path):
        assert tokenization.WordPieceTokenizer(name).vocab["[MASK]"] == 4
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        path, other]


def test_many_repeated_tokens_are_counted(tmp_path, caplog):
    path = _write(tmp_path / "vocab.txt", [*tokenization.SPECIAL_TOKENS, *"abcde",
                                           *"abcde"])
    tokenization.load_vocab(path)
    (message,) = [record.getMessage() for record in caplog.records]
    assert message.startswith(f"{path}: 5 tokens twice")
    assert message.endswith("'c' on lines 8 and 13: id 12 is used, id 7 never (and 2 "
                            "more)")


def test_a_vocabulary_without_repeats_says_nothing(vocab_file, caplog):
    tokenization.load_vocab(vocab_file)
    assert caplog.records == []


@pytest.mark.parametrize("lines, message", [
    (["[PAD]", "[UNK]", "[SEP]", "hello"], "missing special tokens [CLS] [MASK]"),
    (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"], "missing special token [MASK] ("),
    ([], "missing special tokens [PAD] [UNK] [CLS] [SEP] [MASK]"),
    (["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"], "[PAD] is id 1 (line 2), expected"),
    (["[PAD]", "[UNK]", "", "[CLS]", "[SEP]", "[MASK]"], "vocab.txt:3: blank line"),
])
def test_bad_vocabularies_are_named(tmp_path, lines, message):
    path = _write(tmp_path / "vocab.txt", lines)
    with pytest.raises(ValueError, match=r"vocab\.txt") as error:
        tokenization.WordPieceTokenizer(path)
    assert message in str(error.value)
    assert str(error.value).startswith(path)


def test_a_vocabulary_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\n[UNK]\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"vocab\.txt:3: not UTF-8"):
        tokenization.load_vocab(str(path))


def test_a_missing_vocabulary_is_an_os_error(tmp_path):
    with pytest.raises(OSError, match="nothing.txt"):
        tokenization.load_vocab(str(tmp_path / "nothing.txt"))


def _training_text():
    words = ["pack", "packing", "packed", "sequence", "sequences", "token", "tokens",
             "mask", "masked", "attention", "Über", "naïve", "BERT", "pre-training"]
    return [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(5 + i % 7)) + "."
            for i in range(300)]


def test_trained_vocabulary_is_a_bert_vocab_and_tokenizes_its_text(tmp_path):
    path = str(tmp_path / "vocab.txt")
    vocab = tokenization.train_wordpiece_vocab(_training_text(), 120, path)
    lines = open(path, encoding="utf-8").read().splitlines()
    assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(lines) == len(set(lines)) == len(vocab) <= 120
    assert vocab == {token: index for index, token in enumerate(lines)}
    tokenizer = tokenization.WordPieceTokenizer(path)
    assert tokenization.load_vocab(path) == vocab
    ids = [i for text in _training_text() for i in tokenizer.encode(text)]
    assert tokenizer.unk_id not in ids
    assert "uber" in tokenizer.tokenize("Über") or "u" in tokenizer.tokenize("Über")
    assert tokenizer.tokenize("packing") in (["packing"], ["pack", "##ing"])


def test_vocabulary_training_is_deterministic(tmp_path):
    # tokenizers' trainer alone gives different vocabularies from run to run.
    text = [f"{line} {line[::-1]} {line.upper()}" for line in _training_text()]
    contents = set()
    for run in range(4):
        path = tmp_path / f"vocab{run}.txt"
        tokenization.train_wordpiece_vocab(text, 150, str(path), min_frequency=1)
        contents.add(path.read_bytes())
    assert len(contents) == 1


def test_case_and_accents_of_trained_vocabularies(tmp_path):
    cased = tokenization.train_wordpiece_vocab(
        _training_text(), 200, str(tmp_path / "cased.txt"), do_lower_case=False)
    uncased = tokenization.train_wordpiece_vocab(
        _training_text(), 200, str(tmp_path / "uncased.txt"), do_lower_case=True)
    assert {"B", "Ü", "ï"} <= set(cased)
    special = set(tokenization.SPECIAL_TOKENS)
    assert not any(token != token.lower() for token in set(uncased) - special)
    assert not {"ü", "ï", "Ü"} & set(uncased)


@pytest.mark.parametrize("lines, size, message", [
    (["some text"], 5, "vocab_size must be more than the 5 special tokens, got 5"),
    (["", "  "], 100, "no text"),
])
def test_bad_training_input(tmp_path, lines, size, message):
    with pytest.raises(ValueError, match=message):
        tokenization.train_wordpiece_vocab(lines, size, str(tmp_path / "vocab.txt"))
    assert not list(tmp_path.iterdir())


def test_batch_encoding_of_many_lines_equals_one_at_a_time(vocab_file):
    tokenizer = tokenization.WordPieceTokenizer(vocab_file)
    texts = ["Hello, world!", "", "unaffable cafés", " ", "xyz", "the [SEP]", "日本"] * 40
    assert len(texts) > 2 * tokenization.LINES_PER_TEXT
    assert tokenizer.encode_batch(texts) == [tokenizer.encode(t) for t in texts]
    # Texts with line breaks are encoded one by one (a line break is white space).
    assert tokenizer.encode_batch(["hello\nworld", "the"]) == [[5, 6], [19]]
    assert tokenizer.encode("hello\nworld") == [5, 6]
    assert tokenizer.encode_batch([]) == []
