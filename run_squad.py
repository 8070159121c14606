r"""Fine-tunes BERT on SQuAD 1.1 with packing, predicts and scores the answers.

    python run_squad.py --bert_config_file=bert_config.json --vocab_file=vocab.txt \
        --init_checkpoint=bert_model.ckpt --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --output_dir=runs/squad --do_train --do_predict

Flags are those of google-research/bert's run_squad.py plus --batching
(packed by default), --max_sequences_per_pack, --algorithm, --distribution_strategy,
--jit_compile, --mixed_precision and --export_dir (a SavedModel for packed
serving). Features are cached as TFRecords in --output_dir. The run's logic is
`packed_bert_tf.squad.run.run_squad`.
"""

import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program); their defaults are
    `SquadOptions`'."""
    from packed_bert_tf.squad.run import SquadOptions
    from packed_bert_tf.training.flags import define_fine_tuning_flags

    defaults = SquadOptions
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
    flags.DEFINE_integer("n_best_size", defaults.n_best_size,
                         "Start/end candidates per feature.")
    flags.DEFINE_integer("max_answer_length", defaults.max_answer_length,
                         "Longest answer, in tokens.")
    define_fine_tuning_flags("features", defaults)
    # They are this script's flags too (its --helpshort lists them).
    flags.adopt_module_key_flags(sys.modules[define_fine_tuning_flags.__module__])


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
