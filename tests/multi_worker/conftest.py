"""The pre-training runs' fixtures: a tiny config file, packed files."""

import pytest

from tests.conftest import write_unpacked_dataset
from tests.pretraining.conftest import config_file  # noqa: F401
from tests.pretraining.tiny_runs import pack_files


@pytest.fixture(scope="module")
def packed_files(tmp_path_factory):
    """3 packed files (sharded by file: 2 for one worker, 1 for the other) of 40
    sequences each: every evaluation reads them all, in each process, a
    collective over gRPC per batch (training repeats them)."""
    folder = tmp_path_factory.mktemp("multi_worker_data")
    return pack_files(write_unpacked_dataset(folder / "unpacked", per_file=40),
                      folder / "packed")
