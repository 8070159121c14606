"""Each front end's flag defaults are its options dataclass's (one place each)."""

import dataclasses
import importlib
import json
import os
import sys

import pytest

from tests.conftest import REPOSITORY

pytestmark = pytest.mark.slow  # imports TensorFlow (a worker that has not yet)

FRONT_ENDS = [
    ("run_pretraining", "packed_bert_tf.pretraining.run", "PretrainingOptions",
     ["progress_bar"]),
    ("run_squad", "packed_bert_tf.squad.run", "SquadOptions", ["progress_bar"]),
    ("run_classifier", "packed_bert_tf.classification.run", "ClassifierOptions",
     ["progress_bar"]),
]


def _check(script: str, module: str, options: str) -> dict:
    """In a forked child: the front end's flags, defined and parsed with no
    arguments, against its options' defaults."""
    from absl import flags

    from packed_bert_tf.training.flags import options_from_flags

    sys.argv = [script + ".py"]
    front_end = importlib.import_module(script)
    options = getattr(importlib.import_module(module), options)
    front_end.define_flags()
    flags.FLAGS([script + ".py"])
    from_flags = dataclasses.asdict(options_from_flags(options))
    defaults = dataclasses.asdict(options())
    fields = [field.name for field in dataclasses.fields(options)]
    return {"differ": {name: [from_flags[name], defaults[name]] for name in fields
                       if from_flags[name] != defaults[name]},
            "without_flag": [name for name in fields if name not in flags.FLAGS]}


def _in_a_child(script: str, module: str, options: str) -> dict:
    """`_check` in a child forked from this process: absl's FLAGS are one per
    process, and the front ends define flags of the same names. The packages
    (TensorFlow) are imported here once; the child runs no TensorFlow."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            text = json.dumps(_check(script, module, options))
        except BaseException as error:  # noqa: BLE001 - the parent reports it
            text = json.dumps({"error": repr(error)})
        with os.fdopen(write, "w") as pipe:
            pipe.write(text)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@pytest.fixture(scope="module")
def results():
    if str(REPOSITORY) not in sys.path:  # the front ends are scripts of the repository
        sys.path.insert(0, str(REPOSITORY))
    for _, module, _, _ in FRONT_ENDS:
        importlib.import_module(module)
    return {script: _in_a_child(script, module, options)
            for script, module, options, _ in FRONT_ENDS}


@pytest.mark.parametrize("script, module, options, without_flag", FRONT_ENDS)
def test_flag_defaults_are_the_options_defaults(results, script, module, options,
                                                without_flag):
    assert results[script] == {"differ": {}, "without_flag": without_flag}
