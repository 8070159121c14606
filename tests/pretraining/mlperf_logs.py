"""Reading a run's MLPerf log, and MLPerf's compliance checker on it."""

import json
import subprocess
import sys


def mllog_lines(path) -> list:
    """The ``:::MLLOG`` lines of ``path``, each as its JSON object."""
    return [json.loads(line.split(":::MLLOG ", 1)[1])
            for line in open(path) if line.startswith(":::MLLOG ")]


def compliance_check(log, folder):
    """MLPerf's compliance checker (ruleset 5.0.0) on one log, in its own process
    as MLPerf runs it."""
    return subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", "5.0.0", "--log_output", str(folder / "checker.log"), str(log)],
        capture_output=True, text=True, timeout=300, cwd=folder)
