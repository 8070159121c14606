"""Fixtures of the pre-training run tests: a tiny config file, packed files."""

import pytest

from tests.pretraining.tiny_runs import CONFIG, pack_files


@pytest.fixture(scope="module")
def packed_files(unpacked_files, tmp_path_factory):
    return pack_files(unpacked_files, tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    CONFIG.to_json_file(str(path))
    return str(path)
