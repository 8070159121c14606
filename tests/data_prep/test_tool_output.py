"""An interrupt while a tool's outputs get their names comes before or after all
of them (`tool_output.completing`), and the tool's one line says which."""

import os
import signal

import pytest

from data_prep import tool_output


@pytest.fixture
def handlers():
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT,
                                                             signal.SIGTERM)}
    tool_output._completed.clear()  # what in-process runs of the tools named
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)
    tool_output._completed.clear()
    tool_output._Holding.pending = None


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_outputs_are_named_waits_for_all_of_them(handlers, capsys,
                                                               signal_number):
    named = []

    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        with tool_output.completing(["a", "b"]):
            named.append("a")
            os.kill(os.getpid(), signal_number)  # held until both have their names
            named.append("b")
        named.append("after")  # never: the signal ends the tool here

    with pytest.raises(SystemExit) as exit_:
        main(["tool"])
    assert exit_.value.code == 128 + signal_number
    assert named == ["a", "b"]
    assert capsys.readouterr().err == (f"tool: interrupted by "
                                       f"{signal.Signals(signal_number).name}; after "
                                       f"writing a, b\n")


def test_a_signal_before_the_outputs_says_nothing_was_written(handlers, capsys):
    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        os.kill(os.getpid(), signal.SIGINT)
        with tool_output.completing(["a"]):
            pass

    with pytest.raises(SystemExit):
        main(["tool"])
    assert capsys.readouterr().err == "tool: interrupted by SIGINT; nothing written\n"
    assert tool_output._completed == []
