"""The pre-training runs' fixtures (a tiny config file, packed files)."""

from tests.pretraining.conftest import config_file, packed_files  # noqa: F401
