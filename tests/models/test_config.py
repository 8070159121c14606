import dataclasses
import json

import pytest

from packed_bert_tf.models import BertConfig

# google-research/bert's uncased_L-12_H-768_A-12/bert_config.json.
BERT_BASE = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 512,
    "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2,
    "vocab_size": 30522,
}


def _write(tmp_path, values, name="bert_config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def test_reads_the_standard_bert_config(tmp_path):
    config = BertConfig.from_json_file(_write(tmp_path, BERT_BASE))
    assert config.hidden_size == 768 and config.vocab_size == 30522
    assert config.num_hidden_layers == 12 and config.hidden_act == "gelu"
    assert config.to_dict() == BERT_BASE


def test_json_round_trip_and_frozen(tmp_path):
    config = BertConfig.from_json_file(_write(tmp_path, BERT_BASE))
    config.to_json_file(tmp_path / "copy.json")
    assert BertConfig.from_json_file(tmp_path / "copy.json") == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hidden_size = 1024


def test_extra_keys_of_multilingual_configs_are_ignored(tmp_path):
    values = dict(BERT_BASE, directionality="bidi", pooler_type="first_token_transform")
    assert BertConfig.from_json_file(_write(tmp_path, values)).hidden_size == 768


def test_missing_key_names_the_file_and_the_key(tmp_path):
    values = dict(BERT_BASE)
    del values["intermediate_size"]
    path = _write(tmp_path, values)
    with pytest.raises(ValueError, match=rf"^{path}: missing key 'intermediate_size'$"):
        BertConfig.from_json_file(path)


@pytest.mark.parametrize("key, value, expected", [
    ("hidden_size", "768", "key 'hidden_size' must be a positive integer, got '768'"),
    ("num_hidden_layers", 0, "key 'num_hidden_layers' must be a positive integer, got 0"),
    ("vocab_size", True, "key 'vocab_size' must be a positive integer, got True"),
    ("hidden_dropout_prob", 1.5, "key 'hidden_dropout_prob' must be a number in [0, 1)"),
    ("initializer_range", -0.02, "key 'initializer_range' must be a positive number"),
    ("hidden_act", "swish",
     "key 'hidden_act' must be one of 'gelu', 'gelu_exact', 'linear', 'relu'"),
    ("num_attention_heads", 7, "key 'hidden_size' (768) must be divisible by "
                               "'num_attention_heads' (7)"),
])
def test_bad_values_name_the_file_and_the_key(tmp_path, key, value, expected):
    path = _write(tmp_path, dict(BERT_BASE, **{key: value}))
    with pytest.raises(ValueError) as error:
        BertConfig.from_json_file(path)
    assert str(error.value).startswith(f"{path}: {expected}")


def test_not_json_or_not_an_object(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text("{hidden_size: 768")
    with pytest.raises(ValueError, match="not valid JSON"):
        BertConfig.from_json_file(path)
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        BertConfig.from_json_file(_write(tmp_path, [1, 2]))


def test_direct_construction_is_validated():
    with pytest.raises(ValueError, match="BertConfig: key 'hidden_size' must be a "
                                         "positive integer, got -1"):
        BertConfig(vocab_size=10, hidden_size=-1, num_hidden_layers=1,
                   num_attention_heads=1, intermediate_size=4)
