r"""Fine-tunes BERT on a GLUE task with packing, evaluates and predicts.

    python run_classifier.py --task_name=MRPC --data_dir=glue_data/MRPC \
        --vocab_file=vocab.txt --bert_config_file=bert_config.json \
        --init_checkpoint=bert_model.ckpt --output_dir=runs/mrpc \
        --do_train --do_eval --do_predict

Flags are those of google-research/bert's run_classifier.py plus --batching
(packed by default), --max_sequences_per_pack, --algorithm,
--distribution_strategy, --jit_compile, --mixed_precision and --export_dir (a
SavedModel for packed serving). The run's logic
is `packed_bert_tf.classification.run.run_classifier`.
"""

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program); their defaults are
    `ClassifierOptions`'."""
    from packed_bert_tf.classification.run import ClassifierOptions
    from packed_bert_tf.training.fine_tuning import BATCHING
    from packed_bert_tf.training.flags import (define_bucketing_flags,
                                               define_export_flags, define_hardware_flags,
                                               define_loop_flags, define_step_flags)
    from packed_bert_tf.training.optimizers import OPTIMIZERS

    defaults = ClassifierOptions
    # Required.
    flags.DEFINE_string("data_dir", defaults.data_dir,
                        "The input data dir: the task's .tsv files (train, dev, test).")
    flags.DEFINE_string("bert_config_file", defaults.bert_config_file,
                        "bert_config.json of the pre-trained model.")
    flags.DEFINE_string("task_name", defaults.task_name,
                        "The name of the task to train (CoLA, MNLI, MRPC, XNLI, SST-2, "
                        "QQP, QNLI, RTE, STS-B).")
    flags.DEFINE_string("vocab_file", defaults.vocab_file,
                        "The WordPiece vocab.txt the model was trained on.")
    flags.DEFINE_string("output_dir", defaults.output_dir,
                        "Checkpoints, eval_results.json, test_results.tsv.")
    # Other.
    flags.DEFINE_string("init_checkpoint", defaults.init_checkpoint,
                        "Original BERT (TF1) checkpoint, usually pre-trained; ignored "
                        "once --output_dir holds a checkpoint of this run.")
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Lower-case the text (uncased models).")
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length,
                         "Most tokens of an example after WordPiece (longer pairs are "
                         "truncated); the row length S when packing.")
    flags.DEFINE_bool("do_train", defaults.do_train, "Fine-tune on train.tsv.")
    flags.DEFINE_bool("do_eval", defaults.do_eval,
                      "Evaluate on the dev set (MNLI: dev_matched).")
    flags.DEFINE_bool("do_predict", defaults.do_predict,
                      "Predict the test set (test_results.tsv).")
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         "Rows per micro-batch over all replicas (packs when packing: "
                         "each holds up to --max_sequences_per_pack examples).")
    flags.DEFINE_integer("eval_batch_size", defaults.eval_batch_size,
                         "Rows per evaluation batch.")
    flags.DEFINE_integer("predict_batch_size", defaults.predict_batch_size,
                         "Rows per prediction batch.")
    flags.DEFINE_float("learning_rate", defaults.learning_rate,
                       "The initial learning rate for Adam.")
    flags.DEFINE_float("num_train_epochs", defaults.num_train_epochs,
                       "Passes over the training rows.")
    flags.DEFINE_float("warmup_proportion", defaults.warmup_proportion,
                       "Fraction of steps of linear warm-up.")
    define_loop_flags(defaults)
    flags.DEFINE_enum("optimizer", defaults.optimizer, list(OPTIMIZERS), "The optimizer.")
    define_step_flags(defaults)
    flags.DEFINE_integer("max_sequences_per_pack", defaults.max_sequences_per_pack,
                         "--batching=packed: cap on examples per row.")
    flags.DEFINE_string("algorithm", defaults.algorithm,
                        "--batching=packed: packing algorithm.")
    define_hardware_flags(defaults)
    flags.DEFINE_integer("seed", defaults.seed,
                         "Seed of weights, dropout, packing and order.")
    flags.DEFINE_enum("batching", defaults.batching, list(BATCHING),
                      "packed: several examples per row, each attending only to "
                      "itself. padded: one example per row at --max_seq_length "
                      "(google-research/bert). bucketed: one example per row, training "
                      "batches padded to their length bucket (packed_bert_tf.batching).")
    define_bucketing_flags("examples", defaults)
    define_export_flags(defaults)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from packed_bert_tf.classification.run import ClassifierOptions, run_classifier
    from packed_bert_tf.training.flags import run_or_exit

    run_or_exit("run_classifier", run_classifier, ClassifierOptions)


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags, quiet_native_logs

    quiet_native_logs()
    define_flags()
    app.run(main, flags_parser=parse_flags)
