"""Fixtures of the pre-training run tests: a tiny config file, packed files.

`tiny_runs` (TensorFlow, the models) is imported by the fixtures that need it:
a test file of this folder that uses neither imports no TensorFlow."""

import pytest


@pytest.fixture(scope="module")
def packed_files(unpacked_files, tmp_path_factory):
    from tests.pretraining.tiny_runs import pack_files

    return pack_files(unpacked_files, tmp_path_factory.mktemp("packed"))


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    from tests.pretraining.tiny_runs import CONFIG

    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    CONFIG.to_json_file(str(path))
    return str(path)
