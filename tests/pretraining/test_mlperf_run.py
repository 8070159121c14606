"""A pre-training run as MLPerf sees it: evaluation during training at a sample
interval, the stop at a target accuracy, the MLPerf log that MLPerf's own
compliance checker accepts, and the options' refusals."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.pretraining import mlperf
from packed_bert_tf.pretraining.mlperf import (
    TARGET_ACCURACY,
    default_eval_interval_samples,
    nominal_packing_factor,
)
from packed_bert_tf.pretraining.run import run_pretraining
from packed_bert_tf.training.step_counting import crossed
from packed_bert_tf.training.trainer import Trainer
from tests.conftest import write_unpacked_dataset
from tests.pretraining.mlperf_logs import compliance_check, mllog_lines
from tests.pretraining.tiny_runs import options

pytest.importorskip("mlperf_logging")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


# 12 steps of 4 packs (about 2 sequences each): evaluations every 24 sequences.
# The one-layer model (the conftest's config_file) uncompiled, at a learning
# rate high enough for its masked-LM accuracy to rise over the 12 steps (at
# BERT's usual rates it stays near 0): the stop threshold is the second
# evaluation's. No claim here is about XLA, which costs seconds a run.
RUN = dict(do_train=True, num_train_steps=12, save_checkpoints_steps=0,
           iterations_per_loop=4, log_every_n_steps=4, learning_rate=0.1,
           jit_compile=False)


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    """64 unpacked evaluation records (4 batches of 16): each run evaluates
    several times, and no claim here is about the evaluation set's size."""
    return write_unpacked_dataset(tmp_path_factory.mktemp("eval"), num_files=1,
                                  per_file=64, seed=7)[0]


@pytest.fixture(scope="module")
def runs(config_file, packed_files, eval_file, tmp_path_factory):
    """The same run trained without evaluation, with evaluation during training,
    and with a stop threshold that its second evaluation reaches."""
    root = tmp_path_factory.mktemp("mlperf")
    plain = run_pretraining(options(config_file, root / "plain", input_file=packed_files[0],
                                    **RUN))
    evaluated_args = dict(input_file=packed_files[0], do_eval=True,
                          eval_input_file=eval_file, eval_interval_samples=24, **RUN)
    evaluated = run_pretraining(options(config_file, root / "evaluated", **evaluated_args))
    target = evaluated["train"]["evaluations"][1]["masked_lm_accuracy"]
    log = root / "mlperf.log"
    stopped = run_pretraining(options(config_file, root / "stopped", stop_threshold=target,
                                      mlperf_log_file=str(log), **evaluated_args))
    return dict(plain=plain, evaluated=evaluated, stopped=stopped, log=log, root=root,
                target=target)


def test_evaluations_come_every_interval_and_at_the_end(runs):
    evaluations = runs["evaluated"]["train"]["evaluations"]
    samples = [e["samples_count"] for e in evaluations]
    history = runs["plain"]["train"]["history"]
    total = runs["plain"]["train"]["sequences"]
    # The first update at or after each multiple of 24 sequences, and the end.
    assert samples[-1] == total and evaluations[-1]["step"] == 12
    assert all(b > a for a, b in zip(samples, samples[1:]))
    multiples = [s // 24 for s in samples[:-1]]
    assert multiples == list(range(1, len(multiples) + 1))
    assert len(evaluations) >= 3 and history  # the run is long enough to tell
    # Every evaluation reads all the evaluation records.
    assert {e["sequences"] for e in evaluations} == {runs["evaluated"]["eval"]["sequences"]}
    assert runs["evaluated"]["eval"]["masked_lm_accuracy"] == \
        evaluations[-1]["masked_lm_accuracy"]


def test_evaluation_leaves_the_training_trajectory_alone(runs):
    plain, evaluated = runs["plain"]["train"], runs["evaluated"]["train"]
    assert plain["sequences"] == evaluated["sequences"]
    # The same weights, bit for bit.
    want = tf.train.load_checkpoint(plain["google_checkpoint"])
    got = tf.train.load_checkpoint(evaluated["google_checkpoint"])
    names = sorted(want.get_variable_to_shape_map())
    assert names == sorted(got.get_variable_to_shape_map()) and len(names) > 10
    for name in names:
        np.testing.assert_array_equal(want.get_tensor(name), got.get_tensor(name), name)
    # The logged means differ in float32 summation order only (shorter chunks).
    np.testing.assert_allclose([p["loss"] for p in evaluated["history"]],
                               [p["loss"] for p in plain["history"]], rtol=1e-6)


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_threshold(runs):
    stopped = runs["stopped"]["train"]
    evaluations = runs["evaluated"]["train"]["evaluations"]
    first_reaching = next(i for i, e in enumerate(evaluations)
                          if e["masked_lm_accuracy"] >= runs["target"])
    assert stopped["stopped_at_target"]
    assert [e["samples_count"] for e in stopped["evaluations"]] == \
        [e["samples_count"] for e in evaluations[:first_reaching + 1]]
    assert stopped["final_step"] == evaluations[first_reaching]["step"] < 12
    assert (runs["root"] / "stopped" / f"model.ckpt-{stopped['final_step']}.index").exists()


def test_the_mlperf_log_holds_the_run(runs):
    lines = mllog_lines(runs["log"])
    keys = [line["key"] for line in lines]
    assert keys[:2] == ["cache_clear", "init_start"]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    assert keys[-1] == "run_stop"
    assert lines[-1]["metadata"]["status"] == "success"
    # run_stop comes at the evaluation that reached the target, before the
    # checkpoint written after it: saving is not part of the time to train.
    final_step = runs["stopped"]["train"]["final_step"]
    checkpoint = runs["root"] / "stopped" / f"model.ckpt-{final_step}.index"
    assert lines[-1]["time_ms"] / 1000 <= checkpoint.stat().st_mtime
    values = {line["key"]: line["value"] for line in lines}
    assert values["submission_benchmark"] == "bert"
    assert values["submission_division"] == "open"
    assert values["seed"] == 3
    assert values["opt_lamb_learning_rate_decay_poly_power"] == 1.0
    assert values["opt_learning_rate_training_steps"] == 12
    packing_factor = runs["stopped"]["packing_factor"]
    assert values["packing_factor"] == packing_factor
    assert values["global_batch_size"] == 4 * nominal_packing_factor(packing_factor)
    assert isinstance(values["global_batch_size"], int)
    assert values["train_samples"] == int(runs["stopped"]["train"]["sequences"])
    assert keys[-2:] == ["train_samples", "run_stop"]
    assert values["eval_samples"] == runs["evaluated"]["eval"]["sequences"]
    accuracies = [line for line in lines if line["key"] == "eval_accuracy"]
    evaluations = runs["stopped"]["train"]["evaluations"]
    assert [a["value"] for a in accuracies] == [e["masked_lm_accuracy"] for e in evaluations]
    assert [a["metadata"]["epoch_num"] for a in accuracies] == \
        [int(e["samples_count"]) for e in evaluations]
    assert all(line["metadata"]["file"].endswith(".py") for line in lines)
    assert keys.count("eval_samples") == 1 and keys.count("run_start") == 1


def test_mlperf_compliance_checker_accepts_the_log(runs, tmp_path):
    result = compliance_check(runs["log"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stderr


# 16 micro-batch steps at 4 per update, as the unpacked run's flags would say.
ADJUSTED = dict(RUN, num_train_steps=16, steps_per_update=4, num_warmup_steps=8,
                iterations_per_loop=1, log_every_n_steps=4)


#: The runs of `adjusted_runs`: each packing adjustment that changes a
#: hyper-parameter, and padded batches.
MODES = ("lamb_betas", "accumulation", "padded")


@pytest.fixture(scope="module")
def adjusted_runs(config_file, packed_files, unpacked_files, eval_file, tmp_path_factory):
    """A run in each of `MODES`, each with an MLPerf log under MLPerf's
    default target, the padded one without ``--seed`` (it draws its own):
    ``lamb_betas`` and ``padded`` evaluate every 50 sequences (and not at
    the end, off that schedule), ``accumulation`` at the end alone
    (``--eval_interval_samples=0``)."""
    root = tmp_path_factory.mktemp("adjusted")
    runs = {}
    for mode in MODES:
        log = root / f"{mode}.mlperf.log"
        data = (dict(input_file=unpacked_files[0], batching="padded") if mode == "padded"
                else dict(input_file=packed_files[0],
                          packing_hyperparameter_adjustment=mode))
        with pytest.MonkeyPatch.context() as patch:  # the kernel's file stands in here
            patch.setattr(mlperf, "DROP_CACHES", str(root / f"{mode}.drop_caches"))
            summary = run_pretraining(options(
                config_file, root / mode, mlperf_log_file=str(log),
                seed=None if mode == "padded" else 3,
                do_eval=True, eval_input_file=eval_file,
                eval_interval_samples=0 if mode == "accumulation" else 50,
                drop_page_cache=mode == "accumulation", **data, **ADJUSTED))
        lines = mllog_lines(log)
        runs[mode] = dict(summary=summary, log=log, lines=lines, root=root,
                          values={line["key"]: line["value"] for line in lines})
    return runs


def test_the_logged_betas_are_those_lamb_runs_with(adjusted_runs):
    run = adjusted_runs["lamb_betas"]
    factor = run["summary"]["packing_factor"]
    assert factor > 1.2  # the betas differ from the flags' by far more than rounding
    assert run["values"]["opt_lamb_beta_1"] == pytest.approx(0.9 ** factor, rel=1e-12)
    assert run["values"]["opt_lamb_beta_2"] == pytest.approx(0.999 ** factor, rel=1e-12)
    assert run["values"]["opt_lamb_beta_1"] == run["summary"]["adjustment"]["beta_1"]
    assert run["values"]["opt_lamb_beta_2"] == run["summary"]["adjustment"]["beta_2"]


@pytest.mark.parametrize("mode", MODES)
def test_the_logged_schedule_and_batch_are_the_updates_made(adjusted_runs, mode):
    run = adjusted_runs[mode]
    values, summary = run["values"], run["summary"]
    micro_batches = summary["steps"]["micro_batches_per_update"]
    updates = summary["train"]["final_step"] // 4  # the global step advances 4 an update
    assert updates == 4
    factor = summary["packing_factor"] or 1.0  # padded: a sequence a row
    assert (factor == 1.0) == (mode == "padded")
    assert micro_batches == (math.floor(4 / factor + 0.5) if mode == "accumulation" else 4)
    assert values["gradient_accumulation_steps"] == micro_batches
    assert values["opt_learning_rate_training_steps"] == updates * micro_batches
    # Warm-up: 8 of 16 steps, half the updates, in the same micro-batches.
    assert values["opt_learning_rate_warmup_steps"] == 2 * micro_batches
    assert values["num_warmup_steps"] == 2 * micro_batches
    nominal = math.floor(factor + 0.5)
    assert nominal == nominal_packing_factor(factor) >= 1
    assert values["global_batch_size"] == 4 * micro_batches * nominal
    assert isinstance(values["global_batch_size"], int)
    assert values["train_samples"] == int(summary["train"]["sequences"])


def test_a_run_that_evaluates_at_the_end_alone_counts_its_block_in_samples(adjusted_runs):
    run = adjusted_runs["accumulation"]
    blocks = [line for line in run["lines"] if line["key"] == "block_start"]
    sequences = run["summary"]["train"]["sequences"]
    assert len(blocks) == 1
    # The planned samples: the rows of 4 updates at the measured packing factor.
    rows = 4 * 4 * run["summary"]["steps"]["micro_batches_per_update"]
    assert blocks[0]["metadata"]["epoch_count"] == round(
        rows * run["summary"]["packing_factor"])
    assert abs(blocks[0]["metadata"]["epoch_count"] - sequences) <= 0.1 * sequences


def test_with_a_log_no_evaluation_comes_off_the_schedule(adjusted_runs):
    run = adjusted_runs["lamb_betas"]
    train = run["summary"]["train"]
    samples = [e["samples_count"] for e in train["evaluations"]]
    assert [s // 50 for s in samples] == list(range(1, len(samples) + 1))
    # The end is between two multiples: no evaluation there.
    assert samples and not crossed(samples[-1], train["sequences"], 50)
    assert len(samples) == train["sequences"] // 50
    keys = [line["key"] for line in run["lines"]]
    assert keys.count("eval_accuracy") == len(samples)
    assert "off_schedule_evaluation" not in keys
    blocks = [line for line in run["lines"] if line["key"] == "block_start"]
    assert len(blocks) == len(samples) + 1
    assert {block["metadata"]["epoch_count"] for block in blocks} == {50}


@pytest.mark.parametrize("mode", MODES)
def test_with_a_log_the_target_is_mlperfs_by_default(adjusted_runs, mode):
    run = adjusted_runs[mode]
    evaluations = run["summary"]["train"]["evaluations"]
    assert evaluations and all(e["masked_lm_accuracy"] < TARGET_ACCURACY
                               for e in evaluations)
    assert not run["summary"]["train"]["stopped_at_target"]
    assert run["lines"][-1]["key"] == "run_stop"
    assert run["lines"][-1]["metadata"]["status"] == "aborted"


@pytest.mark.parametrize("mode", MODES)
def test_mlperf_compliance_checker_accepts_every_adjustment(adjusted_runs, mode, tmp_path):
    result = compliance_check(adjusted_runs[mode]["log"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_run_without_a_seed_logs_the_seed_it_drew_and_used(adjusted_runs):
    run = adjusted_runs["padded"]
    seed = run["values"]["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**31
    assert run["summary"]["options"]["seed"] == seed
    record = json.loads((run["root"] / "padded" / "trajectory.json").read_text())
    assert record["segments"][-1]["values"]["--seed"] == seed


def test_mlperfs_seed_check_accepts_runs_each_with_its_own_seed(runs, adjusted_runs):
    """The package checker's seed check, on a set of runs: each logs one seed,
    an integer, and no two the same seed from the same line of code; two runs
    with --seed=3 fail it."""
    from mlperf_logging.package_checker.seed_checker import SeedChecker

    logs = [str(adjusted_runs[mode]["log"]) for mode in ("lamb_betas", "padded")]
    assert adjusted_runs["padded"]["values"]["seed"] != 3
    assert SeedChecker("5.0.0").check_seeds(logs)
    assert runs["stopped"]["options"]["seed"] == 3  # as the lamb_betas run's
    assert not SeedChecker("5.0.0").check_seeds([*logs, str(runs["log"])])


def test_the_default_interval_is_mlperfs():
    assert default_eval_interval_samples(256) == 150_000
    assert default_eval_interval_samples(4096) == np.floor(
        0.05 * (230.23 * 4096 + 3_000_000) / 25_000) * 25_000


@pytest.mark.parametrize("overrides, message", [
    (dict(stop_threshold=1.5), r"--stop_threshold must be in \(0, 1\], got 1.5"),
    (dict(stop_threshold=0.0), r"--stop_threshold must be in \(0, 1\], got 0.0"),
    (dict(eval_interval_samples=-1), "--eval_interval_samples must be >= 0, got -1"),
    (dict(stop_threshold=0.5, do_eval=False),
     "--stop_threshold needs --do_train, --do_eval and --eval_input_file"),
])
def test_bad_options_are_refused_before_training(config_file, packed_files, unpacked_files,
                                                 tmp_path, overrides, message):
    values = dict(input_file=packed_files[0], do_eval=True,
                  eval_input_file=unpacked_files[0], **RUN)
    values.update(overrides)
    with pytest.raises(ValueError, match=message):
        run_pretraining(options(config_file, tmp_path / "run", **values))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_log_file_in_a_missing_folder_is_refused(config_file, packed_files, tmp_path):
    log = tmp_path / "missing" / "mlperf.log"
    with pytest.raises(ValueError, match=f"--mlperf_log_file={log} cannot be written"):
        run_pretraining(options(config_file, tmp_path / "run", input_file=packed_files[0],
                                mlperf_log_file=str(log), **RUN))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_killed_run_resumes_with_the_same_evaluations_and_one_log(
        runs, config_file, packed_files, eval_file, tmp_path, monkeypatch):
    """Killed after its second evaluation's checkpoint, resumed: the evaluations
    and the log are those of a run never stopped (the log appended to)."""
    want = runs["evaluated"]["train"]["evaluations"]
    original = Trainer.train_steps

    def dies_after_the_second_evaluation(self, iterator, num_steps):
        if int(self.step.numpy()) >= want[1]["step"]:
            raise KeyboardInterrupt("killed")
        return original(self, iterator, num_steps)

    log = tmp_path / "mlperf.log"
    args = dict(input_file=packed_files[0], do_eval=True, eval_input_file=eval_file,
                eval_interval_samples=24, mlperf_log_file=str(log), eval_at_end=True, **RUN)
    monkeypatch.setattr(Trainer, "train_steps", dies_after_the_second_evaluation)
    with pytest.raises(KeyboardInterrupt):
        run_pretraining(options(config_file, tmp_path / "run", **args))
    monkeypatch.setattr(Trainer, "train_steps", original)
    resumed = run_pretraining(options(config_file, tmp_path / "run", **args))
    assert resumed["train"]["start_step"] == want[1]["step"]
    assert [(e["step"], e["samples_count"], e["masked_lm_accuracy"])
            for e in resumed["train"]["evaluations"]] == \
        [(e["step"], e["samples_count"], e["masked_lm_accuracy"]) for e in want]
    keys = [line["key"] for line in mllog_lines(log)]
    assert keys.count("run_start") == 1 and keys.count("init_stop") == 1
    assert keys.count("eval_accuracy") == len(want) and keys.count("eval_samples") == 1
    assert keys[-1] == "run_stop"
    # The end's evaluation, asked for, is marked when it is off the schedule.
    off_schedule = not crossed(want[-2]["samples_count"], want[-1]["samples_count"], 24)
    assert keys.count("off_schedule_evaluation") == int(off_schedule)


def test_evaluation_records_of_another_length_are_refused(config_file, packed_files,
                                                          tmp_path):
    other = write_unpacked_dataset(tmp_path / "eval", num_files=1, per_file=20,
                                   max_seq_length=32, max_predictions_per_seq=5)
    with pytest.raises(ValueError, match=f"{other[0]}"):
        run_pretraining(options(config_file, tmp_path / "run", input_file=packed_files[0],
                                do_eval=True, eval_input_file=other[0], **RUN))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_drop_page_cache_drops_it_and_the_log_says_so(adjusted_runs):
    dropped = adjusted_runs["accumulation"]
    assert (dropped["root"] / "accumulation.drop_caches").read_text() == "3\n"
    assert dropped["values"]["cache_clear"] is True
    kept = adjusted_runs["lamb_betas"]
    assert not (kept["root"] / "lamb_betas.drop_caches").exists()
    assert kept["values"]["cache_clear"] is False


def test_a_page_cache_the_process_may_not_drop_is_one_line(config_file, packed_files,
                                                            tmp_path, monkeypatch):
    control = tmp_path / "no_proc" / "drop_caches"  # a folder that is not there
    monkeypatch.setattr(mlperf, "DROP_CACHES", str(control))
    with pytest.raises(ValueError) as error:
        run_pretraining(options(config_file, tmp_path / "run", input_file=packed_files[0],
                                drop_page_cache=True, **RUN))
    assert str(error.value) == (
        f"--drop_page_cache: cannot drop the page cache ({control}: No such file or "
        "directory); run as root on Linux, or without the flag")
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing was trained


def closed_division_copy(log, folder, *, drop_key=None):
    """The log as a closed-division submission would be: division closed, its
    last accuracy raised past MLPerf's target, without ``drop_key``'s lines."""
    lines = []
    for line in mllog_lines(log):
        if line["key"] == drop_key:
            continue
        if line["key"] == "submission_division":
            line["value"] = "closed"
        lines.append(line)
    last = max(i for i, line in enumerate(lines) if line["key"] == "eval_accuracy")
    lines[last]["value"] = 0.73
    copy = folder / f"closed-{drop_key}.log"
    copy.write_text("".join(f":::MLLOG {json.dumps(line)}\n" for line in lines))
    return copy


def test_a_closed_division_copy_passes_and_fails_without_a_key(runs, tmp_path):
    result = compliance_check(closed_division_copy(runs["log"], tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "closed_bert.yaml" in result.stderr and "SUCCESS" in result.stderr
    result = compliance_check(closed_division_copy(runs["log"], tmp_path,
                                                   drop_key="opt_lamb_beta_1"), tmp_path)
    assert result.returncode != 0
    assert "opt_lamb_beta_1" in result.stdout + result.stderr


def test_run_stop_holds_the_model_flops_utilisation(runs):
    stop = mllog_lines(runs["log"])[-1]
    assert stop["key"] == "run_stop"
    metadata = stop["metadata"]
    assert metadata["peak_flops_source"] == "measured"
    assert metadata["mfu"] > 0
    assert metadata["mfu"] == pytest.approx(metadata["model_flops_per_second"]
                                            / metadata["peak_flops_per_second"])
