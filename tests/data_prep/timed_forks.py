"""`tests.forked_tools` with each run's wall time: the runs of one module that
must end in bounded time share one process's imports (Beam's, seconds of CPU
a process) and still have their own duration.

    python -m tests.data_prep.timed_forks SPEC.json
      SPEC: as `tests.forked_tools`'s
      prints one JSON line: [{"returncode", "stdout", "stderr", "seconds"}, ...]
"""

import importlib
import json
import os
import sys
import time

from tests import forked_tools


def main(spec_path: str) -> None:
    with open(spec_path) as stream:
        spec = json.load(stream)
    # As `tests.forked_tools`: TensorFlow's C++ logging reads the level once.
    had_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for module in spec.get("preload", []):
        importlib.import_module(module)
    if had_level is None:
        del os.environ["TF_CPP_MIN_LOG_LEVEL"]
    results = []
    for run in spec["runs"]:
        start = time.monotonic()
        (result,) = forked_tools.run_all([run])
        results.append(dict(result, seconds=time.monotonic() - start))
    sys.stdout.write("\n" + json.dumps(results) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
