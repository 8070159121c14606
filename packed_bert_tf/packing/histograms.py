"""Reading length histograms from files, and finding histograms by name.

A histogram file is JSON, either ``{"counts": [...], "max_sequence_length": S,
...}`` or a bare list of counts; or ``.npy``; or text with one count per line
or comma/space separated. In every case ``counts[i]`` is the number of
sequences of length ``i + 1``.

Two histograms ship with the package (``paper_histograms/``), the ones the
paper's tables are computed on: ``wikipedia_512`` (the Wikipedia BERT
pre-training data at length 512) and ``squad_1_1_384`` (SQuAD 1.1 training
features at length 384), as published with the paper's code. Beside them,
``builtin_corpus_documents``: the token lengths of the builtin corpus's
documents, untruncated, from which `split_documents` synthesises long-context
histograms (made by ``benchmarks/document_lengths.py``). Users' own are
found by name in the folders of `HISTOGRAM_DIR_ENV`, or read from a path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

#: Environment variable: folders (``os.pathsep``-separated) searched for
#: histograms given by name, before the packaged ones.
HISTOGRAM_DIR_ENV = "PACKED_BERT_TF_HISTOGRAM_DIR"

#: The histograms installed with the package.
PACKAGED_HISTOGRAM_DIR = pathlib.Path(__file__).resolve().parent / "paper_histograms"


@dataclasses.dataclass(frozen=True, eq=False)
class LengthHistogram:
    """A named length histogram: ``counts[i]`` sequences of length ``i + 1``."""

    name: str
    counts: np.ndarray
    max_sequence_length: int
    source: str


def histogram_search_path() -> list[pathlib.Path]:
    """Folders searched for a histogram given by name, in order:
    `HISTOGRAM_DIR_ENV`'s, then `PACKAGED_HISTOGRAM_DIR`."""
    folders = [pathlib.Path(p) for p in os.environ.get(HISTOGRAM_DIR_ENV, "").split(
        os.pathsep) if p]
    folders.append(PACKAGED_HISTOGRAM_DIR)
    return folders


def available_histograms() -> list[str]:
    """Names of the histograms on the search path (``NAME.json`` files), sorted."""
    return sorted({path.stem for folder in histogram_search_path() if folder.is_dir()
                   for path in folder.glob("*.json")})


def find_histogram(name: str) -> pathlib.Path | None:
    """Path of histogram ``name`` (``NAME.json``) on the search path, or None."""
    for folder in histogram_search_path():
        candidate = folder / f"{name}.json"
        if candidate.is_file():
            return candidate
    return None


def load_histogram(path_or_name: str) -> LengthHistogram:
    """Loads a histogram from a file path, or by name from the search path.

    Raises:
      FileNotFoundError: When neither a file nor a known name, listing the
        folders searched.
      ValueError: When the file holds anything but non-negative whole counts.
    """
    path = pathlib.Path(path_or_name)
    if not path.is_file():
        found = find_histogram(str(path_or_name))
        if found is None:
            searched = ", ".join(str(p) for p in histogram_search_path())
            raise FileNotFoundError(
                f"histogram {path_or_name!r} is neither a file nor a known name "
                f"({', '.join(available_histograms())}; looked in {searched}); pass "
                f"the path of a histogram file (JSON counts[i] = sequences of length "
                f"i+1) or set {HISTOGRAM_DIR_ENV}")
        path = found
    name = path.stem
    max_sequence_length = None
    try:
        if path.suffix == ".npy":
            counts = np.load(path, allow_pickle=False)
        elif path.suffix == ".json":
            document = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(document, dict):
                if "counts" not in document:
                    raise ValueError("JSON object has no 'counts' list")
                counts = document["counts"]
                name = document.get("name", name)
                max_sequence_length = document.get("max_sequence_length")
            else:
                counts = document
        else:
            text = path.read_text(encoding="utf-8").replace(",", " ")
            counts = [float(token) for token in text.split()]
        counts = np.asarray(counts, dtype=np.float64)
    except (ValueError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read histogram {path}: {error}") from error
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(f"histogram {path} must be a non-empty list of counts, "
                         f"got shape {counts.shape}")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0) or np.any(
            counts != np.rint(counts)):
        raise ValueError(f"histogram {path} must hold non-negative whole counts")
    return LengthHistogram(
        name=name, counts=counts.astype(np.int64),
        max_sequence_length=int(max_sequence_length or counts.size),
        source=str(path))


def split_documents(document_counts, max_sequence_length: int, *, num_documents: int,
                    seed: int = 0, jitter: float = 0.25,
                    special_tokens: int = 2) -> np.ndarray:
    """Length histogram of documents cut into sequences, as long-context
    pre-training cuts them (rather than truncate).

    Draws `num_documents` document lengths from `document_counts`
    (``document_counts[i]`` documents of ``i + 1`` tokens), each scaled by
    exp(N(0, `jitter`)) so that a few hundred real documents give a smooth
    long-tailed distribution, and cuts each into sequences of at most
    ``max_sequence_length - special_tokens`` tokens, every sequence adding
    `special_tokens` ([CLS] and [SEP]).

    Returns ``counts`` of length `max_sequence_length`: ``counts[i]``
    sequences of length ``i + 1``. Vectorised: O(`num_documents`).
    """
    document_counts = np.asarray(document_counts, dtype=np.int64)
    room = max_sequence_length - special_tokens
    if room < 1:
        raise ValueError(f"max_sequence_length={max_sequence_length} leaves no room "
                         f"beside {special_tokens} special tokens")
    if document_counts.sum() == 0:
        raise ValueError("document_counts holds no document")
    rng = np.random.default_rng(seed)
    lengths = rng.choice(np.arange(1, document_counts.size + 1), size=num_documents,
                         p=document_counts / document_counts.sum())
    lengths = np.maximum(1, np.rint(lengths * np.exp(rng.normal(0.0, jitter, num_documents))))
    lengths = lengths.astype(np.int64)
    full, rest = np.divmod(lengths, room)
    counts = np.bincount(rest[rest > 0] + special_tokens,
                         minlength=max_sequence_length + 1)[1:]
    counts[room + special_tokens - 1] += full.sum()
    return counts
