"""`Progress`: nothing for short work, lines every interval in a log, one line
redrawn on a terminal, the rate and the time left."""

import io

import pytest

from packed_bert_tf.tool_progress import Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _progress(terminal, **options):
    clock, stream = Clock(), io.StringIO()
    return Progress("making instances", unit="documents", stream=stream,
                    terminal=terminal, clock=clock, **options), clock, stream


@pytest.mark.parametrize("terminal, seconds", [(False, 9.9), (True, 1.9)])
def test_short_work_shows_nothing(terminal, seconds):
    progress, clock, stream = _progress(terminal, total=10)
    for _ in range(10):
        clock.now += seconds / 10
        progress.advance()
    progress.close()
    assert stream.getvalue() == ""


def test_a_log_gets_a_line_every_interval_with_the_rate_and_time_left():
    progress, clock, stream = _progress(False, total=1000, interval=10)
    for _ in range(100):  # 10 documents a second for 100 s
        clock.now += 1
        progress.advance(10)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # every 10 s: 10, 20, ... 100
    assert lines[0] == ("making instances: 100/1,000 documents (10 %), 10 documents/s, "
                        "1 min 30 s left")
    assert lines[-1] == ("making instances: 1,000/1,000 documents (100 %), 10 "
                         "documents/s, 0 s left")


def test_a_terminal_gets_one_line_redrawn_and_a_new_line_at_the_end():
    progress, clock, stream = _progress(True)
    for _ in range(30):
        clock.now += 0.1
        progress.advance(3)
    progress.close()
    text = stream.getvalue()
    assert "\n" not in text[:-1] and text.endswith("\n")
    draws = text.split("\r")[1:]
    assert 4 <= len(draws) <= 6  # from 2 s on, at most every 0.2 s, and at the end
    assert draws[-1].rstrip() == "making instances: 90 documents, 30 documents/s, 3 s"


def test_a_total_given_later_brings_the_time_left():
    progress, clock, stream = _progress(False, interval=1)
    clock.now += 3
    progress.update(30, total=60)
    assert stream.getvalue() == ("making instances: 30/60 documents (50 %), "
                                 "10 documents/s, 3 s left\n")


@pytest.mark.parametrize("seconds, text", [(59, "59 s"), (61, "1 min 01 s"),
                                           (3 * 3600 + 120, "3 h 02 min")])
def test_durations(seconds, text):
    progress, clock, stream = _progress(False, total=2, interval=1)
    clock.now += seconds
    progress.update(1)
    assert stream.getvalue().endswith(f"{text} left\n")
