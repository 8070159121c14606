"""Local or remote files (`packed_bert_tf.filesystem`): which a path is, how it
is resolved, the one atomic write and file patterns.

``ram://`` is TensorFlow's in-memory file system: the remote branch without a
network.
"""

import glob
import os
import resource
import subprocess
import sys
import uuid

import pytest

from packed_bert_tf import filesystem
from packed_bert_tf.json_files import write_text_atomically


@pytest.fixture
def ram_folder():
    """A fresh folder of TensorFlow's in-memory file system."""
    return f"ram://filesystem-test-{uuid.uuid4().hex[:8]}"


def _read_remote(path):
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("path, local", [
    ("vocab.txt", True), ("/data/part-*.tfrecord", True), ("./a:b/c", True),
    ("gs://bucket/data", False), ("ram://folder/a.txt", False),
])
def test_is_local(path, local):
    assert filesystem.is_local(path) is local


def test_a_local_path_is_made_absolute_and_a_remote_one_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert filesystem.absolute_path("data/a.txt") == f"{tmp_path}/data/a.txt"
    assert filesystem.absolute_path("/data/./x/../a.txt") == "/data/a.txt"
    assert filesystem.absolute_path("gs://bucket/x/../a.txt") == "gs://bucket/x/../a.txt"


def test_a_file_gets_its_name_when_complete(tmp_path):
    path = tmp_path / "new" / "a.txt"  # the folder is made
    with filesystem.open_atomically(str(path)) as handle:
        handle.write("first\r\nsecond\n")  # line ends as written
        assert not path.exists()
        (temporary,) = path.parent.iterdir()
        assert temporary.name.startswith("a.txt.tmp-")
    assert path.read_bytes() == b"first\r\nsecond\n"
    assert list(path.parent.iterdir()) == [path]
    with filesystem.open_atomically(str(path), "wb") as handle:
        handle.write(b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"


def test_a_failed_block_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    for failure in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(failure):
            with filesystem.open_atomically(str(path)) as handle:
                handle.write("new")
                raise failure
        assert list(tmp_path.iterdir()) == [path]
        assert path.read_text() == "old"


def test_a_folder_in_the_way_is_named_and_no_temporary_is_left(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(OSError, match=rf"^cannot write {tmp_path}/out \(Is a directory\)$"):
        write_text_atomically(str(tmp_path / "out"), "text")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match=rf"^cannot write {tmp_path}/file/a.txt \(File exists\)$"):
        write_text_atomically(str(tmp_path / "file" / "a.txt"), "text")


def test_a_full_disk_is_named_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # Python ignores SIGXFSZ: a write past the limit fails with EFBIG, as on a
    # full disk.
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError, match=rf"^cannot write {path} \(File too large\)$"):
            with filesystem.open_atomically(str(path), "wb") as handle:
                handle.write(bytes(64 * 1024))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert list(tmp_path.iterdir()) == [path]
    assert path.read_bytes() == b"old"


def test_a_pending_file_is_committed_or_discarded_by_name(tmp_path):
    path = str(tmp_path / "a.npy")
    pending = filesystem.PendingFile(path)
    assert os.path.dirname(pending.temporary) == str(tmp_path)
    open(pending.temporary, "w").write("x")
    pending.discard()
    pending.discard()  # nothing there: nothing to do
    assert list(tmp_path.iterdir()) == []
    with filesystem.PendingFile(path) as pending:
        open(pending.temporary, "w").write("y")
    assert os.listdir(tmp_path) == ["a.npy"]


def test_only_a_mode_that_writes_a_whole_file(tmp_path):
    with pytest.raises(ValueError, match=r"^mode must be 'w' or 'wb', got 'a'$"):
        with filesystem.open_atomically(str(tmp_path / "a.txt"), "a"):
            pass


def test_a_remote_file_is_written_atomically(ram_folder):
    import tensorflow as tf

    path = f"{ram_folder}/out/a.txt"
    assert not filesystem.is_local(path)
    assert filesystem.absolute_path(path) == path
    with filesystem.open_atomically(path) as handle:
        handle.write("first\r\nsecond\n")
        (temporary,) = tf.io.gfile.listdir(f"{ram_folder}/out")
        assert temporary.startswith("a.txt.tmp-")
    assert _read_remote(path) == b"first\r\nsecond\n"
    assert tf.io.gfile.listdir(f"{ram_folder}/out") == ["a.txt"]
    assert filesystem.isfile(path) and not filesystem.isfile(f"{ram_folder}/out/b.txt")
    with pytest.raises(RuntimeError):
        with filesystem.open_atomically(path) as handle:
            handle.write("new")
            raise RuntimeError
    assert tf.io.gfile.listdir(f"{ram_folder}/out") == ["a.txt"]
    assert _read_remote(path) == b"first\r\nsecond\n"


def test_a_remote_failure_is_named(ram_folder):
    import tensorflow as tf

    write_text_atomically(f"{ram_folder}/a.txt", "text")
    with pytest.raises(OSError, match=rf"^cannot write {ram_folder}/a.txt/b.txt \(cannot "
                                      rf"create directory with same name as an existing "
                                      rf"file\)$"):
        write_text_atomically(f"{ram_folder}/a.txt/b.txt", "text")
    assert tf.io.gfile.listdir(ram_folder) == ["a.txt"]


def test_local_files_need_no_tensorflow(tmp_path):
    # A fresh interpreter: this one has imported TensorFlow.
    code = ("import sys, glob\n"
            "from packed_bert_tf import filesystem\n"
            "from packed_bert_tf.json_files import write_json_atomically\n"
            f"path = write_json_atomically({str(tmp_path / 'a.json')!r}, [1])\n"
            "with filesystem.open_atomically(path + '.bin', 'wb') as handle:\n"
            "    handle.write(b'x')\n"
            "filesystem.expand_file_patterns_with_glob(path, glob=glob.glob)\n"
            "assert filesystem.isfile(path) and filesystem.exists(path + '.bin')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras')))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=300).stdout
    assert out.strip() == "[]"
    assert sorted(os.listdir(tmp_path)) == ["a.json", "a.json.bin"]


def test_file_patterns(tmp_path):
    for name in ("b.tfrecord", "a.tfrecord", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    files = filesystem.expand_file_patterns(f"{tmp_path}/*.tfrecord,{tmp_path}/a*")
    assert [f.rsplit("/", 1)[1] for f in files] == ["a.tfrecord", "b.tfrecord"]
    assert files == filesystem.expand_file_patterns_with_glob(
        f"{tmp_path}/*.tfrecord,{tmp_path}/a*", glob=glob.glob)
    with pytest.raises(ValueError, match=r"--input_file: '.*/nothing\*' matches no files"):
        filesystem.expand_file_patterns(f"{tmp_path}/nothing*")
    with pytest.raises(ValueError, match="--packed is empty"):
        filesystem.expand_file_patterns("", flag="packed")


def test_remote_file_patterns(ram_folder):
    for name in ("part-1", "part-0", "packing_stats.json"):
        write_text_atomically(f"{ram_folder}/{name}", "")
    skipped = []
    assert filesystem.expand_file_patterns(f"{ram_folder}/*", skipped=skipped) == [
        f"{ram_folder}/part-0", f"{ram_folder}/part-1"]
    assert skipped == [f"{ram_folder}/packing_stats.json"]


def test_wildcards_skip_side_files_and_folders_are_named(tmp_path):
    names = ("part-0.tfrecord", "part-1.tfrecord", "packing_stats.json", "vocab.txt",
             "part-2.tfrecord.tmp-0a1b2c3d")
    for name in names:
        (tmp_path / name).write_bytes(b"")
    skipped = []
    files = filesystem.expand_file_patterns(f"{tmp_path}/*", flag="packed", skipped=skipped)
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-0.tfrecord", "part-1.tfrecord"]
    assert sorted(s.rsplit("/", 1)[1] for s in skipped) == sorted(names[2:])
    # Named outright, a side file is kept (and fails later as what it is);
    # without a list for them, a wildcard keeps them too.
    assert filesystem.expand_file_patterns(f"{tmp_path}/vocab.txt", skipped=[]) == [
        f"{tmp_path}/vocab.txt"]
    assert len(filesystem.expand_file_patterns(f"{tmp_path}/*")) == len(names)
    with pytest.raises(ValueError, match=r"^--packed: '.*/\*.json' matches no record files "
                                         r"\(only packing_stats.json\)$"):
        filesystem.expand_file_patterns(f"{tmp_path}/*.json", flag="packed", skipped=[])
    with pytest.raises(ValueError, match=f"^--packed: {tmp_path} is a folder \\(give its "
                                         f"files, e.g. '{tmp_path}/part-\\*'\\)$"):
        filesystem.expand_file_patterns(str(tmp_path), flag="packed")
