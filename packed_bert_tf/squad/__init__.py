"""SQuAD v1.1 fine-tuning with packing.

* `features`: SQuAD JSON -> examples -> windowed features (google-research/bert's
  rules, `tokenizers` offsets), cached as TFRecords.
* `packing`: features packed into rows (`pack_features`) and per-feature
  logits unpacked from them (`unpack_logits`); numpy only.
* `dataset`: tf.data pipelines over the rows, prediction under any strategy.
* `task`: the loss, counts and datasets for `packed_bert_tf.training.trainer.Trainer`.
* `postprocess`: the n-best answer search, ``predictions.json``.
* `evaluation`: the official exact match and token F1.

Only `evaluation` is imported here: it never imports TensorFlow.
"""

from packed_bert_tf.squad.evaluation import (
                                             evaluate,
                                             evaluate_files,
                                             exact_match_score,
                                             f1_score,
                                             metric_max_over_ground_truths,
                                             normalize_answer,
)

__all__ = [
    "evaluate", "evaluate_files", "exact_match_score", "f1_score",
    "metric_max_over_ground_truths", "normalize_answer",
]
