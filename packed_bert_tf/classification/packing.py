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

    example_pack[7] = example_pack[3] = this pack
    example_slot[7] = 0, example_offset[7] = 0
    example_slot[3] = 1, example_offset[3] = 5

The unpacked layout (google-research/bert's) is the same with D = 1, one
example per row padded to S, in example order. numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing import PackAssignment, pack_assignment, ragged, rows_of_packs

#: Per-token arrays of a pack ([P, S]) and per-sequence arrays ([P, D]).
TOKEN_ARRAYS = ("input_ids", "segment_ids", "input_mask", "positions")
SEQUENCE_ARRAYS = ("cls_positions", "label_ids", "sequence_weights")

#: Sequences per row by default. At S = 128, 67,349 SST-2-like sentences
#: (12.1 tokens on average) fill every row at a cap of 8 (8.00 per row, 24%
#: padding); from a cap of 12 the optimal plan reaches the token bound (10.57
#: per row, 0.0% padding, 6,373 rows). 16 leaves room for shorter sets
#: (CoLA); a slot costs only a gathered [CLS] in the head.
DEFAULT_MAX_SEQUENCES_PER_PACK = 16


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierPacks:
    """Features laid out in rows of S tokens holding up to D features each.

    Attributes:
      arrays: the model's inputs and the loss's labels: int32 ``input_ids``,
        ``segment_ids``, ``input_mask`` (sequence index 1..D, 0 = padding),
        ``positions`` (restarting at 0 in every feature) [P, S]; int32
        ``cls_positions`` (offset of each feature's [CLS] in the row; 0 in an
        empty slot), ``label_ids`` (int32, float32 for regression; 0 in an
        empty slot), int32 ``sequence_weights`` (1 real, 0 empty) [P, D].
      example_pack, example_slot, example_offset, example_length: [F] int64,
        where each example sits: row, slot d (0-based; its tokens carry
        ``input_mask`` d + 1), first token's offset, number of tokens.
      packed: False for the unpacked layout (D = 1, row = example).
    """
    arrays: dict
    example_pack: np.ndarray
    example_slot: np.ndarray
    example_offset: np.ndarray
    example_length: np.ndarray
    packed: bool

    @property
    def num_packs(self) -> int:
        return int(self.arrays["input_ids"].shape[0])

    @property
    def num_examples(self) -> int:
        return int(self.example_pack.size)

    @property
    def feature_length(self) -> np.ndarray:
        """`example_length`, under the name the shared row pipelines read
        (`packed_bert_tf.squad.dataset.bucketed_squad_dataset`)."""
        return self.example_length

    @property
    def max_sequence_length(self) -> int:
        return int(self.arrays["input_ids"].shape[1])

    @property
    def max_sequences_per_pack(self) -> int:
        return int(self.arrays["cls_positions"].shape[1])

    @property
    def packing_factor(self) -> float:
        """Examples per row (1.0 unpacked)."""
        return self.num_examples / self.num_packs if self.num_packs else 1.0

    @property
    def padding_fraction(self) -> float:
        """Share of the rows' tokens that are padding."""
        total = self.num_packs * self.max_sequence_length
        return 1.0 - float(self.example_length.sum()) / total if total else 0.0

    def describe(self) -> dict:
        return {"examples": self.num_examples, "rows": self.num_packs,
                "packing_factor": self.packing_factor,
                "padding_fraction": self.padding_fraction}


def layout_packs(features, assignment: PackAssignment, max_sequences_per_pack: int,
                 *, packed: bool = True) -> ClassifierPacks:
    """Writes the features into the rows of an assignment (vectorised).

    Args:
      features: `packed_bert_tf.classification.features.ClassifierFeatures`.
      assignment: pack k holds the features ``assignment[k]``, in that order.
      max_sequences_per_pack: D, columns of the per-sequence arrays.
      packed: recorded in the result.

    Raises:
      ValueError: when a pack holds more than D features or more than S
        tokens, or the assignment does not hold every feature exactly once.
    """
    num_examples, sequence_length = len(features), features.max_seq_length
    lengths = features.length
    order = np.asarray(assignment.sequence_indices, np.int64)
    if order.size != num_examples or not np.array_equal(np.sort(order),
                                                        np.arange(num_examples)):
        raise ValueError(f"the assignment holds {order.size} example indices, not each "
                         f"of the {num_examples} examples exactly once")
    depth = assignment.sequences_per_pack
    if depth.size and depth.max() > max_sequences_per_pack:
        raise ValueError(f"a pack holds {depth.max()} examples, more than "
                         f"max_sequences_per_pack={max_sequences_per_pack}")
    num_packs = len(assignment)
    ordered_lengths = lengths[order]  # [F] in assignment order
    offset = assignment.offset_in_pack(ordered_lengths)
    if order.size and (offset + ordered_lengths).max() > sequence_length:
        raise ValueError(f"a pack holds more than max_sequence_length={sequence_length} "
                         f"tokens")
    example_pack = np.empty(num_examples, np.int64)
    example_slot = np.empty(num_examples, np.int64)
    example_offset = np.empty(num_examples, np.int64)
    example_pack[order] = assignment.pack_of_entries
    example_slot[order] = assignment.slot_of_entries
    example_offset[order] = offset

    # Every token: its example, its place in the example, its place in the rows.
    token_example = ragged.row_of_elements(lengths)  # [T]
    token_position = ragged.position_in_row(lengths)
    token_row = example_pack[token_example]
    token_column = example_offset[token_example] + token_position
    arrays = {name: np.zeros((num_packs, sequence_length), np.int32)
              for name in TOKEN_ARRAYS}
    arrays["input_ids"][token_row, token_column] = features.input_ids
    arrays["segment_ids"][token_row, token_column] = features.segment_ids
    arrays["input_mask"][token_row, token_column] = example_slot[token_example] + 1
    arrays["positions"][token_row, token_column] = token_position
    shape = (num_packs, max_sequences_per_pack)
    arrays["cls_positions"] = np.zeros(shape, np.int32)
    arrays["cls_positions"][example_pack, example_slot] = example_offset
    arrays["label_ids"] = np.zeros(shape, features.label_ids.dtype)
    arrays["label_ids"][example_pack, example_slot] = features.label_ids
    arrays["sequence_weights"] = np.zeros(shape, np.int32)
    arrays["sequence_weights"][example_pack, example_slot] = 1
    return ClassifierPacks(arrays, example_pack, example_slot, example_offset, lengths,
                           packed)


def pack_features(features, *, packed: bool = True,
                  max_sequences_per_pack: int = DEFAULT_MAX_SEQUENCES_PER_PACK,
                  algorithm: str = "optimal", seed: int = 0) -> ClassifierPacks:
    """Packs features by length (`packed_bert_tf.packing`), or lays them out unpacked.

    Args:
      features: `packed_bert_tf.classification.features.ClassifierFeatures`.
      packed: False: one example per row in example order, D = 1 (the
        standard BERT batches).
      max_sequences_per_pack: D.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name.
      seed: which examples of a length share a pack, and the packs' order.

    Returns:
      `ClassifierPacks`.
    """
    assignment = pack_assignment(features.length, features.max_seq_length,
                                 max_sequences_per_pack, packed=packed,
                                 algorithm=algorithm, seed=seed)
    return layout_packs(features, assignment, max_sequences_per_pack if packed else 1,
                        packed=packed)


def pack_examples(examples, task, tokenizer, *, max_seq_length: int = 128,
                  packed: bool = True,
                  max_sequences_per_pack: int = DEFAULT_MAX_SEQUENCES_PER_PACK,
                  algorithm: str = "optimal", seed: int = 0) -> ClassifierPacks:
    """InputExamples -> rows, without the front end (for benchmarks and tools).

    `packed_bert_tf.classification.features.convert_examples_to_features`
    then `pack_features`; the arguments are theirs.
    """
    from packed_bert_tf.classification.features import convert_examples_to_features

    features = convert_examples_to_features(examples, task, tokenizer, max_seq_length)
    return pack_features(features, packed=packed,
                         max_sequences_per_pack=max_sequences_per_pack,
                         algorithm=algorithm, seed=seed)


def unpack_logits(packs: ClassifierPacks, pack_index, logits) -> np.ndarray:
    """Per-example logits, in example order, from the model's outputs on the rows.

    Args:
      packs: the `ClassifierPacks` the rows came from.
      pack_index: [N] int, the row of each output (from the dataset's
        ``pack_index``; -1 for padding rows, ignored), in any order.
      logits: [N, D, L] the model's outputs.

    Returns:
      [F, L] float32.

    Raises:
      ValueError: when a pack is missing from the outputs or appears twice.
    """
    logits = np.asarray(logits, np.float32)
    row_of_pack = rows_of_packs(pack_index, packs.num_packs)
    return logits[row_of_pack[packs.example_pack], packs.example_slot]
