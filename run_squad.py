r"""Fine-tunes BERT on SQuAD 1.1 with packing, predicts and scores the answers.

    python run_squad.py --bert_config_file=bert_config.json --vocab_file=vocab.txt \
        --init_checkpoint=bert_model.ckpt --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --output_dir=runs/squad --do_train --do_predict

Flags are those of google-research/bert's run_squad.py plus --batching
(packed by default), --max_sequences_per_pack, --algorithm, --distribution_strategy,
--jit_compile and --mixed_precision. Features are cached as TFRecords in
--output_dir. The run's logic is `packed_bert_tf.squad.run.run_squad`.
"""

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program)."""
    from packed_bert_tf.training.flags import (define_bucketing_flags,
                                               define_hardware_flags, define_loop_flags)
    from packed_bert_tf.training.optimizers import OPTIMIZERS

    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_string("vocab_file", None, "The WordPiece vocab.txt of the model.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased models).")
    flags.DEFINE_string("init_checkpoint", None,
                        "Original BERT (TF1) checkpoint, usually pre-trained; ignored "
                        "once --output_dir holds a checkpoint of this run.")
    flags.DEFINE_string("train_file", None, "SQuAD 1.1 JSON for training.")
    flags.DEFINE_string("predict_file", None,
                        "SQuAD 1.1 JSON to predict (and score: it holds the answers).")
    flags.DEFINE_string("output_dir", None,
                        "Checkpoints, feature caches, predictions, eval_results.json.")
    flags.DEFINE_integer("max_seq_length", 384, "Tokens per feature (S).")
    flags.DEFINE_integer("doc_stride", 128, "Stride between document windows.")
    flags.DEFINE_integer("max_query_length", 64, "Question tokens kept.")
    flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
    flags.DEFINE_bool("do_predict", False, "Predict and score --predict_file.")
    flags.DEFINE_integer("train_batch_size", 32,
                         "Rows per step (packs when packing), over all replicas.")
    flags.DEFINE_integer("predict_batch_size", 8, "Rows per prediction batch.")
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training rows.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of steps of linear warm-up.")
    flags.DEFINE_integer("n_best_size", 20, "Start/end candidates per feature.")
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")
    define_loop_flags()
    flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "The optimizer.")
    flags.DEFINE_integer("steps_per_update", 1, "Micro-batches per update.")
    flags.DEFINE_integer("max_sequences_per_pack", 3,
                         "--batching=packed: cap on features per row.")
    flags.DEFINE_string("algorithm", "optimal", "--batching=packed: packing algorithm.")
    define_hardware_flags()
    flags.DEFINE_integer("seed", None, "Seed of weights, dropout, packing and order.")
    flags.DEFINE_enum("batching", "packed", ["packed", "bucketed", "padded"],
                      "packed: several features per row, each attending only to "
                      "itself. padded: one feature per row at --max_seq_length "
                      "(google-research/bert). bucketed: one feature per row, batches "
                      "padded to their length bucket (packed_bert_tf.batching).")
    define_bucketing_flags("features")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from packed_bert_tf.squad.run import SquadOptions, run_squad
    from packed_bert_tf.training.flags import run_or_exit

    run_or_exit("run_squad", run_squad, SquadOptions)


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags, quiet_native_logs

    quiet_native_logs()
    define_flags()
    app.run(main, flags_parser=parse_flags)
