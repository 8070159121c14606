"""Packing on the fly: `pack_dataset`, a tf.data transformation.

Takes a dataset of unpacked examples (one sequence each, padded to a fixed
length) and yields packs in the packed layout (docs/formats.md), with static
shapes, ready for ``batch``. Which sequences share a pack is decided by
`packed_bert_tf.packing.streaming.StreamingPacker` (near the LP bound with a
bounded buffer; see there); how an example's features go into a pack is
described by a `PackSpec` and laid out by `packed_bert_tf.data.packed_rows`,
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

from packed_bert_tf.data.packed_rows import (PackSpec, compact, concatenate, keep_rows,
                                             lay_out, take)
from packed_bert_tf.packing import PackAssignment
from packed_bert_tf.packing.streaming import STATE_KEYS, StreamingPacker


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
    dtypes = {name: np.dtype(element_spec[name].dtype.as_numpy_dtype)
              for name in input_names}
    names = spec.compact_names
    compact_dtypes = [_compact_dtype(name, dtypes) for name in names]
    outputs = spec.output_shapes(S, D, dtypes)
    output_names = tuple(outputs)
    layout_dtypes = {**dtypes, **{name: outputs[name][1] for name in outputs}}

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
        out = lay_out(spec, dict(zip(names, flat)), sequences_per_pack, S, D,
                      layout_dtypes)
        return [out[name] for name in output_names]

    def to_packs(sequences_per_pack, emitted):
        results = tf.numpy_function(
            layout_step, [sequences_per_pack] + [emitted[name] for name in names],
            [tf.as_dtype(outputs[name][1]) for name in output_names], stateful=False)
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
        .map(to_packs, num_parallel_calls=num_parallel_calls, deterministic=True).unbatch()
    options = tf.data.Options()
    # The numpy steps are pure functions of their inputs; the state is the scan's.
    options.experimental_external_state_policy = \
        tf.data.experimental.ExternalStatePolicy.IGNORE
    return packed.with_options(options)


def _compact_dtype(name: str, dtypes: dict):
    if name in ("lengths", "prediction_counts"):
        return tf.int64
    return tf.as_dtype(dtypes[name])
