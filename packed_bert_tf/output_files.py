"""What a run writes: never one of its inputs, one run at a time, all at its end.

Every tool and script that writes files shares three rules, and this module
is where each is kept (plain Python: the data tools import no TensorFlow):

- `check_outputs_apart`: no output is also an input, or another output of
  the same run (``a``, ``./a``, a symbolic or hard link to it: one file);
  `check_folder_holds_no_input`: a folder a run replaces files in holds
  none of its inputs.
- `output_lock` (`lock_outputs` for a run's outputs by flag): one run at a
  time writes a folder, or a set of files that belong together. A second run
  is refused with the first one's pid and host; a lock left by a killed run
  is taken over with a warning.
- `renamed_at_exit`: a file is written under a temporary name and gets its
  own only when the whole run succeeded, together with the run's other
  outputs; otherwise it is removed (`filesystem.PendingFile`).

Paths of other file systems (``gs://``, ...) are compared as written and
never locked: object stores have no exclusive create.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from typing import Callable, Iterator, Mapping, Sequence

from packed_bert_tf.filesystem import PendingFile, is_local

#: The lock file inside a locked folder.
LOCK_FILE = ".lock"


def _identity(path: str):
    """What makes two names one file: the device and inode of an existing local
    file, else its resolved path (a remote path: as written)."""
    if not is_local(path):
        return path
    resolved = os.path.realpath(path)
    try:
        status = os.stat(resolved)
    except OSError:
        return resolved
    return (status.st_dev, status.st_ino)


def check_outputs_apart(outputs: Mapping[str, Sequence[str]],
                        inputs: Mapping[str, Sequence[str]] | None = None) -> None:
    """Refuses, before any work, a run that would write over its own input or write
    one file twice.

    Args:
      outputs: what names each output (``"--output_file"``, ``"--vocab_size's
        vocab.txt"``) -> the paths it writes.
      inputs: likewise for what the run reads.

    Raises:
      ValueError: naming both flags and the file.
    """
    seen: dict = {}
    for flag, paths in (inputs or {}).items():
        for path in paths:
            seen.setdefault(_identity(path), (flag, path, "input"))
    for flag, paths in outputs.items():
        for path in paths:
            key = _identity(path)
            if key in seen:
                other_flag, other_path, kind = seen[key]
                file = os.path.realpath(path) if is_local(path) else path
                names = ("" if other_path == path else
                         f" as {other_path!r} and {path!r}" if other_flag == flag else
                         f" ({other_path!r} and {path!r})")
                if kind == "input":
                    raise ValueError(f"{flag} would write over {other_flag}'s file "
                                     f"{file}{names}: a run never writes over its input")
                if other_flag == flag:
                    raise ValueError(f"{flag} names the file {file}{names or ' twice'}")
                raise ValueError(f"{flag} and {other_flag} name one file, {file}{names}")
            seen[key] = (flag, path, "output")


def check_folder_holds_no_input(folder: str, inputs: Sequence[str], *, folder_flag: str,
                                input_flag: str) -> None:
    """Refuses a run whose output folder holds one of its inputs (a run that
    replaces or cleans its folder's files must never touch them).

    Raises:
      ValueError: naming the folder, the flags and the first such input.
    """
    if not is_local(folder):
        inside = [path for path in inputs if path.startswith(folder.rstrip("/") + "/")]
    else:
        root = os.path.realpath(folder)
        inside = [path for path in inputs if is_local(path) and os.path.commonpath(
            [root, os.path.realpath(path)]) == root]
    if inside:
        raise ValueError(f"{folder_flag}={folder} holds {input_flag}'s {inside[0]}"
                         f"{f' (and {len(inside) - 1} more)' if len(inside) > 1 else ''}:"
                         f" write the output to a folder of its own")


def lock_path(target: str) -> str:
    """The lock of a folder (``FOLDER/.lock``) or of a file (``.NAME.lock`` beside it)."""
    if os.path.isdir(target):
        return os.path.join(target, LOCK_FILE)
    folder, name = os.path.split(target)
    return os.path.join(folder, f".{name}.lock")


@contextlib.contextmanager
def output_lock(targets: str | Sequence[str], *, flag: str
                ) -> Iterator[Callable[[], None]]:
    """Holds a lock on each of ``targets`` (folders or files) while a run writes them.

    A lock is a file created exclusively (``O_EXCL``) holding the host, pid and
    start time of its run, removed when the run ends, however it ends. A lock
    left by a killed run (its pid gone, on this host) is taken over with a
    warning. Local paths only: others are not locked.

    Yields:
      A function that releases the locks at once (for a signal handler that
      ends the process with ``os._exit``); calling it again does nothing.

    Raises:
      ValueError: another live run holds a lock (naming its pid and host and
        the file to remove if it is gone), or the folder is not writable.
    """
    if isinstance(targets, str):
        targets = [targets]
    holder = {"host": socket.gethostname(), "pid": os.getpid(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with contextlib.ExitStack() as stack:
        for target in sorted(set(t for t in targets if is_local(t))):
            path = lock_path(target)
            _take_lock(path, holder, f"{flag}={target}")
            stack.callback(_release_lock, path, holder)
        yield stack.close


@contextlib.contextmanager
def lock_outputs(outputs: Mapping[str, Sequence[str]]) -> Iterator[Callable[[], None]]:
    """`output_lock` on every output of a run, each named by its flag in the
    refusal: what names each output (``"--output_json"``) -> the paths it writes.

    Call it after `check_outputs_apart` (a file two flags name would be refused
    as in use by this very run). Yields a function that releases them all.
    """
    with contextlib.ExitStack() as stack:
        for flag, paths in outputs.items():
            if paths:
                stack.enter_context(output_lock(paths, flag=flag))
        yield stack.close


def _release_lock(path: str, holder: dict) -> None:
    if _read_lock(path) == holder:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _take_lock(path: str, holder: dict, what: str) -> None:
    for _ in range(2):  # a second try after taking over a stale lock
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            other = _read_lock(path)
            if not _is_stale(other, holder["host"]):
                who = (f"pid {other['pid']} on host {other['host']} (started "
                       f"{other['started']})" if other else "another run")
                raise ValueError(f"{what} is in use by {who}; wait for it or remove "
                                 f"{path}") from None
            from absl import logging

            logging.warning("taking over %s: its run (pid %d on %s) is gone", path,
                            other["pid"], other["host"])
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        except OSError as error:
            raise ValueError(f"{what} is not writable ({error.strerror})") from None
        with os.fdopen(descriptor, "w") as handle:
            json.dump(holder, handle)
        return
    raise ValueError(f"{what}: another run took {path} at the same time")


def _read_lock(path: str) -> dict | None:
    """The lock's holder; None when there is no lock or it cannot be read."""
    try:
        with open(path) as handle:
            holder = json.load(handle)
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) and {"host", "pid", "started"} <= set(
        holder) else None


def _is_stale(holder: dict | None, host: str) -> bool:
    """A lock of this host whose process is gone (another host's: never stale)."""
    if holder is None or holder["host"] != host:
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


@contextlib.contextmanager
def renamed_at_exit(path: str) -> Iterator[str]:
    """Yields a temporary name beside ``path`` (`filesystem.PendingFile`); when
    the block ends normally the file written there is renamed to ``path``,
    otherwise removed.

    Entered in one `contextlib.ExitStack` with a run's record writers, it gets
    its name with them, at the end.
    """
    with PendingFile(path) as pending:
        yield pending.temporary

