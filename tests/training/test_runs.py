"""The output-folder lock and the output folder checks of the two front ends."""

import json
import os
import socket
import subprocess
import sys

import pytest

from packed_bert_tf.training.runs import LOCK_FILE, make_output_dir, output_dir_lock


def _holder(path):
    return json.loads((path / LOCK_FILE).read_text())


def test_the_lock_names_its_holder_and_goes_at_the_end(tmp_path):
    with output_dir_lock(str(tmp_path)):
        holder = _holder(tmp_path)
        assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
        with pytest.raises(ValueError, match=rf"--output_dir={tmp_path} is in use by pid "
                                             rf"{os.getpid()} on host .* wait for it or "
                                             rf"remove {tmp_path}/\.lock"):
            with output_dir_lock(str(tmp_path)):
                pass
        assert _holder(tmp_path) == holder  # the refused run left it alone
    assert not (tmp_path / LOCK_FILE).exists()


def test_the_lock_goes_when_the_run_fails(tmp_path):
    with pytest.raises(RuntimeError):
        with output_dir_lock(str(tmp_path)):
            raise RuntimeError("failed")
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, caplog):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead_pid, "started": "earlier"}))
    with output_dir_lock(str(tmp_path)):
        assert _holder(tmp_path)["pid"] == os.getpid()
    assert f"(pid {dead_pid} on {socket.gethostname()}) is gone" in caplog.text
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_of_another_host_is_never_taken_over(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps(
        {"host": "elsewhere", "pid": 1, "started": "earlier"}))
    with pytest.raises(ValueError, match=r"in use by pid 1 on host elsewhere \(started "
                                         r"earlier\)"):
        with output_dir_lock(str(tmp_path)):
            pass


def test_an_output_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        make_output_dir(str(tmp_path / "file"))
    with pytest.raises(ValueError, match=r"file/sub cannot be created \(\w+Error"):
        make_output_dir(str(tmp_path / "file" / "sub"))


def test_an_output_dir_that_is_not_writable_is_named(tmp_path, monkeypatch):
    # What a read-only folder does to a user who is not root (tests run as root
    # here; test_bad_input.py has the chmod version for the others).
    def refuse(path, flags, mode=0o777):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ValueError, match=rf"^--output_dir={tmp_path} is not writable "
                                         rf"\(Permission denied\)$"):
        with output_dir_lock(str(tmp_path)):
            pass
