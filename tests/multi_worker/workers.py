"""Helpers of the multi-worker tests: worker processes of one cluster on
127.0.0.1 (TF_CONFIG, reserved ports), one process with 2 CPU replicas to
compare them with, and what their runs left behind.

Each worker has one CPU device (MultiWorkerMirroredStrategy's one replica per
worker without a GPU), so 2 workers run 2 replicas, as one process with 2
logical CPU devices does with ``mirrored``. Every process is a fresh
interpreter (`tests.tool_runs.start_tool`), with TensorFlow's graph optimizer
off (no check here is about it); `killed_at_the_end` kills whatever still
runs when a test ends.
"""

import contextlib
import fcntl
import json
import os
import pathlib
import random
import re
import socket
import subprocess
import tempfile

import numpy as np
import tensorflow as tf

from tests.tool_runs import finish_tool, start_tool

#: The strategy flag value of the worker processes.
MULTI = "multi_worker_mirrored"

#: The lock files of the ports this process reserved, held open until it ends.
_reservations = []


def _ephemeral_ports() -> range:
    """The ports the kernel hands out to ``bind(0)`` and outgoing connections."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            low, high = map(int, ports.read().split())
    except OSError:
        low, high = 32768, 60999
    return range(low, high + 1)


def reserve_ports(count: int) -> list:
    """Ports for a cluster's workers, reserved until this process ends.

    A port found free and released would be free for anyone until a worker
    binds it: another process may take it meanwhile. These come from below the
    kernel's ephemeral range (no other process is given one unasked), each
    locked by a file lock that the test processes on this machine respect,
    and checked free by a bind."""
    ephemeral = _ephemeral_ports()
    candidates = [port for port in range(10_000, 32_768) if port not in ephemeral]
    folder = os.path.join(tempfile.gettempdir(), "packed_bert_tf_test_ports")
    os.makedirs(folder, exist_ok=True)
    ports = []
    for port in random.Random().sample(candidates, len(candidates)):
        lock = open(os.path.join(folder, f"{port}.lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            lock.close()
            continue
        _reservations.append(lock)
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"no {count} free ports below {ephemeral.start}")


def tf_config(addresses, index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses},
                       "task": {"type": "worker", "index": index}})


def start_workers(tool: str, flags: list, count: int = 2, *, indices=None):
    """Worker processes of one cluster on 127.0.0.1 (``indices``: only those)."""
    addresses = [f"127.0.0.1:{port}" for port in reserve_ports(count)]
    return [start_tool(tool, *flags, grappler_off=True,
                       env={"TF_CONFIG": tf_config(addresses, index)})
            for index in (range(count) if indices is None else indices)]


def start_two_replicas(tool: str, flags: list):
    """One process with 2 logical CPU devices, --distribution_strategy=mirrored."""
    return start_tool(tool, *flags, "--distribution_strategy=mirrored",
                      two_cpu_replicas=True, grappler_off=True)


def run_both_ways(tool: str, flags_of, timeout: float = 600) -> dict:
    """``tool`` as 2 workers and as one process of 2 replicas, at the same time.

    Args:
      tool: the tool to run (as `tests.tool_runs.start_tool` takes it).
      flags_of: ``flags_of(name)``: the flags of the run ``two_workers`` or
        ``one_process`` (their own --output_dir each), without
        --distribution_strategy.
      timeout: seconds to wait for each process (`finish_tool`).

    Returns:
      {"workers": [chief's, other's ToolResult], "one_process": ToolResult}.
    """
    processes = (start_workers(tool, [*flags_of("two_workers"),
                                      f"--distribution_strategy={MULTI}"])
                 + [start_two_replicas(tool, flags_of("one_process"))])
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


def finish_all(processes, timeout=600):
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
