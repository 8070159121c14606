"""Histogram packing: plans that pack every sequence exactly once.

``pack_histogram`` makes a `PackingPlan` from a length histogram with one of
`ALGORITHMS`; ``assign_sequences`` turns a plan into concrete packs of example
indices. numpy/scipy only: this package never imports TensorFlow.
"""

from packed_bert_tf.packing.api import (
                                        ALGORITHMS,
                                        histogram_from_lengths,
                                        pack_histogram,
                                        pack_lengths,
)
from packed_bert_tf.packing.assign import (
                                        PackAssignment,
                                        assign_sequences,
                                        pack_assignment,
                                        replan_overflowing_packs,
                                        rows_of_packs,
)
from packed_bert_tf.packing.histograms import LengthHistogram, load_histogram
from packed_bert_tf.packing.plan import PackingPlan
from packed_bert_tf.packing.report import describe_certificate, format_plan_table

__all__ = [
    "ALGORITHMS", "LengthHistogram", "PackAssignment", "PackingPlan",
    "assign_sequences", "describe_certificate", "format_plan_table", "histogram_from_lengths",
    "load_histogram", "pack_assignment", "pack_histogram", "pack_lengths",
    "replan_overflowing_packs", "rows_of_packs",
]
