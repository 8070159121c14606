"""Local or remote files: where the package tells them apart, expands file
patterns and writes a file atomically.

A path with a ``scheme://`` (``gs://``, TensorFlow's in-memory ``ram://``, ...)
is remote and goes through ``tf.io.gfile``; any other is local and goes
through `os` and the built-in ``open``. Importing TensorFlow costs seconds of
CPU (about 4 s here): a tool or a Beam worker on local files never pays it,
since TensorFlow is imported only for a remote path. Plain Python otherwise.

- `is_local`, `absolute_path`: which kind a path is, and how another process
  (a Beam worker in a folder of its own, a resumed run) finds it.
- `exists`, `isdir`, `open_file`, `rename`, `remove`, ...: file access, either way.
- `expand_file_patterns_with_glob` and `expand_file_patterns`: comma-separated
  globs to sorted file lists; the first with the glob it is given and nothing
  else (``glob.glob``, Beam's FileSystems: plain Python), the second with
  ``tf.io.gfile.glob`` on any path, refusing folders.
- `PendingFile` and `open_atomically`: the one atomic write. A file is
  written under a temporary name in its own folder (``PATH.tmp-<random>``, a
  name every reader of records passes over as unfinished) and renamed to
  ``PATH`` when complete; a failure removes it, so no reader ever sees half
  a file under its name.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import uuid
from typing import IO, Callable, Iterator, Sequence

#: Files a wildcard never means as records: the tools' side files beside
#: them (``packing_stats.json``, a trained ``vocab.txt``, ...) and unfinished
#: ``*.tmp-*`` files and ``.lock`` files of a run.
_SIDE_FILE = re.compile(r".*\.(json|txt|lock)|.*\.tmp-.*")
_WILDCARD = re.compile(r"[*?\[]")


def is_local(path: str) -> bool:
    """Whether a path is on the local disk (no ``scheme://``)."""
    return "://" not in path


def absolute_path(path: str) -> str:
    """A local path made absolute (as a process started elsewhere reads it); a
    remote one (``gs://...``) unchanged."""
    return os.path.abspath(path) if is_local(path) else path


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return os.path.exists(path) if is_local(path) else _gfile().exists(path)


def isdir(path: str) -> bool:
    return os.path.isdir(path) if is_local(path) else _gfile().isdir(path)


def isfile(path: str) -> bool:
    """Whether `path` is a file (not a folder)."""
    if is_local(path):
        return os.path.isfile(path)
    return _gfile().exists(path) and not _gfile().isdir(path)


def open_file(path: str, mode: str = "rb"):
    """A file object: the built-in ``open`` locally, ``tf.io.gfile.GFile`` otherwise."""
    return open(path, mode) if is_local(path) else _gfile().GFile(path, mode)


def file_errors(path: str) -> tuple:
    """What reading or writing `path` raises when it fails: `OSError`, and
    TensorFlow's ``OpError`` for a remote path."""
    if is_local(path):
        return (OSError,)
    import tensorflow as tf

    return (OSError, tf.errors.OpError)


def write_error_reason(error: Exception) -> str:
    """Why a write failed (an `OSError` or TensorFlow's ``OpError``), in a few
    words: ``File too large``, ``No space left on device`` (TensorFlow's
    message ends with it, after the file's temporary name)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = getattr(error, "message", None) or str(error)
    text = re.sub(r"\s*\[Op:\w+\]\s*$", "", text.strip().splitlines()[0])
    return text.rsplit("; ", 1)[-1].strip() or type(error).__name__


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
    """Makes the folder of `path` and those above it."""
    parent = os.path.dirname(path)
    if not parent:
        return
    if is_local(parent):
        os.makedirs(parent, exist_ok=True)
    else:
        _gfile().makedirs(parent)


# ------------------------------------------------------------ atomic writes
def temporary_name(path: str) -> str:
    """Where a file is written before it gets its name: ``PATH.tmp-<random>``
    (in its own folder, so that the rename is one step of one file system)."""
    return f"{path}.tmp-{uuid.uuid4().hex[:8]}"


class PendingFile:
    """A file written under a temporary name and renamed to its own when complete.

    Whatever writes the file writes ``temporary`` (a path: a record writer, a
    library that takes a file name); `commit` renames it to ``path``,
    `discard` removes it. As a context manager, a block that ends normally
    commits and one that raises discards:

    >>> with PendingFile(path) as pending:            # doctest: +SKIP
    ...     numpy.save(pending.temporary, array)

    Attributes:
      path: the file's own name.
      temporary: ``PATH.tmp-<random>``, beside it.
    """

    def __init__(self, path: str):
        self.path = path
        self.temporary = temporary_name(path)

    def commit(self) -> None:
        """Gives the written file its name (replacing a file there); a failure
        discards it."""
        try:
            rename(self.temporary, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Removes the temporary file, if any (quietly: it runs while another
        error is raised)."""
        with contextlib.suppress(*file_errors(self.temporary)):
            remove_if_exists([self.temporary])

    def __enter__(self) -> PendingFile:
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if exc_type is None:
            self.commit()
        else:
            self.discard()
        return False


@contextlib.contextmanager
def open_atomically(path: str, mode: str = "w") -> Iterator[IO]:
    """A file object that writes ``path`` atomically (`PendingFile`): the file
    gets its name when the block ends normally, and is removed otherwise.

    The folder is made. Text (``"w"``) is UTF-8 with the text's own line ends
    on every platform; ``"wb"`` writes bytes.

    Raises:
      OSError: ``cannot write PATH (why)``, for any failure to make the
        folder, write, close or rename the file (a full disk, a folder in the
        way, a remote error). Other errors of the block pass unchanged.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    errors = file_errors(path)
    try:
        make_parent_dirs(path)
        with PendingFile(path) as pending, _open_for_writing(pending.temporary,
                                                             mode) as handle:
            yield handle
    except errors as error:
        raise OSError(f"cannot write {path} ({write_error_reason(error)})") from None


def _open_for_writing(path: str, mode: str) -> IO:
    if not is_local(path):
        return _gfile().GFile(path, mode)
    if mode == "wb":
        return open(path, "wb")
    # newline="": the text's own line ends, "\n", on every platform.
    return open(path, "w", encoding="utf-8", newline="")


# ------------------------------------------------------------ file patterns
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
