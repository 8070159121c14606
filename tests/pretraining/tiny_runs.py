"""Shared pieces of the pre-training run tests: a tiny model, packed copies of
the small unpacked dataset, the options of a short run (S = 64)."""

import json
import pathlib

from packed_bert_tf.data.packed.pretraining_records import compact_records, pack_records
from packed_bert_tf.data.records import record_files
from packed_bert_tf.data.records.record_format import PACKING_STATS_FILE, RecordFormat
from packed_bert_tf.models import BertConfig
from packed_bert_tf.packing import assign_sequences, pack_lengths
from packed_bert_tf.pretraining.run import PretrainingOptions
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH

S, P, D = SMALL_SEQ_LENGTH, SMALL_PREDICTIONS, 3
#: One layer: what these runs check (resuming, stopping, batching, files, errors)
#: needs no second one, and each run builds and traces its model (a layer costs
#: about a fifth of a run's CPU).
CONFIG = BertConfig(vocab_size=5000, hidden_size=32, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=S)


def pack_files(unpacked_files, folder: pathlib.Path) -> list:
    """Packs each unpacked file into one packed file, with packing_stats.json."""
    folder.mkdir(parents=True, exist_ok=True)
    packed_format = RecordFormat.packed(S, P + D - 1, D)
    paths, sequences, packs = [], 0, 0
    for index, path in enumerate(unpacked_files):
        compact = compact_records(record_files.read_arrays(path, RecordFormat.unpacked(S, P)))
        lengths = compact["lengths"]
        assignment = assign_sequences(lengths, pack_lengths(lengths, S, D), seed=index)
        out = str(folder / f"packed-{index:03d}.tfrecord")
        record_files.write_arrays(out, pack_records(compact, assignment, packed_format))
        paths.append(out)
        sequences += lengths.size
        packs += len(assignment)
    (folder / PACKING_STATS_FILE).write_text(json.dumps(
        {"packing_factor": sequences / packs, "sequences": sequences, "packs": packs}))
    return paths


def options(config_file, output_dir, **overrides) -> PretrainingOptions:
    """A six-step run (checkpoints at 3 and 6) with ``overrides``."""
    values = dict(bert_config_file=config_file, output_dir=str(output_dir),
                  max_seq_length=S, max_predictions_per_seq=P, train_batch_size=4,
                  eval_batch_size=16, learning_rate=1e-3, num_train_steps=6,
                  num_warmup_steps=2, save_checkpoints_steps=3, iterations_per_loop=3,
                  log_every_n_steps=3, seed=3, shuffle_buffer_size=50,
                  progress_bar=False)
    values.update(overrides)
    return PretrainingOptions(**values)
