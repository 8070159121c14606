"""Imported for its effect, as a preload of a fork server (`tests.multi_worker.fork_server`): each child
forked from that process then imports as ``python benchmarks/X.py ARGS`` in
a new interpreter would, so that the benchmark scripts run forked (one import
of TensorFlow for several runs, seconds of CPU each):

* the scripts' folder is on the path (they import ``common``, ``throughput``
  from beside them; a new interpreter puts a script's folder first);
* the entries of the run's own ``PYTHONPATH`` that this process lacks are
  searched first for a module not imported yet (a new interpreter puts them
  before the installed packages: a test hides keras_hub that way)."""

import importlib.abc
import importlib.machinery
import os
import sys

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")


class RunPythonPathFinder(importlib.abc.MetaPathFinder):
    """Finds top-level modules in the ``PYTHONPATH`` entries of the process's
    environment that are not on ``sys.path`` (a child's environment is its
    run's, set after the fork)."""

    def find_spec(self, name, path, target=None):
        if path is not None:  # a submodule: its package's own path
            return None
        entries = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                   if entry and os.path.abspath(entry) not in map(os.path.abspath, sys.path)]
        return importlib.machinery.PathFinder.find_spec(name, entries) if entries else None


if BENCHMARKS not in sys.path:
    sys.path.insert(1, BENCHMARKS)  # [0] is the script's folder in a real run
sys.meta_path.insert(0, RunPythonPathFinder())
