"""The in-process tool runner (`tests.tool_runs.run_main`) leaves the process
as a new one would find it: a script's flags go with its run."""

import sys

from absl import flags
from absl.flags import _helpers

from tests import tool_runs


def test_a_benchmark_script_runs_again_after_its_helper_module_is_dropped(tmp_path):
    for _ in range(2):
        result = tool_runs.run_main("benchmarks/time_to_train.py", "--seeds=a",
                                    f"--work_dir={tmp_path}", tmp_path=tmp_path)
        assert (result.returncode, result.last_line) == (
            1, "time_to_train: --seeds=a: expected distinct non-negative integers"), \
            result.stderr[-2000:]
        assert "setting" not in flags.FLAGS
        # absl knows the modules that disclaim their flags by id(): each such
        # id must stay the id of a live module, never of a freed one that a
        # later script's __main__ could be given.
        live = {id(module) for module in [*sys.modules.values(), *tool_runs._RETIRED_MODULES]}
        assert _helpers.disclaim_module_ids <= live
