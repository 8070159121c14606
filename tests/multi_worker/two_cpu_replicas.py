"""Runs a front end (``run_pretraining.py``, ``run_squad.py``) in one process with
2 logical CPU devices, for ``--distribution_strategy=mirrored`` runs to compare
against 2 worker processes. Usage: python -m tests.multi_worker.two_cpu_replicas
TOOL.py FLAGS... (the logical devices must be configured before TensorFlow
runs any op, hence a process of its own: a fresh one, or one forked by
`tests.multi_worker.fork_server`, which imports TensorFlow but runs no op)."""

import runpy
import sys

import tensorflow as tf

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

if __name__ == "__main__":
    tool = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(tool, run_name="__main__")
