"""google-research/bert's own modules, from `bert-tensorflow`, for the tests to compare with.

The ``reference`` extra installs google-research/bert as the `bert-tensorflow`
package (module ``bert``). A test calls `create_pretraining_data`,
`run_classifier`, `run_pretraining` or `run_squad` for the module itself and calls its
functions: nothing of it is copied here. `benchmarks.google_bert` imports
them (their absl flags on private `FlagValues`, an empty stand-in for the
``tensorflow.contrib`` that ``bert.modeling`` imports). Without the extra the
test is skipped, with the reason; ``make test`` installs it, so there they run.
"""

from __future__ import annotations

import importlib.metadata
import types

import pytest

_DISTRIBUTION = "bert-tensorflow"


def _reference(name: str) -> types.ModuleType:
    """``bert.NAME``; skips the test without the extra."""
    try:
        importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{_DISTRIBUTION} (google-research/bert) is not installed: "
                    "pip install -e '.[reference]'")
    from benchmarks.google_bert import reference_module

    return reference_module(name)


def create_pretraining_data() -> types.ModuleType:
    """``bert.create_pretraining_data``; skips the test without the extra."""
    return _reference("create_pretraining_data")


def run_classifier() -> types.ModuleType:
    """``bert.run_classifier``; skips the test without the extra."""
    return _reference("run_classifier")


def run_pretraining() -> types.ModuleType:
    """``bert.run_pretraining``; skips the test without the extra."""
    return _reference("run_pretraining")


def run_squad() -> types.ModuleType:
    """``bert.run_squad``; skips the test without the extra."""
    return _reference("run_squad")
