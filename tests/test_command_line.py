"""packed_bert_tf.command_line: native log lines dropped, flag errors in one line."""

import re
import subprocess
import sys

import pytest

from packed_bert_tf import command_line
from tests.tool_runs import REPOSITORY

_TOOL = r'''
import os, sys
from absl import app, flags
from packed_bert_tf.command_line import parse_flags, quiet_native_logs
flags.DEFINE_integer("size", 1, "A size.")

def main(argv):
    for line in (
            "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            "I0000 00:00:1796122194.151904   11217 port.cc:153] oneDNN custom operations are on.",
            "E0000 00:00:1796122378.715883   14012 cuda_platform.cc:52] failed call to cuInit",
            "2026-12-01 10:50:12.345678: W tensorflow/core/framework/local_rendezvous.cc:404] Local rendezvous is aborting",
            "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate compiler flags.",
            "I1201 10:50:12.345678 140000 tool.py:12] the tool's own log line",
            "a line of the tool"):
        os.write(2, (line + "\n").encode())  # as C++ writes: straight to the descriptor
    sys.exit(f"tool: done, size {flags.FLAGS.size}")

if __name__ == "__main__":
    quiet_native_logs()
    app.run(main, flags_parser=parse_flags)
'''


def _run(tmp_path, *args):
    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPOSITORY),
                   "TF_CPP_MIN_LOG_LEVEL": "2"}  # set by a user: still filtered
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=environment, timeout=60)


def test_native_log_lines_are_dropped_and_the_rest_kept_in_order(tmp_path):
    result = _run(tmp_path, "--size=3")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "I1201 10:50:12.345678 140000 tool.py:12] the tool's own log line",
        "a line of the tool", "tool: done, size 3"]


@pytest.mark.parametrize("detail", ["--verbosity=0", "-v=2", "-v 1"])
def test_verbosity_brings_them_back(tmp_path, detail):
    lines = _run(tmp_path, *detail.split()).stderr.splitlines()
    assert len(lines) == 8 and lines[1].startswith("I0000 00:00:")


@pytest.mark.parametrize("argument, message", [
    ("--size=big", "tool: flag --size=big: invalid literal for int() with base 10: 'big'"),
    ("--colour=red", "tool: Unknown command line flag 'colour'"),
])
def test_a_bad_flag_is_one_line_and_exit_status_2(tmp_path, argument, message):
    result = _run(tmp_path, argument)
    assert result.returncode == 2
    assert result.stderr.strip() == message


@pytest.mark.parametrize("argv, detail", [
    (["tool"], False), (["tool", "-v", "0"], True), (["tool", "--verbosity=1"], True),
    (["tool", "--verbosity=0"], True), (["tool", "--verbosity=-1"], False),
    (["tool", "--v=3"], True), (["tool", "--verbose_name=1"], False),
    (["tool", "-v"], False)])
def test_wants_detail(argv, detail):
    assert command_line.wants_detail(argv) is detail


def test_native_log_pattern_spares_the_projects_log_lines():
    native = re.compile(command_line.NATIVE_LOG_LINE)
    assert native.match("I0000 00:00:1796122194.151904   11217 port.cc:153] x")
    assert not native.match("I1201 10:50:12.345678 140000 run.py:80] step 10 loss 7.1")
    assert not native.match("run_pretraining: --input_file=x: no such file")


def test_tf_cpp_min_log_level_0_asks_for_everything(tmp_path, monkeypatch):
    script = tmp_path / "tool.py"
    script.write_text(_TOOL)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPOSITORY), "TF_CPP_MIN_LOG_LEVEL": "0"},
                            timeout=60)
    assert len(result.stderr.splitlines()) == 8
