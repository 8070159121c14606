"""`IdLimits`: which ids of a record a model can look up, and the first that it cannot."""

import numpy as np
import pytest

from packed_bert_tf.data.records.record_format import IdLimits, RecordFormat
from packed_bert_tf.models import BertConfig

LIMITS = IdLimits(vocab_size=100, type_vocab_size=2, max_position_embeddings=8)


def _packed(changes):
    """Two packs of S = 8 (M = 3), every id in range."""
    arrays = {"input_ids": np.array([[2, 50, 3, 2, 60, 61, 3, 0],
                                     [2, 70, 71, 72, 3, 0, 0, 0]]),
              "segment_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 0],
                                       [0, 0, 0, 1, 1, 0, 0, 0]]),
              "positions": np.array([[0, 1, 2, 0, 1, 2, 3, 0],
                                     [0, 1, 2, 3, 4, 0, 0, 0]]),
              "masked_lm_positions": np.array([[1, 5, 0], [2, 0, 0]]),
              "masked_lm_ids": np.array([[50, 61, 0], [71, 0, 0]])}
    for (name, row, column), value in changes.items():
        arrays[name][row, column] = value
    return arrays


def test_the_limits_of_each_format():
    packed = RecordFormat.packed(8, 3, 2)
    assert LIMITS.limits(packed.feature_names, 8) == {
        "input_ids": 100, "masked_lm_ids": 100, "segment_ids": 2, "positions": 8,
        "masked_lm_positions": 8}
    unpacked = RecordFormat.unpacked(8, 2)
    assert "positions" not in LIMITS.limits(unpacked.feature_names, 8)
    config = BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1,
                        num_attention_heads=1, intermediate_size=8, type_vocab_size=2,
                        max_position_embeddings=512)
    assert IdLimits.of_config(config) == IdLimits(30522, 2, 512)


@pytest.mark.parametrize("changes, expected", [
    ({}, None),
    ({("input_ids", 1, 2): 100}, (1, 2, "token id 100 is out of range for vocab_size "
                                        "100 of --bert_config_file")),
    ({("masked_lm_ids", 0, 1): -1}, (0, 1, "token id -1 is out of range for vocab_size "
                                           "100 of --bert_config_file")),
    ({("segment_ids", 1, 4): 2}, (1, 4, "segment id 2 is out of range for "
                                        "type_vocab_size 2 of --bert_config_file")),
    ({("positions", 1, 4): 8}, (1, 4, "position 8 is out of range for "
                                      "max_position_embeddings 8 of --bert_config_file")),
    ({("masked_lm_positions", 0, 2): 8}, (0, 2, "masked-LM position 8 is out of range "
                                                "for the sequence length 8")),
    # The first row wins, whichever feature.
    ({("positions", 1, 0): 9, ("segment_ids", 0, 7): 5},
     (0, 7, "segment id 5 is out of range for type_vocab_size 2 of --bert_config_file")),
])
def test_the_first_id_out_of_range_is_found(changes, expected):
    assert LIMITS.first_out_of_range(_packed(changes)) == expected
