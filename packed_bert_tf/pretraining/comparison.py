"""Side-by-side summary of training runs (their ``train_summary.json``).

No TensorFlow here unless a run lives on a remote file system (``gs://``...):
``compare_runs.py`` answers in a second.
"""

from __future__ import annotations

import json
import os

from packed_bert_tf import filesystem

#: What every run_pretraining.py run writes into its output folder.
TRAIN_SUMMARY_FILE = "train_summary.json"


#: What `comparison_table` reads of each run's ``train`` section.
TRAIN_FIELDS = ("final_step", "sequences", "sequences_per_second", "tokens_per_second",
                "occupancy", "final_metrics", "history")


def load_summary(output_dir: str) -> dict:
    """A run's ``train_summary.json``.

    Raises:
      ValueError: naming the folder or file, when the run did not finish, did
        not train, or its summary is not one run_pretraining.py writes.
    """
    if not filesystem.isdir(output_dir):
        raise ValueError(f"{output_dir}: no such run folder")
    path = os.path.join(output_dir, TRAIN_SUMMARY_FILE)
    if not filesystem.exists(path):
        raise ValueError(f"{output_dir}: no {TRAIN_SUMMARY_FILE} (did the run finish?)")
    try:
        with filesystem.open_file(path, "rb") as handle:
            summary = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a JSON summary ({error})") from None
    if not isinstance(summary, dict) or "train" not in summary:
        raise ValueError(f"{path}: the run did not train (no 'train' section)")
    missing = [name for name in TRAIN_FIELDS if name not in summary["train"]]
    if missing:
        raise ValueError(f"{path}: the 'train' section lacks {', '.join(missing)} (not a "
                         f"summary of run_pretraining.py)")
    return summary


def updates(summary: dict) -> int:
    """The optimizer updates a run made: its final step over the steps of an
    update (``steps`` of the summary; a summary without it counted updates)."""
    steps = summary.get("steps") or {}
    per_update = steps.get("steps_per_update", 1) if steps.get("unit") == "micro_batch" \
        else 1
    return summary["train"]["final_step"] // per_update


def comparison_table(summaries: dict) -> str:
    """A text table: steps, updates, sequences (in all and per update), sequences/s,
    tokens/s, occupancy, packing factor, final loss.

    The last column gives each run's sequences per second relative to the
    first run's.
    """
    header = ("run", "steps", "updates", "sequences", "seq/update", "seq/s", "tokens/s",
              "occupancy", "packing factor", "final loss", "speed-up")
    rows = []
    first = None
    for label, summary in summaries.items():
        train = summary["train"]
        first = first or train["sequences_per_second"]
        done = updates(summary)
        rows.append((label, f"{train['final_step']:,}", f"{done:,}",
                     f"{train['sequences']:,.0f}",
                     f"{train['sequences'] / done:.1f}" if done else "",
                     f"{train['sequences_per_second']:.1f}",
                     f"{train['tokens_per_second']:,.0f}", f"{train['occupancy']:.4f}",
                     f"{summary.get('packing_factor') or 1.0:.4f}",
                     f"{train['final_metrics'].get('loss', float('nan')):.4f}",
                     f"{train['sequences_per_second'] / first:.3f}" if first else ""))
    widths = [max(len(str(row[i])) for row in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(cell).rjust(width) if i else str(cell).ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths)))
             for row in [header] + rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
