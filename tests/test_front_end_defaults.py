"""Each front end's flag defaults are its options dataclass's (one place each)."""

import json

import pytest

from tests.conftest import run_json_check

pytestmark = pytest.mark.slow  # a process that imports TensorFlow

FRONT_ENDS = [
    ("run_pretraining", "packed_bert_tf.pretraining.run", "PretrainingOptions",
     ["progress_bar"]),
    ("run_squad", "packed_bert_tf.squad.run", "SquadOptions", ["progress_bar"]),
    ("run_classifier", "packed_bert_tf.classification.run", "ClassifierOptions",
     ["progress_bar"]),
]

# One process imports the packages (TensorFlow) once; each front end defines
# its flags in a child forked from it, as absl's FLAGS are one per process.
_SCRIPT = """
import dataclasses, importlib, json, os, sys
from absl import flags
from packed_bert_tf.training.flags import options_from_flags

def check(script, module, options):
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

cases = json.loads(sys.argv[1])
for _, module, _ in cases:
    importlib.import_module(module)
results = {}
for script, module, options in cases:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            text = json.dumps(check(script, module, options))
        except BaseException as error:
            text = json.dumps({"error": repr(error)})
        with os.fdopen(write, "w") as pipe:
            pipe.write(text)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[script] = json.loads(pipe.read())
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def results():
    return run_json_check("-c", _SCRIPT, json.dumps([case[:3] for case in FRONT_ENDS]))


@pytest.mark.parametrize("script, module, options, without_flag", FRONT_ENDS)
def test_flag_defaults_are_the_options_defaults(results, script, module, options,
                                                without_flag):
    assert results[script] == {"differ": {}, "without_flag": without_flag}
