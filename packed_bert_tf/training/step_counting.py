"""What a training step is: the MLPerf reference's meaning of the step flags
under gradient accumulation, or one step per update.

The MLPerf TensorFlow reference (mlcommons/training
``language_model/tensorflow/bert``) accumulates gradients with
``GradientAggregationOptimizer``: its global step advances once per
micro-batch of ``--train_batch_size`` rows, and the update of the
accumulated gradient is applied at every ``K``-th (``K = --steps_per_update``).
So ``--num_train_steps``, ``--num_warmup_steps``, ``--start_warmup_step``,
``--save_checkpoints_steps`` and ``--iterations_per_loop`` count micro-batches
there, and the learning rate of update ``u`` (0-based) is the schedule's
value at global step ``u K + K - 1``, the step at which it is applied. Each
micro-batch's gradient is clipped to global norm 1.0 before it is added to the
accumulator, unless ``--clip_by_global_norm_after_gradient_allreduce`` moves the
clipping to the accumulated gradient, once per update.

``--step_unit=micro_batch`` (the default) gives those meanings;
``--step_unit=update`` counts one step per optimizer update (what this project
did before). In both, the trainer runs whole updates: the step flags are
read in `StepCounting`'s unit and the run ends, logs and saves at update
boundaries.
"""

from __future__ import annotations

import dataclasses
import math

STEP_UNITS = ("micro_batch", "update")


@dataclasses.dataclass(frozen=True)
class StepCounting:
    """How the step flags count, and how many micro-batches an update runs.

    Attributes:
      unit: ``"micro_batch"`` (the reference's global step) or ``"update"``.
      steps_per_update: ``--steps_per_update`` as given: the micro-batches per
        update that the step flags were written for.
      micro_batches_per_update: the micro-batches an update actually runs
        (fewer than `steps_per_update` after the packing adjustment
        ``accumulation``: each then holds about ``packing factor`` times more
        sequences, so an update holds about as many as the flags meant).
    """

    unit: str
    steps_per_update: int
    micro_batches_per_update: int

    def __post_init__(self):
        if self.unit not in STEP_UNITS:
            raise ValueError(f"--step_unit={self.unit!r} is not one of "
                             f"{', '.join(STEP_UNITS)}")
        if self.steps_per_update < 1 or self.micro_batches_per_update < 1:
            raise ValueError(f"--steps_per_update must be >= 1, got "
                             f"{self.steps_per_update}")

    @property
    def global_steps_per_update(self) -> int:
        """How far the global step advances per update: ``--steps_per_update``
        with ``micro_batch``, 1 with ``update``.

        After the ``accumulation`` adjustment the global step still advances
        by ``--steps_per_update`` per update, so that the step flags, the
        schedule and the step numbers of logs and checkpoints mean what they
        mean in the unpacked run with the same flags (same number of updates).
        """
        return self.steps_per_update if self.unit == "micro_batch" else 1

    def updates(self, steps: int, flag: str = "--num_train_steps") -> int:
        """The updates ``steps`` global steps make; they must be whole updates.

        Raises:
          ValueError: ``steps`` is not a multiple of `global_steps_per_update`
            (the reference would compute the last micro-batches and never
            apply them).
        """
        per_update = self.global_steps_per_update
        if steps % per_update:
            raise ValueError(
                f"{flag}={steps} is not a multiple of --steps_per_update="
                f"{per_update}: steps count micro-batches (--step_unit=micro_batch, as "
                f"in the MLPerf reference), and an update takes {per_update}; give "
                f"{(steps // per_update + 1) * per_update}, or count updates with "
                f"--step_unit=update")
        return steps // per_update

    def describe(self, *, num_train_steps: int, train_batch_size: int,
                 sequences_per_row: float | None = None) -> str:
        """One line for the log: what a step is and what the run will see."""
        updates = self.updates(num_train_steps)
        micro_batches = updates * self.micro_batches_per_update
        rows = micro_batches * train_batch_size
        if self.unit == "micro_batch" and \
                self.micro_batches_per_update == self.steps_per_update:
            step = (f"a step is one micro-batch of {train_batch_size} rows "
                    f"(--step_unit=micro_batch, the MLPerf reference's global step); an "
                    f"update every {self.steps_per_update} steps")
        elif self.unit == "micro_batch":
            plural = "es" if self.micro_batches_per_update > 1 else ""
            step = (f"a step is one micro-batch of the unpacked run these flags describe "
                    f"(--step_unit=micro_batch, the MLPerf reference's global step); an "
                    f"update every {self.steps_per_update} steps, made here of "
                    f"{self.micro_batches_per_update} micro-batch{plural} of "
                    f"{train_batch_size} packs (packing adjustment: accumulation)")
        else:
            step = (f"a step is one update of {self.micro_batches_per_update} "
                    f"micro-batch{'es' if self.micro_batches_per_update > 1 else ''} of "
                    f"{train_batch_size} rows (--step_unit=update)")
        sequences = ("" if sequences_per_row is None
                     else f", about {rows * sequences_per_row:,.0f} sequences")
        return (f"{step}; --num_train_steps={num_train_steps}: {updates:,} updates, "
                f"{micro_batches:,} micro-batches, {rows:,} rows{sequences}")


def updates_to_boundary(step: int, every: int, global_steps_per_update: int) -> int:
    """Updates from global ``step`` to the first update boundary at or after the
    next multiple of ``every`` (a log point or checkpoint that falls inside an
    update happens at its end).

    >>> updates_to_boundary(0, 10, 4)   # steps 4, 8, 12: 12 >= 10
    3
    >>> updates_to_boundary(12, 10, 4)  # next multiple 20: steps 16, 20
    2
    """
    next_multiple = (step // every + 1) * every
    return max(1, math.ceil((next_multiple - step) / global_steps_per_update))


def crossed(step_before: int, step_after: int, every: int) -> bool:
    """Whether ``(step_before, step_after]`` holds a multiple of ``every`` (0: never)."""
    return bool(every) and step_after // every > step_before // every
