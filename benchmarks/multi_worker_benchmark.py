r"""Two local worker processes (multi_worker_mirrored, gRPC on loopback) against one
process with 2 replicas (mirrored over 2 logical CPUs), the same run.

    python benchmarks/multi_worker_benchmark.py --write_markdown=BENCHMARKS.md

Both runs are ``run_pretraining.py`` on the same small packed dataset, same
global batch, seed and number of updates (--steps_per_update=1, so a step is
an update whichever way the step flags count); one after the other, never
together. The time per update is the runs' steady wall time
(``train_summary.json``: without the first chunk of steps, which compiles)
over the updates it covers. On a 2-core machine the workers share the cores,
so the ratio shows the cost of the collectives over gRPC, not a speed-up.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from common import REPOSITORY, define_write_markdown, publish_section, section_header

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_train_steps", 60, "Updates per run.")
flags.DEFINE_integer("iterations_per_loop", 10, "Updates per call of the loop.")
flags.DEFINE_integer("train_batch_size", 16, "Global rows per update.")
flags.DEFINE_integer("hidden_size", 128, "Model width (2 layers, 2 heads).")
define_write_markdown()

S, P, D = 128, 20, 3
TWO_CPU_DEVICES = """
import runpy, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def write_data(folder: pathlib.Path) -> tuple[str, str]:
    """Four packed shards of synthetic sequences and a tiny model's config."""
    from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
    from packed_bert_tf.data.records import record_files, synthetic_records
    from packed_bert_tf.data.records.record_format import PACKING_STATS_FILE, RecordFormat
    from packed_bert_tf.models import BertConfig
    from packed_bert_tf.packing import assign_sequences, pack_lengths

    rng = np.random.default_rng(0)
    packed_format = RecordFormat.packed(S, P + D - 1, D)
    sequences = packs = 0
    for index in range(4):
        lengths = rng.integers(8, S + 1, 600)
        compact = compact_records(synthetic_records.unpacked_arrays(
            lengths, max_seq_length=S, max_predictions_per_seq=P, vocab_size=5000,
            seed=index))
        assignment = assign_sequences(compact["lengths"],
                                      pack_lengths(compact["lengths"], S, D), seed=index)
        record_files.write_arrays(str(folder / f"packed-{index}.tfrecord"),
                               pack_records(compact, assignment, packed_format))
        sequences, packs = sequences + len(lengths), packs + len(assignment)
    (folder / PACKING_STATS_FILE).write_text(json.dumps(
        {"packing_factor": sequences / packs, "sequences": sequences, "packs": packs}))
    config = folder / "bert_config.json"
    BertConfig(vocab_size=5000, hidden_size=FLAGS.hidden_size, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=4 * FLAGS.hidden_size,
               max_position_embeddings=S).to_json_file(str(config))
    return str(folder / "packed-*.tfrecord"), str(config)


def run_flags(input_file, config, output_dir) -> list:
    return [f"--bert_config_file={config}", f"--input_file={input_file}",
            f"--output_dir={output_dir}", "--do_train", f"--max_seq_length={S}",
            f"--max_predictions_per_seq={P}",
            f"--train_batch_size={FLAGS.train_batch_size}",
            f"--num_train_steps={FLAGS.num_train_steps}", "--num_warmup_steps=0",
            "--steps_per_update=1", f"--iterations_per_loop={FLAGS.iterations_per_loop}",
            f"--log_every_n_steps={FLAGS.iterations_per_loop}",
            f"--save_checkpoints_steps={FLAGS.num_train_steps}", "--seed=0"]


def run(commands, environments) -> float:
    """Runs the processes together; their wall time. Killed if they outlive 20 min."""
    started = time.perf_counter()
    processes = [subprocess.Popen(command, env=environment, cwd=REPOSITORY,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for command, environment in zip(commands, environments)]
    try:
        for process in processes:
            _, stderr = process.communicate(timeout=1200)
            if process.returncode:
                raise RuntimeError(stderr[-2000:])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return time.perf_counter() - started


def seconds_per_update(output_dir) -> float:
    train = json.loads((pathlib.Path(output_dir) / "train_summary.json").read_text())["train"]
    steady_updates = FLAGS.num_train_steps - FLAGS.iterations_per_loop
    return train["steady_seconds"] / steady_updates


def main(argv):
    del argv
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    tool = str(pathlib.Path(REPOSITORY) / "run_pretraining.py")
    with tempfile.TemporaryDirectory() as root:
        root = pathlib.Path(root)
        input_file, config = write_data(root)
        one = root / "one_process"
        run([[sys.executable, "-c", TWO_CPU_DEVICES, tool,
              *run_flags(input_file, config, one), "--distribution_strategy=mirrored"]],
            [environment])
        ports = []
        for _ in range(2):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                ports.append(sock.getsockname()[1])
        addresses = [f"127.0.0.1:{port}" for port in ports]
        two = root / "two_workers"
        run([[sys.executable, tool, *run_flags(input_file, config, two),
              "--distribution_strategy=multi_worker_mirrored"]] * 2,
            [dict(environment, TF_CONFIG=json.dumps(
                {"cluster": {"worker": addresses},
                 "task": {"type": "worker", "index": index}})) for index in range(2)])
        one_seconds, two_seconds = seconds_per_update(one), seconds_per_update(two)

    lines = section_header(flags_shown=["num_train_steps", "iterations_per_loop",
                                        "train_batch_size", "hidden_size"])
    lines += [
        (f"Packed records, S = {S}; model 2 layers, hidden {FLAGS.hidden_size}; global "
         f"batch {FLAGS.train_batch_size} rows; LAMB, XLA on; one replica per worker "
         f"process. Time per update over the steady updates (the first "
         f"{FLAGS.iterations_per_loop}, which compile, left out)."),
        "",
        "| | seconds per update |",
        "|---|---:|",
        f"| 1 process, `mirrored` over 2 logical CPUs | {one_seconds:.4f} |",
        (f"| 2 worker processes, `multi_worker_mirrored` (gRPC, 127.0.0.1) | "
         f"{two_seconds:.4f} |"),
        "",
        (f"Ratio, 2 workers / 1 process: **{two_seconds / one_seconds:.2f}** (no "
         f"target: both layouts share the same 2 cores, and the machine's load average "
         f"at the end was {os.getloadavg()[0]:.1f}, so one measurement is noisy; above 1 "
         f"is what the gRPC collectives on loopback and a second process cost, below 1 "
         f"that they cost less than what one process running both replicas loses)."),
    ]
    publish_section("multi_worker_benchmark", "Two local workers vs one process with 2 "
                    "replicas (`run_pretraining.py`, CPU)", "\n".join(lines))


if __name__ == "__main__":
    app.run(main)
