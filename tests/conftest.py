"""Shared fixtures: the paper's real length histograms and small generated
datasets (the ways to run the project's tools are in `tests.tool_runs`)."""

import os

import numpy as np
import pytest

from packed_bert_tf.packing import histograms

# XLA's back end (LLVM) at its lowest optimisation level, for this process and
# every process a test starts (they inherit the environment), set before any
# of them compiles: the tests check what compiled steps compute, not how fast
# they run, and each compilation then costs about a third less CPU.
XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
if XLA_TEST_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()


def pytest_collection_modifyitems(config, items):
    """The test files marked slow first, in their own order (the sort is
    stable): the two xdist workers then share out the short files last
    instead of one worker finishing a long file alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="module")
def grappler_off_for_module():
    """TensorFlow's graph optimizer off for a module's tests, restored after
    (`tests.graph_options`): each new step or evaluation function spends
    about a second of CPU in it, and no check of those modules is about it.
    A module asks for it with ``pytest.mark.usefixtures``."""
    from tests.graph_options import grappler_off

    with grappler_off():
        yield


@pytest.fixture(scope="session")
def wikipedia_512():
    return histograms.load_histogram("wikipedia_512")


@pytest.fixture(scope="session")
def squad_384():
    return histograms.load_histogram("squad_1_1_384")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# Small unpacked pre-training datasets (generated, never committed).
SMALL_SEQ_LENGTH = 64
SMALL_PREDICTIONS = 10


def write_unpacked_dataset(folder, *, num_files=3, per_file=300, seed=0,
                           max_seq_length=SMALL_SEQ_LENGTH,
                           max_predictions_per_seq=SMALL_PREDICTIONS):
    """Writes unpacked shards of synthetic sequences (a third at full length)."""
    from packed_bert_tf.data.records import record_files, synthetic_records

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(num_files):
        lengths = np.where(rng.random(per_file) < 0.3, max_seq_length,
                           rng.integers(5, max_seq_length + 1, per_file))
        arrays = synthetic_records.unpacked_arrays(
            lengths, max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq, vocab_size=5000,
            seed=seed * 100 + index)
        path = folder / f"unpacked-{index:03d}.tfrecord"
        record_files.write_arrays(str(path), arrays)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="session")
def unpacked_files(tmp_path_factory):
    return write_unpacked_dataset(tmp_path_factory.mktemp("unpacked"))
