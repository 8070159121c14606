"""Where the package chooses between local and TensorFlow file access.

Importing TensorFlow costs seconds of CPU (about 4 s here); a Beam worker that
reads, writes and renames local files should not pay it. Local paths (no
``scheme://``) go through `os` and records through the C codec
(`uses_record_codec`); any other (``gs://`` ...) through ``tf.io.gfile`` and
TensorFlow's record reader and writer, imported then.
"""

from __future__ import annotations

import os

from packed_bert_tf.data import record_codec
from packed_bert_tf.output_files import is_local


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
