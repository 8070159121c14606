"""A whole SQuAD fine-tuning / prediction run (what ``run_squad.py`` does), from options.

Order of events: the options and inputs are checked (config, vocab, files,
sizes, batch sizes); training features are made (or read from their cache in
the output folder) and packed; the model and optimizer are made under the
strategy and restored from the output folder's latest checkpoint (else the
encoder comes from ``init_checkpoint``); training runs on the shared loop of
`packed_bert_tf.training`; prediction unpacks the per-feature logits, writes
``predictions.json`` / ``nbest_predictions.json`` and scores them with the
official SQuAD 1.1 rules into ``eval_results.json``; ``export_dir`` gets the
model as a SavedModel for packed serving (on the chief, at the end).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import tensorflow as tf
from absl import logging

from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.squad import task
from packed_bert_tf.squad.dataset import predict_logits
from packed_bert_tf.squad.features import check_feature_arguments, load_or_create_features
from packed_bert_tf.squad.packing import pack_features
from packed_bert_tf.squad.postprocess import postprocess_and_evaluate
from packed_bert_tf.training.distribution import CLUSTER_TIMEOUT_SECONDS
from packed_bert_tf.training.fine_tuning import (check_fine_tuning_options, export,
                                                 make_tokenizer, num_train_steps,
                                                 step_counting)
from packed_bert_tf.training.optimizers import create_optimizer
from packed_bert_tf.training.runs import (mixed_precision_policy, read_bert_config,
                                          run_on_this_worker, start_training,
                                          train_and_export)
from packed_bert_tf.training.schedules import AtUpdateSteps, PolynomialDecayWithWarmup
from packed_bert_tf.training.steps import clipping

SUMMARY_FILE = "squad_summary.json"


@dataclasses.dataclass
class SquadOptions:
    """The options of a run; ``run_squad.py``'s flags of the same names."""

    bert_config_file: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    init_checkpoint: str | None = None
    train_file: str | None = None
    predict_file: str | None = None
    output_dir: str | None = None
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    do_train: bool = False
    do_predict: bool = False
    train_batch_size: int = 32
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    n_best_size: int = 20
    max_answer_length: int = 30
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 3
    iterations_per_loop: int = 100
    log_every_n_steps: int = 100
    optimizer: str = "adamw"
    steps_per_update: int = 1
    step_unit: str = "micro_batch"
    clip_by_global_norm_after_gradient_allreduce: bool = False
    max_sequences_per_pack: int = 3
    algorithm: str = "optimal"
    distribution_strategy: str = "default"
    tpu: str | None = None
    cluster_timeout_seconds: float = CLUSTER_TIMEOUT_SECONDS
    jit_compile: bool = True
    mixed_precision: str = "none"
    seed: int | None = None
    batching: str = "packed"
    bucket_boundaries: tuple | None = None
    pool_size: int = 8192
    progress_bar: bool | None = None
    export_dir: str | None = None



def check_options(options: SquadOptions, config, strategy) -> None:
    """Checks that can fail before any feature is made; one clear error each."""
    check_fine_tuning_options(
        options, config, strategy,
        actions={"do_train": options.do_train, "do_predict": options.do_predict,
                 "export_dir": bool(options.export_dir)},
        positive=("train_batch_size", "predict_batch_size", "n_best_size",
                  "max_answer_length", "iterations_per_loop", "log_every_n_steps",
                  "max_sequences_per_pack", "steps_per_update"),
        batch_sizes={"train_batch_size": options.do_train,
                     "predict_batch_size": options.do_predict},
        need_weights=("do_predict", "export_dir"))
    check_feature_arguments(options.max_seq_length, options.doc_stride,
                            options.max_query_length)
    for flag, needed, path in (("train_file", options.do_train, options.train_file),
                               ("predict_file", options.do_predict, options.predict_file)):
        if needed and (not path or not tf.io.gfile.exists(path)):
            raise ValueError(f"--{flag}={path}: no such file")


def run_squad(options: SquadOptions, strategy: tf.distribute.Strategy | None = None) -> dict:
    """Fine-tunes and/or predicts as the options say; returns the summary dict.

    Raises:
      ValueError (SquadFormatError included): a bad option or input, before
        anything is trained.
      NonFiniteLossError: the loss became NaN (the last good checkpoint is kept).
    """
    config = read_bert_config(options.bert_config_file)
    return run_on_this_worker(
        options, functools.partial(_run_squad_in, options=options, config=config),
        strategy=strategy, batch_flags={"train_batch_size": options.do_train,
                                        "predict_batch_size": options.do_predict})


def _run_squad_in(dirs, strategy, worker, *, options, config) -> dict:
    """`run_squad` once it holds the output folder (``dirs.own``: where this
    worker writes, feature caches included)."""
    output_dir = dirs.own
    check_options(options, config, strategy)
    tokenizer = make_tokenizer(options, config)
    feature_args = dict(max_seq_length=options.max_seq_length,
                        doc_stride=options.doc_stride,
                        max_query_length=options.max_query_length)
    packed = options.batching == "packed"
    pack_args = dict(packed=packed,
                     max_sequences_per_pack=options.max_sequences_per_pack,
                     algorithm=options.algorithm, seed=options.seed or 0)
    summary: dict = {"options": dataclasses.asdict(options), "batching": options.batching,
                     "replicas": strategy.num_replicas_in_sync}

    train_packs = predict_data = None
    if options.do_train:
        train_data = load_or_create_features(options.train_file, tokenizer,
                                             cache_dir=output_dir, is_training=True,
                                             **feature_args)
        train_packs = pack_features(train_data.features, **pack_args)
        summary["train_features"] = _describe(train_data, train_packs)
        logging.info("training features: %s", summary["train_features"])
    if options.do_predict:
        predict_data = load_or_create_features(options.predict_file, tokenizer,
                                               cache_dir=output_dir, is_training=False,
                                               **feature_args)

    steps = step_counting(options)
    clip = clipping(after_allreduce=options.clip_by_global_norm_after_gradient_allreduce,
                    micro_batches_per_update=steps.micro_batches_per_update)
    total_steps = (num_train_steps(train_packs.num_packs, options) if train_packs
                   else steps.global_steps_per_update)
    if options.do_train:
        logging.info("steps: %s", steps.describe(
            num_train_steps=total_steps, train_batch_size=options.train_batch_size,
            sequences_per_row=train_packs.packing_factor))
    with mixed_precision_policy(options.mixed_precision):
        if options.seed is not None:
            tf.keras.utils.set_random_seed(options.seed)
        schedule = PolynomialDecayWithWarmup(
            options.learning_rate, total_steps,
            int(total_steps * options.warmup_proportion))
        with strategy.scope():
            model = BertSquadModel(config, packed=packed)
            model.build()
            optimizer = create_optimizer(
                options.optimizer, AtUpdateSteps(schedule, steps.global_steps_per_update),
                global_clipnorm=clip.optimizer_clipnorm,
                loss_scaling=options.mixed_precision == "fp16")
        trainer, checkpoints, start_step = start_training(
            model, optimizer, task.SQUAD_TASK, strategy=strategy, output_dir=output_dir,
            steps=steps, clip=clip, jit_compile=options.jit_compile,
            keep_checkpoint_max=options.keep_checkpoint_max,
            init_checkpoint=options.init_checkpoint, resume_dir=dirs.shared, worker=worker)

        if options.do_train:
            summary["train"] = _train(options, trainer, checkpoints, schedule, train_packs,
                                      total_steps, start_step, output_dir)
        if options.do_predict:
            summary["predict"] = predict(options, model, strategy, predict_data,
                                         output_dir, pack_args)
    if options.export_dir and worker.is_chief:
        summary["export_dir"] = export(options, model)
    write_json_atomically(os.path.join(output_dir, SUMMARY_FILE), summary)
    return summary


def _describe(data, packs) -> dict:
    return {"examples": len(data.examples), "features": packs.num_features,
            "rows": packs.num_packs, "packing_factor": packs.packing_factor,
            "padding_fraction": packs.padding_fraction,
            "skipped_examples": data.read_stats.num_skipped, "from_cache": data.from_cache}


def _train(options, trainer, checkpoints, schedule, packs, total_steps, start_step,
           output_dir) -> dict:
    dataset_fn = task.train_dataset_fn(
        packs, global_batch_size=options.train_batch_size,
        steps_per_update=trainer.steps_per_update, seed=options.seed,
        skip_steps=start_step // trainer.global_steps_per_update,
        bucketed=options.batching == "bucketed",
        bucket_boundaries=options.bucket_boundaries, pool_size=options.pool_size)
    train = train_and_export(trainer, dataset_fn, output_dir=output_dir,
                             num_train_steps=total_steps, schedule=schedule,
                             checkpoints=checkpoints,
                             iterations_per_loop=options.iterations_per_loop,
                             log_every_n_steps=options.log_every_n_steps,
                             save_checkpoints_steps=options.save_checkpoints_steps,
                             progress_bar=options.progress_bar)
    train.update(num_train_steps=total_steps, epochs=options.num_train_epochs)
    return train


def predict(options, model, strategy, data, output_dir, pack_args) -> dict:
    """Per-feature logits (packed or not), the answers and their official scores."""
    packs = pack_features(data.features, **pack_args)
    logits = predict_logits(model, packs, options.predict_batch_size, strategy=strategy,
                            jit_compile=options.jit_compile)
    results = postprocess_and_evaluate(
        data.examples, data.features, logits, predict_file=options.predict_file,
        output_dir=output_dir, n_best_size=options.n_best_size,
        max_answer_length=options.max_answer_length)
    print(f"{options.predict_file}: exact match {results['exact_match']:.2f}, "
          f"F1 {results['f1']:.2f} ({len(data.examples):,} questions, "
          f"{packs.num_features:,} features in {packs.num_packs:,} rows)")
    return {**results, **_describe(data, packs)}


__all__ = ["SquadOptions", "check_options", "predict", "run_squad"]
