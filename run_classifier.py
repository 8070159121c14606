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

import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program); their defaults are
    `ClassifierOptions`'."""
    from packed_bert_tf.classification.run import ClassifierOptions
    from packed_bert_tf.training.flags import define_fine_tuning_flags

    defaults = ClassifierOptions
    flags.DEFINE_string("data_dir", defaults.data_dir,
                        "The input data dir: the task's .tsv files (train, dev, test).")
    flags.DEFINE_string("task_name", defaults.task_name,
                        "The name of the task to train (CoLA, MNLI, MRPC, XNLI, SST-2, "
                        "QQP, QNLI, RTE, STS-B).")
    flags.DEFINE_string("output_dir", defaults.output_dir,
                        "Checkpoints, eval_results.json, test_results.tsv.")
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length,
                         "Most tokens of an example after WordPiece (longer pairs are "
                         "truncated); the row length S when packing.")
    flags.DEFINE_bool("do_train", defaults.do_train, "Fine-tune on train.tsv.")
    flags.DEFINE_bool("do_eval", defaults.do_eval,
                      "Evaluate on the dev set (MNLI: dev_matched).")
    flags.DEFINE_bool("do_predict", defaults.do_predict,
                      "Predict the test set (test_results.tsv).")
    flags.DEFINE_integer("eval_batch_size", defaults.eval_batch_size,
                         "Rows per evaluation batch.")
    define_fine_tuning_flags("examples", defaults)
    # They are this script's flags too (its --helpshort lists them).
    flags.adopt_module_key_flags(sys.modules[define_fine_tuning_flags.__module__])


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
