"""Timing helpers shared by the packed-vs-unpacked throughput benchmarks."""

import json
import time


def time_alternately(trainers, chunks, steps_per_chunk, rows_per_step):
    """Chunks of steps of each trainer in turn; totals without the first (compiling) one."""
    totals = {kind: dict.fromkeys(("seconds", "cpu_seconds", "sequences", "rows"), 0.0)
              for kind in trainers}
    for chunk in range(chunks + 1):
        for kind, (trainer, iterator) in trainers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            result = trainer.train_steps(iterator, steps_per_chunk)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if chunk:
                totals[kind]["seconds"] += wall
                totals[kind]["cpu_seconds"] += cpu
                totals[kind]["sequences"] += result.statistics["sequences"]
                totals[kind]["rows"] += steps_per_chunk * rows_per_step
        if chunk:
            print(f"chunk {chunk}: " + ", ".join(
                f"{kind} {t['rows'] / t['seconds']:.3f} rows/s"
                for kind, t in totals.items()))
    return totals


def throughput_figures(totals, packing_factor):
    """Measured rates, and the epoch rate: rows/s x the dataset's packing factor.

    A step costs the same whatever its rows hold (static shapes), so over an
    epoch, where every pack is read once, packed sequences/s is rows/s times
    the dataset's packing factor; the batches of a short benchmark hold a
    random sample of packs whose average differs from it by chance.
    """
    rows = {kind: t["rows"] / t["seconds"] for kind, t in totals.items()}
    cpu_rows = {kind: t["rows"] / t["cpu_seconds"] for kind, t in totals.items()}
    measured = {kind: t["sequences"] / t["seconds"] for kind, t in totals.items()}
    epoch = {"unpacked": rows["unpacked"], "packed": rows["packed"] * packing_factor}
    figures = {
        "packing_factor": packing_factor,
        "trained_packing_factor": totals["packed"]["sequences"] / totals["packed"]["rows"],
        "rows_per_second": rows, "measured_sequences_per_second": measured,
        "epoch_sequences_per_second": epoch,
        "ratio": epoch["packed"] / epoch["unpacked"],
        "measured_ratio": measured["packed"] / measured["unpacked"],
        "rows_ratio": rows["packed"] / rows["unpacked"],
        "cpu_rows_ratio": cpu_rows["packed"] / cpu_rows["unpacked"],
    }
    figures["ratio_over_packing_factor"] = figures["ratio"] / packing_factor
    print(json.dumps(figures, indent=2))
    return figures
