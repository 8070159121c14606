"""Packing-aware hyper-parameters (Krell et al. section 3.3) and packing_stats.json."""

import dataclasses
import json
import math
import re

import pytest

from packed_bert_tf.pretraining.hyperparameters import (
    PackingAdjustment,
    adjust_for_packing,
    read_packing_factor,
)

UNPACKED = dict(beta_1=0.9, beta_2=0.999, steps_per_update=32)


def test_lamb_betas_raises_the_betas_to_the_packing_factor():
    adjusted = adjust_for_packing("lamb_betas", 2.0, **UNPACKED)
    assert adjusted.beta_1 == pytest.approx(0.81, rel=1e-15)
    assert adjusted.beta_2 == pytest.approx(0.998001, rel=1e-15)
    assert adjusted.steps_per_update == 32
    assert adjusted.description == (
        "lamb_betas: beta_1 0.9 ** 2 = 0.81, beta_2 0.999 ** 2 = 0.998001, "
        "steps_per_update 32 unchanged")


def test_lamb_betas_with_a_fractional_packing_factor():
    adjusted = adjust_for_packing("lamb_betas", 1.5, **UNPACKED)
    # beta ** 1.5 = beta * sqrt(beta)
    assert adjusted.beta_1 == pytest.approx(0.9 * math.sqrt(0.9), rel=1e-14)
    assert adjusted.beta_2 == pytest.approx(0.999 * math.sqrt(0.999), rel=1e-14)


@pytest.mark.parametrize("packing_factor, steps_per_update, expected", [
    (2.0, 32, 16),
    (1.9, 32, 17),      # 16.84 -> 17
    (3.0, 5, 2),        # 1.67 -> 2
    (2.0, 5, 3),        # 2.5: halves round up
    (1.0, 7, 7),
    (2.0, 1, 1),        # 0.5 -> at least 1
    (8.0, 3, 1),        # 0.375 -> at least 1
])
def test_accumulation_divides_the_steps_per_update(packing_factor, steps_per_update,
                                                   expected):
    adjusted = adjust_for_packing("accumulation", packing_factor, beta_1=0.9, beta_2=0.999,
                                  steps_per_update=steps_per_update)
    assert (adjusted.beta_1, adjusted.beta_2, adjusted.steps_per_update) == (
        0.9, 0.999, expected)


def test_accumulation_description():
    assert adjust_for_packing("accumulation", 1.9, **UNPACKED).description == (
        "accumulation: steps_per_update 32 / 1.9 -> 17, beta_1 0.9 and beta_2 0.999 "
        "unchanged")


def test_none_changes_nothing():
    adjusted = adjust_for_packing("none", 2.3, **UNPACKED)
    assert adjusted == PackingAdjustment(
        0.9, 0.999, 32,
        "none: beta_1 0.9, beta_2 0.999, steps_per_update 32 unchanged (packing factor 2.3)")


def test_result_is_frozen():
    adjusted = adjust_for_packing("none", 1.0, **UNPACKED)
    with pytest.raises(dataclasses.FrozenInstanceError):
        adjusted.beta_1 = 0.5


@pytest.mark.parametrize("mode, packing_factor, arguments, message", [
    ("betas", 2.0, UNPACKED, "mode 'betas' is not one of none, lamb_betas, accumulation"),
    ("none", 0.9, UNPACKED, "packing_factor must be a finite number >= 1, got 0.9"),
    ("none", float("nan"), UNPACKED, "packing_factor must be a finite number >= 1, got nan"),
    ("lamb_betas", 2.0, dict(UNPACKED, beta_1=1.0), r"beta_1 must be in \[0, 1\), got 1.0"),
    ("lamb_betas", 2.0, dict(UNPACKED, beta_2=-0.1), r"beta_2 must be in \[0, 1\), got -0.1"),
    ("accumulation", 2.0, dict(UNPACKED, steps_per_update=0),
     "steps_per_update must be an integer >= 1, got 0"),
    ("accumulation", 2.0, dict(UNPACKED, steps_per_update=2.0),
     "steps_per_update must be an integer >= 1, got 2.0"),
])
def test_adjust_rejects_invalid_input(mode, packing_factor, arguments, message):
    with pytest.raises(ValueError, match=message):
        adjust_for_packing(mode, packing_factor, **arguments)


def write_stats(folder, stats):
    path = folder / "packing_stats.json"
    path.write_text(json.dumps(stats))
    return path


def test_read_packing_factor_from_the_file_or_its_folder(tmp_path):
    path = write_stats(tmp_path, {"packs": 100, "sequences_in": 211,
                                  "packing_factor": 2.11})
    assert read_packing_factor(path) == 2.11
    assert read_packing_factor(str(path)) == 2.11
    assert read_packing_factor(tmp_path) == 2.11
    assert read_packing_factor(str(tmp_path)) == 2.11


def test_read_packing_factor_missing_file_names_the_path(tmp_path):
    expected = re.escape(f"no packing statistics at {tmp_path / 'packing_stats.json'}")
    with pytest.raises(ValueError, match=expected):
        read_packing_factor(tmp_path)
    missing = tmp_path / "elsewhere.json"
    with pytest.raises(ValueError, match=re.escape(f"no packing statistics at {missing}")):
        read_packing_factor(missing)


def test_read_packing_factor_missing_key(tmp_path):
    path = write_stats(tmp_path, {"packs": 100, "efficiency": 0.99})
    expected = re.escape(f"{path} has no 'packing_factor' (found: efficiency, packs)")
    with pytest.raises(ValueError, match=expected):
        read_packing_factor(tmp_path)


@pytest.mark.parametrize("value", [0.97, 0, -2.0, "2.0", None, True])
def test_read_packing_factor_rejects_values_that_are_not_a_factor(tmp_path, value):
    path = write_stats(tmp_path, {"packing_factor": value})
    expected = re.escape(f"packing_factor in {path} must be a finite number >= 1, "
                         f"got {value!r}")
    with pytest.raises(ValueError, match=expected):
        read_packing_factor(path)


def test_read_packing_factor_not_json(tmp_path):
    path = tmp_path / "packing_stats.json"
    path.write_text("packing_factor: 2\n")
    with pytest.raises(ValueError, match=re.escape(f"{path} is not JSON")):
        read_packing_factor(tmp_path)
