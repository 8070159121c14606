r"""Pre-trains BERT on packed (or unpacked) MLPerf-format TFRecords.

    python run_pretraining.py --bert_config_file=bert_config.json \
        --input_file='data/packed/part-*' --output_dir=runs/packed \
        --do_train --train_batch_size=32 --num_train_steps=1000 \
        --packing_hyperparameter_adjustment=lamb_betas

Flags are those of the MLPerf TensorFlow reference where it has one. The
record format (packed or not) is read off the files; the packing factor from
the ``packing_stats.json`` beside packed shards. A restarted run resumes from
the last checkpoint in --output_dir. --batching=packed (the default) trains
on packed records (``python -m data_prep.pack_pretraining_data``), or packs
unpacked ones as it reads them (`packed_bert_tf.data.inputs.pack_dataset`); unpacked
records also train with --batching=padded (or bucketed). --input_text_file
trains straight from text instead: tokenized, masked afresh each epoch and
packed as it is read. The run's logic is
`packed_bert_tf.pretraining.run.run_pretraining`.
"""

import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
    """Defines the script's flags (only when run as a program); their defaults are
    `PretrainingOptions`'s."""
    from packed_bert_tf.pretraining.hyperparameters import PACKING_MODES
    from packed_bert_tf.pretraining.run import PretrainingOptions as defaults
    from packed_bert_tf.training.flags import define_base_flags

    # The model, the rows of a step, the optimizer, batching, the loop and the
    # hardware, as every front end has them.
    define_base_flags("sequences", defaults)
    # They are this script's flags too (its --helpshort lists them).
    flags.adopt_module_key_flags(sys.modules[define_base_flags.__module__])
    flags.DEFINE_integer("num_gpus", defaults.num_gpus,
                         "As in the MLPerf reference: N > 0 trains on the first N GPUs "
                         "(--distribution_strategy=mirrored over them), 0 on the default "
                         "device.")

    # Inputs and outputs.
    flags.DEFINE_string("input_file", defaults.input_file,
                        "Training TFRecords, packed or unpacked: glob or comma list.")
    flags.DEFINE_string(
        "input_text_file", defaults.input_text_file,
        "Train straight from text instead of --input_file: glob or comma list of text "
        "files, one sentence per line and a blank line between documents. Tokenized, "
        "cut into sequences (--pretraining_objective), masked afresh each time a "
        "sequence is read and packed on the fly, with no offline step.")
    flags.DEFINE_enum("pretraining_objective", defaults.pretraining_objective,
                      ["nsp", "mlm"],
                      "--input_text_file: nsp: BERT's sentence pairs with next-sentence "
                      "prediction (as create_pretraining_data makes them); mlm: masked "
                      "LM alone on RoBERTa's full sentences.")
    flags.DEFINE_float("masked_lm_prob", defaults.masked_lm_prob,
                       "--input_text_file: share of the tokens masked (as in "
                       "create_pretraining_data).")
    flags.DEFINE_float("short_seq_prob", defaults.short_seq_prob,
                       "--input_text_file, nsp: probability of a shorter sequence (as in "
                       "create_pretraining_data).")
    flags.DEFINE_bool("do_whole_word_mask", defaults.do_whole_word_mask,
                      "--input_text_file: mask every piece of a word together (as in "
                      "create_pretraining_data).")
    flags.DEFINE_string("eval_input_file", defaults.eval_input_file,
                        "Evaluation TFRecords, packed or unpacked: glob or comma list.")
    flags.DEFINE_string("output_dir", defaults.output_dir,
                        "Checkpoints, TensorBoard summaries, train_summary.json. One run "
                        "at a time (OUTPUT_DIR/.lock).")
    flags.DEFINE_bool("resume_with_changed_flags", defaults.resume_with_changed_flags,
                      "Resume --output_dir although flags that fix the run's trajectory "
                      "(batch size, steps per update, sequence sizes, batching, seed, "
                      "input files, model config) differ from the ones it was started "
                      "with (OUTPUT_DIR/trajectory.json); the records already read are "
                      "skipped. Without it such a resume is refused, naming each flag.")

    # Data.
    flags.DEFINE_integer("max_seq_length", defaults.max_seq_length,
                         "Tokens per record (S).")
    flags.DEFINE_integer("max_predictions_per_seq", defaults.max_predictions_per_seq,
                         "Masked-LM slots per unpacked sequence (P); packed records "
                         "have P + max_sequences_per_pack - 1.")
    flags.DEFINE_bool("packed_input", defaults.packed_input,
                      "Whether --input_file is packed. Default: read off the records.")
    flags.DEFINE_float("packing_factor", defaults.packing_factor,
                       "Average sequences per pack. Default: packing_stats.json beside "
                       "the packed input, or estimated on the first records when "
                       "packing on the fly.")
    flags.DEFINE_integer("shuffle_buffer_size", defaults.shuffle_buffer_size,
                         "Records in the shuffle buffer.")
    flags.DEFINE_integer("packing_buffer_size", defaults.packing_buffer_size,
                         "--batching=packed on unpacked records: records each input "
                         "pipeline's packer decides over at once (more: nearer the LP "
                         "bound, more memory, later first batch).")
    flags.DEFINE_integer("token_budget", defaults.token_budget,
                         "--batching=bucketed: rows x length per step instead of "
                         "--train_batch_size rows.")

    # Optimisation.
    flags.DEFINE_integer("eval_batch_size", defaults.eval_batch_size,
                         "Rows per evaluation batch.")
    flags.DEFINE_integer("num_train_steps", defaults.num_train_steps,
                         "Steps to train for (micro-batches, see --step_unit); a "
                         "multiple of --steps_per_update.")
    flags.DEFINE_integer("num_warmup_steps", defaults.num_warmup_steps,
                         "Linear warm-up steps.")
    flags.DEFINE_integer("start_warmup_step", defaults.start_warmup_step,
                         "The step the warm-up starts at.")
    flags.DEFINE_float("lamb_beta_1", defaults.lamb_beta_1, "LAMB/Adam beta_1.")
    flags.DEFINE_float("lamb_beta_2", defaults.lamb_beta_2, "LAMB/Adam beta_2.")
    flags.DEFINE_float("lamb_weight_decay_rate", defaults.lamb_weight_decay_rate,
                       "Weight decay rate.")
    flags.DEFINE_float("lamb_epsilon", defaults.lamb_epsilon, "LAMB/Adam epsilon.")
    flags.DEFINE_float("log_epsilon", defaults.log_epsilon,
                       "As MLPerf's TPU command lines give it: epsilon = "
                       "10 ** log_epsilon (-6: 1e-6); --lamb_epsilon, if also given, must "
                       "agree.")
    flags.DEFINE_float("poly_power", defaults.poly_power,
                       "Power of the polynomial decay of the learning rate after "
                       "warm-up (1.0: linear).")
    flags.DEFINE_enum("packing_hyperparameter_adjustment",
                      defaults.packing_hyperparameter_adjustment, list(PACKING_MODES),
                      "For packed input (the paper's section 3.3): lamb_betas: beta_i := "
                      "beta_i ** packing_factor; accumulation: steps_per_update / "
                      "packing_factor (same sequences per update as unpacked).")

    # What to do, how often.
    flags.DEFINE_bool("do_train", defaults.do_train, "Train.")
    flags.DEFINE_bool("do_eval", defaults.do_eval, "Evaluate on --eval_input_file.")
    flags.DEFINE_integer("max_eval_steps", defaults.max_eval_steps,
                         "Cap on evaluation steps (0: every evaluation record once).")
    flags.DEFINE_integer(
        "eval_interval_samples", defaults.eval_interval_samples,
        "With --do_train and --do_eval: training samples (sequences, not packs) "
        "between evaluations on all of --eval_input_file, each at the first update "
        "at or after a multiple (and one at the end: --eval_at_end). Default: MLPerf's "
        "FLOOR(0.05 * (230.23 * GBS + 3,000,000), 25,000), GBS the sequences per "
        "update; 0: only at the end.")
    flags.DEFINE_bool(
        "eval_at_end", defaults.eval_at_end,
        "With --do_train and --do_eval: evaluate also at the end of --num_train_steps "
        "when it falls between two evaluations of --eval_interval_samples. Default: yes "
        "without --mlperf_log_file; no with it (MLPerf's schedule has no such "
        "evaluation; when asked for, the log marks it off_schedule_evaluation).")
    flags.DEFINE_float("stop_threshold", defaults.stop_threshold,
                       "Stop training at the first evaluation whose masked-LM accuracy "
                       "reaches this; needs --do_eval. Default: MLPerf's target, 0.720, "
                       "with --mlperf_log_file and evaluation during training; otherwise "
                       "train to --num_train_steps.")

    # MLPerf's log.
    flags.DEFINE_string("mlperf_log_file", defaults.mlperf_log_file,
                        "Write MLPerf's :::MLLOG lines of the run to this file (made "
                        "afresh; a resumed run appends), for mlperf_logging's compliance "
                        "checker. Default: none.")
    flags.DEFINE_bool("drop_page_cache", defaults.drop_page_cache,
                      "Before the run starts, write dirty pages back and drop the "
                      "operating system's page cache (Linux, as root: "
                      "/proc/sys/vm/drop_caches), as MLPerf submissions do before a "
                      "timed run; the MLPerf log's cache_clear is then true. Where the "
                      "process may not, the run stops with one line before training.")
    flags.DEFINE_string("submission_org", defaults.submission_org,
                        "MLPerf log: the submitting organisation.")
    flags.DEFINE_enum("submission_division", defaults.submission_division,
                      ["open", "closed"], "MLPerf log: the division.")
    flags.DEFINE_enum("submission_status", defaults.submission_status,
                      ["onprem", "cloud", "research"], "MLPerf log: the system's status.")
    flags.DEFINE_string("submission_platform", defaults.submission_platform,
                        "MLPerf log: the system. Default: the replicas and their device "
                        "kind (e.g. 2xCPU).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    from packed_bert_tf.pretraining.run import PretrainingOptions, run_pretraining
    from packed_bert_tf.training.flags import run_or_exit

    run_or_exit("run_pretraining", run_pretraining, PretrainingOptions)


if __name__ == "__main__":
    from packed_bert_tf.command_line import parse_flags, quiet_native_logs

    quiet_native_logs()
    define_flags()
    app.run(main, flags_parser=parse_flags)
