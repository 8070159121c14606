"""Classification features packed into rows, and per-example logits unpacked from them.

Letters: F features (= examples), P packs (rows), S sequence length, D max
sequences per pack, L labels, T tokens of all features together.

A pack of two sentence pairs (S = 12, D = 2; a = example 7, b = example 3;
C = [CLS], S = [SEP])::

    input_ids         C a1 S a2 S  C b1 b2 S b3 S  0
    segment_ids       0  0 0  1 1  0  0  0 0  1 1  0
    input_mask        1  1 1  1 1  2  2  2 2  2 2  0
    positions         0  1 2  3 4  0  1  2 3  4 5  0
    cls_positions     0  5
    label_ids         la lb
    sequence_weights  1  1

    sequence_pack[7] = sequence_pack[3] = this pack
    sequence_slot[7] = 0, sequence_offset[7] = 0
    sequence_slot[3] = 1, sequence_offset[3] = 5

The layout is the project's one (`packed_bert_tf.data.packed.packed_rows`) under
`CLASSIFIER_SPEC`. The unpacked layout (google-research/bert's) is the same
with D = 1, one example per row padded to S, in example order. numpy only.
"""

from __future__ import annotations

import numpy as np

from packed_bert_tf.data.packed.packed_rows import (
    PackedRows,
    PackSpec,
    RowShape,
    pack_rows,
    plan_rows,
    unpack_sequence_outputs,
)
from packed_bert_tf.packing import PackAssignment

#: What a classification example carries into a row.
CLASSIFIER_SPEC = PackSpec.classifier()

#: Sequences per row by default. At S = 128, 67,349 SST-2-like sentences
#: (12.1 tokens on average) fill every row at a cap of 8 (8.00 per row, 24%
#: padding); from a cap of 12 the optimal plan reaches the token bound (10.57
#: per row, 0.0% padding, 6,373 rows). 16 leaves room for shorter sets
#: (CoLA); a slot costs only a gathered [CLS] in the head.
DEFAULT_MAX_SEQUENCES_PER_PACK = 16


def pack_features(features, *, packed: bool = True,
                  max_sequences_per_pack: int = DEFAULT_MAX_SEQUENCES_PER_PACK,
                  algorithm: str = "optimal", seed: int = 0) -> PackedRows:
    """Packs features by length (`packed_bert_tf.packing`), or lays them out unpacked.

    Args:
      features: `packed_bert_tf.classification.features.ClassifierFeatures`.
      packed: False: one example per row in example order, D = 1 (the
        standard BERT batches).
      max_sequences_per_pack: D.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name.
      seed: which examples of a length share a pack, and the packs' order.

    Returns:
      `packed_bert_tf.data.packed.packed_rows.PackedRows`: int32 arrays but
      ``label_ids``, which keeps the labels' dtype (float32 for regression).
    """
    return plan_rows(CLASSIFIER_SPEC, _compact(features),
                     RowShape(features.max_seq_length, max_sequences_per_pack, packed),
                     algorithm=algorithm, seed=seed,
                     dtypes={"label_ids": features.label_ids.dtype})


def layout_packs(features, assignment: PackAssignment, max_sequences_per_pack: int,
                 *, packed: bool = True) -> PackedRows:
    """Writes the features into the rows of an assignment
    (`packed_bert_tf.data.packed.packed_rows.pack_rows` under `CLASSIFIER_SPEC`).

    Args:
      features: `packed_bert_tf.classification.features.ClassifierFeatures`.
      assignment: pack k holds the examples ``assignment[k]``, in that order.
      max_sequences_per_pack: D, columns of the per-sequence arrays.
      packed: recorded in the result.

    Raises:
      ValueError: when a pack holds more than D examples or more than S
        tokens, or the assignment does not hold every example exactly once.
    """
    shape = RowShape(features.max_seq_length, max_sequences_per_pack, packed)
    return pack_rows(CLASSIFIER_SPEC, _compact(features), assignment, shape,
                     dtypes={"label_ids": features.label_ids.dtype})


def _compact(features) -> dict:
    """The features as `CLASSIFIER_SPEC`'s compact arrays (they are compact already)."""
    return {"lengths": features.length, "input_ids": features.input_ids,
            "segment_ids": features.segment_ids, "label_ids": features.label_ids}


def pack_examples(examples, task, tokenizer, *, max_seq_length: int = 128,
                  packed: bool = True,
                  max_sequences_per_pack: int = DEFAULT_MAX_SEQUENCES_PER_PACK,
                  algorithm: str = "optimal", seed: int = 0) -> PackedRows:
    """InputExamples -> rows, without the front end (for benchmarks and tools).

    `packed_bert_tf.classification.features.convert_examples_to_features`
    then `pack_features`; the arguments are theirs.
    """
    from packed_bert_tf.classification.features import convert_examples_to_features

    features = convert_examples_to_features(examples, task, tokenizer, max_seq_length)
    return pack_features(features, packed=packed,
                         max_sequences_per_pack=max_sequences_per_pack,
                         algorithm=algorithm, seed=seed)


def unpack_logits(packs: PackedRows, pack_index, logits) -> np.ndarray:
    """Per-example logits, in example order, from the model's outputs on the rows.

    Args:
      packs: the rows the outputs came from (`pack_features`).
      pack_index: [N] int, the row of each output (from the dataset's
        ``pack_index``; -1 for padding rows, ignored), in any order.
      logits: [N, D, L] the model's outputs.

    Returns:
      [F, L] float32.

    Raises:
      ValueError: when a pack is missing from the outputs or appears twice.
    """
    return unpack_sequence_outputs(packs, pack_index, np.asarray(logits, np.float32))
