r"""A small English pre-training corpus from text that ships inside Python.

Writes a documents-format text file (one sentence per line, a blank line
between documents, as google-research/bert's ``sample_text.txt``) from

1. ``pydoc_data.topics.topics``: the language reference pages ``help()`` shows,
   one document per topic, in sorted topic order;
2. the standard library's documentation: one document per module, modules in
   sorted name order, each package's submodules after it. A module's document
   is its docstring, those of its classes, their methods and properties, and
   its functions (in sorted name order, C modules included), then from its
   source file the docstrings of nested and private definitions and the
   comment blocks. Each text is used once, the first time it is met.

    python -m data_prep.builtin_corpus --output_file=/tmp/python_docs.txt

Nothing is downloaded; the output is the same bytes on every run of the same
Python build (and differs between Python versions, whose docs differ). It is
the corpus the tests and demos use when no real one (Wikipedia, BooksCorpus)
is at hand.

Modules are imported with stdout and stderr captured and warnings silenced;
those that fail to import are skipped, and those whose import has side effects
(``antigravity`` opens a browser, ``this`` prints, ``rlcompleter`` changes the
readline completer, ``__main__`` modules run programs, ...) and test suites are
never imported.

Text becomes sentences by a simple rule-based splitter: paragraphs are split at
blank lines, doctest and rule lines dropped, lines joined, and the paragraph
split after ``.``, ``!`` or ``?`` followed by a capital. A sentence is kept only
if it reads like prose: it starts with a capital letter (or a quote, bracket or
digit), ends with ``.``, ``!`` or ``?``, has at least `MIN_WORDS` words, and
mostly letters. Code, grammar rules and headings fail those tests.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import importlib
import inspect
import io
import itertools
import os
import pkgutil
import re
import sys
import time
import warnings
from typing import Iterable, Iterator

from absl import app, flags, logging

from data_prep import tool_output
from packed_bert_tf import filesystem, output_files

#: Top-level modules never imported: side effects on import, GUI toolkits,
#: test suites, Windows-only, codecs (machine-generated, repetitive docs), and
#: ``distutils`` (replaced by setuptools' copy in many environments).
EXCLUDED_MODULES = frozenset({
    "__hello__", "__main__", "__phello__", "_msi", "_overlapped", "_winapi",
    "antigravity", "distutils", "encodings", "ensurepip", "idlelib", "lib2to3",
    "msilib", "msvcrt", "nt", "pydoc_data", "readline", "rlcompleter", "test",
    "this", "tkinter", "turtle", "turtledemo", "winreg", "winsound"})

#: Sentences need this many words.
MIN_WORDS = 4
#: ... and at most this many (longer "sentences" are lists or run-on tables).
MAX_WORDS = 120
#: ... and at least this share of their non-space characters must be letters.
MIN_LETTER_FRACTION = 0.8
#: Documents need this many sentences (next sentence prediction needs two).
MIN_SENTENCES = 2

_RULE_LINE = re.compile(r"^\s*([-=*~^#+`'\"._])\1{2,}\s*$")
_PROMPT_LINE = re.compile(r"^\s*(>>>|\.\.\.|\$ |% )")
# A sentence ends at . ! or ? (and any closing quotes or brackets) followed by
# white space and a capital, digit, quote or bracket; not after common
# abbreviations or a single capital initial.
_SENTENCE_BREAK = re.compile(
    r"(?<![ (][A-Z]\.)(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)(?<!\bvs\.)(?<!\bcf\.)"
    r"(?:(?<=[.!?][\"')\]])|(?<=[.!?]))\s+(?=[\"'(\[]?[A-Z0-9])")
_WHITESPACE = re.compile(r"\s+")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\(?\d{1,2}[.)]|\([a-z]\))\s+")
_ROLE = re.compile(r"(?::[\w:.-]+:)?`([^`]+)`(?!`)")
_COMMENT_LINE = re.compile(r"^\s*#+\s?(.*)$")
_STARTS_LIKE_PROSE = re.compile(r"^[\"'(\[]?[A-Z0-9]")
_ENDS_LIKE_PROSE = re.compile(r"[a-z0-9)\]\"'][.!?][\"')\]]?$")
_CODE_MARKERS = ("::=", ">>>", "->", "==", "!=", "+=", " = ", "();", "{}", "\\n", "://",
                 "|", "#", "(self", "self.", "def ")


def _is_excluded(module_name: str) -> bool:
    parts = module_name.split(".")
    if parts[0] in EXCLUDED_MODULES:
        return True
    return any(part in ("__main__", "test", "tests", "idle_test")
               or part.startswith(("test_", "_test", "xx", "_xx"))
               for part in parts)


def _import_quietly(module_name: str):
    """The module, or None when importing it fails (output and warnings hidden)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(module_name)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - skip any failure
            logging.debug("skipping %s: %s", module_name, error)
            return None


def iter_stdlib_modules() -> Iterator:
    """Standard-library modules (sorted; each package followed by its submodules)."""

    def walk(name):
        if _is_excluded(name):
            return
        module = _import_quietly(name)
        if module is None:
            return
        yield module
        if hasattr(module, "__path__"):
            for info in sorted(pkgutil.iter_modules(module.__path__),
                               key=lambda info: info.name):
                yield from walk(f"{name}.{info.name}")

    for name in sorted(sys.stdlib_module_names):
        yield from walk(name)


def _member_docstrings(owner, module_name: str) -> Iterator[str]:
    """Docstrings of the classes and routines defined in a module or class."""
    members = sorted(vars(owner).items())
    prefix = f"{owner.__qualname__}." if inspect.isclass(owner) else ""
    for name, member in members:
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isclass(member):
            # Only classes defined right here: not imports, aliases or cycles.
            if (getattr(member, "__module__", None) != module_name
                    or getattr(member, "__qualname__", None) != prefix + name):
                continue
            yield member.__doc__
            yield from _member_docstrings(member, module_name)
        elif inspect.isroutine(member) or isinstance(member, property):
            if inspect.isclass(owner) or getattr(member, "__module__",
                                                  None) == module_name:
                yield member.__doc__


def module_docstrings(module) -> list[str]:
    """The module's docstring, then its classes', methods' and functions'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. typing.io warns when its __doc__ is read
        return [module.__doc__, *_member_docstrings(module, module.__name__)]


def source_docstrings(module) -> Iterator[str]:
    """Docstrings of every class and function in the module's source file,
    nested and private ones too (found with `ast`, nothing is run)."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return
    try:
        with open(path, encoding="utf-8") as reader:
            tree = ast.parse(reader.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in _definitions(tree):
        yield ast.get_docstring(node)


#: The fields of a node that hold statements: only these can hold a class or
#: function definition (a lambda is an expression, not a definition).
_STATEMENT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _definitions(tree: ast.AST) -> Iterator[ast.AST]:
    """The class and function definitions of a tree in `ast.walk`'s order
    (breadth first), walking only the statements: the expressions, most of
    a tree's nodes, hold none, and leaving them out leaves that order as it is."""
    queue = collections.deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, _DEFINITIONS):
            yield node
        for field in node._fields:
            if field in _STATEMENT_FIELDS:
                children = getattr(node, field)
                if isinstance(children, list):
                    queue.extend(children)


def source_comments(module) -> Iterator[str]:
    """The comment blocks of the module's source file (consecutive lines that
    hold only a comment), one string per block."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return
    try:
        with open(path, encoding="utf-8") as reader:
            lines = reader.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    block = []
    for line in lines + [""]:
        match = _COMMENT_LINE.match(line)
        if match and not line.startswith("#!"):
            block.append(match.group(1))
        elif block:
            yield "\n".join(block)
            block = []


def _paragraphs(text: str) -> Iterator[str]:
    """Paragraphs of reST-like text on one line each: blocks between blank
    lines, split again at list bullets, without doctest lines, rule lines and
    the headings they underline."""
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        item = []
        for line in block.splitlines():
            if _RULE_LINE.match(line):
                del item[-1:]  # the heading above the rule
                continue
            if _PROMPT_LINE.match(line):
                continue
            bullet = _BULLET.match(line)
            if bullet:
                if item:
                    yield _WHITESPACE.sub(" ", " ".join(item)).strip()
                item = [line[bullet.end():]]
            else:
                item.append(line)
        if item:
            yield _WHITESPACE.sub(" ", " ".join(item)).strip()


def split_sentences(text: str) -> list[str]:
    r"""Prose sentences of a docstring or help page, one string each.

    reST roles and literals lose their markup; a first paragraph that is a
    single sentence may lack its full stop (docstring summaries often do).

    >>> split_sentences("Return the sum of :class:`int` values.  Raise "
    ...                 "ValueError if empty.\n\n   >>> add(1, 2)\n   3\n\n"
    ...                 "* Accepts any iterable of numbers.\n")  # doctest: +NORMALIZE_WHITESPACE
    ['Return the sum of int values.', 'Raise ValueError if empty.',
     'Accepts any iterable of numbers.']
    """
    sentences = []
    for number, paragraph in enumerate(_paragraphs(text)):
        paragraph = _ROLE.sub(r"\1", paragraph).replace("``", '"')
        if not paragraph:
            continue
        pieces = _SENTENCE_BREAK.split(paragraph)
        if number == 0 and len(pieces) == 1 and pieces[0][-1:].isalpha():
            pieces[0] += "."  # a summary line without its full stop
        sentences.extend(piece for piece in pieces if _reads_like_prose(piece))
    return sentences


def _reads_like_prose(sentence: str) -> bool:
    words = sentence.split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return False
    if not (_STARTS_LIKE_PROSE.match(sentence) and _ENDS_LIKE_PROSE.search(sentence)):
        return False
    if any(marker in sentence for marker in _CODE_MARKERS):
        return False
    characters = sentence.replace(" ", "")
    letters = sum(character.isalpha() for character in characters)
    return letters >= MIN_LETTER_FRACTION * len(characters)


def iter_documents() -> Iterator[list[str]]:
    """Documents (lists of sentences): the help topics, then the stdlib modules.

    Each text is used once, the first time it is met, so re-exported and
    inherited docstrings do not repeat.
    """
    from pydoc_data.topics import topics
    for name in sorted(topics):
        sentences = split_sentences(topics[name])
        if len(sentences) >= MIN_SENTENCES:
            yield sentences
    seen = set()
    for module in iter_stdlib_modules():
        sentences = []
        for text in itertools.chain(module_docstrings(module),
                                    source_docstrings(module),
                                    source_comments(module)):
            if isinstance(text, str):
                text = inspect.cleandoc(text)
                if text not in seen:
                    seen.add(text)
                    sentences.extend(split_sentences(text))
        if len(sentences) >= MIN_SENTENCES:
            yield sentences


def write_corpus(output_file: str, *, max_documents: int | None = None
                 ) -> tuple[int, int, int]:
    """Writes the corpus (atomically, one run at a time: `output_files.output_lock`);
    returns (documents, sentences, bytes)."""
    if max_documents is not None and max_documents < 1:
        raise ValueError(f"--max_documents must be >= 1, got {max_documents}")
    if os.path.isdir(output_file):
        raise ValueError(f"--output_file={output_file}: is a folder, expected a file name")
    documents: Iterable[list[str]] = iter_documents()
    num_documents = num_sentences = 0
    filesystem.make_parent_dirs(output_file)  # the lock goes beside the file
    with output_files.output_lock(output_file, flag="--output_file"), \
            filesystem.open_atomically(output_file) as writer:
        for sentences in documents:
            if num_documents:
                writer.write("\n")
            writer.write("".join(f"{sentence}\n" for sentence in sentences))
            num_documents += 1
            num_sentences += len(sentences)
            if num_documents == max_documents:
                break
    return num_documents, num_sentences, os.path.getsize(output_file)


def define_flags():
    """Defines the tool's flags (only when run as a program, so importing the
    module for its functions defines nothing)."""
    flags.DEFINE_string("output_file", None,
                        "Write the documents-format text here (required).")
    flags.DEFINE_integer("max_documents", None,
                         "Stop after this many documents (help topics come first).")
    flags.mark_flag_as_required("output_file")


@tool_output.one_line_on_interrupt("builtin_corpus")
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    tool_output.quiet_unless_verbose()
    options = flags.FLAGS
    start = time.perf_counter()
    try:
        num_documents, num_sentences, num_bytes = write_corpus(
            options.output_file, max_documents=options.max_documents)
    except (OSError, ValueError) as error:
        sys.exit(f"builtin_corpus: {error}")
    print(f"wrote {options.output_file}: {num_documents:,} documents, "
          f"{num_sentences:,} sentences, {num_bytes:,} bytes "
          f"({num_bytes / 2**20:.2f} MiB) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags

    define_flags()
    app.run(main, flags_parser=parse_flags)
