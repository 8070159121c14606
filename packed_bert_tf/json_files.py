"""JSON (and other text) files written so that a reader never sees half of one."""

from __future__ import annotations

import json
import os

from packed_bert_tf import filesystem


def check_output_file(path: str, *, flag: str) -> None:
    """Raises ValueError naming the flag unless ``path`` can be written as a file
    in an existing folder (local paths; others are checked when written).

    For the tools to check an output before their work, not after it.
    """
    if not filesystem.is_local(path):
        return
    if not path or path.endswith(os.sep) or os.path.isdir(path):
        raise ValueError(f"--{flag}={path}: is a folder, expected a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--{flag}={path}: the folder {os.path.dirname(path) or folder} "
                         f"does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--{flag}={path}: cannot write in {folder}")


def write_json_atomically(path: str, value, *, indent: int | None = 2,
                          sort_keys: bool = False, **dump_kwargs) -> str:
    """Writes ``value`` as JSON under a temporary name, then renames it to ``path``.

    Local paths and any filesystem ``tf.io.gfile`` knows (``gs://`` ...) work;
    the folder is created. A failure leaves no file at ``path``, nor the
    temporary one.

    Returns:
      ``path``.
    """
    text = json.dumps(value, indent=indent, sort_keys=sort_keys, **dump_kwargs) + "\n"
    return write_text_atomically(path, text)


def write_text_atomically(path: str, text: str) -> str:
    """Writes ``text`` (UTF-8) under a temporary name, then renames it to ``path``
    (`filesystem.open_atomically`); as `write_json_atomically`, for any text file.

    Returns:
      ``path``.

    Raises:
      OSError: ``cannot write PATH (why)``.
    """
    with filesystem.open_atomically(path) as handle:
        handle.write(text)
    return path
