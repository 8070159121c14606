"""Several worker processes (``--distribution_strategy=multi_worker_mirrored``).

The cluster comes from ``TF_CONFIG``, the standard way: every worker gets the
same ``cluster`` and its own ``task``::

    TF_CONFIG='{"cluster": {"worker": ["host0:2222", "host1:2222"]},
                "task": {"type": "worker", "index": 0}}'

The chief (task ``chief``, else ``worker`` 0) alone writes into
``--output_dir``; the other workers read the chief's checkpoints from it
(a folder every worker sees) and write into a temporary folder of their own,
removed at the end (`packed_bert_tf.training.output_dirs.worker_output_dirs`).

Failures are bounded in time: connecting to the cluster gives up after
``timeout_seconds`` (`create_multi_worker_strategy`: one line, the process
killed; TensorFlow would wait for a missing worker forever), and once connected,
TensorFlow's coordination service notices a worker that stopped (killed,
its host gone) by its missing heartbeats, about 10 s, and aborts the
collectives of the others; `cluster_errors` turns that into one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys

from absl import logging

#: The environment variable that describes the cluster.
TF_CONFIG = "TF_CONFIG"

#: The jobs a cluster of `tf.distribute.MultiWorkerMirroredStrategy` may have.
JOBS = ("chief", "worker")


class ClusterError(ValueError):
    """A bad ``TF_CONFIG``, or a worker lost or unreachable: the run cannot go on."""


@dataclasses.dataclass(frozen=True)
class WorkerTask:
    """This process's place in the cluster of ``TF_CONFIG``.

    Attributes:
      task_type: ``chief`` or ``worker``.
      task_id: the index within its job.
      addresses: ``host:port`` of every task, the chief first.
      index: this task's position in `addresses`.
      names: ``"chief 0"``, ``"worker 1"``, ... of every task, as `addresses`.
    """

    task_type: str
    task_id: int
    addresses: tuple
    index: int
    names: tuple = ()

    @property
    def num_workers(self) -> int:
        return len(self.addresses)

    @property
    def is_chief(self) -> bool:
        """The chief writes checkpoints, summaries and exported weights."""
        return self.index == 0

    @property
    def name(self) -> str:
        return f"{self.task_type} {self.task_id}"


#: One process, no ``TF_CONFIG``: its own chief.
SINGLE_WORKER = WorkerTask("worker", 0, ("localhost",), 0, ("worker 0",))


def parse_tf_config(text: str | None) -> WorkerTask:
    """This worker's task from the text of ``TF_CONFIG`` (None or empty: `SINGLE_WORKER`).

    Raises:
      ClusterError: not JSON, no ``cluster`` or ``task``, a job other than
        ``chief`` and ``worker``, more than one chief, an address that is not
        ``host:port`` or given twice, or a task not in the cluster.
    """
    if not text or not text.strip():
        return SINGLE_WORKER
    try:
        config = json.loads(text)
    except ValueError as error:
        raise ClusterError(f"{TF_CONFIG} is not JSON ({error})") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict) \
            or not isinstance(config.get("task"), dict):
        raise ClusterError(f'{TF_CONFIG} needs "cluster" and "task" objects, e.g. '
                           f'{{"cluster": {{"worker": ["host0:2222", "host1:2222"]}}, '
                           f'"task": {{"type": "worker", "index": 0}}}}')
    cluster, task = config["cluster"], config["task"]
    for job, addresses in cluster.items():
        if job not in JOBS:
            raise ClusterError(f"{TF_CONFIG}: job {job!r} is not one of {', '.join(JOBS)} "
                               f"(multi_worker_mirrored has no parameter servers or "
                               f"evaluators)")
        if not isinstance(addresses, list) or not addresses:
            raise ClusterError(f"{TF_CONFIG}: job {job!r} needs a list of host:port "
                               f"addresses, got {addresses!r}")
        for address in addresses:
            if not isinstance(address, str) or not re.fullmatch(r"[^\s:]+:\d+", address):
                raise ClusterError(f"{TF_CONFIG}: {address!r} in job {job!r} is not "
                                   f"host:port")
    if len(cluster.get("chief", [])) > 1:
        raise ClusterError(f"{TF_CONFIG}: {len(cluster['chief'])} chiefs, at most 1")
    ordered = [(job, index, address) for job in JOBS
               for index, address in enumerate(cluster.get(job, []))]
    addresses = [address for _, _, address in ordered]
    if not addresses:
        raise ClusterError(f"{TF_CONFIG}: the cluster has no worker")
    twice = sorted({address for address in addresses if addresses.count(address) > 1})
    if twice:
        raise ClusterError(f"{TF_CONFIG}: {', '.join(twice)} given for two tasks")
    task_type, task_id = task.get("type"), task.get("index", 0)
    if not isinstance(task_id, int) or isinstance(task_id, bool):
        raise ClusterError(f"{TF_CONFIG}: task index {task_id!r} is not an integer")
    if task_type not in cluster or not 0 <= task_id < len(cluster[task_type]):
        raise ClusterError(f"{TF_CONFIG}: task {task_type!r} {task_id} is not in the "
                           f"cluster ({', '.join(f'{len(v)} {k}' for k, v in cluster.items())})")
    index = [(job, i) for job, i, _ in ordered].index((task_type, task_id))
    return WorkerTask(task_type, task_id, tuple(addresses), index,
                      tuple(f"{job} {i}" for job, i, _ in ordered))


def current_task(strategy_name: str) -> WorkerTask:
    """This process's task: from ``TF_CONFIG`` under ``multi_worker_mirrored``,
    else `SINGLE_WORKER` (``TF_CONFIG`` is then ignored)."""
    if strategy_name != "multi_worker_mirrored":
        return SINGLE_WORKER
    return parse_tf_config(os.environ.get(TF_CONFIG))


def check_worker_count(batch_size: int, task: WorkerTask, flag: str) -> None:
    """Refuses a batch size the workers cannot share, before connecting to them."""
    if batch_size >= 1 and batch_size % task.num_workers:
        raise ClusterError(f"{flag}={batch_size} is not a multiple of the "
                           f"{task.num_workers} workers of {TF_CONFIG}")


def program_name() -> str:
    """The running tool's name (``run_pretraining``), as its error lines begin."""
    return os.path.splitext(os.path.basename(sys.argv[0] or "python"))[0]


# The watchdog of `create_multi_worker_strategy`, a process of its own: while
# TensorFlow waits for the cluster its C++ holds the interpreter lock, so no
# Python thread of the waiting process would run. stdin closes (end of file)
# when the process connected, or died.
_WATCHDOG = """
import os, select, signal, sys
pid, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], seconds)
if not ready:
    sys.stderr.write(message + "\\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
"""


def create_multi_worker_strategy(task: WorkerTask, *, timeout_seconds: float):
    """`tf.distribute.MultiWorkerMirroredStrategy` over the cluster of ``TF_CONFIG``,
    connected within ``timeout_seconds``.

    Every worker must start and reach the others: TensorFlow waits for a
    missing one forever, so after ``timeout_seconds`` a watchdog process
    writes one line ``PROGRAM: ...`` naming the cluster to stderr and kills
    this process (SIGKILL: TensorFlow's wait can be interrupted by nothing
    else; it catches SIGTERM).
    """
    import tensorflow as tf

    message = (f"{program_name()}: {task.name} of {task.num_workers} could not connect "
               f"to the cluster of {TF_CONFIG} ({', '.join(task.addresses)}) within "
               f"{timeout_seconds:g} s: start every worker, and check that each address "
               f"is reachable")
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(timeout_seconds), message],
        stdin=subprocess.PIPE)
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    finally:
        watchdog.stdin.close()
        watchdog.wait()
    logging.info("%s of %d workers (%s): %d replicas in sync", task.name, task.num_workers,
                 "chief" if task.is_chief else "not the chief",
                 strategy.num_replicas_in_sync)
    return strategy


# Peers' messages name their tasks as /job:worker/replica:0/task:1.
_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")


def unreachable_peers(task: WorkerTask, timeout_seconds: float = 2.0) -> list:
    """The other tasks whose address refuses a TCP connection or does not
    answer within the timeout (a killed peer's gRPC port is closed), each as
    ``(name, why)``."""
    lost = []
    for index, (name, address) in enumerate(zip(task.names, task.addresses)):
        if index == task.index:
            continue
        host, port = address.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=timeout_seconds).close()
        except ConnectionRefusedError:
            lost.append((name, "its address refuses connections"))
        except OSError:
            lost.append((name, "its address does not answer"))
    return lost


def describe_cluster_failure(error, task: WorkerTask | None = None) -> str:
    """One line from TensorFlow's (multi-line) error when a peer is lost.

    A peer killed mid-step may show first as a broken RPC that names no task;
    with `task` given, the peers are then probed (`unreachable_peers`).
    """
    text = getattr(error, "message", str(error))
    if "unhealthy" in text or "heartbeat" in text:
        lost = sorted({f"{job} {index}" for job, index in _TASK.findall(
            text.split("unhealthy", 1)[-1])})
        return f"{', '.join(lost) or 'a worker'} stopped (no heartbeat)"
    # A peer killed mid-step is usually seen first as a broken RPC to it
    # ("remote target /job:worker/replica:0/task:1 ... Connection reset by peer"),
    # before the heartbeat notices.
    remote = sorted({f"{job} {index}" for job, index in re.findall(
        r"remote target " + _TASK.pattern, text)})
    broken = re.search(r"Connection reset by peer|Socket closed|Connection refused|"
                       r"Broken pipe", text, flags=re.IGNORECASE)
    if remote and broken:
        return f"{', '.join(remote)} stopped ({broken.group(0).lower()})"
    closed = unreachable_peers(task) if task is not None else []
    if closed:
        return ", ".join(f"{name} stopped ({why})" for name, why in closed)
    for pattern in (r"Failed to connect to remote host: [^\n\"]*", r"Connection refused",
                    r"Socket closed", r"Deadline Exceeded"):
        found = re.search(pattern, text)
        if found:
            return f"lost the connection to a peer ({found.group(0).strip()})"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first[:200]}"


@contextlib.contextmanager
def cluster_errors(task: WorkerTask, output_dir: str | None):
    """Turns the errors of a lost peer (TensorFlow's ``UnavailableError``,
    ``DeadlineExceededError``, ``AbortedError``, ``CancelledError``) into one
    `ClusterError` line saying how to resume; only when there are several
    workers (one process's errors pass unchanged)."""
    import tensorflow as tf

    if task.num_workers == 1:
        yield
        return
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            tf.errors.AbortedError, tf.errors.CancelledError) as error:
        where = f" in {output_dir}" if output_dir else ""
        raise ClusterError(f"{task.name} of {task.num_workers}: the cluster failed: "
                           f"{describe_cluster_failure(error, task)}; restart every worker to "
                           f"resume from the last checkpoint{where}") from None


def chief_value(strategy, value: int, task: WorkerTask) -> int:
    """The chief's ``value`` (a non-negative integer), on every worker.

    What one process decides alone (a seed drawn at random) must be the same
    in all of them: each replica offers its worker's value, the others' -1,
    and the largest is the chief's.
    """
    import tensorflow as tf

    if task.num_workers == 1:
        return value
    offered = value if task.is_chief else -1

    @tf.function(autograph=False)
    def gathered():
        values = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant([offered], tf.int64))
        return strategy.gather(values, axis=0)

    return int(max(gathered().numpy()))


def check_same_step(strategy, step: int, task: WorkerTask) -> None:
    """Every worker must resume from the same step (the chief's checkpoint, read
    from a folder they all see); the replicas' steps are gathered and compared.

    Raises:
      ClusterError: this worker's step differs from another's.
    """
    import tensorflow as tf

    if task.num_workers == 1:
        return

    @tf.function(autograph=False)
    def gathered():
        value = strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant([step], tf.int64))
        return strategy.gather(value, axis=0)

    steps = sorted({int(s) for s in gathered().numpy()})
    if steps != [step]:
        raise ClusterError(f"{task.name} resumes from step {step} but the workers resume "
                           f"from steps {', '.join(map(str, steps))}: --output_dir must "
                           f"be one folder every worker sees (a shared file system or "
                           f"gs://)")
