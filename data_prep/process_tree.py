"""The processes under this one: listing them, and stopping them all.

`kill_descendants` is how `pack_pretraining_data` stops Beam's local workers
when it is interrupted (each worker is a ``sh -c`` and its ``python``; one may
be starting as the signal comes). Linux ``/proc``; elsewhere there is nothing
to list.
"""

from __future__ import annotations

import os
import signal
import time


def descendants(pid: int) -> dict[int, str]:
    """Every descendant of a process, with its state letter (``R``, ``S``,
    ``T`` stopped, ``Z`` ended and not yet reaped, ...); Linux /proc, else none."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (name) state ppid ...": the name may hold anything.
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
        children.setdefault(int(parent), []).append((int(entry), state))
    found, pending = {}, [pid]
    while pending:
        for child, state in children.get(pending.pop(), []):
            found[child] = state
            pending.append(child)
    return found


def kill_descendants() -> None:
    """Kills every process under this one: Beam's workers, each a ``sh -c``
    and its ``python``, some perhaps starting.

    Each is frozen first (SIGSTOP), and the tree scanned again once they are
    all stopped, until a scan finds nothing new: a frozen process starts no
    other, and none is killed while it could leave a child to init, out of
    reach. A worker left behind would wait for its dead runner forever.
    """
    frozen: set[int] = set()
    for _ in range(100):  # a tree that keeps growing is not Beam's
        running = [pid for pid, state in descendants(os.getpid()).items()
                   if pid not in frozen and state != "Z"]
        if not running:
            break
        for pid in running:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
            frozen.add(pid)
        deadline = time.monotonic() + 1.0  # SIGSTOP lands asynchronously
        while time.monotonic() < deadline and any(
                state not in "TtZ" for pid, state in descendants(os.getpid()).items()
                if pid in frozen):
            time.sleep(0.001)
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
