"""Helpers of the multi-worker tests: worker processes of one cluster on
127.0.0.1 (TF_CONFIG, free ports), one process with 2 CPU replicas to compare
them with, and what their runs left behind.

Each worker has one CPU device (MultiWorkerMirroredStrategy's one replica per
worker without a GPU), so 2 workers run 2 replicas, as one process of
``tests.multi_worker.two_cpu_replicas`` does with ``mirrored``. Processes are
started together, each forked from a server that imported TensorFlow once
(`tests.multi_worker.fork_server`: each still traces, and compiles where
asked, tens of seconds of CPU); `killed_at_the_end` kills whatever still runs
when a test ends.
"""

import contextlib
import json
import pathlib
import re
import socket
import subprocess

import numpy as np
import tensorflow as tf

from tests.conftest import finish_tool
from tests.graph_options import GRAPPLER_OFF

#: The strategy flag value of the worker processes.
MULTI = "multi_worker_mirrored"


def free_ports(count: int) -> list:
    """Ports nothing listens on now (bound to 0, read, released)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def tf_config(addresses, index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses},
                       "task": {"type": "worker", "index": index}})


def start_workers(server, tool: str, flags: list, count: int = 2, *, indices=None):
    """Worker processes of one cluster on 127.0.0.1 (``indices``: only those),
    forked by ``server`` (a `ForkServer`)."""
    addresses = [f"127.0.0.1:{port}" for port in free_ports(count)]
    return [server.start_tool(tool, *flags, imports=GRAPPLER_OFF,
                              env={"TF_CONFIG": tf_config(addresses, index)})
            for index in (range(count) if indices is None else indices)]


def start_two_replicas(server, tool: str, flags: list):
    """One process with 2 logical CPU devices, --distribution_strategy=mirrored."""
    return server.start_tool("tests.multi_worker.two_cpu_replicas", tool, *flags,
                             "--distribution_strategy=mirrored", imports=GRAPPLER_OFF)


def run_both_ways(server, tool: str, flags_of, timeout: float = 400) -> dict:
    """``tool`` as 2 workers and as one process of 2 replicas, at the same time,
    forked by ``server``.

    Args:
      server: the fork server that starts the processes.
      tool: the tool to run (as `run_tool` takes it).
      flags_of: ``flags_of(name)``: the flags of the run ``two_workers`` or
        ``one_process`` (their own --output_dir each), without
        --distribution_strategy.
      timeout: seconds to wait for each process (`finish_tool`).

    Returns:
      {"workers": [chief's, other's ToolResult], "one_process": ToolResult}.
    """
    processes = (start_workers(server, tool, [*flags_of("two_workers"),
                                              f"--distribution_strategy={MULTI}"])
                 + [start_two_replicas(server, tool, flags_of("one_process"))])
    with killed_at_the_end(processes):
        results = finish_all(processes, timeout=timeout)
    return {"workers": results[:2], "one_process": results[2]}


@contextlib.contextmanager
def killed_at_the_end(processes):
    """Kills (SIGKILL) every process still running when the block ends."""
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.communicate(timeout=10)


def finish_all(processes, timeout=400):
    results = [finish_tool(process, timeout=timeout) for process in processes]
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    return results


def weights(checkpoint_path) -> dict:
    reader = tf.train.load_checkpoint(str(checkpoint_path))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def max_difference(a: dict, b: dict) -> float:
    assert sorted(a) == sorted(b)
    return max(float(np.max(np.abs(a[name] - b[name]))) for name in a)


def worker_folder(result) -> pathlib.Path:
    """The temporary folder a worker other than the chief wrote into (from its log)."""
    found = re.search(r"its own files go to (\S+),", result.stderr)
    assert found, result.stderr[-2000:]
    return pathlib.Path(found.group(1))
