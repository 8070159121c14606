"""Ctrl-C in a terminal, and SIGTERM, stop run_pretraining.py at a step boundary with
a checkpoint and one line; the resumed run ends with the uninterrupted run's weights.

Ctrl-C is typed into a pseudo-terminal, as a user's terminal sends it: SIGINT to
the whole foreground process group, the script and its stderr filter alike (a
background job of a non-interactive shell would ignore it). The interrupted
runs and the uninterrupted one are fresh processes (`tests.tool_runs`) with
TensorFlow's graph optimizer off (no check is about it; it costs each run
seconds of CPU): the terminal is the controlling terminal of the Ctrl-C run's
own session, the SIGTERM run writes into pipes. The resumed runs are the same
command in this process (`tests.tool_runs.run_main`), the optimizer off there
too (`grappler_off_for_module`).
"""

import os
import re
import select
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.pretraining.tiny_runs import P, S
from tests.tool_runs import finish_tool, run_main, start_in_terminal, start_tool

pytestmark = pytest.mark.slow

#: Long enough that a signal sent at step 2 comes while it trains (steps take
#: about 20 ms here; each costs the straight and resumed runs CPU).
STEPS = 30


def _flags(config_file, input_file, output_dir):
    return [f"--bert_config_file={config_file}", f"--output_dir={output_dir}",
            f"--input_file={input_file}", "--do_train", "--batching=padded",
            f"--max_seq_length={S}", f"--max_predictions_per_seq={P}",
            "--train_batch_size=4", f"--num_train_steps={STEPS}", "--num_warmup_steps=0",
            "--iterations_per_loop=1", "--log_every_n_steps=1",
            "--save_checkpoints_steps=0", "--seed=1", "--nojit_compile"]


def _in_a_terminal(started, *, interrupt_after: bytes, timeout: float = 240):
    """Reads the output of a process `start_in_terminal` started, types
    Ctrl-C once it shows ``interrupt_after``; returns (exit status, all it wrote)."""
    process, terminal = started
    output, typed, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], 0.1)
        if ready:
            try:
                data = os.read(terminal, 65536)
            except OSError:  # the terminal closed: the child has ended
                break
            if not data:
                break
            output += data
        if not typed and interrupt_after in output:
            os.write(terminal, b"\x03")  # Ctrl-C
            typed = True
    status = process.wait(timeout=60)
    os.close(terminal)
    return status, output.decode(errors="replace")


def _weights(path):
    reader = tf.train.load_checkpoint(str(path))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def runs(config_file, unpacked_files, tmp_path_factory, grappler_off_for_module):
    root = tmp_path_factory.mktemp("interrupt")
    flags = {name: _flags(config_file, unpacked_files[0], root / name)
             for name in ("straight", "ctrl_c", "sigterm")}
    straight = start_tool("run_pretraining.py", *flags["straight"], grappler_off=True)
    sigterm = start_tool("run_pretraining.py", *flags["sigterm"], grappler_off=True)
    terminated = []

    def terminate_while_training():
        lines = []
        for line in sigterm.stderr:  # the run's log, read as it comes
            lines.append(line)
            if line.rstrip().endswith("sequences_seen 8") and len(terminated) == 0:
                terminated.append(None)
                sigterm.send_signal(signal.SIGTERM)
        terminated[:] = [(sigterm.wait(timeout=240), "".join(lines))]

    terminator = threading.Thread(target=terminate_while_training)
    terminator.start()
    ctrl_c = _in_a_terminal(
        start_in_terminal("run_pretraining.py", *flags["ctrl_c"], grappler_off=True),
        interrupt_after=b"sequences_seen 8")
    terminator.join()
    stopped = {"ctrl_c": ctrl_c, "sigterm": terminated[0]}
    assert finish_tool(straight).returncode == 0
    unfinished = {name: not (root / name / "train_summary.json").exists()
                  for name in stopped}
    # The same command again resumes each.
    resumed = {name: run_main("run_pretraining.py", *flags[name])
               for name in ("ctrl_c", "sigterm")}
    return root, stopped, resumed, unfinished


@pytest.mark.parametrize("name, signal_number", [("ctrl_c", signal.SIGINT),
                                                 ("sigterm", signal.SIGTERM)])
def test_a_signal_stops_at_a_step_boundary_with_a_checkpoint_and_one_line(
        runs, name, signal_number):
    root, stopped, _, unfinished = runs
    status, output = stopped[name]
    assert status == 128 + signal_number, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    last = output.strip().splitlines()[-1]
    checkpoints = root / name / "checkpoints"
    match = re.fullmatch(rf"run_pretraining: interrupted by "
                         rf"{signal.Signals(signal_number).name} at step (\d+) of {STEPS}; "
                         rf"checkpoint {re.escape(str(checkpoints))}/ckpt-(\d+) written; "
                         rf"run the same command to resume", last.strip())
    assert match and match[1] == match[2], last
    assert 0 < int(match[1]) < STEPS
    assert (checkpoints / f"ckpt-{match[1]}.index").exists()
    assert unfinished[name]  # no summary of a finished run


@pytest.mark.parametrize("name", ["ctrl_c", "sigterm"])
def test_the_resumed_run_ends_with_the_uninterrupted_runs_weights(runs, name):
    root, _, resumed, _ = runs
    assert resumed[name].returncode == 0, resumed[name].stderr[-3000:]
    want = _weights(root / "straight" / f"model.ckpt-{STEPS}")
    got = _weights(root / name / f"model.ckpt-{STEPS}")
    assert got.keys() == want.keys()
    for weight in want:
        np.testing.assert_allclose(got[weight], want[weight], rtol=1e-5, atol=1e-6,
                                   err_msg=weight)


def test_a_terminal_gets_the_progress_bar_and_a_pipe_does_not(runs):
    # stderr goes through the filter of native log lines (a pipe) either way.
    _, stopped, _, _ = runs
    bar = re.compile(rf"\b\d+/{STEPS}\b.*step - loss: ")
    assert bar.search(stopped["ctrl_c"][1])
    assert not bar.search(stopped["sigterm"][1])
    # On the terminal the log lines are above the bar, never on its line.
    screen = _terminal_lines(stopped["ctrl_c"][1])
    logged = [line for line in screen if "train step" in line]
    assert len(logged) >= 2, screen
    assert not [line for line in screen if bar.search(line) and "train step" in line], screen
    assert all(line.lstrip().startswith("I") for line in logged), logged


def _terminal_lines(output: str) -> list[str]:
    """The lines a terminal shows for ``output``: carriage returns, erases to
    the end of the line and backspaces applied, colours dropped."""
    lines = []
    for raw in output.replace("\r\n", "\n").split("\n"):
        line, cursor = [], 0
        for part in re.split(r"(\r|\x1b\[K|\x1b\[[0-9;]*m|\x08)", raw):
            if part == "\r":
                cursor = 0
            elif part == "\x1b[K":
                del line[cursor:]
            elif part == "\x08":
                cursor = max(0, cursor - 1)
            elif not part.startswith("\x1b["):
                for character in part:
                    if cursor < len(line):
                        line[cursor] = character
                    else:
                        line.append(character)
                    cursor += 1
        lines.append("".join(line))
    return lines
