"""Text read as UTF-8, with the file and line of any byte that is not.

Every reader of text (the corpus, a vocabulary, a GLUE TSV, a SQuAD JSON
file) reads bytes and decodes them here, so that a file in another encoding
is named with the line to look at, not with Python's offset into a buffer.
"""

from __future__ import annotations

from typing import Iterable, Iterator


def decode_utf8(data: bytes, path: str, first_line: int = 1) -> str:
    """``data`` (a line, or a whole file) decoded as UTF-8.

    Args:
      data: the bytes.
      path: the file they come from, for the error.
      first_line: the line number ``data`` starts at (1-based).

    Raises:
      ValueError: ``"PATH:LINE: not UTF-8 text (invalid continuation byte at
        byte 12)"``, the byte counted within the line.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = first_line + data.count(b"\n", 0, error.start)
        raise ValueError(f"{path}:{line}: not UTF-8 text ({error.reason} at byte "
                         f"{error.start - line_start})") from None


def utf8_lines(lines: Iterable[bytes], path: str) -> Iterator[str]:
    """The lines of a file opened in binary mode, decoded (`decode_utf8`)."""
    for number, line in enumerate(lines, start=1):
        yield decode_utf8(line, path, number)
