"""One run at a time writes an ``--export_dir`` (`fine_tuning.export`): a run
exporting into a folder another live run exports to is refused with one line
naming it, and the lock goes once the SavedModel is written."""

import json
import os
import socket
import types

import pytest

from packed_bert_tf.training import fine_tuning

OPTIONS = dict(max_seq_length=8, max_sequences_per_pack=2)


def test_an_export_into_a_folder_another_run_writes_is_refused(tmp_path, monkeypatch):
    held = tmp_path / "serving"
    held.mkdir()
    # The process that started this one: alive, and not this run.
    (held / ".lock").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": os.getppid(), "started": "today"}))
    written = []
    monkeypatch.setattr(fine_tuning, "export_for_serving",
                        lambda model, export_dir, **options: written.append(export_dir))
    options = types.SimpleNamespace(export_dir=str(held), **OPTIONS)
    with pytest.raises(ValueError, match=(
            rf"^--export_dir={held} is in use by pid {os.getppid()} on host "
            rf"{socket.gethostname()} \(started today\); wait for it or remove "
            rf"{held}/\.lock$")):
        fine_tuning.export(options, types.SimpleNamespace(packed=True))
    assert written == []


def test_the_export_holds_the_folder_while_it_writes(tmp_path, monkeypatch):
    seen = []

    def write(model, export_dir, **options):
        seen.append(sorted(os.listdir(export_dir)))
        (tmp_path / "serving" / "saved_model.pb").write_bytes(b"")
        return export_dir

    monkeypatch.setattr(fine_tuning, "export_for_serving", write)
    options = types.SimpleNamespace(export_dir=str(tmp_path / "serving"), **OPTIONS)
    assert fine_tuning.export(options, types.SimpleNamespace(packed=True)) == \
        options.export_dir
    assert seen == [[".lock"]]
    assert os.listdir(tmp_path / "serving") == ["saved_model.pb"]
