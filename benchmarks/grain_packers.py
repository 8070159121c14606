"""Grain's greedy packers run on a stream of lengths, their packs as a `StreamPacking`.

Google's Grain packs a stream of sequences with
``grain.experimental.FirstFitPackIterDataset`` and
``grain.experimental.BestFitPackIterDataset``: a window of
``num_packing_bins`` bins takes each sequence, in stream order, into the
first bin where it fits (first fit) or the one it fills best (best fit);
when it fits in none, the whole window is emitted and a new one starts with
that sequence. The benchmark and the tests compare our streaming packer
(`packed_bert_tf.packing.streaming_packer`) with them: `grain_pack` runs Grain
itself (the ``reference`` extra: ``pip install -e '.[reference]'``) on
elements of one feature of each sequence's length, carrying the stream
index as a meta-feature, and reads back which sequences share each emitted
pack and how many sequences Grain had read when it emitted it.
"""

from __future__ import annotations

import numpy as np

from packed_bert_tf.packing.assign import PackAssignment
from packed_bert_tf.packing.stream_packing import StreamPacking


def grain_pack(lengths, max_sequence_length: int, max_sequences_per_pack: int | None,
               num_bins: int, *, best_fit: bool) -> StreamPacking:
    """Packs a stream of lengths with Grain's first-fit or best-fit packer.

    Args:
      lengths: [N] int. Length of every sequence, in stream order; each in
        ``1..max_sequence_length``.
      max_sequence_length: capacity of a pack in tokens (Grain's
        ``length_struct``).
      max_sequences_per_pack: int or None. Grain's ``max_sequences_per_bin``;
        None for no limit.
      num_bins: Grain's ``num_packing_bins``.
      best_fit: ``BestFitPackIterDataset`` if true, else
        ``FirstFitPackIterDataset``.

    Returns:
      A `StreamPacking`: packs in the order Grain emits them
      (``shuffle_bins=False``: window after window, bins in order), each
      listing its stream indices in the order Grain placed them;
      ``read_at_emission`` counts the sequences Grain had read from its source
      when it emitted the pack.
    """
    import grain
    import grain.experimental

    lengths = np.asarray(lengths, dtype=np.int64)
    read = 0

    def element(index):
        nonlocal read
        read += 1  # the packer asks its source for one sequence
        return {"tokens": np.zeros(int(lengths[index]), dtype=np.int8), "index": index}

    # No threads, no prefetch: the source is read only when the packer asks.
    source = grain.MapDataset.range(lengths.size).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)).map(element)
    packer = (grain.experimental.BestFitPackIterDataset if best_fit
              else grain.experimental.FirstFitPackIterDataset)
    packed = packer(source, length_struct={"tokens": max_sequence_length},
                    num_packing_bins=num_bins, shuffle_bins=False,
                    meta_features=("index",),
                    max_sequences_per_bin=max_sequences_per_pack)
    packs, read_at_emission = [], np.zeros(lengths.size, dtype=np.int64)
    for row in packed:
        pack = [int(index) for index in row["index"]]
        packs.append(pack)
        read_at_emission[pack] = read
    assignment = PackAssignment.from_sequences_per_pack(
        [len(pack) for pack in packs], [index for pack in packs for index in pack])
    return StreamPacking(assignment=assignment, read_at_emission=read_at_emission)
