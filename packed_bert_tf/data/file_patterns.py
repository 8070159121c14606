"""Comma-separated globs to sorted file lists, with any filesystem's glob (plain Python)."""

from __future__ import annotations

from typing import Callable, Sequence


def expand_file_patterns(patterns: str | Sequence[str], *,
                         glob: Callable[[str], Sequence[str]],
                         flag: str = "input_file") -> list[str]:
    """Files matching comma-separated globs (or a list of globs), sorted, each once.

    ``glob`` lists one pattern's matches (``tf.io.gfile.glob``, Beam's
    FileSystems, ...). Raises ValueError naming the flag when a pattern
    matches nothing.
    """
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    if not patterns:
        raise ValueError(f"--{flag} is empty")
    files = []
    for pattern in patterns:
        matched = sorted(glob(pattern.strip()))
        if not matched:
            raise ValueError(f"--{flag}: {pattern!r} matches no files")
        files.extend(matched)
    return sorted(set(files))
