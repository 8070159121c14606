"""absl flags and option handling shared by the front ends (run_pretraining.py,
run_squad.py, run_classifier.py)."""

from __future__ import annotations

import dataclasses
import signal
import sys

from absl import flags

from packed_bert_tf.training.flops import check_peak_flag


def define_hardware_flags(defaults) -> None:
    """--distribution_strategy, --tpu, --cluster_timeout_seconds, --jit_compile,
    --mixed_precision, --peak_flops_per_second.

    ``defaults``: the front end's options dataclass, whose field defaults are
    the flags' (one place for each default).
    """
    from packed_bert_tf.training.distribution import MIXED_PRECISION, STRATEGIES

    flags.DEFINE_enum("distribution_strategy", defaults.distribution_strategy,
                      list(STRATEGIES), "tf.distribute strategy.")
    flags.DEFINE_string("tpu", defaults.tpu,
                        "TPU name or address (--distribution_strategy=tpu).")
    flags.DEFINE_float("cluster_timeout_seconds", defaults.cluster_timeout_seconds,
                       "--distribution_strategy=multi_worker_mirrored: seconds to wait "
                       "for every worker of TF_CONFIG to connect before giving up.")
    flags.DEFINE_bool("jit_compile", defaults.jit_compile,
                      "XLA-compile the per-replica step.")
    flags.DEFINE_enum("mixed_precision", defaults.mixed_precision,
                      list(MIXED_PRECISION), "bf16 or fp16 compute with float32 variables.")
    flags.DEFINE_float(
        "peak_flops_per_second", defaults.peak_flops_per_second,
        "The peak FLOPs per second of one device (GPU, TPU core, a machine's CPU) in the "
        "run's compute dtype, which the model FLOPs utilisation (mfu) divides by "
        "(times the devices); default: measured at the start by a large matrix "
        "multiply on the run's first device.")


def define_reference_tpu_flags(defaults) -> None:
    """The TPU flags of google-research/bert's and the MLPerf reference's
    scripts, with their meaning there (`distribution.choose_strategy`):
    --use_tpu, --tpu_name (the same flag as --tpu), --tpu_zone, --gcp_project,
    --master, --num_tpu_cores. ``defaults`` as for `define_hardware_flags`."""
    flags.DEFINE_bool("use_tpu", defaults.use_tpu,
                      "Train on the TPU of --tpu_name (--distribution_strategy=tpu).")
    flags.DEFINE_alias("tpu_name", "tpu")
    flags.DEFINE_string("tpu_zone", defaults.tpu_zone,
                        "--use_tpu: the TPU's Google Cloud zone (default: found from "
                        "the metadata).")
    flags.DEFINE_string("gcp_project", defaults.gcp_project,
                        "--use_tpu: the TPU's Google Cloud project (default: found from "
                        "the metadata).")
    flags.DEFINE_string("master", defaults.master,
                        "--use_tpu: the TPU's address (grpc://...), for a run without "
                        "--tpu_name.")
    flags.DEFINE_integer("num_tpu_cores", defaults.num_tpu_cores,
                         "--use_tpu: the cores the TPU must have (a run uses all of "
                         "them; default: any).")


def define_loop_flags(defaults) -> None:
    """--save_checkpoints_steps, --keep_checkpoint_max, --iterations_per_loop,
    --log_every_n_steps (the shared training loop's); ``defaults`` as for
    `define_hardware_flags`."""
    flags.DEFINE_integer("save_checkpoints_steps", defaults.save_checkpoints_steps,
                         "Checkpoint every this many steps (and at the end).")
    flags.DEFINE_integer("keep_checkpoint_max", defaults.keep_checkpoint_max,
                         "Checkpoints kept.")
    flags.DEFINE_integer("iterations_per_loop", defaults.iterations_per_loop,
                         "Steps per call of the compiled training loop.")
    flags.DEFINE_integer("log_every_n_steps", defaults.log_every_n_steps,
                         "Steps between log lines.")


def define_step_flags(defaults) -> None:
    """--steps_per_update, --step_unit and
    --clip_by_global_norm_after_gradient_allreduce: the micro-batches of an
    update, what the step flags count and where the gradient is clipped under
    accumulation (`packed_bert_tf.training.step_counting`,
    `packed_bert_tf.training.clipping`); ``defaults`` as for
    `define_hardware_flags`."""
    from packed_bert_tf.training.step_counting import STEP_UNITS

    flags.DEFINE_integer("steps_per_update", defaults.steps_per_update,
                         "Gradient-accumulation steps (micro-batches) per update.")
    flags.DEFINE_enum(
        "step_unit", defaults.step_unit, list(STEP_UNITS),
        "What --num_train_steps, --num_warmup_steps, --start_warmup_step, "
        "--save_checkpoints_steps, --iterations_per_loop and --log_every_n_steps count: "
        "micro_batch (the MLPerf reference's global step: one per micro-batch of "
        "--train_batch_size rows, --steps_per_update per update) or update (one per "
        "optimizer update).")
    flags.DEFINE_bool(
        "clip_by_global_norm_after_gradient_allreduce",
        defaults.clip_by_global_norm_after_gradient_allreduce,
        "Clip the accumulated gradient to global norm 1.0 once per update, after the "
        "sum over micro-batches and replicas; by default (as in the MLPerf reference) "
        "each micro-batch's gradient is clipped before it is accumulated.")


def define_bucketing_flags(examples: str, defaults) -> None:
    """--bucket_boundaries and --pool_size of --batching=bucketed; ``defaults`` as
    for `define_hardware_flags` (the boundaries' default is always None: four
    equal buckets)."""
    flags.DEFINE_list("bucket_boundaries", None,
                      "--batching=bucketed: bucket upper edges, e.g. 128,256,384,512 "
                      "(default: four equal buckets).")
    flags.DEFINE_integer("pool_size", defaults.pool_size,
                         f"--batching=bucketed: {examples} sorted into buckets together.")


def define_export_flags(defaults) -> None:
    """--export_dir: the fine-tuned model as a SavedModel for packed serving;
    ``defaults`` as for `define_hardware_flags` (its ``export_dir`` field)."""
    flags.DEFINE_string(
        "export_dir", defaults.export_dir,
        "At the end of the run (on the chief), write the model as a TensorFlow "
        "SavedModel for packed inference here: its serving_default signature takes "
        "the packed features as int32 [batch, --max_seq_length] tensors (input_ids, "
        "input_mask = each token's sequence index 1..--max_sequences_per_pack, "
        "segment_ids, positions restarting in each sequence), and the classifier's "
        "cls_positions as int32 [batch, --max_sequences_per_pack], and returns the "
        "logits; load it with tf.saved_model.load.")


def define_init_checkpoint_flags(defaults) -> None:
    """``--init_checkpoint`` and ``--allow_partial_init_checkpoint``, for every
    front end; ``defaults`` as for `define_hardware_flags`."""
    flags.DEFINE_string(
        "init_checkpoint", defaults.init_checkpoint,
        "The weights to start from: an original BERT (TF1) checkpoint, a run of this "
        "package (its --output_dir, its checkpoints/ folder or a ckpt-N), a Hugging "
        "Face BERT folder or a keras-hub preset folder (the last two also give the "
        "config and vocabulary). Ignored once --output_dir holds a checkpoint of this "
        "run.")
    flags.DEFINE_bool(
        "allow_partial_init_checkpoint", defaults.allow_partial_init_checkpoint,
        "Start the backbone weights --init_checkpoint lacks from random instead of "
        "refusing the run.")


def define_base_flags(examples: str, defaults) -> None:
    """The flags every front end has, defined once: the model, its vocabulary
    and starting weights, the rows of a step, the optimizer, packing and
    batching, the seed, and the loop, step, bucketing and hardware flags.

    Args:
      examples: what one sequence of the unpacked layout is, in the help
        ("sequences", "features", "examples").
      defaults: the front end's options dataclass, whose field defaults are
        the flags' (one place for each default).
    """
    from packed_bert_tf.training.optimizers import OPTIMIZERS
    from packed_bert_tf.training.options import BATCHING

    flags.DEFINE_string("bert_config_file", defaults.bert_config_file,
                        "bert_config.json of the model (default: the --init_checkpoint "
                        "folder's, for a Hugging Face or keras-hub folder).")
    flags.DEFINE_string("vocab_file", defaults.vocab_file,
                        "The WordPiece vocab.txt the model was trained on, or a Hugging "
                        "Face tokenizer.json (default: the --init_checkpoint folder's).")
    flags.DEFINE_bool("do_lower_case", defaults.do_lower_case,
                      "Lower-case the text (uncased models).")
    define_init_checkpoint_flags(defaults)
    flags.DEFINE_integer("train_batch_size", defaults.train_batch_size,
                         f"Rows per micro-batch over all replicas (packs when packing: "
                         f"each holds up to --max_sequences_per_pack {examples}).")
    flags.DEFINE_enum("optimizer", defaults.optimizer, list(OPTIMIZERS), "The optimizer.")
    flags.DEFINE_float("learning_rate", defaults.learning_rate, "Peak learning rate.")
    flags.DEFINE_integer("max_sequences_per_pack", defaults.max_sequences_per_pack,
                         f"--batching=packed: at most this many {examples} per row (D).")
    one = examples[:-1]
    flags.DEFINE_enum("batching", defaults.batching, list(BATCHING),
                      f"packed: several {examples} per row, each attending only to "
                      f"itself (packed records, or {examples} packed as they are read). "
                      f"padded: one {one} per row at --max_seq_length "
                      f"(google-research/bert). bucketed: one {one} per row, training "
                      f"batches padded to their length bucket (packed_bert_tf.batching).")
    define_bucketing_flags(examples, defaults)
    flags.DEFINE_integer("seed", defaults.seed,
                         "Seed of weights, dropout, packing and data order (default: "
                         "drawn at random and logged; a resumed run keeps the seed it "
                         "was started with).")
    define_loop_flags(defaults)
    define_step_flags(defaults)
    define_hardware_flags(defaults)
    define_reference_tpu_flags(defaults)


def define_fine_tuning_flags(examples: str, defaults) -> None:
    """The flags run_squad.py and run_classifier.py share: `define_base_flags`,
    the prediction batch, the schedule in epochs, the packing algorithm and
    the export. ``examples`` and ``defaults`` as for `define_base_flags`. The
    task's own flags (its files, sequence length, ``--do_*``,
    ``--output_dir``) are the front end's.
    """
    define_base_flags(examples, defaults)
    flags.DEFINE_integer("predict_batch_size", defaults.predict_batch_size,
                         "Rows per prediction batch.")
    flags.DEFINE_float("num_train_epochs", defaults.num_train_epochs,
                       "Passes over the training rows.")
    flags.DEFINE_float("warmup_proportion", defaults.warmup_proportion,
                       "Fraction of steps of linear warm-up.")
    flags.DEFINE_string("algorithm", defaults.algorithm,
                        "--batching=packed: packing algorithm.")
    flags.DEFINE_bool("repack_each_epoch", defaults.repack_each_epoch,
                      f"--batching=packed: pack the training {examples} anew for every "
                      f"pass over them (a seed per pass, from --seed), so that they "
                      f"share rows with other {examples} each time; default: packed "
                      f"once, the rows reshuffled every pass.")
    define_export_flags(defaults)


def options_from_flags(options_class, values=None):
    """The options dataclass filled from the flags of the same names.

    ``bucket_boundaries`` (a list of strings on the command line) becomes a
    tuple of ints.

    Raises:
      ValueError: a bucket boundary that is not an integer; a
        ``--peak_flops_per_second`` that is not > 0.
    """
    values = values or flags.FLAGS
    options = options_class(**{field.name: values[field.name].value
                               for field in dataclasses.fields(options_class)
                               if field.name in values})
    boundaries = getattr(options, "bucket_boundaries", None)
    if boundaries:
        try:
            options.bucket_boundaries = tuple(int(b) for b in boundaries)
        except ValueError:
            raise ValueError(f"--bucket_boundaries={','.join(boundaries)} are not "
                             f"integers") from None
    check_peak_flag(getattr(options, "peak_flops_per_second", None))
    return options


def run_or_exit(program: str, run, options_class) -> None:
    """``run(options_from_flags(options_class))``; a bad flag or input, an output
    that cannot be written (a full disk), or a NaN loss, ends the program with
    one line ``program: why`` and exit status 1. SIGINT (Ctrl-C) and SIGTERM
    stop training at the next step boundary with a checkpoint (`interrupts`),
    or at once outside the training loop: one line saying where, exit status
    128 + the signal."""
    from packed_bert_tf.training import interrupts
    from packed_bert_tf.training.loop import NonFiniteLossError

    try:
        with interrupts.stop_on_signals():
            run(options_from_flags(options_class))
    except (ValueError, OSError, NonFiniteLossError) as error:
        sys.exit(f"{program}: {error}")
    except interrupts.TrainingInterrupted as error:
        _exit_on_signal(f"{program}: {error}", error.signal_number)
    except KeyboardInterrupt:
        signum = interrupts.last_signal()
        _exit_on_signal(f"{program}: interrupted by {signal.Signals(signum).name} "
                        f"outside the training loop; nothing of it saved (a resume "
                        f"starts from the last checkpoint)", signum)


def _exit_on_signal(line: str, signum: int) -> None:
    sys.stdout.flush()
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    sys.exit(128 + signum)
