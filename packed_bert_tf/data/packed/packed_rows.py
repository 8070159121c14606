"""Sequences laid out in packed rows: the one layout of every task.

Letters: N sequences, P packs (rows), S tokens per row, D sequences per row,
M prediction slots per row, T tokens and Q predictions of all sequences.

A task says what its sequences carry in a `PackSpec`; `lay_out` writes
sequences in compact form (real tokens only) into rows. The offline packer
of pre-training records (`packed_bert_tf.data.packed.pretraining_records`),
packing on the fly (`packed_bert_tf.data.inputs.pack_dataset.pack_dataset`), SQuAD and
classification (`pack_rows`) all go through it, so one spec gives one
layout whichever path packed the rows. `unpack_rows` is its inverse and
checks every rule of the layout; `fingerprints` hash compact sequences, to
prove that a packing kept each one exactly once.

A pack of two sequences under SQuAD's spec (S = 12, D = 2; a = sequence 7,
b = sequence 3)::

    input_ids         a0 a1 a2 a3 a4 b0 b1 b2 b3  0  0  0   tokens
    segment_ids        0  0  1  1  1  0  0  1  1  0  0  0   tokens
    input_mask         1  1  1  1  1  2  2  2  2  0  0  0   sequence index
    positions          0  1  2  3  4  0  1  2  3  0  0  0   position ids
    start_positions    3  7      offsets: a's token 3, b's token 2, in the row
    end_positions      4  7
    sequence_weights   1  1      slots: 1 for a sequence, 0 for an empty slot

    sequence_pack[7] = sequence_pack[3] = this row
    sequence_slot[7] = 0, sequence_offset[7] = 0
    sequence_slot[3] = 1, sequence_offset[3] = 5

Compact form, the project's one form of unpacked sequences, what travels
between the stages of every packing path (a dict of flat arrays, the spec
saying what each one is): ``lengths`` [N]; each token feature [T]; each
per-sequence feature [N]; with predictions, ``prediction_counts`` [N] and each
prediction feature but the weights [Q] (the weights are generated), positions
counted from the sequence's first token. `compact` makes it from unpacked
examples; `take`, `keep_rows` and `concatenate` select and join sequences.

numpy only: the data-preparation tools and their workers use it without
TensorFlow.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing import PackAssignment, pack_assignment, ragged, rows_of_packs


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """How the features of an unpacked sequence go into a pack.

    Every feature named must be in the examples; features not named are an
    error (`check_element_spec`), so nothing is dropped silently.

    Attributes:
      length: per-token feature whose nonzero entries, a prefix, are the
        sequence's real tokens (``input_mask`` of the MLPerf format).
      tokens: per-token features copied to the sequence's place in the pack
        ([S], 0 on padding).
      sequence: one value per sequence (scalar or [1]) -> [D], 0 in empty slots.
      offsets: token offsets inside the sequence (scalar or [1]) -> [D],
        shifted to offsets in the pack (SQuAD's answer start and end).
      predictions: masked-LM style slots ``(positions, *values, weights)``,
        each [P] with the real ones (weight > 0) first -> [M]: positions
        shifted to the pack, values copied, weights replaced by the sequence
        index 1..D, grouped by sequence in pack order.
      max_predictions_per_pack: M (needed when `predictions` is not empty).
      sequence_index: generated [S] feature: 1..D on each sequence's tokens,
        0 on padding (the packed ``input_mask``).
      position_ids: generated [S]: positions restarting at 0 in each sequence.
      starts: generated [D]: each sequence's first token in the pack.
      slots: generated [D]: 1 for a sequence, 0 for an empty slot.
    """

    length: str = "input_mask"
    tokens: tuple = ("input_ids", "segment_ids")
    sequence: tuple = ()
    offsets: tuple = ()
    predictions: tuple = ()
    max_predictions_per_pack: int | None = None
    sequence_index: str = "input_mask"
    position_ids: str = "positions"
    starts: str | None = None
    slots: str = "sequence_weights"

    @classmethod
    def pretraining(cls, max_predictions_per_pack: int) -> "PackSpec":
        """The MLPerf pre-training example -> the MLPerf packed format."""
        return cls(sequence=("next_sentence_labels",),
                   predictions=("masked_lm_positions", "masked_lm_ids",
                                "masked_lm_weights"),
                   max_predictions_per_pack=max_predictions_per_pack,
                   starts="next_sentence_positions", slots="next_sentence_weights")

    @classmethod
    def squad(cls) -> "PackSpec":
        """SQuAD features -> rows of answer spans (offsets in the row)."""
        return cls(offsets=("start_positions", "end_positions"))

    @classmethod
    def classifier(cls) -> "PackSpec":
        """Sentence (pair) classification -> rows of labels and [CLS] offsets."""
        return cls(sequence=("label_ids",), starts="cls_positions")

    @property
    def input_names(self) -> tuple:
        return tuple(dict.fromkeys((self.length,) + self.tokens + self.sequence
                                   + self.offsets + self.predictions))

    @property
    def per_sequence(self) -> tuple:
        return self.sequence + self.offsets

    @property
    def compact_names(self) -> tuple:
        """Names of the compact arrays, in a fixed order."""
        names = ("lengths",) + self.tokens + self.per_sequence
        if self.predictions:
            names += ("prediction_counts",) + self.predictions[:-1]
        return names

    def __post_init__(self):
        if self.predictions and (len(self.predictions) < 2
                                 or not self.max_predictions_per_pack):
            raise ValueError("predictions need (positions, ..., weights) and "
                             "max_predictions_per_pack")

    def output_shapes(self, max_sequence_length: int, max_sequences_per_pack: int,
                      input_dtypes: dict) -> dict:
        """Name -> (shape, numpy dtype) of a pack; the generated features are int32."""
        S, D, M = max_sequence_length, max_sequences_per_pack, self.max_predictions_per_pack
        out = {name: ([S], input_dtypes[name]) for name in self.tokens}
        out.update({name: ([D], input_dtypes[name]) for name in self.per_sequence})
        out.update({name: ([M], input_dtypes[name]) for name in self.predictions})
        out[self.sequence_index] = ([S], np.dtype(np.int32))
        out[self.position_ids] = ([S], np.dtype(np.int32))
        if self.starts:
            out[self.starts] = ([D], np.dtype(np.int32))
        out[self.slots] = ([D], np.dtype(np.int32))
        return out

    def check_element_spec(self, element_spec) -> None:
        """Raises ValueError listing every difference between a dataset's
        elements (a dict of ``tf.TensorSpec``) and what this spec reads."""
        if not isinstance(element_spec, dict):
            raise ValueError(f"pack_dataset needs a dataset of dicts of features, got "
                             f"elements {element_spec}")
        problems = []
        names = self.input_names
        for name in names:
            if name not in element_spec:
                problems.append(f"{name!r} is missing")
        for name in sorted(set(element_spec) - set(names)):
            problems.append(f"{name!r} is not in the spec (it would be dropped)")
        rank1 = [n for n in (self.length,) + self.tokens + self.predictions
                 if n in element_spec]
        for name in rank1:
            shape = element_spec[name].shape
            if shape.rank != 1 or shape[0] is None:
                problems.append(f"{name!r} has shape {shape}, not a fixed-length vector")
        lengths = {element_spec[n].shape[0] for n in (self.length,) + self.tokens
                   if n in element_spec and element_spec[n].shape.rank == 1}
        if len(lengths) > 1:
            problems.append(f"the per-token features have different lengths "
                            f"{sorted(lengths, key=str)}")
        for name in self.per_sequence:
            if name in element_spec and element_spec[name].shape.num_elements() != 1:
                problems.append(f"{name!r} has shape {element_spec[name].shape}, not one "
                                f"value per sequence")
        predictions = {element_spec[n].shape for n in self.predictions if n in element_spec}
        if len(predictions) > 1:
            problems.append("the prediction features have different shapes")
        for name in names:
            if name in element_spec and not (element_spec[name].dtype.is_integer
                                              or element_spec[name].dtype.is_floating):
                problems.append(f"{name!r} has dtype {element_spec[name].dtype.name}")
        if problems:
            raise ValueError("the dataset's elements do not match the PackSpec: "
                             + "; ".join(problems))


# --------------------------------------------------------------- compact form
def compact(spec: PackSpec, dense: dict, first_index: int, max_sequence_length: int,
            skip_long: bool, *, source: str | None = None) -> tuple[dict, int]:
    """Dense unpacked examples [C, ...] -> compact arrays (real tokens only).

    The arrays share no memory with `dense` (whose buffers may be reused).

    Args:
      spec: what the examples carry.
      dense: name -> [C, ...] array of each feature the spec reads.
      first_index: the index of the first example, in error messages.
      max_sequence_length: S; a longer example is refused or skipped.
      skip_long: skip (and count) the examples longer than S.
      source: where the examples come from (a file): errors name
        ``SOURCE: record I``; by default ``example I of the stream``.

    Returns:
      The compact arrays and the number of examples skipped as too long.

    Raises:
      ValueError: naming the index (and source) of the first bad example.
    """
    def which(index):
        return f"{source}: record {index}" if source is not None \
            else f"example {index} of the stream"

    mask = np.asarray(dense[spec.length]) != 0
    count, width = mask.shape
    lengths = mask.sum(axis=1)
    # A run of nonzero values then 0s: the first 0 is at `lengths` (if any).
    is_run = (lengths == width) | (np.argmin(mask, axis=1) == lengths)
    bad = np.flatnonzero(~is_run | (lengths == 0))
    if bad.size:
        raise ValueError(f"{which(first_index + bad[0])}: {spec.length} is not a "
                         f"non-empty run of nonzero values followed by 0s")
    long = lengths > max_sequence_length
    skipped = 0
    stream_index = first_index + np.arange(count)  # of each example still here
    if long.any():
        if not skip_long:
            index = int(np.argmax(long))
            raise ValueError(f"{which(first_index + index)} has {lengths[index]} tokens, "
                             f"more than max_sequence_length={max_sequence_length} "
                             f"(skip_long_sequences=True skips such examples and counts "
                             f"them)")
        skipped = int(long.sum())
        keep = ~long
        dense = {name: np.asarray(value)[keep] for name, value in dense.items()}
        mask, lengths, stream_index = mask[keep], lengths[keep], stream_index[keep]
    out = {"lengths": lengths.astype(np.int64)}
    for name in spec.tokens:
        out[name] = np.asarray(dense[name])[mask]  # the mask is the prefix
    for name in spec.per_sequence:
        out[name] = np.array(dense[name]).reshape(len(lengths))  # a copy
    if spec.predictions:
        weights = np.asarray(dense[spec.predictions[-1]])
        real = weights > 0
        counts = real.sum(axis=1)
        first_real = np.arange(real.shape[1])[None, :] < counts[:, None]
        positions = np.asarray(dense[spec.predictions[0]])
        bad = np.flatnonzero((real != first_real).any(axis=1) | (
            real & ((positions < 0) | (positions >= lengths[:, None]))).any(axis=1))
        if bad.size:
            raise ValueError(f"{which(stream_index[bad[0]])}: its real predictions "
                             f"({spec.predictions[-1]} > 0) are not first, or a position "
                             f"lies outside the sequence")
        out["prediction_counts"] = counts.astype(np.int64)
        for name in spec.predictions[:-1]:
            out[name] = np.asarray(dense[name])[real]
    for name in spec.offsets:
        inside = (out[name] >= 0) & (out[name] < lengths)
        if not inside.all():
            index = int(np.argmin(inside))
            raise ValueError(f"{which(stream_index[index])}: {name} {out[name][index]} "
                             f"lies outside its {lengths[index]} tokens")
    return out, skipped


def compact_padded(spec: PackSpec, padded: dict, lengths) -> dict:
    """Compact arrays of sequences whose token features are [N, width] rows
    padded after `lengths` tokens (no predictions)."""
    lengths = np.asarray(lengths, np.int64)
    out = {"lengths": lengths}
    if spec.tokens:
        width = np.asarray(padded[spec.tokens[0]]).shape[1]
        prefix = np.arange(width)[None, :] < lengths[:, None]
        for name in spec.tokens:
            out[name] = np.asarray(padded[name])[prefix]
    for name in spec.per_sequence:
        out[name] = np.asarray(padded[name]).reshape(lengths.size)
    return out


def take(spec: PackSpec, arrays: dict, rows: np.ndarray) -> dict:
    """The compact sequences at `rows`, in that order."""
    rows = np.asarray(rows, dtype=np.int64)
    lengths = arrays["lengths"]
    tokens, new_lengths = ragged.take_rows_index(ragged.row_splits_from_lengths(lengths),
                                                 lengths, rows)
    out = {"lengths": new_lengths}
    for name in spec.tokens:
        out[name] = arrays[name][tokens]
    for name in spec.per_sequence:
        out[name] = arrays[name][rows]
    if spec.predictions:
        counts = arrays["prediction_counts"]
        index, new_counts = ragged.take_rows_index(ragged.row_splits_from_lengths(counts),
                                                   counts, rows)
        out["prediction_counts"] = new_counts
        for name in spec.predictions[:-1]:
            out[name] = arrays[name][index]
    return out


def keep_rows(spec: PackSpec, arrays: dict, keep: np.ndarray) -> dict:
    """The compact sequences where `keep` is True, in their order (boolean
    masks: cheaper than `take` for the order-preserving case)."""
    out = {"lengths": arrays["lengths"][keep]}
    token_keep = np.repeat(keep, arrays["lengths"])
    for name in spec.tokens:
        out[name] = arrays[name][token_keep]
    for name in spec.per_sequence:
        out[name] = arrays[name][keep]
    if spec.predictions:
        out["prediction_counts"] = arrays["prediction_counts"][keep]
        prediction_keep = np.repeat(keep, arrays["prediction_counts"])
        for name in spec.predictions[:-1]:
            out[name] = arrays[name][prediction_keep]
    return out


def concatenate(parts) -> dict:
    """Compact arrays of several groups of sequences, one group after the other."""
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def fingerprints(spec: PackSpec, arrays: dict) -> np.ndarray:
    """[N] uint64 hash of everything in each compact sequence.

    Equal sequences have equal fingerprints, whatever the arrays' integer
    types and the spec's M (what a sequence carries counts, not the room in
    a row); different ones collide with probability about 2**-64 per pair.
    Positions are the sequence's own (compact form), so a sequence keeps its
    fingerprint in whichever pack it lands: how packing is proved to keep
    every sequence exactly once.
    """
    lengths = np.asarray(arrays["lengths"])
    with np.errstate(over="ignore"):
        hashes = _ragged_hash(_mixed([arrays[name] for name in spec.tokens], lengths.sum()),
                              lengths) * np.uint64(0x9E3779B97F4A7C15)
        if spec.predictions:
            counts = np.asarray(arrays["prediction_counts"])
            hashes ^= _ragged_hash(_mixed([arrays[name] for name in spec.predictions[:-1]],
                                          counts.sum()), counts) * np.uint64(0xC2B2AE3D27D4EB4F)
        return hashes ^ _mixed([lengths] + [arrays[name] for name in spec.per_sequence],
                               lengths.size)


def _mixed(columns, size) -> np.ndarray:
    """[size] uint64: the values of several integer columns mixed into one, in order."""
    mixed = np.zeros(int(size), np.uint64)
    with np.errstate(over="ignore"):
        for column in columns:
            mixed = (mixed ^ np.asarray(column).astype(np.uint64)) * np.uint64(0x100000001B3)
    return mixed


def _ragged_hash(values: np.ndarray, row_lengths: np.ndarray) -> np.ndarray:
    """Polynomial hash modulo 2**64 of each row of a ragged uint64 array."""
    base = np.uint64(0x100000001B3)
    max_len = int(row_lengths.max(initial=0))
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(max(max_len, 1), base, dtype=np.uint64))
        mixed = (values ^ np.uint64(0x5851F42D4C957F2D)) * powers[
            ragged.position_in_row(row_lengths)]
    hashes = np.zeros(row_lengths.size, dtype=np.uint64)
    np.add.at(hashes, ragged.row_of_elements(row_lengths), mixed)
    return hashes


# --------------------------------------------------------------------- layout
def check_fits(spec: PackSpec, arrays: dict, sequences_per_pack: np.ndarray,
               max_sequence_length: int, max_sequences_per_pack: int) -> None:
    """Raises ValueError naming the first pack that holds more tokens,
    sequences or predictions than a row has room for.

    `arrays` are compact and in pack order, as `lay_out` takes them.
    """
    splits = ragged.row_splits_from_lengths(sequences_per_pack)
    amounts = [("tokens", ragged.sum_over_rows(arrays["lengths"], splits),
                "max_sequence_length", max_sequence_length),
               ("sequences", np.asarray(sequences_per_pack),
                "max_sequences_per_pack", max_sequences_per_pack)]
    if spec.predictions:
        amounts.append(("predictions",
                        ragged.sum_over_rows(arrays["prediction_counts"], splits),
                        "max_predictions_per_pack", spec.max_predictions_per_pack))
    for what, amount, name, limit in amounts:
        if amount.size and amount.max() > limit:
            pack = int(np.argmax(amount))
            raise ValueError(f"pack {pack} holds {amount[pack]} {what}, more than "
                             f"{name}={limit}")


def lay_out(spec: PackSpec, arrays: dict, sequences_per_pack: np.ndarray,
            max_sequence_length: int, max_sequences_per_pack: int, dtypes: dict) -> dict:
    """Compact sequences, already in pack order -> packs: name -> [P, ...].

    Pack k holds the next ``sequences_per_pack[k]`` sequences of `arrays`;
    the caller guarantees that they fit (`check_fits`). `dtypes` gives each
    output's numpy dtype (the generated features default to int32).

    Each pack's tokens fill its first columns, so every [P, S] feature is
    the token stream dropped into the cells left of each pack's token count:
    one boolean-mask assignment per feature, O(P x S + T) in all.
    """
    S = max_sequence_length
    num_packs = sequences_per_pack.size
    lengths = arrays["lengths"]
    pack_splits = ragged.row_splits_from_lengths(sequences_per_pack)
    pack_of = ragged.row_of_elements(sequences_per_pack)
    slot = ragged.position_in_row(sequences_per_pack)
    offset = ragged.exclusive_sum_in_row(lengths, sequences_per_pack)
    real = np.arange(S)[None, :] < ragged.sum_over_rows(lengths, pack_splits)[:, None]

    def zeros(name, width):
        return np.zeros((num_packs, width), dtype=dtypes.get(name, np.int32))

    out = {}
    for name in spec.tokens:
        out[name] = zeros(name, S)
        out[name][real] = arrays[name]
    out[spec.sequence_index] = zeros(spec.sequence_index, S)
    out[spec.sequence_index][real] = np.repeat(slot + 1, lengths)
    out[spec.position_ids] = zeros(spec.position_ids, S)
    out[spec.position_ids][real] = ragged.position_in_row(lengths)
    per_sequence = {name: arrays[name] + offset if name in spec.offsets else arrays[name]
                    for name in spec.per_sequence}
    per_sequence[spec.slots] = 1
    if spec.starts:
        per_sequence[spec.starts] = offset
    for name, values in per_sequence.items():
        out[name] = zeros(name, max_sequences_per_pack)
        out[name][pack_of, slot] = values
    if spec.predictions:
        counts = arrays["prediction_counts"]
        filled = np.arange(spec.max_predictions_per_pack)[None, :] < \
            ragged.sum_over_rows(counts, pack_splits)[:, None]
        positions_name, weights_name = spec.predictions[0], spec.predictions[-1]
        per_prediction = {name: arrays[name] for name in spec.predictions[1:-1]}
        per_prediction[positions_name] = arrays[positions_name] + np.repeat(offset, counts)
        per_prediction[weights_name] = np.repeat(slot + 1, counts)
        for name, values in per_prediction.items():
            out[name] = zeros(name, spec.max_predictions_per_pack)
            out[name][filled] = values
    return out


# ------------------------------------------------------- rows held in memory
@dataclasses.dataclass(frozen=True, eq=False)
class PackedRows:
    """A task's sequences laid out in rows of S tokens, up to D per row.

    Attributes:
      arrays: the model's inputs and the loss's labels, the outputs of
        `lay_out` ([P, S] token features, [P, D] per-sequence features).
      sequence_pack, sequence_slot, sequence_offset, sequence_length: [N]
        int64, where each sequence sits: row, slot d (0-based; its tokens
        carry sequence index d + 1), first token's column, number of tokens.
      spec: the `PackSpec` the rows were laid out by.
      packed: False for the unpacked layout (D = 1, row n = sequence n).
    """
    arrays: dict
    sequence_pack: np.ndarray
    sequence_slot: np.ndarray
    sequence_offset: np.ndarray
    sequence_length: np.ndarray
    spec: PackSpec
    packed: bool

    @property
    def num_packs(self) -> int:
        return int(self.arrays[self.spec.sequence_index].shape[0])

    @property
    def num_sequences(self) -> int:
        return int(self.sequence_pack.size)

    @property
    def max_sequence_length(self) -> int:
        return int(self.arrays[self.spec.sequence_index].shape[1])

    @property
    def max_sequences_per_pack(self) -> int:
        return int(self.arrays[self.spec.slots].shape[1])

    @property
    def packing_factor(self) -> float:
        """Sequences per row (1.0 unpacked)."""
        return self.num_sequences / self.num_packs if self.num_packs else 1.0

    @property
    def padding_fraction(self) -> float:
        """Share of the rows' tokens that are padding."""
        total = self.num_packs * self.max_sequence_length
        return 1.0 - float(self.sequence_length.sum()) / total if total else 0.0

    def describe(self, noun: str = "sequences") -> dict:
        """Counts and occupancy for a summary, the sequences under ``noun``."""
        return {noun: self.num_sequences, "rows": self.num_packs,
                "packing_factor": self.packing_factor,
                "padding_fraction": self.padding_fraction}


@dataclasses.dataclass(frozen=True)
class RowShape:
    """The room in a row: S tokens and D sequences (`packed` False: D = 1,
    one sequence per row in sequence order)."""

    max_sequence_length: int
    max_sequences_per_pack: int
    packed: bool = True


def lay_out_packs(spec: PackSpec, arrays: dict, packs: PackAssignment, shape: RowShape,
                  dtypes: dict) -> dict:
    """Compact sequences (in sequence order) -> the packs of an assignment:
    name -> [P, ...], pack k holding the sequences ``packs[k]`` in that order.

    The assignment may hold any of the sequences (a share of a dataset's
    packs, written a few thousand at a time). `dtypes` as `lay_out` takes them.

    Raises:
      ValueError: naming the first pack that holds more tokens, sequences or
        predictions than a row has room for (`check_fits`).
    """
    in_pack_order = take(spec, arrays, packs.sequence_indices)
    depths = packs.sequences_per_pack
    check_fits(spec, in_pack_order, depths, shape.max_sequence_length,
               shape.max_sequences_per_pack)
    return lay_out(spec, in_pack_order, depths, shape.max_sequence_length,
                   shape.max_sequences_per_pack, dtypes)


def unpack_rows(spec: PackSpec, rows: dict, *, source: str = "records",
                first_row: int = 0) -> tuple[dict, np.ndarray]:
    """Packs laid out by the spec -> their sequences in compact form, checking
    every rule of the layout on the way (the inverse of `lay_out`).

    Args:
      spec: how the rows were laid out.
      rows: name -> [R, ...], every feature of `PackSpec.output_shapes`.
      source: where the rows come from (a file), in error messages.
      first_row: the index of the first row, in error messages.

    Returns:
      The compact arrays of the sequences, row by row, in pack order, and the
      row index of each ([N], counted from `first_row`).

    Raises:
      ValueError: ``SOURCE: record I: RULE``, the first row that breaks a rule:
        the sequence index not 1..k in contiguous runs then 0s, the position
        ids not restarting at 0 in each sequence, a token feature not 0 on
        padding, the starts or slots not matching the sequences, a
        per-sequence value in an empty slot, an offset outside its sequence,
        prediction slots not filled in order, a prediction's weight not the
        sequence index of the token it points at, a value in an empty slot.
    """
    sequence_index = np.asarray(rows[spec.sequence_index]).astype(np.int64)
    num_rows, width = sequence_index.shape
    columns = np.arange(width)[None, :]

    def fail(bad_rows, rule):
        bad_rows = np.flatnonzero(bad_rows)
        if bad_rows.size:
            raise ValueError(f"{source}: record {first_row + bad_rows[0]}: {rule}")

    # 1 1 1 2 2 0 0: non-decreasing by steps of 0 or 1 from 1, then 0s.
    tokens_in_row = (sequence_index > 0).sum(axis=1)
    in_prefix = columns < tokens_in_row[:, None]
    fail((sequence_index > 0) != in_prefix,
         f"{spec.sequence_index} has padding before real tokens")
    fail(tokens_in_row == 0, "the record holds no tokens")
    steps = np.diff(sequence_index, axis=1)
    fail(((steps != 0) & (steps != 1) & in_prefix[:, 1:]).any(axis=1)
         | (sequence_index[:, 0] != 1),
         f"{spec.sequence_index} does not number the sequences 1, 2, ... in order")
    is_start = in_prefix & np.concatenate([np.ones((num_rows, 1), bool), steps == 1],
                                          axis=1)
    depths = is_start.sum(axis=1)
    start_of_token = np.maximum.accumulate(np.where(is_start, columns, 0), axis=1)
    fail((np.asarray(rows[spec.position_ids])
          != np.where(in_prefix, columns - start_of_token, 0)).any(axis=1),
         f"{spec.position_ids} do not restart at 0 in each sequence (or are not 0 on "
         f"padding)")
    for name in spec.tokens:
        fail(((np.asarray(rows[name]) != 0) & ~in_prefix).any(axis=1),
             f"{name} is not 0 on padding")

    max_depth = np.asarray(rows[spec.slots]).shape[1]
    fail(depths > max_depth, f"more than {max_depth} sequences")
    row_of_sequence, start = np.nonzero(is_start)
    slot = ragged.position_in_row(depths)
    used_slot = np.arange(max_depth)[None, :] < depths[:, None]
    if spec.starts:
        expected = np.zeros((num_rows, max_depth), np.int64)
        expected[row_of_sequence, slot] = start
        fail((np.asarray(rows[spec.starts]) != expected).any(axis=1),
             f"{spec.starts} are not the sequences' first tokens")
    fail((np.asarray(rows[spec.slots]) != used_slot).any(axis=1),
         f"{spec.slots} are not 1 for each sequence and 0 after")
    for name in spec.per_sequence:
        fail(((np.asarray(rows[name]) != 0) & ~used_slot).any(axis=1),
             f"{name} set for an empty slot")

    ends = np.empty_like(start)
    last_of_row = np.cumsum(depths) - 1
    ends[:-1] = start[1:]
    ends[last_of_row] = tokens_in_row[row_of_sequence[last_of_row]]
    lengths = ends - start
    out = {"lengths": lengths}
    for name in spec.tokens:
        out[name] = np.asarray(rows[name])[in_prefix]
    for name in spec.per_sequence:
        values = np.asarray(rows[name])[row_of_sequence, slot]
        if name in spec.offsets:
            values = values - start.astype(values.dtype)
            outside = np.zeros(num_rows, bool)
            outside[row_of_sequence[(values < 0) | (values >= lengths)]] = True
            fail(outside, f"{name} lies outside its sequence")
        out[name] = values
    if spec.predictions:
        _unpack_predictions(spec, rows, sequence_index, depths, start, out, fail)
    return out, first_row + row_of_sequence


def _unpack_predictions(spec: PackSpec, rows: dict, sequence_index, depths, start,
                        out: dict, fail) -> None:
    """`unpack_rows`' prediction slots: checked, then cut into `out`'s
    ``prediction_counts`` and prediction features (positions in the sequence)."""
    positions_name, weights_name = spec.predictions[0], spec.predictions[-1]
    weights = np.asarray(rows[weights_name])
    fail((weights != np.rint(weights)).any(axis=1) | (weights < 0).any(axis=1),
         f"{weights_name} are not sequence indices")
    weights = np.rint(weights).astype(np.int64)
    real = weights > 0
    filled = np.arange(real.shape[1])[None, :] < real.sum(axis=1)[:, None]
    fail((real != filled).any(axis=1), "prediction slots are not filled first-to-last")
    for name in spec.predictions[:-1]:
        fail(((np.asarray(rows[name]) != 0) & ~real).any(axis=1),
             f"{name} is not 0 in an empty prediction slot")
    positions = np.asarray(rows[positions_name]).astype(np.int64)
    width = sequence_index.shape[1]
    token_sequence = np.take_along_axis(sequence_index, np.clip(positions, 0, width - 1),
                                        axis=1)
    fail((real & ((positions < 0) | (positions >= width)
                  | (token_sequence != weights))).any(axis=1),
         f"a {weights_name} value is not the sequence index of the token it points at")
    fail((real[:, 1:] & (weights[:, 1:] < weights[:, :-1])).any(axis=1),
         "prediction slots are not grouped by sequence in order")
    row, column = np.nonzero(real)
    sequence_of_prediction = (np.cumsum(depths) - depths)[row] + weights[row, column] - 1
    out["prediction_counts"] = np.bincount(sequence_of_prediction, minlength=start.size)
    for name in spec.predictions[:-1]:
        out[name] = np.asarray(rows[name])[real]
    out[positions_name] = (positions[real] - start[sequence_of_prediction]).astype(
        out[positions_name].dtype)


def pack_rows(spec: PackSpec, arrays: dict, assignment: PackAssignment,
              shape: RowShape, dtypes: dict) -> PackedRows:
    """Lays compact sequences (in sequence order) into the rows of an assignment.

    Args:
      spec: what the sequences carry.
      arrays: compact arrays of the N sequences (module docstring).
      assignment: pack k holds the sequences ``assignment[k]``, in that order.
      shape: the room in a row.
      dtypes: the numpy dtype of each output array (default int32).

    Raises:
      ValueError: when the assignment does not hold every sequence exactly
        once, or a pack holds more than the row has room for.
    """
    lengths = np.asarray(arrays["lengths"], np.int64)
    num_sequences = lengths.size
    order = np.asarray(assignment.sequence_indices, np.int64)
    if order.size != num_sequences or not np.array_equal(np.sort(order),
                                                         np.arange(num_sequences)):
        raise ValueError(f"the assignment holds {order.size} sequence indices, not each "
                         f"of the {num_sequences} sequences exactly once")
    rows = lay_out_packs(spec, arrays, assignment, shape, dtypes)
    sequence_pack = np.empty(num_sequences, np.int64)
    sequence_slot = np.empty(num_sequences, np.int64)
    sequence_offset = np.empty(num_sequences, np.int64)
    sequence_pack[order] = assignment.pack_of_entries
    sequence_slot[order] = assignment.slot_of_entries
    sequence_offset[order] = assignment.offset_in_pack(lengths[order])
    return PackedRows(rows, sequence_pack, sequence_slot, sequence_offset, lengths, spec,
                      shape.packed)


def plan_rows(spec: PackSpec, arrays: dict, shape: RowShape, *, algorithm: str = "optimal",
              seed: int = 0, dtypes: dict | None = None) -> PackedRows:
    """Packs compact sequences by length (`packed_bert_tf.packing.pack_assignment`)
    and lays them into rows (`pack_rows`); ``shape.packed`` False: one
    sequence per row, in sequence order, D = 1.

    Args:
      spec: how the features go into a row, as `pack_rows` takes it.
      arrays: the compact sequences, as `pack_rows` takes them.
      shape: the room in a row.
      algorithm: a `packed_bert_tf.packing.ALGORITHMS` name.
      seed: which sequences of a length share a pack, and the packs' order.
      dtypes: the rows' dtypes, as `pack_rows` takes them.
    """
    assignment = pack_assignment(arrays["lengths"], shape.max_sequence_length,
                                 shape.max_sequences_per_pack, packed=shape.packed,
                                 algorithm=algorithm, seed=seed)
    if not shape.packed:
        shape = dataclasses.replace(shape, max_sequences_per_pack=1)
    return pack_rows(spec, arrays, assignment, shape, dtypes or {})


def unpack_sequence_outputs(rows: PackedRows, pack_index, outputs) -> np.ndarray:
    """Per-sequence outputs [N, ...], in sequence order, from a model's
    [R, D, ...] outputs on the rows (``pack_index`` [R]: the row each output
    came from, -1 for padding rows, any order)."""
    row_of_pack = rows_of_packs(pack_index, rows.num_packs)
    return np.asarray(outputs)[row_of_pack[rows.sequence_pack], rows.sequence_slot]


def unpack_token_outputs(rows: PackedRows, pack_index, *outputs) -> tuple:
    """Per-token outputs of every sequence, ragged, from a model's [R, S, ...]
    outputs on the rows.

    Returns ``(row_splits [N + 1], each output's [T, ...] values)``:
    sequence n's values are ``values[row_splits[n]:row_splits[n + 1]]``.
    """
    row_of_pack = rows_of_packs(pack_index, rows.num_packs)
    lengths = rows.sequence_length
    token_sequence = ragged.row_of_elements(lengths)
    token_rows = row_of_pack[rows.sequence_pack[token_sequence]]
    columns = rows.sequence_offset[token_sequence] + ragged.position_in_row(lengths)
    return (ragged.row_splits_from_lengths(lengths),
            *(np.asarray(output)[token_rows, columns] for output in outputs))
