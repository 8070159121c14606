"""Each front end's flag defaults are its options dataclass's (one place each)."""

import pytest

from tests.conftest import run_json_check

_SCRIPT = """
import dataclasses, json, sys
sys.argv = ["{script}.py"]
import {script}
from absl import flags
from {module} import {options}
from packed_bert_tf.training.flags import options_from_flags
{script}.define_flags()
flags.FLAGS(["{script}.py"])
from_flags = dataclasses.asdict(options_from_flags({options}))
defaults = dataclasses.asdict({options}())
fields = [field.name for field in dataclasses.fields({options})]
print(json.dumps({{"differ": {{name: [from_flags[name], defaults[name]] for name in fields
                             if from_flags[name] != defaults[name]}},
                  "without_flag": [name for name in fields if name not in flags.FLAGS]}}))
"""


@pytest.mark.parametrize("script, module, options, without_flag", [
    ("run_pretraining", "packed_bert_tf.pretraining.run", "PretrainingOptions",
     ["progress_bar"]),
    ("run_squad", "packed_bert_tf.squad.run", "SquadOptions", ["progress_bar"]),
    ("run_classifier", "packed_bert_tf.classification.run", "ClassifierOptions",
     ["progress_bar"]),
])
def test_flag_defaults_are_the_options_defaults(script, module, options, without_flag):
    result = run_json_check("-c", _SCRIPT.format(script=script, module=module,
                                                 options=options))
    assert result == {"differ": {}, "without_flag": without_flag}
