"""Where the package chooses between local and TensorFlow file access, and
how comma-separated globs become sorted file lists.

Importing TensorFlow costs seconds of CPU (about 4 s here); a Beam worker that
reads, writes and renames local files should not pay it. Local paths (no
``scheme://``) go through `os` and records through the C codec
(`uses_record_codec`); any other (``gs://`` ...) through ``tf.io.gfile`` and
TensorFlow's record reader and writer, imported then.

Two functions expand file patterns: `expand_file_patterns_with_glob` with
the glob it is given and nothing else (plain Python: what a Beam worker or a
tool that has checked its paths are local uses, with ``glob.glob`` or Beam's
FileSystems), and `expand_file_patterns` with ``tf.io.gfile.glob`` on any
path, refusing folders (what reads records through TensorFlow uses).
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Callable, Sequence

from packed_bert_tf.data.records import record_codec
from packed_bert_tf.output_files import is_local

#: Files a wildcard never means as records: the tools' side files beside
#: them (``packing_stats.json``, a trained ``vocab.txt``, ...) and unfinished
#: ``*.tmp-*`` files and ``.lock`` files of a run.
_SIDE_FILE = re.compile(r".*\.(json|txt|lock)|.*\.tmp-.*")
_WILDCARD = re.compile(r"[*?\[]")


def uses_record_codec(path: str) -> bool:
    """Whether the records of `path` are read and written by the C codec (a
    local path, and the codec built); otherwise TensorFlow does it."""
    return is_local(path) and record_codec.available()


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return os.path.exists(path) if is_local(path) else _gfile().exists(path)


def isdir(path: str) -> bool:
    return os.path.isdir(path) if is_local(path) else _gfile().isdir(path)


def open_file(path: str, mode: str = "rb"):
    """A file object: the built-in ``open`` locally, ``tf.io.gfile.GFile`` otherwise."""
    return open(path, mode) if is_local(path) else _gfile().GFile(path, mode)


def file_errors(path: str) -> tuple:
    """What reading `path` raises when the file is unreadable: `OSError`, and
    TensorFlow's ``OpError`` for a path it reads."""
    if is_local(path):
        return (OSError,)
    import tensorflow as tf

    return (OSError, tf.errors.OpError)


def remove(path: str) -> None:
    """Removes a file."""
    if is_local(path):
        os.remove(path)
    else:
        _gfile().remove(path)


def remove_if_exists(paths) -> None:
    """Removes those of the files that exist."""
    for path in paths:
        if exists(path):
            remove(path)


def rename(source: str, target: str) -> None:
    """Renames a file, replacing `target` if it exists."""
    if is_local(source) and is_local(target):
        os.replace(source, target)
    else:
        _gfile().rename(source, target, overwrite=True)


def listdir(path: str) -> list[str]:
    """The names in a folder."""
    return os.listdir(path) if is_local(path) else _gfile().listdir(path)


def write_empty_file(path: str) -> None:
    """An empty file: a TFRecord file of no records, say."""
    if is_local(path):
        open(path, "wb").close()
    else:
        with _gfile().GFile(path, "wb"):
            pass


def make_parent_dirs(path: str) -> None:
    """Makes the folder of `path` and those above it (``tf.io.gfile.makedirs``;
    TensorFlow imported now)."""
    parent = os.path.dirname(path)
    if parent:
        _gfile().makedirs(parent)


def is_side_file(path: str) -> bool:
    """Whether a file is a side file (see `expand_file_patterns_with_glob`), by its name."""
    return _SIDE_FILE.fullmatch(posixpath.basename(path.rstrip("/"))) is not None


def expand_file_patterns_with_glob(patterns: str | Sequence[str], *,
                                   glob: Callable[[str], Sequence[str]],
                                   flag: str = "input_file",
                                   skipped: list[str] | None = None) -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted, each once.

    Plain Python: ``glob`` lists one pattern's matches (``glob.glob``, Beam's
    FileSystems, ...), and folders are returned like files. With a
    ``skipped`` list, what a wildcard matches among side files (``*.json``,
    ``*.txt``, unfinished ``*.tmp-*``) is not returned but appended to it:
    ``packed/*`` means the shards, not ``packing_stats.json``. Files named
    without a wildcard are always kept.

    Raises ValueError naming the flag when a pattern matches nothing.
    """
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    if not patterns:
        raise ValueError(f"--{flag} is empty")
    files = []
    for pattern in patterns:
        pattern = pattern.strip()
        matched = sorted(glob(pattern))
        if skipped is not None and _WILDCARD.search(pattern):
            side = [path for path in matched if is_side_file(path)]
            skipped.extend(side)
            matched = [path for path in matched if not is_side_file(path)]
            if not matched and side:
                raise ValueError(f"--{flag}: {pattern!r} matches no record files (only "
                                 f"{', '.join(posixpath.basename(p) for p in side)})")
        if not matched:
            raise ValueError(f"--{flag}: {pattern!r} matches no files")
        files.extend(matched)
    return sorted(set(files))


def expand_file_patterns(patterns: str | Sequence[str], *, flag: str = "input_file",
                         skipped: list[str] | None = None) -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted, by
    ``tf.io.gfile`` (any path TensorFlow reads; TensorFlow imported now).

    See `expand_file_patterns_with_glob` (``skipped``: side files a wildcard
    matched). Raises ValueError naming the flag when a pattern matches
    nothing, or matches or names a folder.
    """
    gfile = _gfile()
    files = expand_file_patterns_with_glob(patterns, glob=gfile.glob, flag=flag,
                                           skipped=skipped)
    folders = [path for path in files if gfile.isdir(path)]
    if folders:
        raise ValueError(f"--{flag}: {folders[0]} is a folder (give its files, e.g. "
                         f"'{os.path.join(folders[0], 'part-*')}')")
    return files
