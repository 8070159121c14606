"""create_pretraining_data end to end, as a user runs it, and every bad input."""

import os
import random
import re
import signal
import socket
import time

import numpy as np
import pytest
import tensorflow as tf

from data_prep import create_pretraining_data as cpd
from data_prep.create_pretraining_data import create_pretraining_data, merge_file_instances
from data_prep.process_tree import descendants
from packed_bert_tf.data import tokenization
from packed_bert_tf.data.preparation import pretraining_instances
from packed_bert_tf.data.preparation.pretraining_instances import InstanceOptions
from packed_bert_tf.data.records import record_files, record_format
from tests.tool_runs import (
    ctrl_c_in_terminal,
    finish_tool,
    run_main,
    start_in_terminal,
    start_tool,
)

pytestmark = pytest.mark.slow

WORDS = ("the a of packing sequence sequences token tokens model models train "
         "training data set sets mask masked attention layer layers batch size "
         "length lengths pack packs histogram strategy strategies speed fast "
         "slow word words sentence next random is are was were and or but "
         "with without for to from in on at by it this that").split()
# Pieces that make some unlisted words (e.g. "packed", "tokenizer") into several.
PIECES = ["##s", "##ed", "##ing", "##er", "##izer", "##ly", "pre", "un"]
FORMAT = record_format.RecordFormat.unpacked(64, 10)


def _write_corpus(directory, seed=0):
    rng = random.Random(seed)
    vocabulary = WORDS + ["packed", "tokenizer", "unmasked", "quickly", "préfix"]
    paths = []
    for name in ("part-0.txt", "part-1.txt"):
        documents = []
        for _ in range(25):
            sentences = []
            for _ in range(rng.randint(2, 12)):
                words = [rng.choice(vocabulary) for _ in range(rng.randint(3, 16))]
                sentences.append(" ".join(words).capitalize()
                                 + rng.choice([".", "!", "?", " ..."]))
            documents.append("\n".join(sentences) + "\n")
        path = directory / name
        path.write_text("\n".join(documents) + "\n", encoding="utf-8")
        paths.append(path)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *WORDS, *PIECES, ".", "!",
                                "?", "##i", "##x"]) + "\n", encoding="utf-8")
    return paths, vocab


def _command(*flags):
    return flags


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All command-line runs, one after the other in this process
    (`tests.tool_runs.run_main`); the other bad inputs are tested through the
    library function the tool's `main` calls, below."""
    root = tmp_path_factory.mktemp("create_pretraining_data")
    (first, second), vocab = _write_corpus(root)
    no_specials = root / "no_specials.txt"
    no_specials.write_text("[PAD]\n[UNK]\n[SEP]\nthe\n", encoding="utf-8")
    common = [f"--max_seq_length={FORMAT.max_seq_length}",
              f"--max_predictions_per_seq={FORMAT.max_masked_tokens}", "--dupe_factor=3"]
    inputs = f"--input_file={root / 'part-0*.txt'},{root / 'part-1.t?t'}"

    def outputs(name, count=2):
        return ",".join(str(root / name / f"shard-{i}.tfrecord") for i in range(count))

    commands = {
        "seed_1": _command(inputs, f"--output_file={outputs('seed_1')}",
                           f"--vocab_file={vocab}", "--random_seed=1", "--verbosity=0",
                           *common),
        "trained_vocab": _command(inputs, f"--output_file={outputs('trained', 1)}",
                                  "--vocab_size=150", *common),
        "no_such_input": _command(f"--input_file={root / 'nothing' / '*.txt'}",
                                  f"--output_file={outputs('bad_1', 1)}",
                                  f"--vocab_file={vocab}"),
        "vocab_without_specials": _command(inputs, f"--output_file={outputs('bad_3', 1)}",
                                           f"--vocab_file={no_specials}"),
        "no_vocab": _command(inputs, f"--output_file={outputs('bad_4', 1)}"),
        "masked_lm_prob": _command(inputs, f"--output_file={outputs('bad_5', 1)}",
                                   f"--vocab_file={vocab}", "--masked_lm_prob=0"),
    }
    results = {}
    for name, flags in commands.items():
        result = run_main("data_prep.create_pretraining_data", *flags, cwd=root)
        results[name] = result.returncode, result.stdout, result.stderr
    return root, (first, second), vocab, results


def _records(directory):
    return sorted(str(path) for path in directory.glob("*.tfrecord"))


def test_records_read_back_and_equal_the_library_output(runs, tmp_path):
    root, inputs, vocab, results = runs
    returncode, stdout, stderr = results["seed_1"]
    assert returncode == 0, stderr
    files = _records(root / "seed_1")
    assert [os.path.basename(f) for f in files] == ["shard-0.tfrecord",
                                                    "shard-1.tfrecord"]
    assert not [p for p in (root / "seed_1").iterdir() if ".tmp" in p.name]
    shards = [record_files.read_arrays(path, FORMAT) for path in files]

    # Instances per input file, file i seeded random_seed + i, then merged in
    # one seeded order.
    tokenizer = tokenization.WordPieceTokenizer(str(vocab))
    per_file = [pretraining_instances.tokenize_documents(
        pretraining_instances.read_text_documents([str(path)]), tokenizer.encode_batch)
        for path in inputs]
    expected = merge_file_instances([pretraining_instances.create_training_instances(
        documents, tokenizer.vocab, InstanceOptions(
            max_seq_length=64, max_predictions_per_seq=10, masked_lm_prob=0.15,
            dupe_factor=3, random_seed=1 + index))
        for index, documents in enumerate(per_file)], random_seed=1)
    documents = [document for file_documents in per_file for document in file_documents]
    parts = pretraining_instances.split_round_robin(expected, 2)
    for shard, part, path in zip(shards, parts, files):
        assert list(shard) == list(record_format.UNPACKED_FEATURE_NAMES)
        for name in shard:
            np.testing.assert_array_equal(shard[name], part[name], err_msg=name)
        # Byte for byte: the library is deterministic for a seed (tested in
        # tests/data), so the tool's output is too.
        copy = str(tmp_path / os.path.basename(path))
        record_files.write_arrays(copy, part)
        assert open(copy, "rb").read() == open(path, "rb").read()
    instances = len(expected["input_ids"])
    tokens = int(expected["input_mask"].sum())
    assert f"{len(documents):,} documents" in stdout
    assert f"{instances:,} instances, {tokens:,} tokens" in stdout
    assert f"mean length {tokens / instances:.1f} of 64" in stdout
    # The first instances are logged with their tokens, as BERT's tool does
    # (--verbosity=0; by default the tool prints only its own lines).
    assert "tokens: [CLS] " in stderr
    returncode, stdout, stderr = results["trained_vocab"]
    assert returncode == 0 and stderr == "", stderr
    assert stdout.splitlines()[0] == "reading 2 input files (0.0 MB) ..."
    assert len(stdout.splitlines()) == 5 and stdout.splitlines()[-1].startswith("wrote ")


def test_records_parse_with_the_mlperf_feature_spec(runs):
    root, _, _, results = runs
    assert results["seed_1"][0] == 0
    spec = {"input_ids": tf.io.FixedLenFeature([64], tf.int64),
            "input_mask": tf.io.FixedLenFeature([64], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([64], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([10], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([10], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    dataset = tf.data.TFRecordDataset(_records(root / "seed_1")).batch(1000)
    serialized = next(iter(dataset))
    parsed = tf.io.parse_example(serialized, spec)
    assert parsed["input_ids"].shape[0] == serialized.shape[0] > 10
    mask = parsed["input_mask"].numpy()
    assert ((mask == 0) | (mask == 1)).all()
    assert (parsed["input_ids"].numpy()[:, 0] == 2).all()     # [CLS]
    weights = parsed["masked_lm_weights"].numpy()
    assert ((weights == 0) | (weights == 1)).all() and weights.sum() > 0


def test_vocab_size_trains_a_vocabulary_beside_the_output(runs):
    root, _, _, results = runs
    returncode, stdout, stderr = results["trained_vocab"]
    assert returncode == 0, stderr
    vocab_file = root / "trained" / "vocab.txt"
    lines = vocab_file.read_text(encoding="utf-8").splitlines()
    assert lines[:5] == list(tokenization.SPECIAL_TOKENS)
    assert 60 < len(lines) <= 150
    assert f"vocabulary {vocab_file}" in stdout
    (records,) = _records(root / "trained")
    arrays = record_files.read_arrays(records, FORMAT)
    assert len(arrays["input_ids"]) > 10
    assert arrays["input_ids"].max() < len(lines)
    assert arrays["masked_lm_ids"].max() < len(lines)
    tokenizer = tokenization.WordPieceTokenizer(str(vocab_file))
    assert tokenizer.tokenize("The model") == ["the", "model"]
    original = arrays["input_ids"].copy()
    rows, slots = np.nonzero(arrays["masked_lm_weights"])
    original[rows, arrays["masked_lm_positions"][rows, slots]] = \
        arrays["masked_lm_ids"][rows, slots]
    assert tokenizer.unk_id not in original   # the vocabulary covers its corpus


@pytest.mark.parametrize("case, message", [
    ("no_such_input", "--input_file: '{root}/nothing/*.txt' matches no files"),
    ("vocab_without_specials", "{root}/no_specials.txt: not a BERT vocabulary: missing "
                               "special tokens [CLS] [MASK]"),
    ("no_vocab", "give --vocab_file (a BERT vocab.txt) or --vocab_size"),
    ("masked_lm_prob", "masked_lm_prob must be in (0, 1], got 0.0"),
])
def test_bad_input_fails_with_one_line_and_no_output(runs, case, message):
    root, _, _, results = runs
    returncode, stdout, stderr = results[case]
    assert returncode != 0
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines()
              if line.startswith("create_pretraining_data:")]
    assert errors == [stderr.splitlines()[-1]]
    assert message.format(root=root) in errors[0]
    assert not [path for path in root.glob("bad_*/**/*") if path.is_file()]


@pytest.fixture
def corpus(tmp_path):
    (first, second), vocab = _write_corpus(tmp_path)
    return tmp_path, f"{first},{second}", str(vocab)


def _create(inputs, output, **options):
    arguments = dict(vocab_file=None, vocab_size=None, do_lower_case=True,
                     do_whole_word_mask=False, max_seq_length=64,
                     max_predictions_per_seq=10, masked_lm_prob=0.15,
                     short_seq_prob=0.1, dupe_factor=1, random_seed=1)
    arguments.update(options)
    instance_options = InstanceOptions(**{name: arguments.pop(name) for name in (
        "do_whole_word_mask", "max_seq_length", "max_predictions_per_seq",
        "masked_lm_prob", "short_seq_prob", "dupe_factor", "random_seed")})
    return create_pretraining_data(inputs, [output], instance_options=instance_options,
                                   **arguments)


@pytest.mark.parametrize("make_input, options, message", [
    (lambda d: str(d / "missing" / "*.txt"), {}, "matches no files"),
    (lambda d: "", {}, "--input_file is empty"),
    (lambda d: _file(d, "empty.txt", b""), {}, "empty.txt: no documents"),
    (lambda d: _file(d, "blank.txt", b"\n  \n\n"), {}, "blank.txt: no documents"),
    (lambda d: _file(d, "binary.txt", b"Text.\n\x80\x81\n"), {},
     "binary.txt:2: not UTF-8 text"),
    (None, {"vocab_file": "specials"}, "specials.txt: not a BERT vocabulary: missing "
                                       "special tokens [CLS] [SEP] [MASK]"),
    (None, {"vocab_file": "missing"}, "No such file or directory"),
    (None, {"max_seq_length": 4}, "max_seq_length must be >= 5"),
    (None, {"masked_lm_prob": 0.0}, "masked_lm_prob must be in (0, 1], got 0.0"),
    (None, {"masked_lm_prob": 1.01}, "masked_lm_prob must be in (0, 1], got 1.01"),
    (None, {"vocab_file": None}, "give --vocab_file (a BERT vocab.txt) or --vocab_size"),
    (None, {"vocab_size": 100}, "give --vocab_file or --vocab_size, not both"),
    (None, {"vocab_file": None, "vocab_size": 3}, "vocab_size must be more than"),
    (None, {"output": "/proc/no/such/place.tfrecord"}, "--output_file: /proc/no"),
])
def test_every_bad_input_is_named_and_writes_nothing(corpus, make_input, options,
                                                     message):
    directory, inputs, vocab = corpus
    if make_input is not None:
        inputs = make_input(directory)
    options.setdefault("vocab_file", vocab)
    if options["vocab_file"] in ("specials", "missing"):
        path = directory / f"{options['vocab_file']}.txt"
        if options["vocab_file"] == "specials":
            path.write_text("[PAD]\n[UNK]\nthe\n", encoding="utf-8")
        options["vocab_file"] = str(path)
    output = options.pop("output", str(directory / "out" / "train.tfrecord"))
    with pytest.raises((ValueError, OSError)) as error:
        _create(inputs, output, **options)
    assert message in str(error.value)
    assert not (directory / "out").exists() or not list((directory / "out").iterdir())


def _file(directory, name, content):
    path = directory / name
    path.write_bytes(content)
    return str(path)


def test_text_without_any_known_token_is_an_error(tmp_path):
    corpus = _file(tmp_path, "corpus.txt", "\x00\x01\n\x02\n".encode())
    vocab = _file(tmp_path, "vocab.txt",
                  "\n".join(tokenization.SPECIAL_TOKENS).encode() + b"\n")
    with pytest.raises(ValueError, match="no sentence of .*corpus.txt has a token"):
        _create(corpus, str(tmp_path / "out.tfrecord"), vocab_file=vocab)
    assert not (tmp_path / "out.tfrecord").exists()


def test_whole_word_masking_and_cased_options_reach_the_library(corpus):
    directory, inputs, vocab = corpus
    output = str(directory / "wwm.tfrecord")
    summary = _create(inputs, output, vocab_file=vocab, do_whole_word_mask=True,
                      do_lower_case=False, dupe_factor=2)
    arrays = record_files.read_arrays(output, FORMAT)
    assert len(arrays["input_ids"]) == summary["instances"] > 10
    # Cased: the capitalised first words of sentences are not in the vocabulary.
    assert (arrays["input_ids"] == 1).sum() > 0


def test_the_output_is_the_same_bytes_for_any_number_of_workers(tmp_path):
    (first, second), vocab = _write_corpus(tmp_path)
    (tmp_path / "more").mkdir()
    (third, fourth), _ = _write_corpus(tmp_path / "more", seed=1)
    inputs = ",".join(map(str, (first, second, third, fourth)))
    contents = {}
    for num_workers in (1, 2, 3, 5):
        outputs = [str(tmp_path / f"workers-{num_workers}" / f"shard-{i}.tfrecord")
                   for i in range(3)]
        summary = create_pretraining_data(
            inputs, outputs, vocab_file=str(vocab), vocab_size=None, do_lower_case=True,
            instance_options=InstanceOptions(
                do_whole_word_mask=False, max_seq_length=64, max_predictions_per_seq=10,
                masked_lm_prob=0.15, short_seq_prob=0.1, dupe_factor=2, random_seed=3),
            num_workers=num_workers)
        assert summary["input_files"] == 4 and summary["documents"] == 100
        contents[num_workers] = [open(path, "rb").read() for path in outputs]
    assert all(len(data) > 1000 for data in contents[1])
    assert contents[2] == contents[1] and contents[3] == contents[1]
    assert contents[5] == contents[1]  # more workers than files: one per file


def test_num_workers_below_one_is_named(corpus):
    directory, inputs, vocab = corpus
    with pytest.raises(ValueError, match="--num_workers must be >= 1, got 0"):
        _create(inputs, str(directory / "out.tfrecord"), vocab_file=vocab, num_workers=0)


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_a_run_that_stops_after_training_its_vocabulary_changes_nothing(
        corpus, monkeypatch, failure):
    # What an interrupt or a failure while instances are made leaves: the
    # earlier run's records and vocabulary, together, and nothing else.
    directory, inputs, _ = corpus
    out = directory / "out"
    out.mkdir()
    (out / "train.tfrecord").write_bytes(b"earlier records")
    (out / "vocab.txt").write_text("earlier vocabulary")
    trained = []

    def stop(tasks, num_workers):
        trained.append(open(tasks[0].vocab_file, encoding="utf-8").read())
        raise failure

    monkeypatch.setattr(cpd, "_make_instances", stop)
    with pytest.raises(failure):
        _create(inputs, str(out / "train.tfrecord"), vocab_file=None, vocab_size=120)
    assert trained and trained[0].startswith("[PAD]\n")  # it had trained one
    assert sorted(p.name for p in out.iterdir()) == ["train.tfrecord", "vocab.txt"]
    assert (out / "train.tfrecord").read_bytes() == b"earlier records"
    assert (out / "vocab.txt").read_text() == "earlier vocabulary"

    monkeypatch.undo()
    summary = _create(inputs, str(out / "train.tfrecord"), vocab_file=None,
                      vocab_size=120)
    assert summary["vocab_file"] == str(out / "vocab.txt")
    assert (out / "vocab.txt").read_text(encoding="utf-8") == trained[0]
    assert sorted(p.name for p in out.iterdir()) == ["train.tfrecord", "vocab.txt"]


def test_a_full_disk_names_the_output_file(corpus, monkeypatch):
    directory, inputs, vocab = corpus

    def full(self, buffer, offsets):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(record_files.RecordWriter, "write_serialized", full)
    output = directory / "out" / "train.tfrecord"
    with pytest.raises(OSError, match=rf"^--output_file: {output}: No space left on "
                                      rf"device$"):
        _create(inputs, str(output), vocab_file=vocab)
    assert list((directory / "out").iterdir()) == []


def _started_on_a_pipe(pipe, *flags):
    """Starts the tool (a process of its own, as a second user's run) reading
    the named pipe ``pipe``; returns it with the pipe's write end once it reads
    there: it holds its outputs' locks by then and waits for the text."""
    process = start_tool("data_prep.create_pretraining_data", f"--input_file={pipe}",
                         "--max_seq_length=64", "--max_predictions_per_seq=10",
                         "--dupe_factor=1", *flags, tmp_path=pipe.parent)
    while True:
        try:
            return process, os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader yet
            if process.poll() is not None:
                raise AssertionError(finish_tool(process).stderr) from None
            time.sleep(0.01)


def _give_text(writer, text):
    os.set_blocking(writer, True)
    with os.fdopen(writer, "w", encoding="utf-8") as pipe:
        pipe.write(text)


def test_a_second_run_into_a_running_runs_outputs_is_refused(tmp_path):
    # The running run reads a vocabulary that holds "the" twice: it says so
    # once, whatever its workers read, and its records use the later id.
    (first, _), vocab = _write_corpus(tmp_path)
    lines = vocab.read_text(encoding="utf-8").splitlines()
    repeated = tmp_path / "repeated_vocab.txt"
    repeated.write_text("\n".join([*lines, "the"]) + "\n", encoding="utf-8")
    pipe = tmp_path / "text.txt"
    os.mkfifo(pipe)
    out = tmp_path / "out"
    running, writer = _started_on_a_pipe(
        pipe, f"--output_file={out}/train.tfrecord", f"--vocab_file={repeated}")
    try:
        second = run_main("data_prep.create_pretraining_data", f"--input_file={first}",
                          f"--output_file={out}/train.tfrecord", "--vocab_size=100",
                          cwd=tmp_path)
    finally:
        _give_text(writer, first.read_text(encoding="utf-8"))
    result = finish_tool(running, timeout=120)
    assert second.returncode == 1
    assert re.fullmatch(
        rf"create_pretraining_data: --output_file={out}/train\.tfrecord is in use by "
        rf"pid {running.pid} on host {re.escape(socket.gethostname())} \(started "
        rf"[^)]+\); wait for it or remove {out}/\.train\.tfrecord\.lock",
        second.stderr.strip()), second.stderr
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"wrote {out}/train.tfrecord"
    assert sorted(p.name for p in out.iterdir()) == ["train.tfrecord"]  # not the second's
    (warning,) = result.stderr.splitlines()
    assert warning.endswith(
        f"] {repeated}: 1 token twice, read as google-research/bert reads them (the "
        f"last line wins): 'the' on lines 6 and {len(lines) + 1}: id {len(lines)} is "
        f"used, id 5 never")
    ids = record_files.read_arrays(str(out / "train.tfrecord"), FORMAT)["input_ids"]
    assert (ids == len(lines)).any() and not (ids == 5).any()


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    (first, _), _ = _write_corpus(tmp_path)
    pipe = tmp_path / "text.txt"
    os.mkfifo(pipe)
    out = tmp_path / "out"
    killed, writer = _started_on_a_pipe(pipe, f"--output_file={out}/train.tfrecord",
                                        "--vocab_size=100")
    killed.kill()
    finish_tool(killed)
    os.close(writer)
    assert sorted(p.name for p in out.iterdir()) == [".train.tfrecord.lock",
                                                     ".vocab.txt.lock"]
    result = run_main("data_prep.create_pretraining_data", f"--input_file={first}",
                      f"--output_file={out}/train.tfrecord", "--vocab_size=100",
                      "--max_seq_length=64", "--max_predictions_per_seq=10",
                      "--dupe_factor=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    host = socket.gethostname()
    assert [line.split("] ", 1)[1] for line in result.stderr.splitlines()] == [
        f"taking over {out}/.{name}.lock: its run (pid {killed.pid} on {host}) is gone"
        for name in ("train.tfrecord", "vocab.txt")]
    assert sorted(p.name for p in out.iterdir()) == ["train.tfrecord", "vocab.txt"]


def test_ctrl_c_in_a_terminal_stops_the_tool_and_its_workers_with_one_line(tmp_path):
    # Two workers, one of them waiting to read a named pipe, the tool waiting
    # for them: Ctrl-C reaches all of them, and the tool ends with one line.
    (first, _), vocab = _write_corpus(tmp_path)
    pipe = tmp_path / "text.txt"
    os.mkfifo(pipe)
    out = tmp_path / "out"
    process, terminal = start_in_terminal(
        "data_prep.create_pretraining_data", f"--input_file={first},{pipe}",
        f"--output_file={out}/train.tfrecord", f"--vocab_file={vocab}",
        "--num_workers=2", "--max_seq_length=64", "--max_predictions_per_seq=10",
        env={"TMPDIR": tmp_path})

    def waiting(output):
        return "reading 2 input files" in output and len(descendants(process.pid)) >= 2

    status, output = ctrl_c_in_terminal(process, terminal, waiting)
    assert status == 128 + signal.SIGINT, output
    assert [line.strip() for line in output.replace("^C", "").splitlines()] == [
        "reading 2 input files (0.0 MB) ...",
        "create_pretraining_data: interrupted by SIGINT; nothing written"]
    assert os.listdir(out) == []
