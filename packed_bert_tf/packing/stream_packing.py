"""What packing a stream gives: `StreamPacking`, made by the streaming packer
(`packed_bert_tf.packing.streaming_packer`) and, for comparison, from Grain's greedy
packers by the benchmarks."""

from __future__ import annotations

import dataclasses

import numpy as np

from packed_bert_tf.packing.assign import PackAssignment


@dataclasses.dataclass(frozen=True, eq=False)
class StreamPacking:
    """Packs of a stream of sequences, in the order they were emitted.

    Attributes:
      assignment: `PackAssignment`, packs as ragged rows of stream indices
        (0 = the first sequence read).
      read_at_emission: [N] int64, for each sequence (by stream index), how
        many sequences had been read when its pack was emitted: sequence i
        waited ``read_at_emission[i] - i - 1`` later sequences in the buffer.
    """

    assignment: PackAssignment
    read_at_emission: np.ndarray

    @property
    def num_packs(self) -> int:
        return len(self.assignment)

    @property
    def waits(self) -> np.ndarray:
        """[N] number of later sequences read while each sequence waited."""
        return self.read_at_emission - np.arange(1, self.read_at_emission.size + 1)

    def efficiency(self, lengths, max_sequence_length: int) -> float:
        """Real tokens over the packs' capacity (1.0: no padding)."""
        total = int(np.asarray(lengths, dtype=np.int64).sum())
        return total / (self.num_packs * max_sequence_length) if self.num_packs else 1.0
