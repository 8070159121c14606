r"""Fine-tunes BERT on SQuAD 1.1 with packing, predicts and scores the answers.

    python run_squad.py --bert_config_file=bert_config.json --vocab_file=vocab.txt \
        --init_checkpoint=bert_model.ckpt --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --output_dir=runs/squad --do_train --do_predict

Flags are those of google-research/bert's run_squad.py plus --batching
(packed by default), --max_sequences_per_pack, --algorithm, --distribution_strategy,
--jit_compile, --mixed_precision and --export_dir (a SavedModel for packed
serving). Features are cached as TFRecords in --output_dir. The run's logic is `packed_bert_tf.squad.run.run_squad`.
"""

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program); their defaults are
    `SquadOptions`'."""
    from packed_bert_tf.squad.run import SquadOptions
    from packed_bert_tf.training.fine_tuning import BATCHING
    from packed_bert_tf.training.flags import (define_bucketing_flags,
                                               define_export_flags, define_hardware_flags,
                                               define_loop_flags, define_step_flags)
    from packed_bert_tf.training.optimizers import OPTIMIZERS

    defaults = SquadOptions
    flags.DEFINE_string("bert_config_file", defaults.bert_config_file,
                        "bert_config.json of the model.")
    flags.DEFINE_string("vocab_file", defaults.vocab_file,
                        "The WordPiece vocab.txt of the model.")
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Lower-case the text (uncased models).")
    flags.DEFINE_string("init_checkpoint", defaults.init_checkpoint,
                        "Original BERT (TF1) checkpoint, usually pre-trained; ignored "
                        "once --output_dir holds a checkpoint of this run.")
    flags.DEFINE_string("train_file", defaults.train_file, "SQuAD 1.1 JSON for training.")
    flags.DEFINE_string("predict_file", defaults.predict_file,
                        "SQuAD 1.1 JSON to predict (and score: it holds the answers).")
    flags.DEFINE_string("output_dir", defaults.output_dir,
                        "Checkpoints, feature caches, predictions, eval_results.json.")
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length,
                         "Tokens per feature (S).")
    flags.DEFINE_integer("doc_stride", defaults.doc_stride,
                         "Stride between document windows.")
    flags.DEFINE_integer("max_query_length", defaults.max_query_length,
                         "Question tokens kept.")
    flags.DEFINE_bool("do_train", defaults.do_train, "Fine-tune on --train_file.")
    flags.DEFINE_bool("do_predict", defaults.do_predict,
                      "Predict and score --predict_file.")
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         "Rows per micro-batch (packs when packing), over all "
                         "replicas.")
    flags.DEFINE_integer("predict_batch_size", defaults.predict_batch_size,
                         "Rows per prediction batch.")
    flags.DEFINE_float("learning_rate", defaults.learning_rate, "Peak learning rate.")
    flags.DEFINE_float("num_train_epochs", defaults.num_train_epochs,
                       "Passes over the training rows.")
    flags.DEFINE_float("warmup_proportion", defaults.warmup_proportion,
                       "Fraction of steps of linear warm-up.")
    flags.DEFINE_integer("n_best_size", defaults.n_best_size,
                         "Start/end candidates per feature.")
    flags.DEFINE_integer("max_answer_length", defaults.max_answer_length,
                         "Longest answer, in tokens.")
    define_loop_flags(defaults)
    flags.DEFINE_enum("optimizer", defaults.optimizer, list(OPTIMIZERS), "The optimizer.")
    define_step_flags(defaults)
    flags.DEFINE_integer("max_sequences_per_pack", defaults.max_sequences_per_pack,
                         "--batching=packed: cap on features per row.")
    flags.DEFINE_string("algorithm", defaults.algorithm,
                        "--batching=packed: packing algorithm.")
    define_hardware_flags(defaults)
    flags.DEFINE_integer("seed", defaults.seed,
                         "Seed of weights, dropout, packing and order.")
    flags.DEFINE_enum("batching", defaults.batching, list(BATCHING),
                      "packed: several features per row, each attending only to "
                      "itself. padded: one feature per row at --max_seq_length "
                      "(google-research/bert). bucketed: one feature per row, batches "
                      "padded to their length bucket (packed_bert_tf.batching).")
    define_bucketing_flags("features", defaults)
    define_export_flags(defaults)


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
