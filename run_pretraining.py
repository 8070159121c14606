r"""Pre-trains BERT on packed (or unpacked) MLPerf-format TFRecords.

    python run_pretraining.py --bert_config_file=bert_config.json \
        --input_file='data/packed/part-*' --output_dir=runs/packed \
        --do_train --train_batch_size=32 --num_train_steps=1000 \
        --packing_hyperparameter_adjustment=lamb_betas

Flags are those of the MLPerf TensorFlow reference where it has one. The
record format (packed or not) is read off the files; the packing factor from
the ``packing_stats.json`` beside packed shards. A restarted run resumes from
the last checkpoint in --output_dir. The run's logic is
`packed_bert_tf.training.pretrain.run_pretraining`.
"""

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program)."""
    from packed_bert_tf.training.flags import (define_bucketing_flags,
                                               define_hardware_flags, define_loop_flags)
    from packed_bert_tf.training.hyperparameters import PACKING_MODES
    from packed_bert_tf.training.optimizers import OPTIMIZERS

    # Inputs and outputs.
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_string("input_file", None,
                        "Training TFRecords, packed or unpacked: glob or comma list.")
    flags.DEFINE_string("eval_input_file", None,
                        "Evaluation TFRecords, packed or unpacked: glob or comma list.")
    flags.DEFINE_string("output_dir", None,
                        "Checkpoints, TensorBoard summaries, train_summary.json.")
    flags.DEFINE_string("init_checkpoint", None,
                        "Original BERT (TF1) checkpoint to start from; ignored once "
                        "--output_dir holds a checkpoint of this run.")

    # Data.
    flags.DEFINE_integer("max_seq_length", 512, "Tokens per record (S).")
    flags.DEFINE_integer("max_predictions_per_seq", 76,
                         "Masked-LM slots per unpacked sequence (P); packed records "
                         "have P + max_sequences_per_pack - 1.")
    flags.DEFINE_bool("packed_input", None,
                      "Whether --input_file is packed. Default: read off the records.")
    flags.DEFINE_integer("max_sequences_per_pack", 3, "D of packed records.")
    flags.DEFINE_float("packing_factor", None,
                       "Average sequences per pack. Default: packing_stats.json beside "
                       "the packed input.")
    flags.DEFINE_integer("shuffle_buffer_size", 10_000, "Records in the shuffle buffer.")
    flags.DEFINE_enum("batching", "packed", ["packed", "bucketed", "padded"],
                      "packed: the records as they are (packed records give packed "
                      "batches). padded: unpacked records padded to --max_seq_length "
                      "(standard BERT). bucketed: unpacked records batched by length "
                      "(packed_bert_tf.batching).")
    define_bucketing_flags("records")
    flags.DEFINE_integer("token_budget", None,
                         "--batching=bucketed: rows x length per step instead of "
                         "--train_batch_size rows.")

    # Optimisation.
    flags.DEFINE_integer("train_batch_size", 32,
                         "Rows (packs, for packed input) per step, over all replicas.")
    flags.DEFINE_integer("eval_batch_size", 8, "Rows per evaluation batch.")
    flags.DEFINE_enum("optimizer", "lamb", list(OPTIMIZERS), "The optimizer.")
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
    flags.DEFINE_integer("num_train_steps", 100_000, "Optimizer updates to train for.")
    flags.DEFINE_integer("num_warmup_steps", 10_000, "Linear warm-up updates.")
    flags.DEFINE_integer("start_warmup_step", 0, "The update the warm-up starts at.")
    flags.DEFINE_integer("steps_per_update", 1,
                         "Gradient-accumulation steps (micro-batches) per update.")
    flags.DEFINE_float("lamb_beta_1", 0.9, "LAMB/Adam beta_1.")
    flags.DEFINE_float("lamb_beta_2", 0.999, "LAMB/Adam beta_2.")
    flags.DEFINE_float("lamb_weight_decay_rate", 0.01, "Weight decay rate.")
    flags.DEFINE_float("lamb_epsilon", 1e-6,
                       "Epsilon (MLPerf's log_epsilon -6 means 1e-6).")
    flags.DEFINE_enum("packing_hyperparameter_adjustment", "none", list(PACKING_MODES),
                      "For packed input (the paper's section 3.3): lamb_betas: beta_i := "
                      "beta_i ** packing_factor; accumulation: steps_per_update / "
                      "packing_factor (same sequences per update as unpacked).")

    # What to do, how often.
    flags.DEFINE_bool("do_train", False, "Train.")
    flags.DEFINE_bool("do_eval", False, "Evaluate on --eval_input_file.")
    flags.DEFINE_integer("max_eval_steps", 0,
                         "Cap on evaluation steps (0: every evaluation record once).")
    define_loop_flags()
    flags.DEFINE_integer("seed", None, "Seed of weights, dropout and data order.")

    # Hardware.
    define_hardware_flags()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from packed_bert_tf.training.flags import run_or_exit
    from packed_bert_tf.training.pretrain import PretrainingOptions, run_pretraining

    run_or_exit("run_pretraining", run_pretraining, PretrainingOptions)


if __name__ == "__main__":
    define_flags()
    app.run(main)
