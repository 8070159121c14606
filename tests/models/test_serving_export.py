"""Every model of the package exports as a SavedModel that serves packed batches."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.models import BertSquadModel, export_for_serving, serving_input_signature
from tests.models.model_cases import CASES_BY_NAME, MODEL_CASES, S, model_of
from tests.models.packed_batches import TINY_CONFIG

pytestmark = pytest.mark.slow  # three SavedModel exports

CASES = pytest.mark.parametrize("case", MODEL_CASES, ids=[c.name for c in MODEL_CASES])


@CASES
def test_exported_saved_model_serves_the_models_logits(case, tmp_path):
    model = model_of(case)
    export_dir = export_for_serving(model, str(tmp_path / "serving"), max_seq_length=S,
                                    **case.export_sizes)
    served = tf.saved_model.load(export_dir)
    signature = served.signatures["serving_default"]
    _, inputs = signature.structured_input_signature
    features = model.input_features()
    assert set(inputs) == set(features)
    for name, spec in inputs.items():
        assert spec.dtype == tf.int32 and spec.shape[0] is None, name
    assert set(signature.structured_outputs) == set(model.SERVING_OUTPUTS)

    batch = case.make_batch(5)
    want = model({name: batch[name] for name in features})
    got = signature(**{name: tf.constant(batch[name]) for name in features})
    also = served.serve(*[tf.constant(batch[name]) for name in features])
    for name in model.SERVING_OUTPUTS:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(also[name], want[name], rtol=0, atol=1e-6,
                                   err_msg=name)
    # Any batch size: B is free in the signature.
    one = signature(**{name: tf.constant(batch[name][:1]) for name in features})
    np.testing.assert_allclose(one[model.SERVING_OUTPUTS[0]],
                               want[model.SERVING_OUTPUTS[0]][:1], rtol=0, atol=1e-6)


def test_signature_shapes_and_missing_sizes():
    pretraining = CASES_BY_NAME["pretraining"].make_model()
    signature = serving_input_signature(pretraining, max_seq_length=S,
                                        max_sequences_per_pack=3, max_predictions_per_seq=8)
    assert [(spec.name, tuple(spec.shape)) for spec in signature] == [
        ("input_ids", (None, S)), ("input_mask", (None, S)), ("segment_ids", (None, S)),
        ("positions", (None, S)), ("masked_lm_positions", (None, 8)),
        ("next_sentence_positions", (None, 3))]
    with pytest.raises(ValueError, match=r"^BertPretrainingModel reads "
                       r"next_sentence_positions \[B, D\]: max_sequences_per_pack must be "
                       r"given \(>= 1\), got None$"):
        serving_input_signature(pretraining, max_seq_length=S, max_predictions_per_seq=8)
    squad = BertSquadModel.from_bert_config(TINY_CONFIG, packed=False)
    assert [spec.name for spec in serving_input_signature(squad, max_seq_length=S)] == [
        "input_ids", "input_mask", "segment_ids"]  # unpacked: no positions


def test_a_model_without_declared_features_needs_them_given(tmp_path):
    inputs = {"input_ids": keras.Input((S,), dtype="int32", name="input_ids")}
    embedded = keras.layers.Embedding(10, 4)(inputs["input_ids"])
    model = keras.Model(inputs, {"logits": keras.layers.Dense(2)(embedded)})
    with pytest.raises(ValueError, match="^Functional declares no input features: pass "
                                         "input_features="):
        export_for_serving(model, str(tmp_path / "a"), max_seq_length=S)
    export_dir = export_for_serving(model, str(tmp_path / "b"), max_seq_length=S,
                                    input_features={"input_ids": "S"})
    ids = tf.constant(np.arange(2 * S).reshape(2, S) % 10, tf.int32)
    got = tf.saved_model.load(export_dir).signatures["serving_default"](input_ids=ids)
    np.testing.assert_allclose(got["logits"], model({"input_ids": ids})["logits"],
                               atol=1e-6)
    with pytest.raises(ValueError, match=r"^Functional has no output scores \(its "
                                         r"outputs: logits\)$"):
        export_for_serving(model, str(tmp_path / "c"), max_seq_length=S,
                           input_features={"input_ids": "S"}, output_names=["scores"])


def test_a_model_that_was_never_called_is_one_clear_error(tmp_path):
    model = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="^Sequential is not built: call it on a batch "
                                         "first$"):
        export_for_serving(model, str(tmp_path / "a"), max_seq_length=S,
                           input_features={"input_ids": "S"})
