"""A whole GLUE fine-tuning, evaluation and prediction run (``run_classifier.py``).

Order of events: the options and inputs are checked (task, config, vocab,
data files, sizes, batch sizes); every split the run needs is read and
tokenised (google-research/bert's ``convert_single_example``, unpadded) and
packed; the model and optimizer are made under the strategy and restored from
the output folder's latest checkpoint (else the encoder and pooler come from
``init_checkpoint``); training runs on the shared loop of
`packed_bert_tf.training`; evaluation unpacks the per-example logits of the
dev set and writes the GLUE metrics to ``eval_results.json``; prediction
writes the GLUE submission file ``test_results.tsv`` (and, for
classification, the reference's per-class probabilities to
``test_probabilities.tsv``).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import numpy as np
import tensorflow as tf
from absl import logging

from packed_bert_tf.classification import task as classifier_task
from packed_bert_tf.classification.dataset import predict_logits
from packed_bert_tf.classification.features import convert_examples_to_features
from packed_bert_tf.classification.glue import get_task, read_examples
from packed_bert_tf.classification.metrics import glue_metrics, write_test_results
from packed_bert_tf.classification.packing import DEFAULT_MAX_SEQUENCES_PER_PACK, pack_features
from packed_bert_tf.json_files import write_json_atomically, write_text_atomically
from packed_bert_tf.models.bert_classifier import BertClassifierModel
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

SUMMARY_FILE = "classifier_summary.json"
EVAL_FILE = "eval_results.json"
TEST_FILE = "test_results.tsv"
PROBABILITIES_FILE = "test_probabilities.tsv"


@dataclasses.dataclass
class ClassifierOptions(FineTuningOptions):
    """The options of a run; ``run_classifier.py``'s flags of the same names."""

    task_name: str | None = None
    data_dir: str | None = None
    do_eval: bool = False
    eval_batch_size: int = 8
    max_sequences_per_pack: int = DEFAULT_MAX_SEQUENCES_PER_PACK


def check_options(options: ClassifierOptions, config, strategy) -> None:
    """Checks that can fail before any example is read; one clear error each."""
    check_fine_tuning_options(
        options, config, strategy,
        actions={"do_train": options.do_train, "do_eval": options.do_eval,
                 "do_predict": options.do_predict, "export_dir": bool(options.export_dir)},
        positive=("max_seq_length", "train_batch_size", "eval_batch_size",
                  "predict_batch_size", "iterations_per_loop", "log_every_n_steps",
                  "max_sequences_per_pack", "steps_per_update"),
        batch_sizes={"train_batch_size": options.do_train,
                     "eval_batch_size": options.do_eval,
                     "predict_batch_size": options.do_predict},
        need_weights=("do_eval", "do_predict", "export_dir"))
    if not options.data_dir or not tf.io.gfile.isdir(options.data_dir):
        raise ValueError(f"--data_dir={options.data_dir}: no such folder")


def run_classifier(options: ClassifierOptions,
                   strategy: tf.distribute.Strategy | None = None) -> dict:
    """Fine-tunes, evaluates and/or predicts as the options say; returns the summary.

    Raises:
      ValueError: a bad option or input (an unknown task, a missing file, a
        bad line of a TSV naming ``path:line``), before anything is trained.
      NonFiniteLossError: the loss became NaN (the last good checkpoint is kept).
    """
    if not options.task_name:
        raise ValueError("--task_name is required")
    glue_task = get_task(options.task_name)
    return run_task(options, functools.partial(_run_in, options, glue_task),
                    strategy=strategy, batch_flags={"train_batch_size": options.do_train,
                                                    "eval_batch_size": options.do_eval,
                                                    "predict_batch_size": options.do_predict})


def _run_in(options: ClassifierOptions, glue_task, context: RunContext) -> dict:
    """`run_classifier` once it holds the output folder (``context.dirs.own``:
    where this worker writes)."""
    config, strategy, output_dir = context.config, context.strategy, context.dirs.own
    check_options(options, config, strategy)
    check_resume(options, context)
    tokenizer = make_tokenizer(options, config)
    packed = options.batching == "packed"
    pack_args = dict(packed=packed, max_sequences_per_pack=options.max_sequences_per_pack,
                     algorithm=options.algorithm, seed=options.seed or 0)
    summary: dict = {"options": dataclasses.asdict(options), "task": glue_task.name,
                     "batching": options.batching,
                     "replicas": strategy.num_replicas_in_sync}

    # Every split is read (and every bad line reported) before training starts.
    splits = {split: read_examples(glue_task, options.data_dir, split)
              for split, wanted in (("train", options.do_train), ("dev", options.do_eval),
                                    ("test", options.do_predict)) if wanted}
    features = {split: convert_examples_to_features(examples, glue_task, tokenizer,
                                                    options.max_seq_length)
                for split, examples in splits.items()}
    for split, examples in splits.items():
        _check_ids(features[split], examples, options.data_dir, config)
    train_packs = None
    if options.do_train:
        train_packs = pack_features(features["train"], **pack_args)
        summary["train_examples"] = train_packs.describe("examples")
        logging.info("training examples: %s", summary["train_examples"])
        if train_packs.num_packs < options.train_batch_size:
            raise ValueError(f"{train_packs.num_sequences} training examples make "
                             f"{train_packs.num_packs} rows, too few for one batch of "
                             f"--train_batch_size={options.train_batch_size}")

    with mixed_precision_policy(options.mixed_precision):
        run = start_fine_tuning(
            options,
            lambda: BertClassifierModel.from_bert_config(config, glue_task.num_labels,
                                                         packed=packed),
            classifier_task.classification_task(glue_task.is_regression), context,
            train_packs)
        model = run.model
        if options.do_train:
            rows = training_rows(options, train_packs, lambda seed: pack_features(
                features["train"], **{**pack_args, "seed": seed}))
            summary["train"] = train_on_rows(options, run, rows, output_dir)
        global_step = int(run.trainer.step.numpy())
        if options.do_eval:
            summary["eval"] = evaluate(glue_task, model, features["dev"], strategy,
                                       batch_size=options.eval_batch_size,
                                       jit_compile=options.jit_compile,
                                       output_dir=output_dir, global_step=global_step,
                                       **pack_args)
        if options.do_predict:
            summary["predict"] = predict(glue_task, model, features["test"], strategy,
                                         batch_size=options.predict_batch_size,
                                         jit_compile=options.jit_compile,
                                         output_dir=output_dir, **pack_args)
    if options.export_dir and context.worker.is_chief:
        summary["export_dir"] = export(options, model)
    write_json_atomically(os.path.join(output_dir, SUMMARY_FILE), summary)
    return summary


def _check_ids(features, examples, data_dir: str, config) -> None:
    """Every example's ids against the model (`check_feature_ids`), naming the
    example (``--data_dir``, its guid): a pair task on a config of one token
    type, say."""
    def describe(row, column):
        example = examples[np.searchsorted(features.row_splits, column, side="right") - 1]
        return f"--data_dir={data_dir} example {example.guid}"

    check_feature_ids(features.input_ids[None], features.segment_ids[None], config,
                      describe)


def example_logits(model, features, strategy, *, batch_size: int, jit_compile: bool,
                   **pack_args):
    """([F, L] logits in example order, the `PackedRows` they came from)."""
    packs = pack_features(features, **pack_args)
    return predict_logits(model, packs, batch_size, strategy=strategy,
                          jit_compile=jit_compile), packs


def predictions_of(glue_task, logits) -> np.ndarray:
    """[F] label ids (argmax), or the regression outputs."""
    if glue_task.is_regression:
        return logits[:, 0]
    return np.argmax(logits, axis=-1).astype(np.int64)


def mean_loss(glue_task, logits, label_ids) -> float:
    """The model's loss over the examples: mean cross entropy (or squared error)."""
    if not len(label_ids):
        return 0.0
    logits = np.asarray(logits, np.float64)
    if glue_task.is_regression:
        return float(np.mean(np.square(logits[:, 0] - label_ids)))
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.mean(log_probabilities[np.arange(len(label_ids)), label_ids]))


def evaluate(glue_task, model, features, strategy, *, batch_size, jit_compile, output_dir,
             global_step, **pack_args) -> dict:
    """The dev set's GLUE metrics and loss, written to ``eval_results.json``."""
    logits, packs = example_logits(model, features, strategy, batch_size=batch_size,
                                   jit_compile=jit_compile, **pack_args)
    results = glue_metrics(glue_task, predictions_of(glue_task, logits),
                           features.label_ids)
    results = {name: float(value) for name, value in results.items()}
    results.update(loss=mean_loss(glue_task, logits, features.label_ids),
                   global_step=global_step, **packs.describe("examples"))
    write_json_atomically(os.path.join(output_dir, EVAL_FILE), results)
    logging.info("eval: %s", results)
    print(f"{glue_task.name} dev: " + ", ".join(
        f"{name} {results[name]:.4f}" for name in (*glue_task.metric_names, "loss"))
        + f" ({packs.num_sequences:,} examples in {packs.num_packs:,} rows)")
    return results


def predict(glue_task, model, features, strategy, *, batch_size, jit_compile, output_dir,
            **pack_args) -> dict:
    """Writes the test set's predictions: ``test_results.tsv`` (GLUE submission)
    and, for classification, ``test_probabilities.tsv`` (the reference's file:
    one line of tab-separated class probabilities per example)."""
    logits, packs = example_logits(model, features, strategy, batch_size=batch_size,
                                   jit_compile=jit_compile, **pack_args)
    write_test_results(glue_task, predictions_of(glue_task, logits),
                       os.path.join(output_dir, TEST_FILE))
    written = {"test_results": os.path.join(output_dir, TEST_FILE)}
    if not glue_task.is_regression:
        written["probabilities"] = write_probabilities(
            logits, os.path.join(output_dir, PROBABILITIES_FILE))
    return {**written, **packs.describe("examples")}


def write_probabilities(logits, path: str) -> str:
    """Softmax of each example's logits, one tab-separated line each (atomically)."""
    shifted = np.asarray(logits, np.float64)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    return write_text_atomically(path, "".join(
        "\t".join(str(p) for p in row) + "\n" for row in probabilities))


__all__ = ["ClassifierOptions", "check_options", "evaluate", "predict", "run_classifier"]
