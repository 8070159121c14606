"""The output lock every tool and script takes (`output_files.output_lock`)."""

import functools
import json
import os
import socket
import subprocess
import sys

import pytest

from packed_bert_tf.output_files import (
    LOCK_FILE,
    check_folder_holds_no_input,
    check_outputs_apart,
    lock_outputs,
    output_lock,
    renamed_at_exit,
)

output_dir_lock = functools.partial(output_lock, flag="--output_dir")


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


def test_a_file_is_locked_beside_it_and_every_lock_goes_at_the_end(tmp_path):
    records, vocab = str(tmp_path / "a.tfrecord"), str(tmp_path / "vocab.txt")
    with output_lock([records, vocab], flag="--output_file"):
        assert sorted(p.name for p in tmp_path.iterdir()) == [".a.tfrecord.lock",
                                                              ".vocab.txt.lock"]
        with pytest.raises(ValueError, match=rf"^--output_file={tmp_path}/vocab.txt is in "
                                             rf"use by pid {os.getpid()} .* remove "
                                             rf"{tmp_path}/\.vocab\.txt\.lock$"):
            with output_lock(vocab, flag="--output_file"):
                pass
    assert list(tmp_path.iterdir()) == []


def test_a_refused_lock_releases_those_already_taken(tmp_path):
    (tmp_path / ".b.lock").write_text(json.dumps(
        {"host": "elsewhere", "pid": 1, "started": "earlier"}))
    with pytest.raises(ValueError, match="b is in use by pid 1 on host elsewhere"):
        with output_lock([str(tmp_path / "a"), str(tmp_path / "b")], flag="--out"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.lock"]


def test_a_runs_outputs_are_locked_each_named_by_its_flag(tmp_path):
    report, plot = str(tmp_path / "r.json"), str(tmp_path / "r.png")
    outputs = {"--output_json": [report], "--plot": [plot], "--unused": []}
    with lock_outputs(outputs):
        assert sorted(p.name for p in tmp_path.iterdir()) == [".r.json.lock",
                                                              ".r.png.lock"]
        with pytest.raises(ValueError, match=rf"^--plot={plot} is in use by pid "
                                             rf"{os.getpid()} "):
            with lock_outputs({"--plot": [plot]}):
                pass
    assert list(tmp_path.iterdir()) == []


def test_the_release_function_frees_the_lock_at_once_and_only_once(tmp_path):
    with output_lock(str(tmp_path), flag="--output_dir") as release:
        release()
        assert not (tmp_path / LOCK_FILE).exists()
        with output_lock(str(tmp_path), flag="--output_dir"):  # another run may take it
            release()  # does nothing: the lock is the other run's now
            assert (tmp_path / LOCK_FILE).exists()


def test_remote_outputs_are_not_locked(tmp_path):
    with output_lock("gs://bucket/out", flag="--output_dir"):
        pass


@pytest.fixture
def files(tmp_path):
    (tmp_path / "corpus.txt").write_text("text")
    os.symlink(tmp_path / "corpus.txt", tmp_path / "link.txt")
    os.link(tmp_path / "corpus.txt", tmp_path / "hard.txt")
    return tmp_path


@pytest.mark.parametrize("outputs, inputs, message", [
    ({"--out": ["corpus.txt"]}, {"--in": ["corpus.txt"]},
     "--out would write over --in's file {d}/corpus.txt: a run never writes over its "
     "input"),
    ({"--out": ["./sub/../corpus.txt"]}, {"--in": ["corpus.txt"]},
     "--out would write over --in's file {d}/corpus.txt ('{d}/corpus.txt' and "
     "'{d}/./sub/../corpus.txt')"),
    ({"--out": ["link.txt"]}, {"--in": ["corpus.txt"]}, "--in's file {d}/corpus.txt"),
    ({"--out": ["hard.txt"]}, {"--in": ["corpus.txt"]}, "--in's file {d}/hard.txt"),
    ({"--out": ["new.txt", "./new.txt"]}, {},
     "--out names the file {d}/new.txt as '{d}/new.txt' and '{d}/./new.txt'"),
    ({"--out": ["new.txt", "new.txt"]}, {}, "--out names the file {d}/new.txt twice"),
    ({"--out": ["new.txt"], "--plot": ["new.txt"]}, {},
     "--plot and --out name one file, {d}/new.txt"),
    ({"--out": ["gs://b/x"]}, {"--in": ["gs://b/x"]}, "--in's file gs://b/x"),
])
def test_an_output_that_is_an_input_or_another_output_is_refused(files, outputs, inputs,
                                                                 message):
    def absolute(mapping):
        return {flag: [p if "://" in p else f"{files}/{p}" for p in paths]
                for flag, paths in mapping.items()}

    with pytest.raises(ValueError) as error:
        check_outputs_apart(absolute(outputs), absolute(inputs))
    assert message.format(d=files) in str(error.value)


def test_outputs_apart_from_the_inputs_pass(files):
    check_outputs_apart({"--out": [f"{files}/a", f"{files}/b"]},
                        {"--in": [f"{files}/corpus.txt", f"{files}/corpus.txt"]})


def test_a_folder_holding_an_input_is_refused(tmp_path):
    inputs = [str(tmp_path / "data" / "a"), str(tmp_path / "data" / "deep" / "b"),
              str(tmp_path / "elsewhere")]
    with pytest.raises(ValueError, match=rf"^--output_dir={tmp_path}/data/ holds "
                                         rf"--input_file's {tmp_path}/data/a \(and 1 "
                                         rf"more\): write the output to a folder of its "
                                         rf"own$"):
        check_folder_holds_no_input(f"{tmp_path}/data/", inputs,
                                    folder_flag="--output_dir", input_flag="--input_file")
    check_folder_holds_no_input(f"{tmp_path}/dat", inputs, folder_flag="--output_dir",
                                input_flag="--input_file")
    with pytest.raises(ValueError, match="holds --input_file's gs://b/data/a"):
        check_folder_holds_no_input("gs://b/data", ["gs://b/data/a"],
                                    folder_flag="--output_dir", input_flag="--input_file")


def test_a_file_gets_its_name_only_when_the_block_ends_well(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("old")
    for failure in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(failure):
            with renamed_at_exit(str(path)) as temporary:
                open(temporary, "w").write("new")
                raise failure
        assert [p.name for p in tmp_path.iterdir()] == ["vocab.txt"]
        assert path.read_text() == "old"
    with renamed_at_exit(str(path)) as temporary:
        open(temporary, "w").write("new")
        assert path.read_text() == "old"
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.txt"]
