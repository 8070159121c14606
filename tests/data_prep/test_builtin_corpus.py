"""The built-in corpus: Python's own help topics and docstrings as documents."""

import re

import pytest

from data_prep import builtin_corpus
from tests.tool_runs import run_main, run_tool


def _run(*flags, cwd, seed="0"):
    """A fresh process: the corpus is what the standard library's modules hold
    as a new interpreter imports them (a test process has imported and
    changed many), under a hash seed of its own (string hashes, set order)."""
    return run_tool("data_prep.builtin_corpus", *flags, cwd=cwd, timeout=300,
                    env={"PYTHONHASHSEED": seed})


def _documents(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n")
    return [block.split("\n") for block in text[:-1].split("\n\n")]


@pytest.mark.parametrize("text, sentences", [
    ("Return the sum of :class:`int` values.  Raise ValueError if empty.",
     ["Return the sum of int values.", "Raise ValueError if empty."]),
    ("Summary line without a full stop", ["Summary line without a full stop."]),
    ("Return the summary line\n\nA lead-in without a full stop\n\n   code()\n",
     ["Return the summary line."]),
    ("The Standard Type Hierarchy\n***************************\n\n"
     "The first sentence is here.\nIt goes on over lines, "
     "e.g. this one.\n\n   >>> f(1, 2)\n   3\n",
     ["The first sentence is here.", "It goes on over lines, e.g. this one."]),
    ("Heading\n=======\n\nThe first sentence is here.\nIt goes on over lines, "
     "e.g. this one.\n\n   >>> f(1, 2)\n   3\n",
     ["The first sentence is here.", "It goes on over lines, e.g. this one."]),
    ("Options:\n\n* The first option is fast.\n* The second one is slow.\n",
     ["The first option is fast.", "The second one is slow."]),
    ("   if x:\n       raise ValueError(x)\n\nx = f(a, b) + g(c); y = {}", []),
    ("assert_stmt ::= \"assert\" expression [\",\" expression]", []),
    ("Too short.", []),
])
def test_split_sentences_keeps_prose_and_drops_code(text, sentences):
    assert builtin_corpus.split_sentences(text) == sentences


def test_excluded_modules():
    for name in ("antigravity", "this", "idlelib.run", "tkinter", "turtle",
                 "turtledemo.clock", "test.support", "json.__main__",
                 "unittest.test.test_case", "ctypes.test", "_testcapi", "xxsubtype",
                 "lib2to3.main", "encodings.cp1252", "readline", "__hello__"):
        assert builtin_corpus._is_excluded(name), name
    for name in ("json", "json.decoder", "collections", "asyncio.tasks", "textwrap"):
        assert not builtin_corpus._is_excluded(name), name


def test_a_few_documents_deterministically(tmp_path):
    # 90 documents: the 79 help topics of Python 3.11 and the first modules.
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    result = _run(f"--output_file={first}", "--max_documents=90", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    again = _run(f"--output_file={second}", "--max_documents=90", cwd=tmp_path,
                 seed="12345")
    assert again.returncode == 0, again.stderr
    assert first.read_bytes() == second.read_bytes()
    documents = _documents(first)
    assert len(documents) == 90
    sentences = [sentence for document in documents for sentence in document]
    assert all(len(document) >= builtin_corpus.MIN_SENTENCES for document in documents)
    assert all(sentence == sentence.strip() and len(sentence.split()) >= 4
               for sentence in sentences)
    assert sum(map(len, sentences)) > 200_000
    match = re.search(r"wrote .*: (\S+) documents, (\S+) sentences, (\S+) bytes",
                      result.stdout)
    assert match, result.stdout
    assert [int(group.replace(",", "")) for group in match.groups()] == [
        90, len(sentences), first.stat().st_size]
    assert "The \"assert\" statement" not in first.read_text(encoding="utf-8")


def test_the_whole_corpus(tmp_path):
    path = tmp_path / "corpus" / "python.txt"
    result = _run(f"--output_file={path}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    documents = _documents(path)
    assert len(documents) > 300
    assert sum(len(document) for document in documents) > 15_000
    assert path.stat().st_size > 1_000_000
    assert not [p for p in path.parent.iterdir() if p != path]


def test_bad_max_documents(tmp_path):
    result = run_main("data_prep.builtin_corpus", f"--output_file={tmp_path / 'out.txt'}",
                      "--max_documents=0",
                  cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "builtin_corpus: --max_documents must be >= 1, got 0")
    assert not list(tmp_path.iterdir())
