"""Pre-training records and the compact form, both ways (numpy only).

The record formats are `packed_bert_tf.data.records.record_format`'s; the
compact form, its checks and the layout are `packed_rows`', under
``PackSpec.pretraining(M)``:

- `compact_records`: unpacked records -> compact sequences, in the narrowest
  integer types that hold them (what the offline packer's stages hold and
  pass on);
- `pack_records`: compact sequences and their packs -> packed records;
- `unpack_records`: packed records -> compact sequences, every rule of the
  packed format checked on the way.

Sequences compare across the three with `packed_rows.fingerprints`.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from packed_bert_tf.data.packed.packed_rows import (
    PackSpec,
    RowShape,
    compact,
    lay_out_packs,
    unpack_rows,
)
from packed_bert_tf.data.records.record_format import FLOAT_FEATURE_NAMES, RecordFormat
from packed_bert_tf.packing import PackAssignment


def compact_records(arrays: Mapping[str, np.ndarray], *, source: str = "records",
                    first_record: int = 0) -> dict:
    """Unpacked records (the MLPerf feature arrays [C, ...]) -> compact sequences.

    Token ids come as uint16 where every real one fits (BERT vocabularies
    do), segment ids and next-sentence labels as int8, masked-LM positions as
    int16 (S <= 32,768) and ids as int32: the same values in a third of the
    memory of int64. The arrays share no memory with `arrays`.

    Raises:
      ValueError: ``SOURCE: record I: ...`` for the first record that breaks
        the format (`packed_rows.compact`).
    """
    max_seq_length = np.asarray(arrays["input_mask"]).shape[1]
    spec = PackSpec.pretraining(np.asarray(arrays["masked_lm_weights"]).shape[1])
    out, _ = compact(spec, {name: arrays[name] for name in spec.input_names},
                     first_record, max_seq_length, False, source=source)
    token_ids = out["input_ids"]
    fits = not token_ids.size or (0 <= token_ids.min() and token_ids.max() < 1 << 16)
    out["input_ids"] = token_ids.astype(np.uint16 if fits else np.int32)
    out["segment_ids"] = out["segment_ids"].astype(np.int8)
    out["next_sentence_labels"] = out["next_sentence_labels"].astype(np.int8)
    out["masked_lm_positions"] = out["masked_lm_positions"].astype(
        np.int16 if max_seq_length <= 1 << 15 else np.int32)
    out["masked_lm_ids"] = out["masked_lm_ids"].astype(np.int32)
    return out


def pack_records(arrays: dict, packs: PackAssignment, record_format: RecordFormat, *,
                 narrow: bool = False) -> dict[str, np.ndarray]:
    """Compact sequences (in sequence order) -> packed records: name ->
    [len(packs), length], int32 (masked_lm_weights float32).

    Pack k holds the sequences ``packs[k]`` in that order, laid out by
    `packed_rows.lay_out_packs` under ``PackSpec.pretraining(M)``; `packs` may
    hold any of the sequences. Cost O(tokens + packs x (S + D + M)).

    With ``narrow``, the four [P, S] token features come in narrower integer
    types that hold their values (input_ids and segment_ids in the sequences'
    types, input_mask uint8, positions int16): the same values, a quarter to
    half the memory for the encoder to read.

    Raises:
      ValueError: if a pack holds more than S tokens, D sequences or M
        masked-LM predictions (`packed_bert_tf.packing.replan_overflowing_packs`
        re-plans such packs).
    """
    max_len, max_depth = record_format.max_seq_length, record_format.max_sequences_per_pack
    dtypes = {name: np.float32 for name in FLOAT_FEATURE_NAMES}
    if narrow:
        dtypes.update(input_ids=arrays["input_ids"].dtype,
                      segment_ids=arrays["segment_ids"].dtype,
                      input_mask=np.uint8 if max_depth <= 0xFF else np.int32,
                      positions=np.int16 if max_len <= 1 << 15 else np.int32)
    out = lay_out_packs(PackSpec.pretraining(record_format.max_masked_tokens), arrays,
                        packs, RowShape(max_len, max_depth), dtypes)
    return {name: out[name] for name in record_format.feature_names}


def unpack_records(arrays: Mapping[str, np.ndarray], *, source: str = "records",
                   first_record: int = 0) -> tuple[dict, np.ndarray]:
    """Packed records -> their sequences in compact form, record by record in
    pack order, and each one's record index; every rule of the packed format
    checked (`packed_rows.unpack_rows`).

    Raises:
      ValueError: ``SOURCE: record I: RULE`` for the first record that breaks
        a rule.
    """
    spec = PackSpec.pretraining(np.asarray(arrays["masked_lm_weights"]).shape[1])
    return unpack_rows(spec, arrays, source=source, first_row=first_record)
