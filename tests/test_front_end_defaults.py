"""Each front end's flag defaults are its options dataclass's (one place each)."""

import dataclasses
import importlib

import pytest

from tests.tool_runs import defined_flags

pytestmark = pytest.mark.slow  # imports TensorFlow (a worker that has not yet)

FRONT_ENDS = [
    ("run_pretraining", "packed_bert_tf.pretraining.run", "PretrainingOptions",
     ["progress_bar"]),
    ("run_squad", "packed_bert_tf.squad.run", "SquadOptions", ["progress_bar"]),
    ("run_classifier", "packed_bert_tf.classification.run", "ClassifierOptions",
     ["progress_bar"]),
]


def _check(script: str, module: str, options: str) -> dict:
    """The front end's flags, defined and parsed with no arguments, against its
    options' defaults; the flags deleted again after (the front ends define
    flags of the same names)."""
    from packed_bert_tf.training.flags import options_from_flags

    front_end = importlib.import_module(script)
    options = getattr(importlib.import_module(module), options)
    with defined_flags(front_end.define_flags) as flag_values:
        flag_values([script + ".py"])
        from_flags = dataclasses.asdict(options_from_flags(options))
        fields = [field.name for field in dataclasses.fields(options)]
        without_flag = [name for name in fields if name not in flag_values]
    defaults = dataclasses.asdict(options())
    return {"differ": {name: [from_flags[name], defaults[name]] for name in fields
                       if from_flags[name] != defaults[name]},
            "without_flag": without_flag}


@pytest.fixture(scope="module")
def results():
    return {script: _check(script, module, options)
            for script, module, options, _ in FRONT_ENDS}


@pytest.mark.parametrize("script, module, options, without_flag", FRONT_ENDS)
def test_flag_defaults_are_the_options_defaults(results, script, module, options,
                                                without_flag):
    assert results[script] == {"differ": {}, "without_flag": without_flag}
