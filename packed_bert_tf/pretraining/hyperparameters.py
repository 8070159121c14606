"""Packing-aware hyper-parameters (Krell et al., arXiv 2107.02027, section 3.3).

A packed batch of ``b`` packs holds on average ``p * b`` sequences, ``p`` being
the packing factor (sequences per pack). Training on packed data with the
unpacked hyper-parameters therefore sees ``p`` times more sequences per update.
The paper keeps training comparable in one of two ways:

* ``"accumulation"``: divide the number of gradient-accumulation steps per
  update by ``p``, so that an update again averages about as many sequences as
  unpacked training does (and the learning rate and betas stay as they are).
* ``"lamb_betas"``: keep the batch and raise LAMB's betas to the power ``p``,
  ``beta_1 := beta_1 ** p`` and ``beta_2 := beta_2 ** p``: each update carries
  ``p`` updates' worth of sequences, so the moments decay ``p`` times as fast
  per update, as much per sequence as in unpacked training.

``"none"`` leaves everything unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os

from packed_bert_tf.data.records.record_format import PACKING_STATS_FILE

PACKING_MODES = ("none", "lamb_betas", "accumulation")


@dataclasses.dataclass(frozen=True)
class PackingAdjustment:
    """Hyper-parameters after the packing adjustment.

    Attributes:
      beta_1: LAMB's first-moment decay rate to train with.
      beta_2: LAMB's second-moment decay rate to train with.
      steps_per_update: gradient-accumulation steps per optimizer update.
      description: one human-readable line saying what was applied.
    """

    beta_1: float
    beta_2: float
    steps_per_update: int
    description: str


def adjust_for_packing(mode: str, packing_factor: float, *, beta_1: float, beta_2: float,
                       steps_per_update: int) -> PackingAdjustment:
    """Adjusts the unpacked hyper-parameters for training on packed data.

    Args:
      mode: ``"none"``, ``"lamb_betas"`` or ``"accumulation"``.
        ``"lamb_betas"``: ``beta_i := beta_i ** packing_factor``.
        ``"accumulation"``: ``steps_per_update := max(1, round(steps_per_update
        / packing_factor))``, halves rounded up. ``"none"``: unchanged.
      packing_factor: float. Average sequences per pack, >= 1
        (``read_packing_factor``).
      beta_1: float. LAMB's first-moment decay rate for unpacked training, in
        [0, 1).
      beta_2: float. LAMB's second-moment decay rate for unpacked training, in
        [0, 1).
      steps_per_update: int. Gradient-accumulation steps per update for
        unpacked training, >= 1.

    Returns:
      A `PackingAdjustment`: all three hyper-parameters (changed or not) and a
      description.

    Note:
      Krell et al., "Efficient Sequence Packing without Cross-contamination:
      Accelerating Large Language Models without Impacting Performance",
      arXiv 2107.02027, section 3.3 (adjusting hyper-parameters).

    Example:
      >>> adjust_for_packing("lamb_betas", 2.0, beta_1=0.9, beta_2=0.999,
      ...                    steps_per_update=32).beta_1
      0.81
      >>> adjust_for_packing("accumulation", 2.0, beta_1=0.9, beta_2=0.999,
      ...                    steps_per_update=32).steps_per_update
      16
    """
    if mode not in PACKING_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(PACKING_MODES)}")
    _check_packing_factor(packing_factor, "packing_factor")
    for name, beta in (("beta_1", beta_1), ("beta_2", beta_2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {beta}")
    if isinstance(steps_per_update, bool) or not isinstance(steps_per_update, int) \
            or steps_per_update < 1:
        raise ValueError(f"steps_per_update must be an integer >= 1, got {steps_per_update!r}")

    if mode == "lamb_betas":
        adjusted_beta_1, adjusted_beta_2 = beta_1 ** packing_factor, beta_2 ** packing_factor
        return PackingAdjustment(
            adjusted_beta_1, adjusted_beta_2, steps_per_update,
            f"lamb_betas: beta_1 {beta_1:g} ** {packing_factor:g} = {adjusted_beta_1:.6g}, "
            f"beta_2 {beta_2:g} ** {packing_factor:g} = {adjusted_beta_2:.6g}, "
            f"steps_per_update {steps_per_update} unchanged")
    if mode == "accumulation":
        adjusted_steps = max(1, math.floor(steps_per_update / packing_factor + 0.5))
        return PackingAdjustment(
            beta_1, beta_2, adjusted_steps,
            f"accumulation: steps_per_update {steps_per_update} / {packing_factor:g} "
            f"-> {adjusted_steps}, beta_1 {beta_1:g} and beta_2 {beta_2:g} unchanged")
    return PackingAdjustment(
        beta_1, beta_2, steps_per_update,
        f"none: beta_1 {beta_1:g}, beta_2 {beta_2:g}, steps_per_update "
        f"{steps_per_update} unchanged (packing factor {packing_factor:g})")


def read_packing_factor(path_or_dir) -> float:
    """Reads ``packing_factor`` from the packing tool's ``packing_stats.json``.

    Args:
      path_or_dir: a str or ``os.PathLike``: the JSON file, or the folder of
        packed shards that holds it (any path ``tf.io.gfile`` reads,
        ``gs://`` included).

    Returns:
      float: the packing factor, sequences per pack, >= 1.

    Raises:
      ValueError: the file is missing or not JSON, has no ``packing_factor``,
        or its value is not a finite number >= 1.
    """
    import tensorflow as tf

    path = os.fspath(path_or_dir)
    if tf.io.gfile.isdir(path):
        path = os.path.join(path, PACKING_STATS_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"no packing statistics at {path} (the packing tool writes "
                         f"{PACKING_STATS_FILE} beside the packed shards)")
    with tf.io.gfile.GFile(path, "r") as stats_file:
        text = stats_file.read()
    try:
        stats = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON: {error}") from None
    if not isinstance(stats, dict) or "packing_factor" not in stats:
        keys = ", ".join(sorted(stats)) if isinstance(stats, dict) else type(stats).__name__
        raise ValueError(f"{path} has no 'packing_factor' (found: {keys})")
    packing_factor = stats["packing_factor"]
    _check_packing_factor(packing_factor, f"packing_factor in {path}")
    return float(packing_factor)


def _check_packing_factor(packing_factor, what: str) -> None:
    if isinstance(packing_factor, bool) or not isinstance(packing_factor, numbers.Real) \
            or not math.isfinite(packing_factor) or packing_factor < 1:
        raise ValueError(f"{what} must be a finite number >= 1, got {packing_factor!r}")
