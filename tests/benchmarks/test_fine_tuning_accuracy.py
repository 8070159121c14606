"""benchmarks/fine_tuning_accuracy.py: Welch's interval on known numbers, and the
script on a slice of the corpus: one seed of both arms of the classifier run
by run_classifier.py (tiny model, one epoch), another seed's results already
in its folders (read, not run), the report's figures those of the runs'
``eval_results.json`` and the section written.

The script runs in this process (`tests.tool_runs.run_main`); each front end
it starts is a process of its own, as the benchmark measures them."""

import importlib.util
import json
import sys

import pytest
from scipy import stats

from tests.tool_runs import REPOSITORY, defined_flags, run_main

pytestmark = pytest.mark.slow

SCRIPT = REPOSITORY / "benchmarks" / "fine_tuning_accuracy.py"
# The issue's exact matches: five seeds per arm.
PACKED = [51.7, 51.5, 49.4, 50.4, 56.4]
PADDED = [59.0, 49.8, 56.5, 57.8, 58.3]
# Seed 2's results, written before the benchmark runs: it must read them.
READ = {"packed": 0.625, "padded": 0.5}


@pytest.fixture(scope="module")
def script():
    """The script as a module, for its functions (its flags defined only while
    it loads; the functions tested here do not read them)."""
    loaded = []

    def load():
        sys.path.insert(0, str(SCRIPT.parent))  # its `common`, as `python SCRIPT` has it
        try:
            spec = importlib.util.spec_from_file_location("fine_tuning_accuracy_functions",
                                                          SCRIPT)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(SCRIPT.parent))
        loaded.append(module)

    with defined_flags(load):
        pass
    return loaded[0]


def test_welch_interval_of_the_issue_numbers(script):
    found = script.welch_interval(PACKED, PADDED)
    assert found["difference"] == pytest.approx(51.88 - 56.28)
    assert (found["low"], found["high"]) == pytest.approx((-9.23206, 0.43206), abs=1e-4)
    assert found["df"] == pytest.approx(7.2692, abs=1e-4)
    assert found["contains_zero"]
    expected = stats.ttest_ind(PACKED, PADDED, equal_var=False).confidence_interval(0.95)
    assert (found["low"], found["high"]) == pytest.approx((expected.low, expected.high))


def test_welch_interval_excludes_zero_for_a_clear_gap(script):
    found = script.welch_interval([50.0, 51.0, 52.0], [60.0, 61.0, 62.0, 63.0])
    assert found["high"] < 0 and not found["contains_zero"]
    # At its bounds, Welch's t of the shifted arm is the critical value.
    for bound in (found["low"], found["high"]):
        shifted = [x - bound for x in (50.0, 51.0, 52.0)]
        t = stats.ttest_ind(shifted, [60.0, 61.0, 62.0, 63.0], equal_var=False).statistic
        assert abs(t) == pytest.approx(stats.t.ppf(0.975, found["df"]))


def test_welch_interval_without_spread_and_too_few(script):
    assert script.welch_interval([70.0, 70.0], [71.0, 71.0]) == dict(
        difference=-1.0, low=-1.0, high=-1.0, df=float("inf"), contains_zero=False)
    with pytest.raises(ValueError, match="1 packed and 2 padded scores"):
        script.welch_interval([1.0], [1.0, 2.0])
    assert script.describe([1.0, 2.0, 6.0]) == dict(n=3, mean=3.0, std=pytest.approx(
        2.6457513))


def test_word_order_sentences_are_half_as_written_half_reversed(script):
    import random

    documents = [["one two three four", "too short here", "a b b a"],
                 ["five six seven eight nine", "ten eleven twelve thirteen"],
                 ["alpha beta gamma delta", "x y x y"]]
    rows = script.word_order_sentences(documents, random.Random(0), max_sentences=10)
    eligible = {"one two three four", "five six seven eight nine",
                "ten eleven twelve thirteen", "alpha beta gamma delta", "x y x y"}
    assert [label for _, label in rows] == ["1", "0", "1", "0", "1"]
    for sentence, label in rows:
        backwards = " ".join(sentence.split()[::-1])
        assert (sentence in eligible, backwards in eligible) == (label == "1", label == "0")
    assert {s if label == "1" else " ".join(s.split()[::-1]) for s, label in rows} == eligible
    assert rows == script.word_order_sentences(documents, random.Random(0), max_sentences=10)
    assert len(script.word_order_sentences(documents, random.Random(0), max_sentences=3)) == 3


def arguments(root):
    return [f"--work_dir={root / 'work'}", f"--write_markdown={root / 'BENCHMARKS.md'}",
            "--tasks=classifier", "--seeds=1,2", "--max_documents=40", "--heldout_every=4",
            "--max_train_sentences=160", "--max_dev_sentences=60", "--vocab_size=2000",
            "--hidden_size=32", "--intermediate_size=64", "--classifier_num_train_epochs=1",
            "--squad_num_train_epochs=7",
            "--train_batch_size=16", "--max_seq_length=128", "--jit_compile=false"]


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
    """The script once, seed 2's results already in its folders."""
    root = tmp_path_factory.mktemp("fine_tuning_accuracy")
    for arm, accuracy in READ.items():
        folder = root / "work" / "classifier" / "seed2" / arm
        folder.mkdir(parents=True)
        (folder / "eval_results.json").write_text(json.dumps({"accuracy": accuracy}))
    result = run_main("benchmarks/fine_tuning_accuracy.py", *arguments(root), tmp_path=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(root=root, report=json.loads((root / "work" / "report.json").read_text()),
                markdown=(root / "BENCHMARKS.md").read_text())


def test_the_figures_are_those_of_the_runs_outputs(benchmark):
    root, report = benchmark["root"], benchmark["report"]["tasks"]["classifier"]
    for arm in ("packed", "padded"):
        ran = root / "work" / "classifier" / "seed1" / arm
        accuracy = json.loads((ran / "eval_results.json").read_text())["accuracy"]
        seeds = report["arms"][arm]["accuracy"]["seeds"]
        assert seeds == {"1": pytest.approx(100 * accuracy), "2": 100 * READ[arm]}
        assert (ran / "run.log").exists()
        assert not (ran.parent.parent / "seed2" / arm / "run.log").exists()  # read, not run
    found = report["difference"]["accuracy"]
    packed = list(report["arms"]["packed"]["accuracy"]["seeds"].values())
    padded = list(report["arms"]["padded"]["accuracy"]["seeds"].values())
    expected = stats.ttest_ind(packed, padded, equal_var=False).confidence_interval(0.95)
    assert (found["low"], found["high"]) == pytest.approx((expected.low, expected.high))


def test_the_classifier_data_is_half_reversed(benchmark):
    for split in ("train", "dev"):
        lines = (benchmark["root"] / "work" / "data" / "SST-2" / f"{split}.tsv"
                 ).read_text().splitlines()
        labels = [line.rsplit("\t", 1)[1] for line in lines[1:]]
        assert lines[0] == "sentence\tlabel"
        assert abs(labels.count("0") - labels.count("1")) <= 1


def test_the_packed_arm_sees_as_many_sequences_per_update(benchmark):
    root = benchmark["root"]
    factor = benchmark["report"]["data"]["packing_factor"]["classifier"]
    assert factor > 1.5  # sentences of 128 tokens at most pack
    rows = {arm: json.loads((root / "work" / "classifier" / "seed1" / arm
                             / "classifier_summary.json").read_text())
            ["options"]["train_batch_size"] for arm in ("packed", "padded")}
    assert rows == {"padded": 16, "packed": round(16 / factor)}


def test_the_classifier_runs_take_the_classifier_epochs_and_learning_rate(benchmark):
    root = benchmark["root"]
    for arm in ("packed", "padded"):
        summary = json.loads((root / "work" / "classifier" / "seed1" / arm
                              / "classifier_summary.json").read_text())
        # --classifier_num_train_epochs=1, not --squad_num_train_epochs=7, and
        # the classifier's own learning rate (its default), not SQuAD's.
        assert summary["options"]["num_train_epochs"] == 1.0
        assert summary["options"]["learning_rate"] == 5e-4
        assert json.loads((root / "work" / "classifier" / "seed1" / arm / "run.json")
                          .read_text())["classifier_learning_rate"] == 5e-4


def test_the_section_is_written(benchmark):
    text = benchmark["markdown"]
    assert "<!-- fine_tuning_accuracy:begin -->" in text
    assert "| packed | 2 | 62.50 |" in text and "| padded | 2 | 50.00 |" in text
    assert "95 % Welch interval" in text
    assert "The commonest dev label alone scores" in text
    assert "Word order, as written or reversed" in text
