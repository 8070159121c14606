"""SQuAD v1.1: the official evaluation (exact match and token F1).

Pure Python: this package's evaluation never imports TensorFlow.
"""

from packed_bert_tf.squad.evaluation import (evaluate, evaluate_files,
                                             exact_match_score, f1_score,
                                             metric_max_over_ground_truths,
                                             normalize_answer)

__all__ = [
    "evaluate", "evaluate_files", "exact_match_score", "f1_score",
    "metric_max_over_ground_truths", "normalize_answer",
]
