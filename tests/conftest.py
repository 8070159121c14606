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
