"""Every data-prep tool on bad input, run as the README shows (default flags,
TF_CPP_MIN_LOG_LEVEL unset): one line naming the file, flag or record, a
non-zero exit, no traceback, no Beam or TensorFlow log lines, no output file.

The cases run one after the other in this process (`tests.tool_runs.run_main`:
each run is the tool's ``__main__`` with its own argv, flags, output and exit
status); Ctrl-C and SIGTERM reach real processes."""

import json
import os
import signal
import socket

import pytest

from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH, write_unpacked_dataset
from tests.tool_runs import (
    finish_tool,
    one_line_error_problems,
    run_main,
    start_tool,
    wait_for_signal_handlers,
)

pytestmark = pytest.mark.slow

#: At most this many lines of stdout and stderr together for a bad input.
MAX_LINES = 10


CORPUS = ("A first sentence here.\nAnd a second one.\n\n"
          "Another document starts.\nIt ends here.\n")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "first", "sentence", "."]


#: The locks of outputs in the folder "held" that another run holds.
HELD_LOCKS = [".a.tfrecord.lock", ".c.txt.lock", ".lock", ".report.json.lock",
              ".report.png.lock"]


def _corpus(root):
    path = root / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    (root / "binary.txt").write_bytes(b"Text.\n\x80\x81\n")
    return path


def _histogram(root):
    path = root / "histogram.json"
    path.write_text(json.dumps({"name": "small", "max_sequence_length": 64,
                                "counts": [3] * 64}))
    return path


def _cases(root):
    """(tool, arguments, what the error line says, a file that must not exist).

    ``{out}`` in an argument is the case's own output folder."""
    corpus, histogram = _corpus(root), _histogram(root)
    unpacked = write_unpacked_dataset(root / "unpacked", num_files=2, per_file=30)
    truncated = root / "truncated"
    truncated.mkdir()
    data = open(unpacked[1], "rb").read()
    (truncated / "part-1.tfrecord").write_bytes(data[:len(data) - 100])
    (root / "packed").mkdir()
    (root / "packed" / "packing_stats.json").write_text(json.dumps(
        {"sequences_in": 900, "packs": 617, "packing_factor": 1.4587}, indent=2))
    (root / "a_file").write_text("")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    # Outputs another run holds (the process that started this one: alive).
    held = root / "held"
    held.mkdir()
    lock = json.dumps({"host": socket.gethostname(), "pid": os.getppid(),
                       "started": "today"})
    for name in HELD_LOCKS:
        (held / name).write_text(lock)
    out = "{out}"
    pack = [f"--input_file={','.join(unpacked)}", f"--output_dir={out}/packed",
            f"--max_seq_length={SMALL_SEQ_LENGTH}",
            f"--max_predictions_per_seq={SMALL_PREDICTIONS}"]
    create = [f"--input_file={corpus}", f"--output_file={out}/a.tfrecord",
              "--vocab_size=50", "--max_seq_length=16", "--max_predictions_per_seq=2"]
    verify = [f"--unpacked={','.join(unpacked)}"]
    report = [f"--histogram={histogram}"]
    return [
        ("builtin_corpus", [f"--output_file={root}"], f"--output_file={root}: is a folder",
         None),
        ("builtin_corpus", [f"--output_file={out}/c.txt", "--max_documents=0"],
         "--max_documents must be >= 1, got 0", None),
        ("builtin_corpus", [f"--output_file={held}/c.txt"],
         f"--output_file={held}/c.txt is in use by pid {os.getppid()} on host "
         f"{socket.gethostname()} (started today); wait for it or remove "
         f"{held}/.c.txt.lock", held / "c.txt"),
        ("create_pretraining_data", [*create, f"--input_file={root}/none/*.txt"],
         f"--input_file: '{root}/none/*.txt' matches no files", None),
        ("create_pretraining_data", [*create, f"--input_file={root}/binary.txt"],
         "binary.txt:2: not UTF-8 text", None),
        ("create_pretraining_data",
         [*create, f"--output_file={out}/a.tfrecord,{out}/./a.tfrecord"],
         "/a.tfrecord as '{out}/a.tfrecord' and '{out}/./a.tfrecord'", None),
        # An output that is an input, or another output of the run.
        ("create_pretraining_data", [*create, f"--output_file={corpus}"],
         f"--output_file would write over --input_file's file {corpus}: a run never "
         f"writes over its input", None),
        ("create_pretraining_data", [create[0], f"--vocab_file={vocab}",
                                     f"--output_file={vocab}", *create[3:]],
         f"--output_file would write over --vocab_file's file {vocab}", None),
        ("create_pretraining_data", [*create, f"--output_file={out}/vocab.txt"],
         f"the vocabulary --vocab_size trains and --output_file name one file, "
         f"{out}/vocab.txt", None),
        ("create_pretraining_data", [*create, f"--output_file={held}/a.tfrecord"],
         f"--output_file={held}/a.tfrecord is in use by pid {os.getppid()} on host "
         f"{socket.gethostname()} (started today); wait for it or remove "
         f"{held}/.a.tfrecord.lock", None),
        ("create_pretraining_data", [*create, "--max_seq_length=4"],
         "max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]", None),
        ("create_pretraining_data", [*create, "--num_workers=0"],
         "--num_workers must be >= 1, got 0", None),
        ("pack_pretraining_data", [*pack, "--max_seq_length=0"],
         "--max_seq_length must be >= 1, got 0", None),
        ("pack_pretraining_data", [*pack, "--max_predictions_per_seq=0"],
         "--max_predictions_per_seq must be >= 1, got 0", None),
        ("pack_pretraining_data", [*pack, "--max_sequences_per_pack=0"],
         "--max_sequences_per_pack must be >= 1, got 0", None),
        ("pack_pretraining_data", [*pack, "--seed=-1"], "--seed must be >= 0, got -1",
         None),
        ("pack_pretraining_data", [*pack, "--max_sequence_lenght=64"],
         "unknown flag --max_sequence_lenght", None),
        ("pack_pretraining_data", [*pack, f"--input_file={root}/unpacked"],
         f"--input_file: {root}/unpacked is a folder", None),
        ("pack_pretraining_data", [*pack, f"--output_dir={root}/a_file"],
         f"--output_dir {root}/a_file is a file", None),
        # A worker's error, through Beam's multi-process runner.
        ("pack_pretraining_data", [*pack, f"--input_file={truncated}/*"],
         f"{truncated}/part-1.tfrecord: record 29 is corrupt", None),
        ("pack_pretraining_data", [*pack, f"--output_dir={root}/unpacked", "--overwrite"],
         f"--output_dir={root}/unpacked holds --input_file's {unpacked[0]} (and 1 more): "
         f"write the output to a folder of its own", None),
        ("pack_pretraining_data", [*pack, f"--output_dir={held}", "--overwrite"],
         f"--output_dir={held} is in use by pid {os.getppid()} on host "
         f"{socket.gethostname()} (started today); wait for it or remove {held}/.lock",
         None),
        ("verify_packing", [*verify, f"--packed={root}/packed"],
         f"--packed: {root}/packed is a folder", None),
        ("verify_packing", [*verify, f"--packed={root}/packed/packing_stats.json"],
         f"{root}/packed/packing_stats.json: not a TFRecord file", None),
        ("verify_packing", [*verify, f"--packed={root}/packed/*"],
         f"--packed: '{root}/packed/*' matches no record files (only packing_stats.json)",
         None),
        ("packing_report", [*report, f"--output_json={out}/report.json"],
         f"--output_json={out}/report.json: the folder {out} does not exist", None),
        ("packing_report", [*report, f"--plot={root}/report.pgn"],
         f"--plot={root}/report.pgn: unknown image format 'pgn'", root / "report.pgn"),
        ("packing_report", [*report, f"--plot={root}"], f"--plot={root}: is a folder",
         None),
        ("packing_report", [*report, f"--plot={out}/r.json", f"--output_json={out}/r.json"],
         f"--plot and --output_json name one file, {out}/r.json", None),
        ("packing_report", [*report, f"--output_json={histogram}"],
         f"--output_json would write over --histogram's file {histogram}", None),
        ("packing_report", [*report, f"--output_json={held}/report.json"],
         f"--output_json={held}/report.json is in use by pid {os.getppid()} on host "
         f"{socket.gethostname()} (started today); wait for it or remove "
         f"{held}/.report.json.lock", held / "report.json"),
        ("packing_report", [*report, f"--plot={held}/report.png"],
         f"--plot={held}/report.png is in use by pid {os.getppid()} on host "
         f"{socket.gethostname()} (started today); wait for it or remove "
         f"{held}/.report.png.lock", held / "report.png"),
    ]


def _output_folder(root, index):
    return root / f"out{index}"


def _run_all(root, cases):
    results = []
    for index, (tool, arguments, _, _) in enumerate(cases):
        arguments = [a.replace("{out}", str(_output_folder(root, index)))
                     for a in arguments]
        results.append(run_main(f"data_prep.{tool}", *arguments, cwd=root, tmp_path=root))
    return results


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    cases = _cases(root)
    return root, cases, _run_all(root, cases)


def _problems(result, tool, message, out, absent):
    """What is wrong with one bad-input run (empty: nothing)."""
    problems = [[p for p in out.rglob("*") if p.is_file()] and "output files",
                absent is not None and absent.exists() and f"{absent} written"]
    return one_line_error_problems(result, tool, message, max_lines=MAX_LINES) + [
        problem for problem in problems if problem]


def test_every_tool_fails_on_bad_input_with_one_line(bad_runs):
    root, cases, results = bad_runs
    failures = []
    for index, ((tool, arguments, message, absent), result) in enumerate(
            zip(cases, results)):
        out = _output_folder(root, index)
        problems = _problems(result, tool, message.replace("{out}", str(out)), out,
                             absent)
        if problems:
            failures.append(f"{tool} {arguments[-1]}: {', '.join(problems)}\n"
                            f"{(result.stdout + result.stderr)[-2000:]}")
    assert not failures, "\n".join(failures)


def test_no_tool_changed_an_input_or_another_runs_files(bad_runs):
    root, cases, _ = bad_runs
    assert (root / "corpus.txt").read_text(encoding="utf-8") == CORPUS
    assert (root / "vocab.txt").read_text(encoding="utf-8") == "\n".join(VOCAB) + "\n"
    assert sorted(path.name for path in (root / "unpacked").iterdir()) == [
        "unpacked-000.tfrecord", "unpacked-001.tfrecord"]
    assert sorted(path.name for path in (root / "held").iterdir()) == HELD_LOCKS
    assert json.loads((root / "histogram.json").read_text())["counts"] == [3] * 64


def test_packing_report_checks_its_outputs_before_packing(tmp_path):
    # --verbosity=0: its log line before packing would show.
    histogram = _histogram(tmp_path)
    result = run_main("data_prep.packing_report", f"--histogram={histogram}",
                      f"--plot={tmp_path}/report.pgn", "--verbosity=0", cwd=tmp_path,
                      tmp_path=tmp_path)
    assert result.returncode != 0
    assert "unknown image format 'pgn'" in result.last_line
    assert "Packing small with" not in result.stderr


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_tool_says_so_in_one_line(tmp_path, signal_number):
    # The whole corpus takes seconds after the handlers are in (it imports the
    # standard library).
    process = start_tool("data_prep.builtin_corpus", f"--output_file={tmp_path}/c.txt",
                         tmp_path=tmp_path)
    wait_for_signal_handlers(process, signal.SIGINT, signal.SIGTERM)
    process.send_signal(signal_number)
    result = finish_tool(process, timeout=60)
    assert result.returncode == 128 + signal_number
    assert (result.stdout, result.stderr) == ("", f"builtin_corpus: interrupted by "
                                    f"{signal.Signals(signal_number).name}; nothing "
                                    f"written\n")
    assert list(tmp_path.iterdir()) == []
