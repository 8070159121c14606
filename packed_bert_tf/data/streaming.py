"""Packing on the fly: `pack_dataset`, a tf.data transformation.

Takes a dataset of unpacked examples (one sequence each, padded to a fixed
length) and yields packs in the packed layout (docs/formats.md), with static
shapes, ready for ``batch``. Which sequences share a pack is decided by
`packed_bert_tf.packing.streaming.StreamingPacker` (near the LP bound with a
bounded buffer; see there); how an example's features go into a pack is
described by a `PackSpec`.

Why a ``scan`` with a numpy step, and not a Python generator: the whole state
(the packer's and the waiting examples, kept compact: real tokens only) is
the ``scan`` state, so it lives inside tf.data. ``tf.train.Checkpoint(
iterator=...)`` saves it with the iterator, and a restored iterator yields
exactly the packs the uninterrupted one would have yielded; the transformation
composes with ``shard``, ``prefetch`` and ``tf.distribute`` input pipelines
like any other. The step is pure (its state comes in and goes out as tensors),
which is what makes checkpointing it sound even though tf.data cannot look
inside a ``numpy_function``; `pack_dataset` sets the external-state policy to
``IGNORE`` for that reason. Examples are read in chunks so that the step runs
once per `chunk_size` examples, not once per example.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from absl import logging

from packed_bert_tf.packing import PackAssignment, ragged
from packed_bert_tf.packing.streaming import STATE_KEYS, StreamingPacker


@dataclasses.dataclass(frozen=True)
class PackSpec:
    """How the features of an unpacked example go into a pack.

    Letters: S tokens per pack, D sequences per pack, M prediction slots per
    pack. Every feature named must be in the examples; features not named are
    an error (`check_element_spec`), so nothing is dropped silently.

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
        """SQuAD training features -> the packed SQuAD layout
        (`packed_bert_tf.squad.packing`)."""
        return cls(offsets=("start_positions", "end_positions"))

    @property
    def input_names(self) -> tuple:
        return tuple(dict.fromkeys((self.length,) + self.tokens + self.sequence
                                   + self.offsets + self.predictions))

    @property
    def per_sequence(self) -> tuple:
        return self.sequence + self.offsets

    def __post_init__(self):
        if self.predictions and (len(self.predictions) < 2
                                 or not self.max_predictions_per_pack):
            raise ValueError("predictions need (positions, ..., weights) and "
                             "max_predictions_per_pack")

    def output_shapes(self, max_sequence_length: int, max_sequences_per_pack: int,
                      input_spec: dict) -> dict:
        """name -> (shape, dtype) of a pack."""
        S, D, M = max_sequence_length, max_sequences_per_pack, self.max_predictions_per_pack
        out = {name: ([S], input_spec[name].dtype) for name in self.tokens}
        out.update({name: ([D], input_spec[name].dtype) for name in self.per_sequence})
        out.update({name: ([M], input_spec[name].dtype) for name in self.predictions})
        out[self.sequence_index] = ([S], tf.int32)
        out[self.position_ids] = ([S], tf.int32)
        if self.starts:
            out[self.starts] = ([D], tf.int32)
        out[self.slots] = ([D], tf.int32)
        return out

    def check_element_spec(self, element_spec) -> None:
        """Raises ValueError listing every difference between the dataset's
        elements and what this spec reads."""
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


# ----------------------------------------------------------------- numpy side
def compact(spec: PackSpec, dense: dict, first_index: int, max_sequence_length: int,
            skip_long: bool) -> tuple[dict, int]:
    """Dense unpacked examples [C, ...] -> compact arrays (real tokens only):
    ``lengths`` [C], each token feature flat [T], each per-sequence feature
    [C], ``prediction_counts`` [C] and each prediction feature flat [Q].

    Returns the arrays and the number of examples skipped as too long.

    Raises ValueError naming the stream index of a bad example.
    """
    mask = np.asarray(dense[spec.length]) != 0
    count, width = mask.shape
    lengths = mask.sum(axis=1)
    # A run of nonzero values then 0s: the first 0 is at `lengths` (if any).
    is_run = (lengths == width) | (np.argmin(mask, axis=1) == lengths)
    bad = np.flatnonzero(~is_run | (lengths == 0))
    if bad.size:
        raise ValueError(f"example {first_index + bad[0]} of the stream: {spec.length} "
                         f"is not a non-empty run of nonzero values followed by 0s")
    long = lengths > max_sequence_length
    skipped = 0
    stream_index = first_index + np.arange(count)  # of each example still here
    if long.any():
        if not skip_long:
            index = int(np.argmax(long))
            raise ValueError(f"example {first_index + index} of the stream has "
                             f"{lengths[index]} tokens, more than max_sequence_length="
                             f"{max_sequence_length} (skip_long_sequences=True skips "
                             f"such examples and counts them)")
        skipped = int(long.sum())
        keep = ~long
        dense = {name: np.asarray(value)[keep] for name, value in dense.items()}
        mask, lengths, stream_index = mask[keep], lengths[keep], stream_index[keep]
    out = {"lengths": lengths.astype(np.int64)}
    for name in spec.tokens:
        out[name] = np.asarray(dense[name])[mask]  # the mask is the prefix
    for name in spec.per_sequence:
        out[name] = np.asarray(dense[name]).reshape(len(lengths))
    if spec.predictions:
        weights = np.asarray(dense[spec.predictions[-1]])
        real = weights > 0
        counts = real.sum(axis=1)
        first_real = np.arange(real.shape[1])[None, :] < counts[:, None]
        positions = np.asarray(dense[spec.predictions[0]])
        bad = np.flatnonzero((real != first_real).any(axis=1) | (
            real & ((positions < 0) | (positions >= lengths[:, None]))).any(axis=1))
        if bad.size:
            raise ValueError(f"example {stream_index[bad[0]]} of the stream: its "
                             f"real predictions ({spec.predictions[-1]} > 0) are not "
                             f"first, or a position lies outside the sequence")
        out["prediction_counts"] = counts.astype(np.int64)
        for name in spec.predictions[:-1]:
            out[name] = np.asarray(dense[name])[real]
    for name in spec.offsets:
        inside = (out[name] >= 0) & (out[name] < lengths)
        if not inside.all():
            index = int(np.argmin(inside))
            raise ValueError(f"example {stream_index[index]} of the stream: {name} "
                             f"{out[name][index]} lies outside its {lengths[index]} tokens")
    return out, skipped


def compact_names(spec: PackSpec) -> tuple:
    """Names of the compact arrays, in a fixed order."""
    names = ("lengths",) + spec.tokens + spec.per_sequence
    if spec.predictions:
        names += ("prediction_counts",) + spec.predictions[:-1]
    return names


def take(spec: PackSpec, arrays: dict, rows: np.ndarray) -> dict:
    """The compact examples at `rows`, in that order."""
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
    """The compact examples where `keep` is True, in their order (boolean
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
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


def layout(spec: PackSpec, arrays: dict, sequences_per_pack: np.ndarray,
           max_sequence_length: int, max_sequences_per_pack: int, dtypes: dict) -> dict:
    """Compact examples, already in pack order -> packs: name -> [packs, ...].

    Pack k holds the next ``sequences_per_pack[k]`` examples of `arrays`; the
    caller guarantees they fit (tokens, sequences, prediction slots). Each
    pack's tokens fill its first columns, so every [packs, S] feature is the
    token stream dropped into the cells left of each pack's token count (one
    boolean-mask assignment per feature).
    """
    S = max_sequence_length
    num_packs = sequences_per_pack.size
    lengths = arrays["lengths"]
    pack_splits = ragged.row_splits_from_lengths(sequences_per_pack)
    pack_of = ragged.row_of_elements(sequences_per_pack)
    slot = ragged.position_in_row(sequences_per_pack)
    offset = ragged.exclusive_sum_in_row(lengths, sequences_per_pack)
    real = np.arange(S)[None, :] < ragged.sum_over_rows(lengths, pack_splits)[:, None]
    out = {}
    for name in spec.tokens:
        out[name] = np.zeros((num_packs, S), dtype=dtypes[name])
        out[name][real] = arrays[name]
    out[spec.sequence_index] = np.zeros((num_packs, S), dtype=np.int32)
    out[spec.sequence_index][real] = np.repeat((slot + 1).astype(np.int32), lengths)
    out[spec.position_ids] = np.zeros((num_packs, S), dtype=np.int32)
    out[spec.position_ids][real] = ragged.position_in_row(lengths)
    per_sequence = {name: arrays[name] + offset if name in spec.offsets else arrays[name]
                    for name in spec.per_sequence}
    per_sequence[spec.slots] = 1
    if spec.starts:
        per_sequence[spec.starts] = offset
    for name, values in per_sequence.items():
        out[name] = np.zeros((num_packs, max_sequences_per_pack), dtype=dtypes[name])
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
            out[name] = np.zeros(filled.shape, dtype=dtypes[name])
            out[name][filled] = values
    return out


def split_overflowing(packs: PackAssignment, counts: np.ndarray, limit: int
                      ) -> tuple[PackAssignment, int]:
    """Packs whose sequences hold more than `limit` predictions in all are
    split into one pack per sequence (each fits on its own). Returns the new
    assignment and the number of packs split."""
    per_pack = packs.sum_per_pack(counts[packs.sequence_indices])
    over = per_pack > limit
    if not over.any():
        return packs, 0
    depths = packs.sequences_per_pack
    split = np.repeat(over, depths)
    new_depths = np.concatenate([depths[~over], np.ones(int(split.sum()), np.int64)])
    order = np.concatenate([packs.sequence_indices[~split], packs.sequence_indices[split]])
    return PackAssignment.from_sequences_per_pack(new_depths, order), int(over.sum())


# ------------------------------------------------------------------ tf side
@dataclasses.dataclass(frozen=True)
class PackOnTheFly:
    """How an input pipeline packs unpacked records as it reads them
    (`pack_dataset` options; the seed is the pipeline's)."""

    max_sequences_per_pack: int = 3
    buffer_size: int = 10_000
    max_wait: int | None = None


def pack_dataset(dataset: tf.data.Dataset, *, max_sequence_length: int,
                 max_sequences_per_pack: int = 3, spec: PackSpec | None = None,
                 max_predictions_per_pack: int | None = None,
                 buffer_size: int = 10_000, max_wait: int | None = None,
                 chunk_size: int | None = None, seed: int = 0,
                 skip_long_sequences: bool = False,
                 num_parallel_calls: int | None = tf.data.AUTOTUNE) -> tf.data.Dataset:
    """Packs a dataset of unpacked examples on the fly.

    Three stages: chunks of examples are compacted (real tokens only) in a
    parallel map; a ``scan`` holds the packer and the waiting examples and
    emits, per chunk, the examples of the packs it decided on, in pack order;
    a second parallel map lays them out as packs. Only the scan is
    sequential, and it moves compact data only.

    Args:
      dataset: elements are dicts of one example's features (not batched).
      max_sequence_length: S, tokens per pack.
      max_sequences_per_pack: D.
      spec: how the features go into a pack; default `PackSpec.pretraining`
        with M = `max_predictions_per_pack` (default: the examples' P + D - 1,
        as the offline packer).
      buffer_size: examples the packer decides over at once (memory: about
        `buffer_size` + 2 `chunk_size` compact examples).
      max_wait: an example that has waited this many later examples leaves
        in the next round (so none waits more than ``max_wait +
        buffer_size``); default twice `buffer_size`.
      chunk_size: examples read per step (default `buffer_size` // 2).
      seed: orders each round's packs.
      skip_long_sequences: skip (and count) examples with more than S tokens
        instead of failing on the first one.
      num_parallel_calls: of the two maps.

    Returns:
      A dataset of packs: dicts of [S], [D] and [M] tensors with static
      shapes; the generated features (sequence index, positions, starts,
      slots) are int32, the others keep the examples' dtypes. Every example
      is in exactly one pack, whole; a finite dataset's last examples are
      flushed into packs at its end.

    Raises:
      ValueError: the elements do not match the spec (every difference listed).
      tf.errors.InvalidArgumentError (while iterating): an example longer
        than S, or malformed, named by its index in the stream.
    """
    element_spec = dataset.element_spec
    if spec is not None and max_predictions_per_pack is not None:
        raise ValueError("give max_predictions_per_pack in the spec "
                         "(PackSpec.pretraining(M)), not beside it")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if spec is None:
        predictions = element_spec.get("masked_lm_weights") \
            if isinstance(element_spec, dict) else None
        if max_predictions_per_pack is None:
            if predictions is None or predictions.shape.rank != 1 \
                    or predictions.shape[0] is None:
                PackSpec.pretraining(1).check_element_spec(element_spec)
            max_predictions_per_pack = int(predictions.shape[0]) + max_sequences_per_pack - 1
        spec = PackSpec.pretraining(max_predictions_per_pack)
    spec.check_element_spec(element_spec)
    S, D = int(max_sequence_length), int(max_sequences_per_pack)
    if spec.predictions:
        per_example = int(element_spec[spec.predictions[0]].shape[0])
        if per_example > spec.max_predictions_per_pack:
            raise ValueError(f"max_predictions_per_pack={spec.max_predictions_per_pack} is "
                             f"less than the {per_example} prediction slots of one example")
    chunk_size = int(chunk_size or max(1, buffer_size // 2))
    packer_options = dict(buffer_size=buffer_size, max_wait=max_wait, seed=seed)
    initial_state = StreamingPacker(S, D, **packer_options).state  # checks the options
    input_names = spec.input_names
    dtypes = {name: element_spec[name].dtype.as_numpy_dtype for name in input_names}
    names = compact_names(spec)
    compact_dtypes = [_compact_dtype(name, dtypes) for name in names]
    outputs = spec.output_shapes(S, D, element_spec)
    output_names = tuple(outputs)
    layout_dtypes = {**dtypes, **{name: outputs[name][1].as_numpy_dtype
                                  for name in outputs}}

    def compact_step(chunk_index, *dense):
        first = int(chunk_index) * chunk_size
        arrays, skipped = compact(spec, dict(zip(input_names, dense)), first, S,
                                  skip_long_sequences)
        if skipped:
            logging.warning("pack_dataset: skipped %d example(s) of more than %d tokens "
                            "among examples %d..%d of the stream", skipped, S, first,
                            first + len(dense[0]) - 1)
        return [arrays[name] for name in names]

    def compact_chunk(chunk_index, features):
        results = tf.numpy_function(compact_step, [chunk_index] + [
            features[name] for name in input_names], compact_dtypes, stateful=False)
        for value in results:
            value.set_shape([None])
        return dict(zip(names, results)), False

    def decide_step(*flat):
        state = dict(zip(STATE_KEYS, flat[:len(STATE_KEYS)]))
        flat = flat[len(STATE_KEYS):]
        buffered = dict(zip(names, flat[:len(names)]))
        chunk = dict(zip(names, flat[len(names):2 * len(names)]))
        final = bool(flat[2 * len(names)])
        # A packer per step, from the scan's state: two iterators of this
        # dataset (tf.distribute may make several) share no Python state.
        packer = StreamingPacker.from_state(state, S, D, **packer_options)
        pool = concatenate([buffered, chunk])
        pool_indices = np.concatenate([packer.buffer_indices,
                                       packer.read + np.arange(chunk["lengths"].size)])
        packs, _ = packer.push(chunk["lengths"])
        if final:
            packs = PackAssignment.concatenate([packs, packer.flush()[0]])
        rows = np.searchsorted(pool_indices, packs.sequence_indices)
        packs = PackAssignment(packs.row_splits, rows)
        if spec.predictions:
            packs, split = split_overflowing(packs, pool["prediction_counts"],
                                             spec.max_predictions_per_pack)
            if split:
                logging.warning("pack_dataset: %d pack(s) held more than %d predictions; "
                                "their sequences went one per pack", split,
                                spec.max_predictions_per_pack)
        emitted = take(spec, pool, packs.sequence_indices)
        if len(packs):
            kept = keep_rows(spec, pool, np.isin(pool_indices, packer.buffer_indices,
                                                 assume_unique=True))
        else:
            kept = pool
        new_state = packer.state
        return ([new_state[key] for key in STATE_KEYS]
                + [kept[name] for name in names] + [packs.sequences_per_pack]
                + [emitted[name] for name in names])

    def decide(carry, element):
        packer_state, buffered = carry
        chunk, final = element
        results = tf.numpy_function(
            decide_step, [packer_state[key] for key in STATE_KEYS]
            + [buffered[name] for name in names] + [chunk[name] for name in names]
            + [final],
            [tf.int64] * len(STATE_KEYS) + compact_dtypes + [tf.int64]
            + compact_dtypes, stateful=False)
        for value in results:
            value.set_shape([None])
        new_packer = dict(zip(STATE_KEYS, results[:len(STATE_KEYS)]))
        new_packer["counters"].set_shape([2])
        rest = results[len(STATE_KEYS):]
        new_buffer = dict(zip(names, rest[:len(names)]))
        sequences_per_pack = rest[len(names)]
        emitted = dict(zip(names, rest[len(names) + 1:]))
        return (new_packer, new_buffer), (sequences_per_pack, emitted)

    def layout_step(sequences_per_pack, *flat):
        out = layout(spec, dict(zip(names, flat)), sequences_per_pack, S, D,
                     layout_dtypes)
        return [out[name] for name in output_names]

    def lay_out(sequences_per_pack, emitted):
        results = tf.numpy_function(
            layout_step, [sequences_per_pack] + [emitted[name] for name in names],
            [outputs[name][1] for name in output_names], stateful=False)
        packs = dict(zip(output_names, results))
        for name, value in packs.items():
            value.set_shape([None] + outputs[name][0])
        return packs

    # The elements hold exactly the spec's features (check_element_spec).
    chunks = dataset.batch(chunk_size).enumerate() \
        .map(compact_chunk, num_parallel_calls=num_parallel_calls, deterministic=True)
    end = {name: tf.zeros([0], dtype) for name, dtype in zip(names, compact_dtypes)}
    chunks = chunks.concatenate(tf.data.Dataset.from_tensors((end, True)))
    initial = ({key: tf.constant(value) for key, value in initial_state.items()}, dict(end))
    packed = chunks.scan(initial, decide) \
        .map(lay_out, num_parallel_calls=num_parallel_calls, deterministic=True).unbatch()
    options = tf.data.Options()
    # The numpy steps are pure functions of their inputs; the state is the scan's.
    options.experimental_external_state_policy = \
        tf.data.experimental.ExternalStatePolicy.IGNORE
    return packed.with_options(options)


def _compact_dtype(name: str, dtypes: dict):
    if name in ("lengths", "prediction_counts"):
        return tf.int64
    return tf.as_dtype(dtypes[name])
