"""An interrupt while a tool's outputs get their names comes before or after all
of them (`tool_output.completing`), and the tool's one line says which; a
thread that fails as the interrupt comes prints nothing more."""

import os
import signal
import threading

import pytest

from data_prep import tool_output


@pytest.fixture
def handlers():
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT,
                                                             signal.SIGTERM)}
    tool_output._completed.clear()  # what in-process runs of the tools named
    excepthook = threading.excepthook  # an interrupted tool leaves its own
    yield
    threading.excepthook = excepthook
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


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_that_lands_in_another_thread_ends_a_main_thread_that_waits(
        handlers, capsys, signal_number):
    # As when Ctrl-C reaches the tool in one of Beam's threads and kills the
    # workers the main thread waits for: without the signal sent on, the main
    # thread would sleep until the lock came free (here: after the fallback).
    import linecache
    import sys
    import threading
    import time

    workers_done = threading.Lock()
    workers_done.acquire()
    fallback = threading.Event()
    fell_back = []

    def worker_thread():
        # Once the main thread waits for the lock (its frame at the line):
        # a signal sent earlier would reach it before it waits.
        main_thread = threading.main_thread().ident
        while sys._current_frames()[main_thread].f_code is not main.__wrapped__.__code__ \
                or "acquire" not in linecache.getline(
                    __file__, sys._current_frames()[main_thread].f_lineno):
            time.sleep(0.001)
        time.sleep(0.05)  # into the wait
        signal.pthread_kill(threading.get_ident(), signal_number)  # lands here
        if not fallback.wait(60):  # set at once when the signal woke the main thread
            fell_back.append(True)
            workers_done.release()

    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        threading.Thread(target=worker_thread, daemon=True).start()
        try:
            workers_done.acquire()  # no timeout: only a signal or the fallback wakes it
        finally:
            fallback.set()

    with pytest.raises(SystemExit) as exit_:
        main(["tool"])
    assert fell_back == []  # interrupted, not woken by the lock
    assert exit_.value.code == 128 + signal_number
    assert capsys.readouterr().err == (f"tool: interrupted by "
                                       f"{signal.Signals(signal_number).name}; nothing "
                                       f"written\n")


def test_the_tools_lock_goes_when_its_main_ends_however_it_ends(handlers, tmp_path):
    from packed_bert_tf import output_files

    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        tool_output.held_until_the_end(output_files.lock_outputs(
            {"--out": [str(tmp_path / "a.json")]}))
        assert os.listdir(tmp_path) == [".a.json.lock"]
        if argv[1:] == ["fail"]:
            raise SystemExit("tool: failed")

    main(["tool"])
    assert os.listdir(tmp_path) == []
    with pytest.raises(SystemExit):
        main(["tool", "fail"])
    assert os.listdir(tmp_path) == []


def test_a_thread_that_fails_as_an_interrupt_comes_prints_no_traceback(handlers, capfd,
                                                                        monkeypatch):
    # A thread watching a subprocess that Ctrl-C killed (Beam's workers) fails
    # before the main thread has taken the signal: its traceback is the
    # interrupt's, and only the tool's one line is printed (the usual hook,
    # which would print it, is never called).
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)

    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        failing = threading.Thread(target=lambda: 1 / 0)
        failing.start()
        os.kill(os.getpid(), signal.SIGINT)
        failing.join()

    with pytest.raises(SystemExit):
        main(["tool"])
    assert failures == []
    assert capfd.readouterr().err == "tool: interrupted by SIGINT; nothing written\n"


def test_a_thread_that_fails_without_an_interrupt_gets_the_usual_hook(handlers,
                                                                     monkeypatch):
    monkeypatch.setattr(tool_output, "_INTERRUPT_GRACE_SECONDS", 0.01)
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)

    @tool_output.one_line_on_interrupt("tool")
    def main(argv):
        failing = threading.Thread(target=lambda: 1 / 0)
        failing.start()
        failing.join()

    main(["tool"])
    assert [failure.exc_type for failure in failures] == [ZeroDivisionError]
    assert threading.excepthook == failures.append  # put back as the tool ends
