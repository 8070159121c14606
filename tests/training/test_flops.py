"""The model FLOPs utilisation: the count against a hand computation, padding
that earns nothing, the peak (measured or given), and MFU in the log lines,
the training summary and a front end's train_summary.json."""

import json
import logging as python_logging
import time

import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import BertConfig
from packed_bert_tf.training import flops
from packed_bert_tf.training.flops import (
    EncoderShape,
    Peak,
    Utilisation,
    check_peak_flag,
    measure_peak_flops_per_second,
    peak_devices,
    run_peak,
)
from packed_bert_tf.training.loop import LoopIntervals, run_training, run_utilisation
from packed_bert_tf.training.options import TrainingOptions
from packed_bert_tf.training.progress import TrainingLogger
from packed_bert_tf.training.trainer import batch_statistics
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH
from tests.tool_runs import run_main
from tests.training.trainer_checks import make_trainer, micro_batches, random_features

pytestmark = pytest.mark.usefixtures("grappler_off_for_module")

TINY = EncoderShape(num_layers=2, hidden_size=4, intermediate_size=8)

# Three sequences of 3, 2 and 4 tokens, packed into two rows of 6 (D = 3) ...
PACKED_MASK = [[1, 1, 1, 2, 2, 0],
               [1, 1, 1, 1, 0, 0]]
PACKED_WEIGHTS = [[1, 1, 0],
                  [1, 0, 0]]
# ... and padded, one a row (D = 1).
PADDED_MASK = [[1, 1, 1, 0, 0, 0],
               [1, 1, 0, 0, 0, 0],
               [1, 1, 1, 1, 0, 0]]
PADDED_WEIGHTS = [[1], [1], [1]]


def _statistics(mask, weights) -> dict:
    values = batch_statistics(tf.constant(mask, tf.int32), tf.constant(weights, tf.int32))
    return {name: float(value) for name, value in values.items()}


def test_the_count_is_the_hand_computation():
    # N = L (4 H^2 + 2 H I) = 2 (4 * 16 + 2 * 4 * 8) = 256.
    assert TINY.parameters == 256
    statistics = _statistics(PACKED_MASK, PACKED_WEIGHTS)
    assert statistics == {"sequences": 3.0, "tokens": 9.0, "padded_tokens": 12.0,
                          "attention_pairs": 3 ** 2 + 2 ** 2 + 4 ** 2}
    # 6 N tokens + 12 L H sum(l^2) = 6 * 256 * 9 + 12 * 2 * 4 * 29.
    assert TINY.training_flops(statistics["tokens"], statistics["attention_pairs"]) \
        == 13_824 + 2_784


def test_padding_earns_nothing():
    packed = _statistics(PACKED_MASK, PACKED_WEIGHTS)
    padded = _statistics(PADDED_MASK, PADDED_WEIGHTS)
    assert padded["padded_tokens"] == 18 and packed["padded_tokens"] == 12
    assert TINY.training_flops(padded["tokens"], padded["attention_pairs"]) == \
        TINY.training_flops(packed["tokens"], packed["attention_pairs"])


def test_bert_base_counts_its_85_million_encoder_weights():
    base = EncoderShape.of_config(BertConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=512))
    assert base.parameters == 84_934_656
    # A full 512-token sequence: attention adds 12 L H S / 6 N = 5.6 % per token.
    per_token = base.training_flops(512, 512 ** 2) / 512
    assert per_token == 6 * 84_934_656 + 12 * 12 * 768 * 512


def test_utilisation_divides_by_the_peak_of_every_device():
    utilisation = Utilisation(TINY, Peak(1000.0, "flag"), devices=4)
    values = utilisation.values(tokens=9, attention_pairs=29, seconds=2.0)
    assert values == {"model_flops_per_second": 16_608 / 2,
                      "mfu": 16_608 / 2 / 4000}
    assert utilisation.values(9, 29, 0.0)["mfu"] == 0.0
    assert utilisation.describe() == {
        "peak_flops_per_second": 4000.0, "peak_flops_source": "flag",
        "peak_flops_dtype": None, "peak_devices": 4, "flops_parameters": 256}


def test_the_default_strategy_is_one_device():
    assert peak_devices(tf.distribute.get_strategy()) == 1


@pytest.mark.parametrize("value", [0, -1e12])
def test_a_peak_not_above_zero_is_one_line_naming_the_flag(value):
    with pytest.raises(ValueError, match=rf"^--peak_flops_per_second must be > 0, "
                                         rf"got {value}$"):
        check_peak_flag(value)
    with pytest.raises(ValueError, match="--peak_flops_per_second must be > 0"):
        run_peak(value, "none")


def test_the_measured_peak_is_a_matrix_multiply_in_the_compute_dtype():
    cpu = time.process_time()
    peak = measure_peak_flops_per_second("bfloat16", size=256, min_seconds=0.01)
    assert np.isfinite(peak) and peak > 0
    # Cheap: the measurement runs at the start of every run.
    assert time.process_time() - cpu < 5


def test_the_flag_overrides_the_measurement(monkeypatch):
    measured = []

    def measure(dtype, **kwargs):
        measured.append(dtype)
        return 5e9

    monkeypatch.setattr(flops, "measure_peak_flops_per_second", measure)
    assert run_peak(2e12, "bf16") == Peak(2e12, "flag")
    assert measured == []
    assert run_peak(None, "bf16") == Peak(5e9, "measured", "bfloat16")
    assert run_peak(None, "none") == Peak(5e9, "measured", "float32")
    assert measured == ["bfloat16", "float32"]
    # A resumed run keeps the peak its first segment measured; the flag wins.
    assert run_peak(None, "none", measured=3e9) == Peak(3e9, "measured", "float32")
    assert run_peak(2e12, "none", measured=3e9) == Peak(2e12, "flag")
    assert measured == ["bfloat16", "float32"]


@pytest.fixture(scope="module")
def tiny_run():
    """Three updates of 4 random packs each (one layer, uncompiled), logged every
    update, the peak given: the summary and the log lines."""
    trainer = make_trainer(jit_compile=False)
    elements = [micro_batches(random_features(seed, 4), 1) for seed in range(3)]
    stacked = {name: np.stack([e[name] for e in elements]) for name in elements[0]}
    iterator = iter(tf.data.Dataset.from_tensor_slices(stacked))
    utilisation = run_utilisation(trainer, TrainingOptions(peak_flops_per_second=1e9))
    records = []
    handler = python_logging.Handler()
    handler.emit = records.append
    absl_logger = python_logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.addHandler(handler)
    absl_logger.setLevel(python_logging.INFO)
    try:
        summary = run_training(trainer, iterator, num_train_steps=3,
                               intervals=LoopIntervals(log_every_n_steps=1),
                               logger=TrainingLogger(None, 3, progress_bar=False,
                                                     utilisation=utilisation))
    finally:
        absl_logger.setLevel(level)
        absl_logger.removeHandler(handler)
    lines = [record.getMessage() for record in records]
    return summary, lines, elements, utilisation


def test_the_summary_holds_mfu_over_the_steady_steps(tiny_run):
    summary, _, elements, utilisation = tiny_run
    # Per update: each pack's sequences' lengths, squared, summed.
    pairs = [sum(float((row == index).sum()) ** 2 for row in e["input_mask"][0]
                 for index in range(1, 4)) for e in elements]
    assert summary.attention_pairs == sum(pairs)
    assert summary.steady_attention_pairs == sum(pairs[1:])  # the first chunk compiles
    values = summary.to_dict()
    want = utilisation.encoder.training_flops(summary.steady_tokens,
                                              summary.steady_attention_pairs)
    assert values["model_flops_per_second"] == pytest.approx(want / summary.steady_seconds)
    assert values["mfu"] == pytest.approx(values["model_flops_per_second"] / 1e9)
    assert values["peak_flops_per_second"] == 1e9
    assert values["peak_flops_source"] == "flag"
    assert values["flops_parameters"] == utilisation.encoder.parameters
    assert all("mfu" in point for point in summary.history)


def test_the_log_lines_hold_mfu(tiny_run):
    _, lines, _, _ = tiny_run
    points = [line for line in lines if line.startswith("train step ")]
    assert len(points) == 3
    assert all(" model_flops_per_second " in line and " mfu " in line for line in points)


@pytest.fixture(scope="module")
def front_end_runs(unpacked_files, tmp_path_factory):
    """run_pretraining.py: a two-step run with the peak given, and one with a bad
    peak."""
    root = tmp_path_factory.mktemp("mfu")
    config = BertConfig(vocab_size=5000, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=SMALL_SEQ_LENGTH)
    config.to_json_file(str(root / "bert_config.json"))

    def run(output_dir, peak):
        return run_main(
            "run_pretraining.py", f"--bert_config_file={root / 'bert_config.json'}",
            f"--output_dir={root / output_dir}", f"--input_file={unpacked_files[0]}",
            "--do_train", "--batching=padded", f"--max_seq_length={SMALL_SEQ_LENGTH}",
            f"--max_predictions_per_seq={SMALL_PREDICTIONS}", "--train_batch_size=8",
            "--num_train_steps=2", "--num_warmup_steps=0", "--iterations_per_loop=1",
            "--log_every_n_steps=1", "--save_checkpoints_steps=0", "--seed=0",
            "--nojit_compile", f"--peak_flops_per_second={peak}", tmp_path=root)

    return {"given": run("given", 1e9), "bad": run("bad", 0), "root": root}


def test_train_summary_json_holds_mfu(front_end_runs):
    result = front_end_runs["given"]
    assert result.returncode == 0, result.stderr[-3000:]
    train = json.loads((front_end_runs["root"] / "given" / "train_summary.json")
                       .read_text())["train"]
    assert train["peak_flops_source"] == "flag" and train["peak_flops_per_second"] == 1e9
    assert train["mfu"] == pytest.approx(train["model_flops_per_second"] / 1e9)
    assert train["mfu"] > 0
    # Padded rows: attention over each row's real tokens only.
    assert train["attention_pairs"] < train["padded_tokens"] * SMALL_SEQ_LENGTH
    # Every logged point (the log lines' values) too.
    assert [point["step"] for point in train["history"]] == [1, 2]
    assert all(point["mfu"] > 0 for point in train["history"])


def test_a_front_end_refuses_a_peak_not_above_zero(front_end_runs):
    result = front_end_runs["bad"]
    assert result.returncode == 1
    assert result.last_line == "run_pretraining: --peak_flops_per_second must be > 0, got 0.0"
    assert not (front_end_runs["root"] / "bad").exists()
