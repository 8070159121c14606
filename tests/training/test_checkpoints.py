"""Training checkpoints under damage: a full disk while saving, a damaged or
missing state file (``checkpoints/checkpoint``)."""

import re
import resource

import keras
import pytest
import tensorflow as tf

from packed_bert_tf.training.checkpoints import TrainingCheckpoints


def _checkpoints(output_dir):
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    return TrainingCheckpoints(str(output_dir), model=model, optimizer=optimizer,
                               step=step), step


def _saved_at(output_dir, steps):
    checkpoints, step = _checkpoints(output_dir)
    for number in steps:
        step.assign(number)
        checkpoints.save()
    return output_dir / "checkpoints"


def _names(folder):
    return sorted(path.name for path in folder.iterdir())


def test_a_full_disk_while_saving_leaves_the_previous_checkpoint_named(tmp_path):
    checkpoints, step = _checkpoints(tmp_path)
    step.assign(3)
    checkpoints.save()
    folder = tmp_path / "checkpoints"
    before = _names(folder)
    step.assign(6)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # Python ignores SIGXFSZ: a write past the limit fails with EFBIG, as on a
    # full disk (a checkpoint here is about 200 kB).
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, hard))
    try:
        with pytest.raises(OSError, match=rf"^cannot save checkpoint ckpt-6 in "
                                          rf"{re.escape(str(folder))} \(File too large\); "
                                          rf"{re.escape(str(folder / 'ckpt-3'))} is intact: "
                                          rf"a run resumes from it$"):
            checkpoints.save()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert _names(folder) == before  # no part of ckpt-6 left
    assert tf.train.get_checkpoint_state(str(folder)).model_checkpoint_path.endswith(
        "ckpt-3")
    resumed, _ = _checkpoints(tmp_path)
    assert resumed.restore_latest() == 3


@pytest.mark.parametrize("damage, problem", [
    (lambda state: state.write_text(state.read_text()[:30]), "cannot be read"),
    (lambda state: state.unlink(), "is missing"),
    (lambda state: state.write_text('model_checkpoint_path: "ckpt-3"\n'
                                    'all_model_checkpoint_paths: "ckpt-3"\n'),
     "names ckpt-3, not the newest"),
])
def test_a_damaged_state_file_is_rewritten_and_the_newest_checkpoint_resumed(
        tmp_path, caplog, damage, problem):
    folder = _saved_at(tmp_path, [3, 6])
    files = {name: (folder / name).read_bytes() for name in _names(folder)
             if name.startswith("ckpt-")}
    damage(folder / "checkpoint")
    checkpoints, step = _checkpoints(tmp_path)
    assert checkpoints.restore_latest() == 6
    assert f"{folder / 'checkpoint'} {problem}: rewrote it from the 2 checkpoints " \
           f"there; resuming from the newest, {folder / 'ckpt-6'}" in caplog.text
    assert "ParseError" not in caplog.text  # TensorFlow's own warning: said once, ours
    step.assign(9)
    checkpoints.save()
    assert {name: (folder / name).read_bytes() for name in files} == files
    assert TrainingCheckpoints.exists(str(tmp_path))


def test_a_sound_state_file_is_left_alone(tmp_path, caplog):
    folder = _saved_at(tmp_path, [3, 6])
    state = (folder / "checkpoint").read_text()
    checkpoints, _ = _checkpoints(tmp_path)
    assert checkpoints.restore_latest() == 6
    assert (folder / "checkpoint").read_text() == state
    assert "rewrote" not in caplog.text


def test_a_checkpoint_without_a_newer_count_resumes_with_it_at_zero(tmp_path, monkeypatch,
                                                                    caplog):
    """A checkpoint written when the run's totals had fewer counts resumes: the
    counts it holds come back, the others start at 0, a warning names them."""
    from packed_bert_tf.training.checkpoints import RunTotals

    every = RunTotals.NAMES
    older, newer = every[:-2], every[-2:]
    with monkeypatch.context() as patch:
        patch.setattr(RunTotals, "NAMES", older)
        checkpoints, step = _checkpoints(tmp_path)
        step.assign(5)
        checkpoints.totals.write({name: 7.0 for name in older}, [{"step": 5}], [])
        checkpoints.save()
    resumed, _ = _checkpoints(tmp_path)
    assert resumed.restore_latest() == 5
    counts, history, _ = resumed.totals.read()
    assert counts == {**{name: 7.0 for name in older}, **{name: 0.0 for name in newer}}
    assert history == [{"step": 5}]
    assert f"has no {', '.join(newer)}: counted from the resume on" in caplog.text


def test_a_checkpoint_of_another_model_is_still_refused(tmp_path):
    _saved_at(tmp_path, [3])
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    other = TrainingCheckpoints(str(tmp_path), model=model, optimizer=optimizer,
                                step=tf.Variable(0, dtype=tf.int64))
    with pytest.raises(ValueError, match=r"checkpoint .*ckpt-3 is not of this model and "
                                         r"optimizer .*: use another --output_dir"):
        other.restore_latest()
