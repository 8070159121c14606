"""`BertBackbone`: the encoder object every task model wraps."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import (
    BertBackbone,
    BertClassifierModel,
    BertPretrainingModel,
    BertSquadModel,
)
from tests.layers import numpy_reference
from tests.models.packed_batches import TINY_CONFIG, layout, random_packs

pytestmark = pytest.mark.slow  # several models built, run and saved

S, D, M = 32, 3, 8


@pytest.fixture(scope="module")
def features():
    packs = random_packs(np.random.default_rng(0), 3, num_packs=2, sequence_length=S)
    packed = layout(packs, sequence_length=S, max_sequences_per_pack=D, max_masked=M)[0]
    names = ("input_ids", "segment_ids", "input_mask", "positions",
             "next_sentence_positions")
    return {name: np.asarray(packed[name]) for name in names}


@pytest.fixture(scope="module")
def backbone():
    tf.random.set_seed(0)
    backbone = BertBackbone(TINY_CONFIG)
    backbone.build()
    return backbone


def test_pooler_at_every_cls(backbone, features):
    cls_positions = features["next_sentence_positions"]
    outputs = backbone(features, cls_positions)
    sequence_output = outputs["sequence_output"].numpy()
    assert sequence_output.shape == (2, S, 32)
    first_tokens = np.take_along_axis(sequence_output, cls_positions[:, :, None], axis=1)
    expected = np.tanh(numpy_reference.dense(first_tokens, backbone.pooler_dense))
    np.testing.assert_allclose(outputs["pooled_output"], expected, atol=1e-5)
    # Without offsets the pooler runs at each row's first token.
    np.testing.assert_allclose(backbone(features)["pooled_output"], expected[:, :1],
                               atol=1e-5)
    assert backbone.pooler_dense.name == "pooler"


def test_without_pooler_only_the_sequence_output(features):
    backbone = BertBackbone(TINY_CONFIG, pooler=False)
    assert set(backbone(features)) == {"sequence_output"}
    # 3 tables + 2 norm; 16 per block.
    assert len(backbone.weights) == 5 + 16 * 2


def test_config_and_keras_file_round_trip(backbone, features, tmp_path):
    restored = BertBackbone.from_config(backbone.get_config())
    assert restored.get_config() == backbone.get_config()
    path = str(tmp_path / "backbone.keras")
    backbone.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, BertBackbone)
    cls_positions = features["next_sentence_positions"]
    for name, value in backbone(features, cls_positions).items():
        np.testing.assert_array_equal(loaded(features, cls_positions)[name], value)


def test_every_task_model_takes_one(backbone, features):
    pretraining = BertPretrainingModel(BertBackbone(TINY_CONFIG))
    classifier = BertClassifierModel(BertBackbone(TINY_CONFIG, packed=False), 3)
    squad = BertSquadModel.from_bert_config(TINY_CONFIG)
    for model in (pretraining, classifier, squad):
        model.build()
        assert isinstance(model.backbone, BertBackbone)
        assert model.bert_config is model.backbone.bert_config
        # Built by the task model: the weight paths hold its name.
        assert model.backbone.weights[0].path == (
            f"{model.name}/backbone/embeddings/word_embeddings/embeddings")
    assert (pretraining.packed, classifier.packed, squad.packed) == (True, False, True)
    assert squad.backbone.pooler_dense is None
    pretraining.backbone.copy_weights_from(backbone)
    outputs = pretraining({**features, "masked_lm_positions": np.zeros((2, M), np.int32)})
    expected = backbone(features, features["next_sentence_positions"])
    np.testing.assert_allclose(outputs["sequence_output"], expected["sequence_output"],
                               atol=1e-6)
    np.testing.assert_allclose(outputs["pooled_output"], expected["pooled_output"],
                               atol=1e-6)


def test_compute_dtype_under_mixed_precision(features):
    outputs = BertBackbone(TINY_CONFIG, dtype="mixed_float16")(features)
    assert outputs["sequence_output"].dtype == tf.float16
    assert outputs["pooled_output"].dtype == tf.float16


def test_a_backbone_that_does_not_fit_is_one_clear_error():
    with pytest.raises(TypeError) as error:
        BertSquadModel(TINY_CONFIG)
    assert str(error.value) == ("BertSquadModel takes a BertBackbone, got a BertConfig "
                                "(BertSquadModel.from_bert_config(config) builds one from "
                                "a config)")
    with pytest.raises(ValueError) as error:
        BertClassifierModel(BertBackbone(TINY_CONFIG, pooler=False), 2)
    assert str(error.value) == ("BertClassifierModel reads the pooled output: its "
                                "BertBackbone needs pooler=True, got pooler=False")
    with pytest.raises(ValueError) as error:
        BertSquadModel(BertBackbone(TINY_CONFIG))
    assert str(error.value) == ("BertSquadModel reads no pooled output: its BertBackbone "
                                "needs pooler=False, got pooler=True")


def test_the_task_model_takes_the_backbones_dtype_policy():
    model = BertSquadModel(BertBackbone(TINY_CONFIG, pooler=False, dtype="mixed_bfloat16"))
    assert model.dtype_policy.name == model.span_head.dtype_policy.name == "mixed_bfloat16"
    assert BertSquadModel.from_bert_config(
        TINY_CONFIG, dtype="mixed_float16").backbone.dtype_policy.name == "mixed_float16"
