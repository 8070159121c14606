"""Hugging Face BERT folders in and out: transformers' outputs, packed and unpacked."""

import builtins
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import safetensors.numpy

from packed_bert_tf.layers.ops import gelu_exact
from packed_bert_tf.models import (
    BertClassifierModel,
    BertPretrainingModel,
    BertSquadModel,
    google_named_weights,
    hugging_face_vocabulary,
    is_hugging_face_folder,
    load_google_weights,
    open_hugging_face_folder,
    read_hugging_face_weights,
    save_hugging_face,
)
from tests.models.packed_batches import TINY_CONFIG, packed_and_unpacked, random_packs

pytestmark = pytest.mark.slow  # transformers and our models built and run, 6 times

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

NUM_LABELS = 3
#: Our model for each transformers class, from a config and ``packed``.
MODELS = {
    "BertForPreTraining": lambda config, packed: BertPretrainingModel.from_bert_config(
        config, packed=packed),
    "BertForQuestionAnswering": lambda config, packed: BertSquadModel.from_bert_config(
        config, packed=packed),
    "BertForSequenceClassification": lambda config, packed: BertClassifierModel.from_bert_config(
        config, NUM_LABELS, packed=packed),
}
#: Hugging Face hidden_act -> ours.
ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu"}
WEIGHTS = "model.safetensors"
QUERY = "bert.encoder.layer.0.attention.self.query.weight"


@dataclasses.dataclass(frozen=True)
class Saved:
    """A folder transformers wrote, and the model it wrote."""
    architecture: str
    hidden_act: str
    model: object  # the transformers model, eval mode
    folder: str


def transformers_model(architecture, hidden_act, *, seed=0):
    """A random transformers model of `TINY_CONFIG`'s sizes, in eval mode."""
    # num_labels also sizes qa_outputs: 2 (start, end) unless a classifier.
    labels = NUM_LABELS if architecture == "BertForSequenceClassification" else 2
    config = transformers.BertConfig(**dict(dataclasses.asdict(TINY_CONFIG),
                                            hidden_act=hidden_act), num_labels=labels)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config).eval()
    # Non-trivial values everywhere: fresh biases are 0 and LayerNorm weights
    # 1, which would hide a bias or a layer norm mapped to the wrong place.
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            offset = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            parameter.copy_(offset + 0.2 * torch.randn_like(parameter))
    return model


@pytest.fixture(scope="module", params=[(architecture, act) for architecture in MODELS
                                        for act in ACTIVATIONS],
                ids=lambda param: f"{param[0]}-{param[1]}")
def saved(request, tmp_path_factory):
    architecture, hidden_act = request.param
    model = transformers_model(architecture, hidden_act)
    folder = tmp_path_factory.mktemp(f"{architecture}-{hidden_act}") / "hf"
    model.save_pretrained(folder)
    return Saved(architecture, hidden_act, model, str(folder))


@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory):
    """The folder the one-folder tests copy and change."""
    folder = tmp_path_factory.mktemp("classifier") / "hf"
    transformers_model("BertForSequenceClassification", "gelu").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def batches():
    """Nine random sequences, packed 3 per row (S = 48) and one per row."""
    rng = np.random.default_rng(7)
    packs = random_packs(rng, 3, num_packs=3, sequence_length=48,
                         vocab_size=TINY_CONFIG.vocab_size)
    (packed, packed_at), (unpacked, unpacked_at) = packed_and_unpacked(
        packs, sequence_length=48, max_sequences_per_pack=3, max_masked=8)
    sequences = [sequence for pack in packs for sequence in pack]
    for features in (packed, unpacked):  # the classifier's name for them
        features["cls_positions"] = features["next_sentence_positions"]
    return sequences, (packed, packed_at), (unpacked, unpacked_at)


def transformers_outputs(model, unpacked) -> dict:
    """Each sequence alone in its row (attention on its own tokens): numpy outputs."""
    def tensor(name):
        return torch.tensor(np.asarray(unpacked[name]), dtype=torch.long)

    with torch.no_grad():
        outputs = model(input_ids=tensor("input_ids"), token_type_ids=tensor("segment_ids"),
                        attention_mask=(tensor("input_mask") > 0).long())
    return {name: value.numpy() for name, value in outputs.items()
            if isinstance(value, torch.Tensor)}


def per_sequence(architecture, outputs, placements, sequences, *, ours) -> list:
    """Per sequence, the logits to compare: ours read at its placement, theirs
    at its row (row i holds sequence i)."""
    result = []
    for index, (p, sequence) in enumerate(zip(placements, sequences)):
        tokens = slice(p.offset, p.offset + p.length) if ours else slice(0, p.length)
        if architecture == "BertForPreTraining":
            mlm = (np.asarray(outputs["mlm_logits"][p.row])[p.mlm_slots] if ours else
                   outputs["prediction_logits"][index][sequence.masked_offsets])
            nsp = (np.asarray(outputs["nsp_logits"][p.row, p.slot]) if ours else
                   outputs["seq_relationship_logits"][index])
            result.append((mlm, nsp))
        elif architecture == "BertForQuestionAnswering":
            row = p.row if ours else index
            result.append(tuple(np.asarray(outputs[name][row, tokens])
                                for name in ("start_logits", "end_logits")))
        else:
            result.append((np.asarray(outputs["logits"][p.row, p.slot]) if ours
                           else outputs["logits"][index],))
    return result


def assert_close(got, want, tolerance, what):
    for index, (mine, theirs) in enumerate(zip(got, want)):
        for a, b in zip(mine, theirs):
            error = float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
            assert error <= tolerance, f"{what}, sequence {index}: max abs error {error:.2e}"


def loaded_model(folder, architecture, *, packed=True):
    model = MODELS[architecture](folder.config, packed)
    report = load_google_weights(model, read_hugging_face_weights(folder),
                                 source=folder.weights_file)
    assert report.missing == () and report.unused == ()
    return model


def test_folder_gives_transformers_outputs_packed_and_unpacked(saved, batches):
    sequences, (packed, packed_at), (unpacked, unpacked_at) = batches
    folder = open_hugging_face_folder(saved.folder)
    assert folder.config == dataclasses.replace(TINY_CONFIG,
                                                hidden_act=ACTIVATIONS[saved.hidden_act])
    assert folder.weights_file == os.path.join(saved.folder, WEIGHTS)
    assert (folder.vocab_file, folder.tokenizer_file, folder.do_lower_case) == (None,) * 3
    theirs = per_sequence(saved.architecture, transformers_outputs(saved.model, unpacked),
                          unpacked_at, sequences, ours=False)
    assert max(np.abs(value).max() for logits in theirs for value in logits) > 0.1
    for is_packed, features, placements in ((True, packed, packed_at),
                                            (False, unpacked, unpacked_at)):
        model = loaded_model(folder, saved.architecture, packed=is_packed)
        ours = per_sequence(saved.architecture, model(features), placements, sequences,
                            ours=True)
        assert_close(ours, theirs, 1e-5, f"packed={is_packed}")


def test_saved_folder_is_what_transformers_wrote(saved, batches, tmp_path):
    sequences, _, (unpacked, placements) = batches
    model = loaded_model(open_hugging_face_folder(saved.folder), saved.architecture)
    folder = save_hugging_face(model, tmp_path / "ours")
    assert sorted(os.listdir(folder)) == ["config.json", WEIGHTS]
    reloaded, info = getattr(transformers, saved.architecture).from_pretrained(
        folder, output_loading_info=True)
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys",
                                         "mismatched_keys", "error_msgs")), info
    assert reloaded.config.hidden_act == saved.hidden_act
    if saved.architecture == "BertForSequenceClassification":
        assert reloaded.config.num_labels == NUM_LABELS
    reloaded.eval()
    assert_close(*[per_sequence(saved.architecture, transformers_outputs(m, unpacked),
                                placements, sequences, ours=False)
                   for m in (reloaded, saved.model)], 1e-6, "reloaded")
    original = safetensors.numpy.load_file(os.path.join(saved.folder, WEIGHTS))
    ours = safetensors.numpy.load_file(os.path.join(folder, WEIGHTS))
    assert set(ours) == set(original)  # neither holds the tied decoder
    for key, value in original.items():
        assert ours[key].dtype == np.float32 and np.array_equal(ours[key], value), key


def test_config_json_of_a_regression_classifier(tmp_path):
    config = dataclasses.replace(TINY_CONFIG, hidden_act="gelu_exact")
    folder = save_hugging_face(BertClassifierModel.from_bert_config(config, 1),
                               tmp_path / "sts-b")
    with open(os.path.join(folder, "config.json")) as file:
        values = json.load(file)
    assert values["architectures"] == ["BertForSequenceClassification"]
    assert (values["model_type"], values["hidden_act"], values["num_labels"],
            values["problem_type"], values["layer_norm_eps"], values["pad_token_id"]) == (
        "bert", "gelu", 1, "regression", 1e-12, 0)
    for key, value in dataclasses.asdict(config).items():
        assert values[key] == (value if key != "hidden_act" else "gelu"), key
    reloaded, info = transformers.BertForSequenceClassification.from_pretrained(
        folder, output_loading_info=True)
    assert not info["missing_keys"] and reloaded.config.problem_type == "regression"
    assert open_hugging_face_folder(folder).config == config


def test_pytorch_model_bin_and_half_precision_read_alike(tmp_path):
    model = transformers_model("BertForPreTraining", "gelu_new", seed=1)
    model.save_pretrained(tmp_path / "safetensors")
    expected = read_hugging_face_weights(str(tmp_path / "safetensors"))
    # transformers 5 always writes safetensors: the .bin is a state dict,
    # which holds the tied decoder weight and bias too.
    model.config.save_pretrained(tmp_path / "bin")
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    assert "cls.predictions.decoder.weight" in model.state_dict()
    weights = read_hugging_face_weights(str(tmp_path / "bin"))
    assert set(weights) == set(expected)
    for name, value in expected.items():
        assert np.array_equal(weights[name], value), name
    for dtype in (torch.bfloat16, torch.float16):
        folder = tmp_path / str(dtype)
        transformers_model("BertForPreTraining", "gelu_new", seed=1).to(dtype).save_pretrained(
            folder)
        weights = read_hugging_face_weights(str(folder))
        for name, value in expected.items():
            rounded = torch.from_numpy(value).to(dtype).float().numpy()
            assert weights[name].dtype == np.float32 and np.array_equal(weights[name],
                                                                        rounded), name


def test_bert_model_without_prefix_reads_as_the_backbone(tmp_path):
    model = transformers_model("BertForPreTraining", "gelu", seed=2)
    model.bert.save_pretrained(tmp_path / "bare")  # a BertModel: no "bert." in its keys
    keys = safetensors.numpy.load_file(tmp_path / "bare" / WEIGHTS)
    assert not any(key.startswith("bert.") for key in keys)
    model.save_pretrained(tmp_path / "full")
    full = read_hugging_face_weights(str(tmp_path / "full"))
    bare = read_hugging_face_weights(str(tmp_path / "bare"))
    assert set(bare) == {name for name in full if name.startswith("bert/")}
    for name, value in bare.items():
        assert np.array_equal(value, full[name]), name
    ours = BertPretrainingModel.from_bert_config(
        open_hugging_face_folder(tmp_path / "bare").config)
    report = load_google_weights(ours, bare)
    assert all(name.startswith("cls/") for name in report.missing) and report.missing


def test_old_layer_norm_names_read_alike(tmp_path, saved_classifier):
    folder = tmp_path / "hf"
    shutil.copytree(saved_classifier, folder)
    tensors = safetensors.numpy.load_file(folder / WEIGHTS)
    renamed = {key.replace("LayerNorm.weight", "LayerNorm.gamma")
               .replace("LayerNorm.bias", "LayerNorm.beta"): value
               for key, value in tensors.items()}
    assert "bert.embeddings.LayerNorm.gamma" in renamed
    safetensors.numpy.save_file(renamed, folder / WEIGHTS)
    expected = read_hugging_face_weights(str(saved_classifier))
    weights = read_hugging_face_weights(str(folder))
    assert set(weights) == set(expected)
    for name, value in expected.items():
        assert np.array_equal(weights[name], value), name


def test_tokenizer_files_give_the_vocabulary_and_the_case(tmp_path, saved_classifier):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"]
    tokenizer = transformers.BertTokenizer(vocab={token: index for index, token in
                                                  enumerate(tokens)}, do_lower_case=False)
    folder = tmp_path / "with-tokenizer"
    shutil.copytree(saved_classifier, folder)
    tokenizer.save_pretrained(folder)
    opened = open_hugging_face_folder(folder)
    assert opened.tokenizer_file == str(folder / "tokenizer.json") and not opened.vocab_file
    assert hugging_face_vocabulary(opened) == tokens and opened.do_lower_case is False
    os.remove(folder / "tokenizer_config.json")  # the normalizer says it then
    assert open_hugging_face_folder(folder).do_lower_case is False

    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(tokens) + "\n")
    model = loaded_model(open_hugging_face_folder(saved_classifier),
                         "BertForSequenceClassification")
    out = save_hugging_face(model, tmp_path / "out", vocab_file=str(vocab_file),
                            do_lower_case=True)
    opened = open_hugging_face_folder(out)
    assert opened.vocab_file == os.path.join(out, "vocab.txt") and opened.do_lower_case
    assert hugging_face_vocabulary(opened) == tokens
    reread = transformers.AutoTokenizer.from_pretrained(out)
    assert reread("Hello worlds")["input_ids"] == [2, 5, 6, 7, 3]


def test_is_hugging_face_folder(tmp_path, saved_classifier):
    assert is_hugging_face_folder(saved_classifier)
    (tmp_path / "file").write_text("x")
    for path in (tmp_path, tmp_path / "file", tmp_path / "absent", None, 3):
        assert not is_hugging_face_folder(path)


def _edit_config(**changes):
    def edit(folder):
        path = folder / "config.json"
        values = json.loads(path.read_text())
        values.update(changes)
        path.write_text(json.dumps({k: v for k, v in values.items() if v is not None}))
    return edit


def _write(name, text):
    return lambda folder: (folder / name).write_text(text)


BPE = json.dumps({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})
GAP = json.dumps({"model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "a": 2}}})


@pytest.mark.parametrize("change, file, expected", [
    (lambda folder: os.remove(folder / "config.json"), "config.json", "no such file"),
    (lambda folder: os.remove(folder / WEIGHTS), "", "no model.safetensors or "
                                                      "pytorch_model.bin"),
    (_write("config.json", "{"), "config.json", "not valid JSON"),
    (_edit_config(model_type="roberta"), "config.json", "model_type 'roberta' is not BERT"),
    (_edit_config(hidden_act="swish"), "config.json", "key 'hidden_act' 'swish' has no "
                                                      "counterpart here"),
    (_edit_config(num_hidden_layers=None), "config.json", "missing key 'num_hidden_layers'"),
    (_edit_config(hidden_size="32"), "config.json", "key 'hidden_size' must be a positive "
                                                    "integer"),
    (_edit_config(layer_norm_eps=1e-5), "config.json", "key 'layer_norm_eps' is 1e-05"),
    (_write("tokenizer.json", BPE), "tokenizer.json", "model 'BPE' is not WordPiece"),
    (_write("tokenizer.json", GAP), "tokenizer.json", "model vocab ids are not 0..1"),
    (_write("vocab.txt", "[PAD]\n" * 101), "vocab.txt",
     "vocab.txt has 101 tokens, more than vocab_size 100 of"),
    (lambda folder: (folder / "vocab.txt").write_bytes(b"\xff\n"), "vocab.txt",
     "not UTF-8"),
], ids=["no-config", "no-weights", "not-json", "roberta", "swish", "missing-key",
        "bad-key", "layer-norm-eps", "bpe", "wordpiece-ids", "vocab-too-big",
        "vocab-not-utf8"])
def test_bad_folders_are_refused_in_one_line(tmp_path, saved_classifier, change, file,
                                             expected):
    folder = tmp_path / "hf"
    shutil.copytree(saved_classifier, folder)
    change(folder)
    with pytest.raises(ValueError) as error:
        open_hugging_face_folder(folder)
    message = str(error.value)
    assert "\n" not in message and expected in message, message
    assert message.startswith(str(folder / file).rstrip("/")), message


def _rewrite_weights(folder, **changes):
    path = folder / WEIGHTS
    tensors = dict(safetensors.numpy.load_file(path))
    tensors.update(changes)
    safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


def test_a_weight_of_the_wrong_shape_is_named(tmp_path, saved_classifier):
    folder = tmp_path / "hf"
    shutil.copytree(saved_classifier, folder)
    _rewrite_weights(folder, **{QUERY: np.zeros((TINY_CONFIG.hidden_size, 16), np.float32)})
    opened = open_hugging_face_folder(folder)
    with pytest.raises(ValueError, match=r"attention/self/query/kernel: source \(16, 32\), "
                                         r"model expects \(32, 32\)") as error:
        load_google_weights(BertClassifierModel.from_bert_config(opened.config, NUM_LABELS),
                            read_hugging_face_weights(opened), source=opened.weights_file)
    assert str(error.value).startswith(opened.weights_file)


def test_an_untied_decoder_is_refused(tmp_path):
    model = transformers_model("BertForPreTraining", "gelu")
    model.save_pretrained(tmp_path / "hf")
    words = model.bert.embeddings.word_embeddings.weight.detach().numpy()
    _rewrite_weights(tmp_path / "hf", **{"cls.predictions.decoder.weight": words + 1})
    with pytest.raises(ValueError) as error:
        read_hugging_face_weights(str(tmp_path / "hf"))
    assert str(error.value) == (f"{tmp_path / 'hf' / WEIGHTS}: cls.predictions.decoder.weight "
                                f"is not the word-embedding table; an untied masked-LM "
                                f"decoder is not supported")
    # Equal to the table, it is the tied decoder, and not logged as unmapped.
    _rewrite_weights(tmp_path / "hf", **{"cls.predictions.decoder.weight": words})
    assert "cls/predictions/output_bias" in read_hugging_face_weights(str(tmp_path / "hf"))


def test_unmapped_keys_are_logged_once_and_left_out(tmp_path, saved_classifier, caplog):
    folder = tmp_path / "hf"
    shutil.copytree(saved_classifier, folder)
    _rewrite_weights(folder, **{"bert.embeddings.position_ids": np.arange(64)[None],
                                "extra.adapter.weight": np.ones(3, np.float32)})
    with caplog.at_level("WARNING"):
        weights = read_hugging_face_weights(str(folder))
    assert not any("extra" in name or "position_ids" in name for name in weights)
    logged = [record.getMessage() for record in caplog.records if "left out" in
              record.getMessage()]
    assert len(logged) == 1 and "extra.adapter.weight" in logged[0]
    assert "position_ids" not in logged[0]


def test_torch_missing_is_one_line(tmp_path, saved_classifier, monkeypatch):
    folder = tmp_path / "hf"
    shutil.copytree(saved_classifier, folder)
    os.remove(folder / WEIGHTS)
    (folder / "pytorch_model.bin").write_bytes(b"")
    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name == "torch":
            raise ImportError("No module named 'torch'", name="torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(ImportError) as error:
        read_hugging_face_weights(str(folder))
    assert str(error.value) == (f"{folder / 'pytorch_model.bin'}: reading "
                                f"pytorch_model.bin needs PyTorch (pip install torch)")


def test_save_refuses_a_used_folder_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    model = BertSquadModel.from_bert_config(TINY_CONFIG)
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=rf"^{used}: exists and is not an empty folder$"):
        save_hugging_face(model, used)
    assert os.listdir(used) == ["notes.txt"]

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    with pytest.raises(OSError, match=r"cannot write .*new/model.safetensors \(No space"):
        save_hugging_face(model, tmp_path / "new")
    assert sorted(os.listdir(tmp_path)) == ["used"]  # no folder, no temporary one
    monkeypatch.undo()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert save_hugging_face(model, f"{empty}/") == str(empty)
    names = google_named_weights(model)
    assert len(safetensors.numpy.load_file(empty / WEIGHTS)) == len(names)


def test_gelu_exact_is_torchs_gelu():
    x = np.linspace(-8.0, 8.0, 4001, dtype=np.float32)
    expected = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    assert np.abs(np.asarray(gelu_exact(x)) - expected).max() <= 1e-6
