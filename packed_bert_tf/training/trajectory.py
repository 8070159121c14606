"""What fixes a run's trajectory, recorded in its output folder and compared on resume.

A resumed run skips the data its checkpoint's step accounts for and goes on
as the uninterrupted run would have, which holds only with the flags it was
started with: another ``--train_batch_size`` skips another number of
records, another ``--seed`` or ``--input_file`` reads other records, another
``--bert_config_file`` trains another model. So the first run of an output
folder writes ``trajectory.json``: the values that fix its trajectory (flags,
the model config, the replica count) and how many rows each replica reads
per update. A resume compares them with its own and refuses a difference in
one line naming each value, old and new, unless the run is told to accept
them (``allow_changes``): the new values then start a new segment, and the
rows to skip are counted segment by segment, the records actually read.

    {"segments": [{"start_step": 0, "global_steps_per_update": 1,
                   "rows_per_update": 8, "values": {"--train_batch_size": 8, ...}},
                  {"start_step": 300, ...}]}
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from packed_bert_tf.json_files import write_json_atomically

TRAJECTORY_FILE = "trajectory.json"


@dataclasses.dataclass(frozen=True)
class Segment:
    """A stretch of a run with one set of values.

    Attributes:
      start_step: the global step it starts at.
      global_steps_per_update: global steps of one update (`StepCounting`).
      rows_per_update: rows (records, or packs made on the fly) each replica
        reads per update: its batch times the micro-batches of an update.
      values: what fixes the trajectory (flag or other name -> a JSON value).
    """

    start_step: int
    global_steps_per_update: int
    rows_per_update: int
    values: dict


def rows_read(segments: list[Segment], step: int) -> int:
    """Rows each replica had read when the run reached ``step``, segment by segment."""
    total = 0
    for segment, following in zip(segments, [*segments[1:], None]):
        end = min(step, following.start_step if following else step)
        total += max(0, end - segment.start_step) // segment.global_steps_per_update \
            * segment.rows_per_update
    return total


def differences(old: dict, new: dict) -> list[str]:
    """``"--train_batch_size 4 (now 8)"`` for each value that differs; a dict
    value (the model config) by its fields."""
    found = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            fields = [f"{field} {before.get(field)} (now {after.get(field)})"
                      for field in sorted(set(before) | set(after))
                      if before.get(field) != after.get(field)]
            found.append(f"{name} ({', '.join(fields)})")
        else:
            found.append(f"{name} {_shown(before)} (now {_shown(after)})")
    return found


def _shown(value) -> str:
    if isinstance(value, list) and len(value) > 3:
        return f"[{', '.join(map(str, value[:2]))}, ... {len(value)} in all]"
    return "none" if value is None else str(value)


def read_segments(output_dir: str) -> list[Segment] | None:
    """The recorded segments; None when the folder has no record."""
    path = os.path.join(output_dir, TRAJECTORY_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as handle:
            return [Segment(**segment) for segment in json.load(handle)["segments"]]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} cannot be read ({type(error).__name__}: {error}); "
                         f"it records the flags the run was started with") from None


def resume(output_dir: str, segment: Segment, *, step: int, allow_changes: bool,
           allow_flag: str | None, write: bool = True) -> list[Segment]:
    """Checks this run's values against the folder's record and records the run
    (``write``: the chief). Called before the model is built: a resume with
    another model config is this one line, not a failed restore.

    Args:
      output_dir: the run's folder (the chief's, which holds the record).
      segment: this run's values, starting at ``step``.
      step: the global step the run starts from (0: a new run).
      allow_changes: accept values that differ from the record (a new
        segment) instead of refusing them.
      allow_flag: the flag that sets ``allow_changes``, for the error; None
        when the run has none (the error then says to start another folder).
      write: whether this process writes the record.

    Returns:
      The run's segments, this one last (`rows_read` of them at the step
      the run restored: the rows each replica skips).

    Raises:
      ValueError: one line naming each value that differs, old and new.
    """
    segments = read_segments(output_dir) if step else None
    if segments is None:
        if step:
            logging.warning("%s has no %s: resuming at step %d with the flags as given, "
                            "unchecked", output_dir, TRAJECTORY_FILE, step)
        segments = [dataclasses.replace(segment, start_step=0)]
    else:
        segments = [s for s in segments if s.start_step < step]
        changed = differences(segments[-1].values, segment.values)
        if changed and not allow_changes:
            other = (f"pass {allow_flag} to go on with these (the records already read "
                     f"are skipped)" if allow_flag else
                     "start from its weights (--init_checkpoint) in another --output_dir")
            raise ValueError(f"--output_dir={output_dir} was trained to step {step} with "
                             f"other values: {'; '.join(changed)}. Resume with the same "
                             f"flags, or {other}")
        if changed:
            logging.warning("resuming at step %d with changed values: %s", step,
                            "; ".join(changed))
            segments.append(dataclasses.replace(segment, start_step=step))
    if write:
        write_json_atomically(os.path.join(output_dir, TRAJECTORY_FILE),
                              {"segments": [dataclasses.asdict(s) for s in segments]})
    return segments
