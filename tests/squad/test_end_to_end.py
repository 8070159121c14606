"""From SQuAD JSON to predictions.json with a tiny model, packed and unpacked."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.inputs.rows_dataset import rows_dataset
from packed_bert_tf.data.tokenization import WordPieceTokenizer
from packed_bert_tf.models import BertSquadModel
from packed_bert_tf.models.bert_squad import squad_span_loss
from packed_bert_tf.squad.dataset import predict_logits
from packed_bert_tf.squad.features import load_or_create_features
from packed_bert_tf.squad.packing import pack_features
from packed_bert_tf.squad.postprocess import postprocess_and_evaluate
from tests.squad import squad_data
from tests.squad.squad_data import tiny_config as _config


def test_packed_and_unpacked_prediction_write_identical_predictions(tmp_path):
    # Long contexts in several windows, and short ones that share rows.
    dataset = squad_data.squad_dataset([
        (squad_data.CONTEXT, squad_data.QUESTIONS),
        (squad_data.SECOND_CONTEXT, squad_data.SECOND_QUESTIONS),
        ("Paris is in France.", [("Where is Paris?", "France", 0)]),
        ("Lyon lies east of Clermont.", [("Where is Lyon?", "east of Clermont", 0),
                                         ("What is west of Lyon?", "Clermont", 0)]),
        ("She moved to Lyon in 1915.", [("When did she move?", "1915", 0)])])
    predict_file = squad_data.write_json(tmp_path / "dev.json", dataset)
    tokenizer = squad_data.tokenizer_for(tmp_path, dataset)
    data = load_or_create_features(predict_file, tokenizer, cache_dir=str(tmp_path / "out"),
                                   max_seq_length=48, doc_stride=8, max_query_length=10,
                                   is_training=False)
    tf.random.set_seed(0)
    # One layer: a sequence that saw another in its row would already differ.
    config = _config(tokenizer.vocab_size, num_hidden_layers=1)
    packed_model = BertSquadModel.from_bert_config(config, packed=True)
    packed_model.build()
    unpacked_model = BertSquadModel.from_bert_config(config, packed=False)
    unpacked_model.build()
    unpacked_model.set_weights(packed_model.get_weights())

    files = {}
    for name, model, packs in [
            ("packed", packed_model, pack_features(data.features, max_sequences_per_pack=3)),
            ("unpacked", unpacked_model, pack_features(data.features, packed=False))]:
        logits = predict_logits(model, packs, batch_size=4)
        output_dir = tmp_path / name
        postprocess_and_evaluate(data.examples, data.features, logits,
                                 predict_file=predict_file, output_dir=str(output_dir))
        files[name] = {file: (output_dir / file).read_text()
                       for file in ("predictions.json", "nbest_predictions.json",
                                    "eval_results.json")}
        files[name]["packs"] = packs.num_packs
    assert files["packed"]["packs"] < files["unpacked"]["packs"]
    assert files["packed"]["predictions.json"] == files["unpacked"]["predictions.json"]
    assert files["packed"]["eval_results.json"] == files["unpacked"]["eval_results.json"]
    packed_nbest = json.loads(files["packed"]["nbest_predictions.json"])
    unpacked_nbest = json.loads(files["unpacked"]["nbest_predictions.json"])
    for qas_id, entries in unpacked_nbest.items():
        assert [e["text"] for e in packed_nbest[qas_id]] == [e["text"] for e in entries]
        np.testing.assert_allclose([e["start_logit"] for e in packed_nbest[qas_id]],
                                   [e["start_logit"] for e in entries], atol=1e-5)


def _train(model, packs, *, steps, batch_size, learning_rate=3e-3):
    model.build()
    optimizer = keras.optimizers.Adam(learning_rate)
    optimizer.build(model.trainable_variables)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            loss = squad_span_loss(batch, model(batch, training=True))["loss"]
        optimizer.apply(tape.gradient(loss, model.trainable_variables),
                        model.trainable_variables)
        return loss

    losses = [float(step(batch)) for batch in
              rows_dataset(packs, batch_size, is_training=True, seed=0).take(steps)]
    return losses


@pytest.mark.parametrize("packed", [True, False])
def test_a_tiny_model_learns_a_toy_squad_task(tmp_path, packed):
    vocab = squad_data.learnable_vocab(tmp_path / "vocab.txt")
    tokenizer = WordPieceTokenizer(vocab)
    train_file = squad_data.write_json(tmp_path / "train.json",
                                       squad_data.learnable_dataset(96, seed=0))
    dev_file = squad_data.write_json(tmp_path / "dev.json",
                                     squad_data.learnable_dataset(24, seed=1))
    shapes = dict(max_seq_length=32, doc_stride=16, max_query_length=4)
    train = load_or_create_features(train_file, tokenizer, cache_dir=None,
                                    is_training=True, **shapes)
    dev = load_or_create_features(dev_file, tokenizer, cache_dir=None, is_training=False,
                                  **shapes)
    train_packs = pack_features(train.features, packed=packed, max_sequences_per_pack=3)
    dev_packs = pack_features(dev.features, packed=packed, max_sequences_per_pack=3)
    if packed:
        assert train_packs.packing_factor > 2.5

    tf.random.set_seed(0)
    # One layer learns the task (tracing a second costs more than the steps).
    model = BertSquadModel.from_bert_config(
        _config(tokenizer.vocab_size, initializer_range=0.02, num_hidden_layers=1),
        packed=packed)
    # The same number of sequences seen either way: fewer, fuller rows packed
    # (25 steps packed, 37 not: the first and last 10 losses apart).
    sequences = 600
    batch_size = 16 if not packed else 8
    steps = int(sequences / (batch_size * train_packs.packing_factor))
    losses = _train(model, train_packs, steps=steps, batch_size=batch_size,
                    learning_rate=6e-3)
    assert np.mean(losses[-10:]) < 0.2 * np.mean(losses[:10])
    results = postprocess_and_evaluate(
        dev.examples, dev.features, predict_logits(model, dev_packs, batch_size=8),
        predict_file=dev_file, output_dir=str(tmp_path / "out"))
    assert results["exact_match"] >= 90.0, results
