"""Shared fixtures: the paper's real length histograms from ../shared."""

import numpy as np
import pytest

from packed_bert_tf.packing import histograms


def _real_histogram(name):
    path = histograms.find_histogram(name)
    if path is None:
        pytest.skip(f"the paper's histogram {name!r} is not here (looked in "
                    f"{', '.join(map(str, histograms.histogram_search_path()))})")
    return histograms.load_histogram(str(path))


@pytest.fixture(scope="session")
def wikipedia_512():
    return _real_histogram("wikipedia_512")


@pytest.fixture(scope="session")
def squad_384():
    return _real_histogram("squad_1_1_384")


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
    from packed_bert_tf.data import synthetic, tfrecords

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(num_files):
        lengths = np.where(rng.random(per_file) < 0.3, max_seq_length,
                           rng.integers(5, max_seq_length + 1, per_file))
        arrays = synthetic.unpacked_arrays(
            lengths, max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq, vocab_size=5000,
            seed=seed * 100 + index)
        path = folder / f"unpacked-{index:03d}.tfrecord"
        tfrecords.write_arrays(str(path), arrays)
        paths.append(str(path))
    return paths


@pytest.fixture(scope="session")
def unpacked_files(tmp_path_factory):
    return write_unpacked_dataset(tmp_path_factory.mktemp("unpacked"))
