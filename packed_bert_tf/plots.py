"""Figures for reports (matplotlib, headless)."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from packed_bert_tf import filesystem
from packed_bert_tf.json_files import check_output_file
from packed_bert_tf.packing.plan import PackingPlan


def check_figure_path(path: str, *, flag: str = "plot") -> None:
    """Raises ValueError naming the flag unless a figure can be saved at ``path``:
    a file in an existing folder, with an image format matplotlib writes (none
    means PNG). Checked before the work that makes the figure."""
    check_output_file(path, flag=flag)
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension:
        from matplotlib.backend_bases import FigureCanvasBase

        formats = FigureCanvasBase.get_supported_filetypes()
        if extension not in formats:
            raise ValueError(f"--{flag}={path}: unknown image format {extension!r} "
                             f"(one of {', '.join(sorted(formats))})")


def save_figure_atomically(figure, path: str, **savefig_kwargs) -> None:
    """Writes a figure to `path` via a temporary file (`filesystem.open_atomically`),
    so that a failure never leaves a half-written image that looks complete.

    The format is the extension's (none means PNG): the temporary name has
    another.
    """
    image_format = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    with filesystem.open_atomically(path, "wb") as handle:
        figure.savefig(handle, **{"format": image_format, **savefig_kwargs})


def plot_packing_report(name: str, plans: Sequence[PackingPlan], path: str) -> None:
    """Two panels: the length histogram with its padding, and each plan's efficiency.

    Left: for every length, the real tokens and the padding tokens the
    sequences of that length carry without packing (stacked), which shows
    where the padding comes from. Right: the token efficiency of each plan,
    with the bound set by the LP relaxation (or the token count) marked.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not plans:
        raise ValueError("no plans to plot")
    plan = plans[0]
    max_len = plan.max_sequence_length
    lengths = np.arange(1, max_len + 1)
    counts = np.asarray(plan.histogram, dtype=np.float64)
    real = counts * lengths
    padding = counts * (max_len - lengths)
    unpacked_padding = padding.sum() / max(1.0, (real + padding).sum())

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5),
                                         gridspec_kw={"width_ratios": [3, 2]})
    left.fill_between(lengths, 0, real / 1e6, step="mid", color="tab:blue",
                      label="real tokens")
    left.fill_between(lengths, real / 1e6, (real + padding) / 1e6, step="mid",
                      color="tab:orange", alpha=0.6, label="padding tokens (unpacked)")
    left.set_xlim(1, max_len)
    # One length can dwarf the rest (Wikipedia: a quarter of all sequences
    # are cut at 512): clip the axis and label that bar instead.
    column = (real + padding) / 1e6
    order = np.argsort(column)
    if column[order[-1]] > 5 * column[order[-2]]:
        left.set_ylim(0, 1.3 * column[order[-2]])
        tallest = int(order[-1])
        left.annotate(f"length {tallest + 1}: {column[tallest]:,.0f} M tokens,\n"
                      f"{counts[tallest] / counts.sum():.0%} of sequences (off scale)",
                      xy=(tallest + 1, 1.3 * column[order[-2]]), xytext=(-10, -30),
                      textcoords="offset points", ha="right", fontsize=8,
                      arrowprops=dict(arrowstyle="->"))
    left.set_xlabel("sequence length (tokens)")
    left.set_ylabel("tokens (millions)")
    left.set_title(f"{name}: {plan.num_sequences:,} sequences, "
                   f"{100 * unpacked_padding:.1f} % padding unpacked")
    left.legend(loc="upper left")

    efficiencies = [100 * p.efficiency for p in plans]
    labels = [p.algorithm for p in plans]
    bars = right.barh(labels, efficiencies, color="tab:green")
    right.invert_yaxis()
    for bar, value, p in zip(bars, efficiencies, plans):
        right.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                   f" {value:.3f} % ({p.num_packs:,} packs)", va="center", fontsize=8)
    bounds = [p.lp_lower_bound_packs for p in plans if p.lp_lower_bound_packs]
    bound_packs = max(bounds) if bounds else plan.token_lower_bound
    bound_name = "LP bound" if bounds else "token bound"
    if bound_packs:
        best_possible = 100 * plan.real_tokens / (bound_packs * max_len)
        right.axvline(best_possible, color="black", linestyle="--", linewidth=1,
                      label=f"{bound_name}: {best_possible:.3f} %")
        right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8,
                     frameon=False)
    right.set_xlim(0, 125)
    right.set_xlabel("efficiency: real / all tokens (%)")
    right.set_title(f"packing at {max_len} tokens, at most "
                    f"{plan.max_sequences_per_pack} sequences per pack")
    figure.tight_layout()
    try:
        save_figure_atomically(figure, path, dpi=110)
    finally:
        plt.close(figure)


def plot_loss_curves(curves: dict, path: str, *, title: str = "") -> None:
    """Training loss against sequences seen, one line per run.

    Args:
      curves: label -> list of logged points (dicts with ``sequences_seen``
        and ``loss``, as in ``train_summary.json``'s ``history``).
      path: the PNG to write (atomically).
      title: the plot's title; none when empty.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, history in curves.items():
        axes.plot([point["sequences_seen"] for point in history],
                  [point["loss"] for point in history], marker=".", label=label)
    axes.set_xlabel("sequences seen")
    axes.set_ylabel("training loss (masked-LM + next-sentence)")
    axes.grid(alpha=0.3)
    axes.legend()
    if title:
        axes.set_title(title)
    figure.tight_layout()
    save_figure_atomically(figure, path, dpi=120)
    plt.close(figure)
