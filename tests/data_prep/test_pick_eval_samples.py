"""pick_eval_samples: MLPerf's picks, the records unchanged, its error lines,
and pack_pretraining_data taking its output."""

import json
import struct

import numpy as np
import pytest

from data_prep.pick_eval_samples import pick_eval_samples, pick_indices
from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import RecordFormat
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH, write_unpacked_dataset
from tests.tool_runs import one_line_error_problems, run_main

TOOL = "pick_eval_samples"
FORMAT = RecordFormat.unpacked(SMALL_SEQ_LENGTH, SMALL_PREDICTIONS)
SIZE_FLAGS = [f"--max_seq_length={SMALL_SEQ_LENGTH}",
              f"--max_predictions_per_seq={SMALL_PREDICTIONS}"]


def _raw_records(path):
    """The serialised records of a TFRecord file (its framing read by hand)."""
    data = open(path, "rb").read()
    records, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        records.append(data[offset + 12:offset + 12 + length])
        offset += 12 + length + 4
    return records


# --------------------------------------------------------------- the picks
def test_picks_are_mlperfs_float_quotient_truncated():
    # int(i * (30 / 22)): the quotient rounds below 15/11, so i = 11 gives 14,
    # where floor(11 * 30 / 22) = 15.
    assert pick_indices(30, 22).tolist() == [
        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 19, 20, 21, 23, 24, 25, 27, 28]
    assert pick_indices(10, 4).tolist() == [0, 2, 5, 7]
    assert pick_indices(7, 7).tolist() == list(range(7))
    assert pick_indices(1_000_000, 3).tolist() == [0, 333333, 666666]


@pytest.mark.parametrize("num_records, num_to_pick, message", [
    (30, 31, "--num_examples_to_pick=31 asks for more records than --input_tfrecord "
             "holds (30)"),
    (0, 1, "--num_examples_to_pick=1 asks for more records than --input_tfrecord "
           "holds (0)"),
    (30, 0, "--num_examples_to_pick must be >= 1, got 0"),
])
def test_pick_indices_refuses(num_records, num_to_pick, message):
    with pytest.raises(ValueError) as error:
        pick_indices(num_records, num_to_pick)
    assert str(error.value) == message


# ------------------------------------------------------- the tool, as run
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The inputs and every command-line run, started together: 30 records in
    one file (MLPerf's case), 12 + 18 in two, a file of another
    --max_seq_length; then pack_pretraining_data on a picked file."""
    root = tmp_path_factory.mktemp("pick")
    one = write_unpacked_dataset(root / "one", num_files=1, per_file=30, seed=1)[0]
    two = (write_unpacked_dataset(root / "two", num_files=1, per_file=12, seed=2)
           + write_unpacked_dataset(root / "two_b", num_files=1, per_file=18, seed=3))
    longer = write_unpacked_dataset(root / "longer", num_files=1, per_file=5, seed=4,
                                    max_seq_length=2 * SMALL_SEQ_LENGTH)[0]
    cases = {
        "one": [f"--input_tfrecord={one}", f"--output_tfrecord={root}/out/one.tfrecord",
                "--num_examples_to_pick=22", *SIZE_FLAGS],
        "two": [f"--input_tfrecord={','.join(two)}",
                f"--output_tfrecord={root}/out/two.tfrecord", "--num_examples_to_pick=7",
                *SIZE_FLAGS],
        "too_many": [f"--input_tfrecord={one}", f"--output_tfrecord={root}/bad/a",
                     "--num_examples_to_pick=31", *SIZE_FLAGS],
        "default_count": [f"--input_tfrecord={one}", f"--output_tfrecord={root}/bad/b",
                          *SIZE_FLAGS],
        "other_length": [f"--input_tfrecord={longer}", f"--output_tfrecord={root}/bad/c",
                         "--num_examples_to_pick=2", *SIZE_FLAGS],
        "other_predictions": [f"--input_tfrecord={one}",
                              f"--output_tfrecord={root}/bad/d",
                              "--num_examples_to_pick=2",
                              f"--max_seq_length={SMALL_SEQ_LENGTH}",
                              f"--max_predictions_per_seq={SMALL_PREDICTIONS + 1}"],
        "onto_input": [f"--input_tfrecord={one}", f"--output_tfrecord={one}",
                       "--num_examples_to_pick=2", *SIZE_FLAGS],
    }
    results = {name: run_main(f"data_prep.{TOOL}", *arguments, tmp_path=root)
               for name, arguments in cases.items()}
    assert results["one"].returncode == 0, results["one"].stderr
    packed = run_main(
        "data_prep.pack_pretraining_data", f"--input_file={root}/out/one.tfrecord",
        f"--output_dir={root}/packed", "--num_output_shards=1", "--max_sequences_per_pack=3",
        *SIZE_FLAGS, "--direct_running_mode=in_memory", "--direct_num_workers=1",
        tmp_path=root)
    return {"root": root, "one": one, "two": two, "longer": longer, "results": results,
            "packed": packed}


def test_the_tool_writes_mlperfs_picks_byte_for_byte(runs):
    result = runs["results"]["one"]
    output = runs["root"] / "out" / "one.tfrecord"
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "reading 1 input file (0.0 MB) ...",
        f"picked 22 of 30 records (one in 1.36, records 0 to 28); wrote {output}"]
    picks = pick_indices(30, 22)
    inputs = _raw_records(runs["one"])
    assert _raw_records(output) == [inputs[i] for i in picks]
    expected = record_files.read_arrays(runs["one"], FORMAT)
    picked = record_files.read_arrays(str(output), FORMAT)
    assert list(picked) == list(FORMAT.feature_names)
    for name, values in picked.items():
        np.testing.assert_array_equal(values, expected[name][picks])
    assert sorted(p.name for p in output.parent.iterdir()) == ["one.tfrecord",
                                                               "two.tfrecord"]


def test_several_files_are_one_sequence_of_records_in_sorted_order(runs):
    assert runs["results"]["two"].returncode == 0, runs["results"]["two"].stderr
    inputs = _raw_records(runs["two"][0]) + _raw_records(runs["two"][1])
    assert pick_indices(30, 7).tolist() == [0, 4, 8, 12, 17, 21, 25]  # both files
    assert _raw_records(runs["root"] / "out" / "two.tfrecord") == [
        inputs[i] for i in pick_indices(30, 7)]
    assert runs["results"]["two"].stdout.startswith("reading 2 input files (")


@pytest.mark.parametrize("case, message", [
    ("too_many", "pick_eval_samples: --num_examples_to_pick=31 asks for more records "
                 "than --input_tfrecord holds (30)"),
    ("default_count", "pick_eval_samples: --num_examples_to_pick=10000 asks for more "
                      "records than --input_tfrecord holds (30)"),
    ("other_length", "pick_eval_samples: {longer}: record 0 feature 'input_ids' has 128 "
                     "values, expected 64 (--max_seq_length=64)"),
    ("other_predictions", "pick_eval_samples: {one}: record 0 feature "
                          "'masked_lm_positions' has 10 values, expected 11 "
                          "(--max_predictions_per_seq=11)"),
    ("onto_input", "pick_eval_samples: --output_tfrecord would write over "
                   "--input_tfrecord's file {one}: a run never writes over its input"),
])
def test_bad_input_is_one_line_and_writes_nothing(runs, case, message):
    result = runs["results"][case]
    expected = message.format(**{name: runs[name] for name in ("one", "longer")})
    assert not one_line_error_problems(result, TOOL, expected), result.stderr
    assert result.last_line == expected
    assert result.returncode == 1
    assert not (runs["root"] / "bad").exists()


def test_pack_pretraining_data_packs_the_picked_records(runs):
    packed = runs["packed"]
    assert packed.returncode == 0, packed.stderr[-3000:]
    stats = json.loads((runs["root"] / "packed" / "packing_stats.json").read_text())
    assert stats["sequences_in"] == stats["sequences_out"] == 22


def test_the_library_call_returns_what_it_picked(runs, tmp_path):
    summary = pick_eval_samples(",".join(runs["two"]), str(tmp_path / "p.tfrecord"),
                                num_to_pick=30, max_seq_length=SMALL_SEQ_LENGTH,
                                max_predictions_per_seq=SMALL_PREDICTIONS)
    assert summary.input_files == tuple(runs["two"]) and summary.num_records == 30
    assert summary.indices.tolist() == list(range(30))
    assert _raw_records(tmp_path / "p.tfrecord") == (_raw_records(runs["two"][0])
                                                     + _raw_records(runs["two"][1]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.tfrecord"]
