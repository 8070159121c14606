"""Packing on the fly: `pack_dataset`, a tf.data transformation.

Takes a dataset of unpacked examples (one sequence each, padded to a fixed
length) and yields packs in the packed layout (docs/formats.md), with static
shapes, ready for ``batch``. Which sequences share a pack is decided by
`packed_bert_tf.packing.streaming_packer.StreamingPacker` (near the LP bound with a
bounded buffer; see there); how an example's features go into a pack is
described by a `PackSpec` and laid out by `packed_bert_tf.data.packed.packed_rows`,
as every packed row of the project is.

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

from packed_bert_tf.data.packed.packed_rows import (
    PackSpec,
    compact,
    concatenate,
    keep_rows,
    lay_out,
    take,
)
from packed_bert_tf.packing import PackAssignment, replan_overflowing_packs
from packed_bert_tf.packing.streaming_packer import STATE_KEYS, StreamingPacker


# ------------------------------------------------------------------ tf side
@dataclasses.dataclass(frozen=True)
class PackOnTheFly:
    """How `pack_dataset` packs a stream (an input pipeline's unpacked records, as
    it reads them; the seed is the pipeline's).

    Attributes:
      max_sequences_per_pack: D.
      buffer_size: examples the packer decides over at once (memory: about
        `buffer_size` + 2 `chunk_size` compact examples).
      max_wait: an example that has waited this many later examples leaves
        in the next round (so none waits more than ``max_wait +
        buffer_size``); default twice `buffer_size`.
      chunk_size: examples read per step (default `buffer_size` // 2); the
        packs do not depend on it.
    """

    max_sequences_per_pack: int = 3
    buffer_size: int = 10_000
    max_wait: int | None = None
    chunk_size: int | None = None


def pack_dataset(dataset: tf.data.Dataset, *, max_sequence_length: int,
                 packing: PackOnTheFly = PackOnTheFly(), spec: PackSpec | None = None,
                 max_predictions_per_pack: int | None = None, seed: int = 0,
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
      packing: D, the packer's buffer and wait, and the examples read per
        step (`PackOnTheFly`).
      spec: how the features go into a pack; default `PackSpec.pretraining`
        with M = `max_predictions_per_pack` (default: the examples' P + D - 1,
        as the offline packer).
      max_predictions_per_pack: M of the default spec (not with ``spec``).
      seed: orders each round's packs.
      skip_long_sequences: skip (and count) examples with more than S tokens
        instead of failing on the first one.
      num_parallel_calls: of the two maps.

    Returns:
      A dataset of packs: dicts of [S], [D] and [M] tensors with static
      shapes; the generated features (sequence index, positions, starts,
      slots) are int32, the others keep the examples' dtypes. Every example
      is in exactly one pack, whole; a finite dataset's last examples are
      flushed into packs at its end. The sequences of a pack that would hold
      more than M predictions are re-planned, as the offline packer does
      (`packed_bert_tf.packing.replan_overflowing_packs`).
      ``packed_bert_tf.data.inputs.pretraining_dataset.with_sequence_offsets(packs,
      packing.max_sequences_per_pack)`` adds the sequence offsets.

    Raises:
      ValueError: the elements do not match the spec (every difference listed).
      tf.errors.InvalidArgumentError (while iterating): an example longer
        than S, or malformed, named by its index in the stream.
    """
    element_spec = dataset.element_spec
    max_sequences_per_pack, buffer_size = packing.max_sequences_per_pack, packing.buffer_size
    chunk_size = packing.chunk_size
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
    steps = PackingSteps(spec, S, D, {name: element_spec[name].dtype.as_numpy_dtype
                                      for name in spec.input_names},
                         dict(buffer_size=buffer_size, max_wait=packing.max_wait,
                              seed=seed),
                         chunk_size, skip_long_sequences)
    # The elements hold exactly the spec's features (check_element_spec).
    chunks = dataset.batch(chunk_size).enumerate() \
        .map(steps.compact_chunk, num_parallel_calls=num_parallel_calls, deterministic=True)
    end = steps.empty_chunk()
    chunks = chunks.concatenate(tf.data.Dataset.from_tensors((end, True)))
    packed = chunks.scan(steps.initial_state(), steps.decide_chunk) \
        .map(steps.to_packs, num_parallel_calls=num_parallel_calls, deterministic=True) \
        .unbatch()
    options = tf.data.Options()
    # The numpy steps are pure functions of their inputs; the state is the scan's.
    options.experimental_external_state_policy = \
        tf.data.experimental.ExternalStatePolicy.IGNORE
    return packed.with_options(options)


class PackingSteps:
    """The three steps of `pack_dataset`, each a pure function of explicit state.

    In the manner of Grain's packers, what packing carries from one chunk to
    the next is named and whole: the `StreamingPacker`'s state (its
    ``STATE_KEYS`` arrays) and the waiting examples in compact form
    (`packed_bert_tf.data.packed.packed_rows`). `decide` takes that state and a
    chunk and returns the next state and the packs decided on, so that the
    state can live in a ``tf.data`` ``scan`` and be checkpointed with the
    iterator. The numpy methods (`compact`, `decide`, `lay_out`) hold the
    logic; the others wrap them in ``tf.numpy_function`` with static shapes.
    """

    def __init__(self, spec: PackSpec, max_sequence_length: int,
                 max_sequences_per_pack: int, input_dtypes: dict, packer_options: dict,
                 chunk_size: int, skip_long: bool):
        self.spec, self.S, self.D = spec, max_sequence_length, max_sequences_per_pack
        self.packer_options = packer_options
        self.chunk_size, self.skip_long = chunk_size, skip_long
        self.input_dtypes = {name: np.dtype(dtype) for name, dtype in input_dtypes.items()}
        self.names = spec.compact_names
        self.compact_dtypes = [_compact_dtype(name, self.input_dtypes)
                               for name in self.names]
        self.outputs = spec.output_shapes(max_sequence_length, max_sequences_per_pack,
                                          self.input_dtypes)
        self.layout_dtypes = {**self.input_dtypes,
                              **{name: shape_and_dtype[1]
                                 for name, shape_and_dtype in self.outputs.items()}}
        # Checks the options, and is the state before the first chunk.
        self._initial_packer = StreamingPacker(max_sequence_length, max_sequences_per_pack,
                                               **packer_options).state

    # ------------------------------------------------------------ numpy
    def compact(self, chunk_index: int, dense: dict) -> dict:
        """A chunk of dense examples -> compact arrays (long ones skipped or refused)."""
        first = int(chunk_index) * self.chunk_size
        arrays, skipped = compact(self.spec, dense, first, self.S, self.skip_long)
        if skipped:
            count = len(next(iter(dense.values())))
            logging.warning("pack_dataset: skipped %d example(s) of more than %d tokens "
                            "among examples %d..%d of the stream", skipped, self.S, first,
                            first + count - 1)
        return arrays

    def decide(self, packer_state: dict, buffered: dict, chunk: dict, final: bool):
        """One chunk into the packer: returns (packer state, waiting examples,
        sequences per pack, the examples of the packs decided, in pack order)."""
        spec = self.spec
        # A packer per step, from the state: two iterators of this dataset
        # (tf.distribute may make several) share no Python state.
        packer = StreamingPacker.from_state(packer_state, self.S, self.D,
                                            **self.packer_options)
        pool = concatenate([buffered, chunk])
        pool_indices = np.concatenate([packer.buffer_indices,
                                       packer.read + np.arange(chunk["lengths"].size)])
        packs, _ = packer.push(chunk["lengths"])
        if final:
            packs = PackAssignment.concatenate([packs, packer.flush()[0]])
        rows = np.searchsorted(pool_indices, packs.sequence_indices)
        packs = PackAssignment(packs.row_splits, rows)
        if spec.predictions:
            # As the offline packer: the overflowing packs' sequences are
            # packed again, which keeps most of the packing.
            packs, replanned = replan_overflowing_packs(
                packs, pool["lengths"], pool["prediction_counts"],
                limit=spec.max_predictions_per_pack, max_sequence_length=self.S,
                max_sequences_per_pack=self.D, seed=self.packer_options["seed"])
            if replanned:
                logging.warning("pack_dataset: %d sequence(s) re-planned into new packs: "
                                "their packs held more than %d predictions", replanned,
                                spec.max_predictions_per_pack)
        emitted = take(spec, pool, packs.sequence_indices)
        kept = pool
        if len(packs):
            kept = keep_rows(spec, pool, np.isin(pool_indices, packer.buffer_indices,
                                                 assume_unique=True))
        return packer.state, kept, packs.sequences_per_pack, emitted

    def lay_out(self, sequences_per_pack: np.ndarray, emitted: dict) -> dict:
        """The examples of the packs decided -> packs (`packed_rows.lay_out`)."""
        return lay_out(self.spec, emitted, sequences_per_pack, self.S, self.D,
                       self.layout_dtypes)

    # ----------------------------------------------------- tf.data wrappers
    # The map and scan functions are not converted by AutoGraph: their control
    # flow is Python's, on lists.
    def initial_state(self):
        """The ``scan`` state before the first chunk: (packer, waiting examples)."""
        return ({key: tf.constant(value) for key, value in self._initial_packer.items()},
                self.empty_chunk())

    def empty_chunk(self) -> dict:
        return {name: tf.zeros([0], dtype)
                for name, dtype in zip(self.names, self.compact_dtypes)}

    @tf.autograph.experimental.do_not_convert
    def compact_chunk(self, chunk_index, features):
        input_names = self.spec.input_names

        def step(index, *dense):
            arrays = self.compact(index, dict(zip(input_names, dense)))
            return [arrays[name] for name in self.names]

        results = tf.numpy_function(step, [chunk_index] + [
            features[name] for name in input_names], self.compact_dtypes, stateful=False)
        for value in results:
            value.set_shape([None])
        return dict(zip(self.names, results)), False

    @tf.autograph.experimental.do_not_convert
    def decide_chunk(self, carry, element):
        names = self.names

        def step(*flat):
            packer_state = dict(zip(STATE_KEYS, flat[:len(STATE_KEYS)]))
            flat = flat[len(STATE_KEYS):]
            new_state, kept, sequences_per_pack, emitted = self.decide(
                packer_state, dict(zip(names, flat[:len(names)])),
                dict(zip(names, flat[len(names):2 * len(names)])),
                bool(flat[2 * len(names)]))
            return ([new_state[key] for key in STATE_KEYS] + [kept[name] for name in names]
                    + [sequences_per_pack] + [emitted[name] for name in names])

        packer_state, buffered = carry
        chunk, final = element
        results = tf.numpy_function(
            step, [packer_state[key] for key in STATE_KEYS]
            + [buffered[name] for name in names] + [chunk[name] for name in names]
            + [final],
            [tf.int64] * len(STATE_KEYS) + self.compact_dtypes + [tf.int64]
            + self.compact_dtypes, stateful=False)
        for value in results:
            value.set_shape([None])
        new_packer = dict(zip(STATE_KEYS, results[:len(STATE_KEYS)]))
        new_packer["counters"].set_shape([2])
        rest = results[len(STATE_KEYS):]
        new_buffer = dict(zip(names, rest[:len(names)]))
        sequences_per_pack = rest[len(names)]
        emitted = dict(zip(names, rest[len(names) + 1:]))
        return (new_packer, new_buffer), (sequences_per_pack, emitted)

    @tf.autograph.experimental.do_not_convert
    def to_packs(self, sequences_per_pack, emitted):
        output_names = tuple(self.outputs)

        def step(depths, *flat):
            out = self.lay_out(depths, dict(zip(self.names, flat)))
            return [out[name] for name in output_names]

        results = tf.numpy_function(
            step, [sequences_per_pack] + [emitted[name] for name in self.names],
            [tf.as_dtype(self.outputs[name][1]) for name in output_names], stateful=False)
        packs = dict(zip(output_names, results))
        for name, value in packs.items():
            value.set_shape([None] + self.outputs[name][0])
        return packs


def _compact_dtype(name: str, dtypes: dict):
    if name in ("lengths", "prediction_counts"):
        return tf.int64
    return tf.as_dtype(dtypes[name])
