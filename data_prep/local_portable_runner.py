"""Beam's portability framework on one machine: a job service and an SDK worker
pool, each a process of its own, as a cluster runs them.

A cluster (Flink, Spark, Dataflow's Runner v2) runs a Python pipeline through
Beam's portability framework: the launching process submits the pipeline to a
job service, and the DoFns run in SDK worker processes that share no memory
with either. `local_portable_runner` starts the same pieces here, Beam's own
pure-Python ones (no Java, no Docker):

- the job service, ``python -m apache_beam.runners.portability.local_job_service_main``;
- an SDK worker pool, ``python -m apache_beam.runners.worker.worker_pool_main``,
  which starts one SDK worker process per worker the job service asks for
  (``--environment_type=EXTERNAL``).

It yields the Beam options that send a tool's pipeline there, and stops both
services, with every worker process they started, on the way out. The tests
and the data-prep benchmark use it; docs/pack_pretraining_data.md gives the same two
commands to run by hand.

Two properties of Beam's Python job service (2.77) matter when reading its
figures: it runs one SDK worker at a time (it is a reference job server: its
runner ignores ``--direct_num_workers``), and the worker pool starts each SDK
worker with the ``python`` first on ``PATH``, so that ``PATH`` leads to the
interpreter with the project installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

#: How long each service gets to come up (Beam's import is a few seconds).
START_TIMEOUT_S = 60
#: How long each service gets to stop after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 10
_WORKER_POOL_ADDRESS = re.compile(r"Started worker pool servicer at port: (\S+:\d+)")


@dataclasses.dataclass(frozen=True)
class PortableServices:
    """Where the running services listen, and what they logged."""

    job_endpoint: str  # HOST:PORT of the job service
    worker_pool: str  # HOST:PORT of the SDK worker pool
    worker_pool_log: str  # the pool's stderr, with its SDK workers'
    job_service_log: str
    worker_pool_pid: int
    job_service_pid: int

    @property
    def pipeline_args(self) -> list[str]:
        """Beam options that run a pipeline on these services."""
        return ["--runner=PortableRunner", f"--job_endpoint={self.job_endpoint}",
                "--environment_type=EXTERNAL",
                f"--environment_config={self.worker_pool}"]


def _stop(process: subprocess.Popen) -> None:
    """Stops a service and every process it started (its own process group)."""
    if process.poll() is not None:
        # The service is gone; what it started may not be.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # SDK workers the pool left (their group is the pool's): none must outlive it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _wait_for(what: str, process: subprocess.Popen, log: str, ready) -> str:
    """Polls ``ready()`` until it returns a value; RuntimeError quoting the log
    if the service exits or takes longer than `START_TIMEOUT_S`."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        if process.poll() is not None:
            break
        time.sleep(0.1)
    with open(log, errors="replace") as f:
        tail = f.read()[-2000:]
    state = (f"exited with status {process.returncode}" if process.poll() is not None
             else f"not ready after {START_TIMEOUT_S} s")
    raise RuntimeError(f"{what} {state}:\n{tail}")


@contextlib.contextmanager
def local_portable_runner(log_dir: str | None = None, *, environment=None, cwd=None):
    """Starts a Beam job service and an SDK worker pool; yields `PortableServices`.

    Both services run in process groups of their own, stopped (SIGTERM, then
    SIGKILL) with every worker process they started on the way out, whatever
    happened inside the ``with``.

    Args:
      log_dir: str, optional. Where the services' logs (and the job service's
        port file) go; a temporary folder by default, removed afterwards.
      environment: a mapping, optional. The SDK worker pool's environment (its
        workers inherit it): what they need to import the pipeline's code
        (``PYTHONPATH``). The directory of this interpreter is put first on
        its ``PATH`` (the pool starts workers as ``python``). The job service
        gets this process's environment without ``PYTHONPATH``: it never runs
        the pipeline's code.
      cwd: str, optional. The services' working folder (default: a fresh
        temporary one, so that nothing resolves against the launching
        process's folder).
    """
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="beam-services-"))
        if cwd is None:
            cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="beam-cwd-"))
        python_dir = os.path.dirname(sys.executable)
        pool_environment = dict(environment if environment is not None else os.environ)
        pool_environment["PATH"] = os.pathsep.join([python_dir,
                                                    pool_environment.get("PATH", "")])
        service_environment = dict(os.environ)
        service_environment.pop("PYTHONPATH", None)

        port_file = os.path.join(log_dir, "job_service.port")
        job_log = os.path.join(log_dir, "job_service.log")
        pool_log = os.path.join(log_dir, "worker_pool.log")
        processes = []
        stack.callback(lambda: [_stop(p) for p in reversed(processes)])
        with open(job_log, "w") as job_out, open(pool_log, "w") as pool_out:
            processes.append(subprocess.Popen(
                [sys.executable, "-m",
                 "apache_beam.runners.portability.local_job_service_main", "--port=0",
                 f"--port_file={port_file}"],
                stdin=subprocess.DEVNULL, stdout=job_out, stderr=subprocess.STDOUT,
                cwd=cwd, env=service_environment, start_new_session=True))
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                 "--service_port=0"],
                stdin=subprocess.DEVNULL, stdout=pool_out, stderr=subprocess.STDOUT,
                cwd=cwd, env=pool_environment, start_new_session=True))
        job_service, worker_pool = processes

        def port_written():
            with contextlib.suppress(OSError), open(port_file) as f:
                return f.read().strip()
            return None

        def pool_listening():
            with open(pool_log, errors="replace") as f:
                found = _WORKER_POOL_ADDRESS.search(f.read())
            return found and found[1]

        port = _wait_for("the Beam job service", job_service, job_log, port_written)
        pool_address = _wait_for("the SDK worker pool", worker_pool, pool_log,
                                 pool_listening)
        yield PortableServices(
            job_endpoint=f"localhost:{port}", worker_pool=pool_address,
            worker_pool_log=pool_log, job_service_log=job_log,
            worker_pool_pid=worker_pool.pid, job_service_pid=job_service.pid)
