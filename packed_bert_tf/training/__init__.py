"""Optimisation for packed BERT pre-training: MLPerf's LAMB, its learning-rate
schedule and the packing-aware hyper-parameter adjustment (Krell et al.,
arXiv 2107.02027, section 3.3)."""

from packed_bert_tf.training.hyperparameters import (PACKING_MODES, PACKING_STATS_FILE,
                                                     PackingAdjustment, adjust_for_packing,
                                                     read_packing_factor)
from packed_bert_tf.training.lamb import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, LAMB
from packed_bert_tf.training.schedules import PolynomialDecayWithWarmup

__all__ = [
    "DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY", "LAMB", "PACKING_MODES", "PACKING_STATS_FILE",
    "PackingAdjustment", "PolynomialDecayWithWarmup", "adjust_for_packing",
    "read_packing_factor",
]
