"""keras-hub `BertBackbone` weights in and out: same outputs unpacked and packed."""

import builtins
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.data.tokenization import WordPieceTokenizer
from packed_bert_tf.models import (
    BertClassifierModel,
    BertPretrainingModel,
    BertSquadModel,
    bert_config_from_keras_hub,
    google_named_weights,
    keras_hub_named_weights,
    load_keras_hub_backbone,
    to_keras_hub_backbone,
    write_keras_hub_backbone,
    write_keras_hub_vocabulary,
)
from packed_bert_tf.models.keras_hub_weights import MISSING_KERAS_HUB
from tests.models.packed_batches import TINY_CONFIG, packed_and_unpacked, random_packs

pytestmark = pytest.mark.slow  # keras-hub models built and run

H = TINY_CONFIG.hidden_size
TOLERANCE = 1e-5
POOLER = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")
PRETRAINING_HEADS = ("cls/predictions/transform/dense/kernel",
                     "cls/predictions/transform/dense/bias",
                     "cls/predictions/transform/LayerNorm/gamma",
                     "cls/predictions/transform/LayerNorm/beta",
                     "cls/predictions/output_bias", "cls/seq_relationship/output_weights",
                     "cls/seq_relationship/output_bias")
SQUAD_HEAD = ("cls/squad/output_weights", "cls/squad/output_bias")  # checkpoint order
NUM_BACKBONE_NAMES = 5 + 16 * TINY_CONFIG.num_hidden_layers + 2


@pytest.fixture(scope="module")
def keras_hub():
    return pytest.importorskip("keras_hub", reason="keras-hub is an optional extra: "
                               "pip install -e '.[keras-hub]'")


def _randomize(variables, seed):
    """Non-trivial values everywhere (fresh biases are 0 and gammas 1, which
    would hide a bias or layer-norm mapped to the wrong place)."""
    rng = np.random.default_rng(seed)
    for variable in variables:
        shape = tuple(variable.shape)
        offset = 1.0 if variable.path.endswith("gamma") else 0.0
        variable.assign((offset + 0.2 * rng.standard_normal(shape)).astype(np.float32))


def tiny_backbone(keras_hub, seed=0, **overrides):
    config = dict(vocabulary_size=TINY_CONFIG.vocab_size, num_layers=2, num_heads=4,
                  hidden_dim=H, intermediate_dim=TINY_CONFIG.intermediate_size,
                  dropout=0.0, max_sequence_length=TINY_CONFIG.max_position_embeddings)
    config.update(overrides)
    backbone = keras_hub.models.BertBackbone(**config)
    _randomize(backbone.weights, seed)
    return backbone


@pytest.fixture(scope="module")
def backbone(keras_hub):
    return tiny_backbone(keras_hub, name="tiny_bert")


@pytest.fixture(scope="module")
def batches():
    """Nine random sequences, packed 3 per row (S = 48) and one per row."""
    packs = random_packs(np.random.default_rng(7), 3, num_packs=3, sequence_length=48)
    return packed_and_unpacked(packs, sequence_length=48, max_sequences_per_pack=3,
                               max_masked=8)


def _keras_hub_outputs(backbone, unpacked_features):
    outputs = backbone({"token_ids": unpacked_features["input_ids"],
                        "segment_ids": unpacked_features["segment_ids"],
                        "padding_mask": unpacked_features["input_mask"]})
    return {name: np.asarray(value) for name, value in outputs.items()}


def _assert_close(got, want, what):
    error = float(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max())
    assert error <= TOLERANCE, f"{what}: max abs error {error:.2e}"


def test_config_is_read_from_the_backbone(keras_hub):
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=120, num_layers=3, num_heads=2, hidden_dim=16,
        intermediate_dim=48, dropout=0.05, max_sequence_length=40, num_segments=3)
    config = bert_config_from_keras_hub(backbone)
    assert dataclasses.asdict(config) == dict(
        vocab_size=120, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
        intermediate_size=48, hidden_act="gelu", hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.05, max_position_embeddings=40,
        type_vocab_size=3, initializer_range=0.02)


def test_names_are_the_original_bert_names(backbone):
    weights = keras_hub_named_weights(backbone)
    assert len(weights) == NUM_BACKBONE_NAMES
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(backbone))
    ours = google_named_weights(model)
    assert set(weights) == set(ours) - set(PRETRAINING_HEADS)
    for name, value in weights.items():
        assert value.shape == ours[name].shape, name
    # keras-hub keeps the query kernel as [H, N, E]: the [H, H] one is its reshape.
    query = backbone.transformer_layers[1]._self_attention_layer.query_dense.kernel
    np.testing.assert_array_equal(
        weights["bert/encoder/layer_1/attention/self/query/kernel"],
        np.asarray(query).reshape(H, H))


def test_unpacked_model_gives_keras_hubs_outputs(backbone, batches):
    (_, _), (unpacked, placements) = batches
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(backbone),
                                                  packed=False)
    report = load_keras_hub_backbone(model, backbone)
    assert len(report.loaded) == NUM_BACKBONE_NAMES
    assert report.missing == PRETRAINING_HEADS and report.unused == ()

    theirs = _keras_hub_outputs(backbone, unpacked)
    ours = model(unpacked)
    for p in placements:  # one sequence per row, padded after it
        _assert_close(ours["sequence_output"][p.row, :p.length],
                      theirs["sequence_output"][p.row, :p.length], f"row {p.row}")
    # The pooler at [CLS] (offset 0): [B, 1, H] against keras-hub's [B, H].
    _assert_close(ours["pooled_output"][:, 0], theirs["pooled_output"], "pooled")
    assert np.abs(theirs["pooled_output"]).max() > 0.1  # a real comparison


def test_packed_model_gives_every_sequence_its_unpacked_output(backbone, batches):
    (packed, packed_placements), (unpacked, placements) = batches
    assert packed["input_ids"].shape[0] == 3 and unpacked["input_ids"].shape[0] == 9
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(backbone),
                                                  packed=True)
    load_keras_hub_backbone(model, backbone)
    unpacked_model = BertPretrainingModel.from_bert_config(model.bert_config, packed=False)
    load_keras_hub_backbone(unpacked_model, backbone)

    ours_packed = model(packed)
    ours_unpacked = unpacked_model(unpacked)
    theirs = _keras_hub_outputs(backbone, unpacked)
    for p, u in zip(packed_placements, placements):
        sequence = ours_packed["sequence_output"][p.row, p.offset:p.offset + p.length]
        _assert_close(sequence, ours_unpacked["sequence_output"][u.row, :u.length],
                      f"sequence {u.row} against ours unpacked")
        _assert_close(sequence, theirs["sequence_output"][u.row, :u.length],
                      f"sequence {u.row} against keras-hub")
        _assert_close(ours_packed["pooled_output"][p.row, p.slot],
                      theirs["pooled_output"][u.row], f"pooled {u.row}")


def test_squad_model_loads_the_backbone_and_reports_the_pooler_unused(backbone, batches):
    (packed, packed_placements), (unpacked, placements) = batches
    model = BertSquadModel.from_bert_config(bert_config_from_keras_hub(backbone), packed=True)
    report = load_keras_hub_backbone(model, backbone)
    assert report.unused == tuple(sorted(POOLER)) and report.missing == SQUAD_HEAD
    assert len(report.loaded) == NUM_BACKBONE_NAMES - 2
    ours = model(packed)["sequence_output"]
    theirs = _keras_hub_outputs(backbone, unpacked)["sequence_output"]
    for p, u in zip(packed_placements, placements):
        _assert_close(ours[p.row, p.offset:p.offset + p.length], theirs[u.row, :u.length],
                      f"sequence {u.row}")


def test_classifier_loads_the_backbone_and_its_pooler(backbone):
    # The classifier's backbone holds a pooler: keras-hub's pooled_dense lands
    # there; only the reference's classifier (output_weights/bias) is new.
    model = BertClassifierModel.from_bert_config(bert_config_from_keras_hub(backbone), 3)
    report = load_keras_hub_backbone(model, backbone)
    assert report.missing == ("output_weights", "output_bias") and not report.unused
    assert len(report.loaded) == NUM_BACKBONE_NAMES
    np.testing.assert_array_equal(model.backbone.pooler_dense.kernel.numpy(),
                                  backbone.get_layer("pooled_dense").kernel.numpy())


def test_a_preset_fine_tunes_packed(keras_hub, backbone, batches, tmp_path):
    """The documented flow on a preset saved here (``from_preset`` reads a local
    directory the same way it reads a downloaded one): convert, then one packed
    training step that changes the loaded encoder."""
    (packed, _), (unpacked, placements) = batches
    backbone.save_to_preset(str(tmp_path / "preset"))
    preset = keras_hub.models.BertBackbone.from_preset(str(tmp_path / "preset"))
    model = BertPretrainingModel.from_bert_config(bert_config_from_keras_hub(preset),
                                                  packed=True)
    load_keras_hub_backbone(model, preset)
    theirs = _keras_hub_outputs(backbone, unpacked)["sequence_output"]
    p = placements[0]
    _assert_close(model(unpacked)["sequence_output"][p.row, :p.length],
                  theirs[p.row, :p.length], "from the preset")

    # The step of ``fit`` (its loss is the model's compute_loss), run eagerly:
    # tracing train_on_batch would cost seconds on this tiny model.
    query = model.backbone.encoder.blocks[0].attention.query.kernel
    before = query.numpy().copy()
    optimizer = keras.optimizers.Adam(1e-3)
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=packed, y_pred=model(packed, training=True))
    optimizer.apply(tape.gradient(loss, model.trainable_variables),
                    model.trainable_variables)
    assert np.isfinite(float(loss)) and float(loss) > 0
    assert np.abs(query.numpy() - before).max() > 1e-4


def test_way_back_gives_the_same_outputs(keras_hub, batches):
    (_, _), (unpacked, placements) = batches
    tf.random.set_seed(3)
    model = BertPretrainingModel.from_bert_config(TINY_CONFIG, packed=False)
    model.build()
    _randomize(model.weights, seed=4)

    backbone = to_keras_hub_backbone(model)
    assert isinstance(backbone, keras_hub.models.BertBackbone)
    assert bert_config_from_keras_hub(backbone) == TINY_CONFIG
    mine = google_named_weights(model)
    for name, value in keras_hub_named_weights(backbone).items():
        np.testing.assert_array_equal(value, mine[name], err_msg=name)

    ours = model(unpacked)
    theirs = _keras_hub_outputs(backbone, unpacked)
    for p in placements:
        _assert_close(theirs["sequence_output"][p.row, :p.length],
                      ours["sequence_output"][p.row, :p.length], f"row {p.row}")
    _assert_close(theirs["pooled_output"], ours["pooled_output"][:, 0], "pooled")


def test_writing_a_squad_model_leaves_the_pooler_and_reports_it(keras_hub):
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    model.build()
    _randomize(model.weights, seed=5)
    backbone = tiny_backbone(keras_hub, seed=6)
    pooler_before = np.asarray(backbone.pooled_dense.kernel).copy()
    report = write_keras_hub_backbone(model, backbone)
    assert report.missing == POOLER and report.unused == tuple(sorted(SQUAD_HEAD))
    np.testing.assert_array_equal(np.asarray(backbone.pooled_dense.kernel), pooler_before)
    np.testing.assert_array_equal(np.asarray(backbone.token_embedding.embeddings),
                                  np.asarray(model.backbone.embeddings.word_embeddings.embeddings))


def test_config_mismatch_names_every_difference_and_assigns_nothing(backbone):
    config = dataclasses.replace(TINY_CONFIG, hidden_size=64, num_hidden_layers=3)
    model = BertPretrainingModel.from_bert_config(config)
    model.build()
    before = [weight.numpy().copy() for weight in model.weights]
    with pytest.raises(ValueError) as error:
        load_keras_hub_backbone(model, backbone)
    assert str(error.value) == (
        "keras-hub BertBackbone 'tiny_bert' does not match the model's BertConfig "
        "(2 difference(s)):\n"
        "  hidden_size (keras-hub hidden_dim): backbone 32, model 64\n"
        "  num_hidden_layers (keras-hub num_layers): backbone 2, model 3")
    for weight, old in zip(model.weights, before):
        np.testing.assert_array_equal(weight.numpy(), old)
    with pytest.raises(ValueError, match="hidden_size"):
        write_keras_hub_backbone(model, backbone)

    relu = BertSquadModel.from_bert_config(dataclasses.replace(TINY_CONFIG, hidden_act="relu"))
    with pytest.raises(ValueError, match=r"hidden_act: backbone 'gelu' \(tanh GELU\), "
                                         r"model 'relu'"):
        load_keras_hub_backbone(relu, backbone)
    with pytest.raises(ValueError, match="has only 'gelu'"):
        to_keras_hub_backbone(relu)


def test_a_backbone_that_computes_something_else_is_refused(keras_hub):
    erf_gelu = tiny_backbone(keras_hub)
    erf_gelu.transformer_layers[0].activation = keras.activations.gelu  # exact erf form
    with pytest.raises(ValueError, match="transformer_layer_0's activation is not the "
                                         "tanh-approximated GELU"):
        bert_config_from_keras_hub(erf_gelu)

    epsilon = tiny_backbone(keras_hub)
    epsilon.embeddings_layer_norm.epsilon = 1e-5
    with pytest.raises(ValueError, match="embeddings_layer_norm has layer-norm epsilon "
                                         "1e-05, the models here 1e-12"):
        load_keras_hub_backbone(BertSquadModel.from_bert_config(TINY_CONFIG), epsilon)

    with pytest.raises(ValueError, match="expected a keras_hub.models.BertBackbone, got "
                                         "BertSquadModel"):
        bert_config_from_keras_hub(BertSquadModel.from_bert_config(TINY_CONFIG))


def _failing_import(monkeypatch, error):
    real_import = builtins.__import__

    def importer(name, *args, **kwargs):
        if name == "keras_hub" or name.startswith("keras_hub."):
            raise error
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", importer)


def test_missing_keras_hub_is_one_clear_import_error(monkeypatch):
    # What Python raises for a package that is not installed.
    _failing_import(monkeypatch, ModuleNotFoundError("No module named 'keras_hub'",
                                                     name="keras_hub"))
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    for call in (lambda: to_keras_hub_backbone(model),
                 lambda: load_keras_hub_backbone(model, object()),
                 lambda: write_keras_hub_vocabulary(object(), "vocab.txt")):
        with pytest.raises(ImportError) as error:
            call()
        assert str(error.value) == ("keras-hub is not installed; install the optional "
                                    "extra with pip install -e '.[keras-hub]'")
        assert str(error.value) == MISSING_KERAS_HUB
        assert isinstance(error.value.__cause__, ModuleNotFoundError)


def test_a_broken_keras_hub_is_not_called_missing(monkeypatch):
    _failing_import(monkeypatch, ImportError("tensorflow_text: undefined symbol",
                                             name="tensorflow_text"))
    with pytest.raises(ImportError) as error:
        to_keras_hub_backbone(BertSquadModel.from_bert_config(TINY_CONFIG))
    assert str(error.value) == ("keras-hub is installed but does not import "
                                "(tensorflow_text: undefined symbol); reinstall the extra "
                                "with pip install -e '.[keras-hub]'")


VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown",
              "fox", "jump", "##ed", "over", "lazy", "dog", ".", ",", "!", "a", "##s"]


def test_vocabulary_is_written_for_our_tokenizer(keras_hub, backbone, tmp_path):
    # A preset as a user has one: a backbone and its tokenizer in one directory.
    backbone.save_to_preset(str(tmp_path))
    keras_hub.models.BertTokenizer(vocabulary=VOCABULARY, lowercase=True,
                                   strip_accents=True).save_to_preset(str(tmp_path))
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(tmp_path))
    path = write_keras_hub_vocabulary(tokenizer, tmp_path / "vocab.txt")
    assert (tmp_path / "vocab.txt").read_text().splitlines() == VOCABULARY
    ours = WordPieceTokenizer(path, do_lower_case=tokenizer.lowercase)
    for text in ["The quick brown fox jumped over the lazy dog.",
                 "A fox, a dog! Foxes jumps", "the zebra"]:
        assert ours.encode(text) == np.asarray(tokenizer(text)).tolist(), text
    assert ours.encode("the zebra") == [5, 1]  # [UNK] for a word with no split


def test_vocabulary_without_pad_first_is_refused(keras_hub, tmp_path):
    vocabulary = VOCABULARY[1:4] + ["[PAD]"] + VOCABULARY[4:]
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=True)
    path = tmp_path / "vocab.txt"
    with pytest.raises(ValueError, match=rf"{path}: \[PAD\] is id 3 \(line 4\), "
                                         r"expected id 0"):
        write_keras_hub_vocabulary(tokenizer, path)
