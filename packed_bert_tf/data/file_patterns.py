"""Comma-separated globs to sorted file lists, with any filesystem's glob (plain Python)."""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Sequence

#: Files a wildcard never means as records: the tools' side files beside
#: them (``packing_stats.json``, a trained ``vocab.txt``, ...) and unfinished
#: ``*.tmp-*`` files and ``.lock`` files of a run.
_SIDE_FILE = re.compile(r".*\.(json|txt|lock)|.*\.tmp-.*")
_WILDCARD = re.compile(r"[*?\[]")


def is_side_file(path: str) -> bool:
    """Whether a file is a side file (see `expand_file_patterns`), by its name."""
    return _SIDE_FILE.fullmatch(posixpath.basename(path.rstrip("/"))) is not None


def expand_file_patterns(patterns: str | Sequence[str], *,
                         glob: Callable[[str], Sequence[str]],
                         flag: str = "input_file",
                         skipped: list[str] | None = None) -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted, each once.

    ``glob`` lists one pattern's matches (``tf.io.gfile.glob``, Beam's
    FileSystems, ...). With a ``skipped`` list, what a wildcard matches among
    side files (``*.json``, ``*.txt``, unfinished ``*.tmp-*``) is not
    returned but appended to it: ``packed/*`` means the shards, not
    ``packing_stats.json``. Files named without a wildcard are always kept.

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
