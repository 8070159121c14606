"""The record of what fixes a run's trajectory, and the rows a resume skips."""

import json

import pytest

from packed_bert_tf.training import trajectory
from packed_bert_tf.training.trajectory import Segment

VALUES = {"--train_batch_size": 4, "--seed": 1, "--input_file": ["a", "b"],
          "--bert_config_file": {"hidden_size": 32, "vocab_size": 100}}


def _segment(start=0, rows=4, steps=1, **changes):
    return Segment(start, steps, rows, {**VALUES, **changes})


def test_rows_read_counts_each_segment_at_its_own_rate():
    segments = [_segment(0, rows=4), _segment(30, rows=8, steps=2), _segment(50, rows=2)]
    assert trajectory.rows_read(segments, 0) == 0
    assert trajectory.rows_read(segments, 30) == 120
    assert trajectory.rows_read(segments, 40) == 120 + 5 * 8
    assert trajectory.rows_read(segments, 60) == 120 + 10 * 8 + 10 * 2


def test_differences_name_each_value_old_and_new():
    new = {**VALUES, "--seed": None, "--input_file": ["a", "b", "c", "d"],
           "--bert_config_file": {"hidden_size": 64, "vocab_size": 100}}
    assert trajectory.differences(VALUES, new) == [
        "--bert_config_file (hidden_size 32 (now 64))",
        "--input_file ['a', 'b'] (now [a, b, ... 4 in all])",
        "--seed 1 (now none)"]
    assert trajectory.differences(VALUES, dict(VALUES)) == []


def test_a_new_run_records_its_values_and_skips_nothing(tmp_path):
    segments = trajectory.resume(str(tmp_path), _segment(), step=0, allow_changes=False,
                                 allow_flag="--x")
    assert segments == [_segment()]
    assert json.loads((tmp_path / "trajectory.json").read_text()) == {
        "segments": [{"start_step": 0, "global_steps_per_update": 1,
                      "rows_per_update": 4, "values": json.loads(json.dumps(VALUES))}]}


def test_a_resume_with_the_same_values_continues_the_segment(tmp_path):
    trajectory.resume(str(tmp_path), _segment(), step=0, allow_changes=False,
                      allow_flag="--x")
    segments = trajectory.resume(str(tmp_path), _segment(), step=12, allow_changes=False,
                                 allow_flag="--x")
    assert trajectory.rows_read(segments, 12) == 48


def test_changed_values_are_refused_or_start_a_segment_when_allowed(tmp_path):
    trajectory.resume(str(tmp_path), _segment(), step=0, allow_changes=False,
                      allow_flag="--x")
    changed = _segment(rows=8, **{"--train_batch_size": 8})
    with pytest.raises(ValueError, match=r"was trained to step 12 with other values: "
                                         r"--train_batch_size 4 \(now 8\)\. Resume with "
                                         r"the same flags, or pass --x to go on"):
        trajectory.resume(str(tmp_path), changed, step=12, allow_changes=False,
                          allow_flag="--x")
    segments = trajectory.resume(str(tmp_path), changed, step=12, allow_changes=True,
                                 allow_flag="--x")
    assert [s.start_step for s in segments] == [0, 12]
    assert trajectory.rows_read(segments, 12) == 48  # not 96: the records read
    assert trajectory.rows_read(segments, 15) == 48 + 3 * 8
    # Resumed from an earlier checkpoint: later segments are dropped.
    again = trajectory.resume(str(tmp_path), _segment(), step=6, allow_changes=False,
                              allow_flag="--x")
    assert [s.start_step for s in again] == [0]


def test_a_folder_without_a_record_resumes_as_told(tmp_path, caplog):
    segments = trajectory.resume(str(tmp_path), _segment(), step=9, allow_changes=False,
                                 allow_flag="--x")
    assert trajectory.rows_read(segments, 9) == 36
    assert "has no trajectory.json: resuming at step 9 with the flags as given" \
        in caplog.text


def test_a_damaged_record_is_named(tmp_path):
    (tmp_path / "trajectory.json").write_text("{")
    with pytest.raises(ValueError, match=r"trajectory.json cannot be read"):
        trajectory.resume(str(tmp_path), _segment(), step=3, allow_changes=False,
                          allow_flag="--x")
