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
from packed_bert_tf.training.fine_tuning import (
    FineTuningOptions,
    check_feature_ids,
    check_fine_tuning_options,
    check_resume,
    export,
    start_fine_tuning,
    train_on_rows,
    training_rows,
)
from packed_bert_tf.training.startup import (
    RunContext,
    make_tokenizer,
    mixed_precision_policy,
    run_task,
)

SUMMARY_FILE = "squad_summary.json"


@dataclasses.dataclass
class SquadOptions(FineTuningOptions):
    """The options of a run; ``run_squad.py``'s flags of the same names."""

    train_file: str | None = None
    predict_file: str | None = None
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30


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
    return run_task(options, functools.partial(_run_squad_in, options),
                    strategy=strategy, batch_flags={"train_batch_size": options.do_train,
                                                    "predict_batch_size": options.do_predict})


def _run_squad_in(options: SquadOptions, context: RunContext) -> dict:
    """`run_squad` once it holds the output folder (``context.dirs.own``: where
    this worker writes, feature caches included)."""
    config, strategy, output_dir = context.config, context.strategy, context.dirs.own
    check_options(options, config, strategy)
    check_resume(options, context)
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
        _check_ids(train_data, options.train_file, config)
        train_packs = pack_features(train_data.features, **pack_args)
        summary["train_features"] = _describe(train_data, train_packs)
        logging.info("training features: %s", summary["train_features"])
    if options.do_predict:
        predict_data = load_or_create_features(options.predict_file, tokenizer,
                                               cache_dir=output_dir, is_training=False,
                                               **feature_args)
        _check_ids(predict_data, options.predict_file, config)

    with mixed_precision_policy(options.mixed_precision):
        run = start_fine_tuning(
            options, lambda: BertSquadModel.from_bert_config(config, packed=packed),
            task.SQUAD_TASK, context, train_packs)
        model = run.model
        if options.do_train:
            rows = training_rows(options, train_packs, lambda seed: pack_features(
                train_data.features, **{**pack_args, "seed": seed}))
            summary["train"] = train_on_rows(options, run, rows, output_dir)
        if options.do_predict:
            summary["predict"] = predict(options, model, strategy, predict_data,
                                         output_dir, pack_args)
    if options.export_dir and context.worker.is_chief:
        summary["export_dir"] = export(options, model)
    write_json_atomically(os.path.join(output_dir, SUMMARY_FILE), summary)
    return summary


def _check_ids(data, input_file: str, config) -> None:
    """Every feature's ids against the model (`check_feature_ids`), naming the
    file the features came from (a feature cache, or the SQuAD file) and the
    question."""
    features = data.features

    def describe(row, column):
        example = data.examples[features.example_index[row]]
        return (f"{data.cache_path if data.from_cache else input_file} feature {row} "
                f"(question {example.qas_id!r})")

    check_feature_ids(features.input_ids, features.segment_ids, config, describe)


def _describe(data, packs) -> dict:
    return {"examples": len(data.examples), "features": packs.num_sequences,
            "rows": packs.num_packs, "packing_factor": packs.packing_factor,
            "padding_fraction": packs.padding_fraction,
            "skipped_examples": data.read_stats.num_skipped,
            "skipped_by_reason": data.read_stats.skipped_by_reason(),
            "from_cache": data.from_cache}


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
          f"{packs.num_sequences:,} features in {packs.num_packs:,} rows)")
    return {**results, **_describe(data, packs)}


__all__ = ["SquadOptions", "check_options", "predict", "run_squad"]
