"""Hugging Face BERT folders in and out of the models here.

Letters: V vocab, P max positions, T token types, H hidden, I intermediate
size, L labels.

A folder as ``transformers``' ``save_pretrained`` writes it (config.json,
model.safetensors or pytorch_model.bin, the tokenizer's files) fine-tunes
packed, and a model goes back as one that ``from_pretrained`` reads::

    folder = open_hugging_face_folder("bert-base-uncased")
    model = BertSquadModel.from_bert_config(folder.config)  # or BertPretrainingModel, ...
    report = load_google_weights(model, read_hugging_face_weights(folder),
                                 source=folder.weights_file)
    save_hugging_face(model, "my-bert", vocab_file=folder.vocab_file,
                      do_lower_case=folder.do_lower_case)

The weights go through the original BERT checkpoint names of
`packed_bert_tf.models.google_checkpoint` (one set of shape checks and one
report for every source). A Linear's weight|bias is a dense's kernel|bias
(``*``: transposed, Hugging Face's being [out, in]), a LayerNorm's a layer
norm's gamma|beta, a head's output_weights|output_bias; shapes are Hugging
Face's::

    bert.embeddings.                          bert/embeddings/
      word_embeddings.weight         [V, H]     word_embeddings
      position_embeddings.weight     [P, H]     position_embeddings
      token_type_embeddings.weight   [T, H]     token_type_embeddings
      LayerNorm                      [H]        LayerNorm
    bert.encoder.layer.N.                     bert/encoder/layer_N/
      attention.self.query         * [H, H]     attention/self/query (key, value alike)
      attention.output.dense       * [H, H]     attention/output/dense
      attention.output.LayerNorm     [H]        attention/output/LayerNorm
      intermediate.dense           * [I, H]     intermediate/dense
      output.dense                 * [H, I]     output/dense
      output.LayerNorm               [H]        output/LayerNorm
    bert.pooler.dense              * [H, H]   bert/pooler/dense
    cls.predictions.transform.dense * [H, H]  cls/predictions/transform/dense
    cls.predictions.transform.LayerNorm [H]   cls/predictions/transform/LayerNorm
    cls.predictions.bias             [V]      cls/predictions/output_bias
    cls.seq_relationship             [2, H]   cls/seq_relationship
    qa_outputs                       [2, H]   cls/squad
    classifier                       [L, H]   (top level: output_weights|output_bias)

``bert.`` is absent from a bare ``BertModel``'s file, and old files name a
LayerNorm's weight|bias gamma|beta: both read. The masked-LM decoder is the
word-embedding table, here as in ``transformers``, which writes neither
``cls.predictions.decoder.weight`` nor its bias (``cls.predictions.bias``);
a file whose decoder differs from the table is refused.

``hidden_act`` differs between the two: Hugging Face's "gelu" is the exact
(erf) GELU, "gelu_exact" here; its "gelu_new" and "gelu_pytorch_tanh" are
the tanh form, which is "gelu" here (original BERT's). "relu", "tanh" and
"linear" are the same; any other is refused.
"""

import dataclasses
import json
import os
import re
import shutil
import struct

import numpy as np
import safetensors
import safetensors.numpy
from absl import logging

from packed_bert_tf.data.tokenization import tokenizer_json_vocabulary
from packed_bert_tf.filesystem import temporary_name, write_error_reason
from packed_bert_tf.json_files import write_json_atomically
from packed_bert_tf.models.backbone import LAYER_NORM_EPSILON
from packed_bert_tf.models.bert_classifier import BertClassifierModel
from packed_bert_tf.models.bert_pretraining import BertPretrainingModel
from packed_bert_tf.models.bert_squad import BertSquadModel
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import google_named_weights

#: The weight files read, in order of preference (sharded ones are not).
WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")

_ACTIVATIONS_IN = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                   "relu": "relu", "tanh": "tanh", "linear": "linear"}
_ACTIVATIONS_OUT = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu",
                    "tanh": "tanh", "linear": "linear"}
# config.json values other than these change what the model computes.
_FIXED = {"layer_norm_eps": LAYER_NORM_EPSILON, "is_decoder": False,
          "position_embedding_type": "absolute"}
_ARCHITECTURES = ((BertPretrainingModel, "BertForPreTraining"),
                  (BertSquadModel, "BertForQuestionAnswering"),
                  (BertClassifierModel, "BertForSequenceClassification"))

# (Hugging Face module, Google scope, kind); {n} is a layer index. In a task
# model's file the modules of `_BACKBONE_MODULES` are inside ``bert.``.
_MODULES = (
    *((f"embeddings.{name}", f"bert/embeddings/{name}", "table")
      for name in ("word_embeddings", "position_embeddings", "token_type_embeddings")),
    ("embeddings.LayerNorm", "bert/embeddings/LayerNorm", "norm"),
    *((f"encoder.layer.{{n}}.{module}", f"bert/encoder/layer_{{n}}/{scope}", kind)
      for module, scope, kind in (
          ("attention.self.query", "attention/self/query", "dense"),
          ("attention.self.key", "attention/self/key", "dense"),
          ("attention.self.value", "attention/self/value", "dense"),
          ("attention.output.dense", "attention/output/dense", "dense"),
          ("attention.output.LayerNorm", "attention/output/LayerNorm", "norm"),
          ("intermediate.dense", "intermediate/dense", "dense"),
          ("output.dense", "output/dense", "dense"),
          ("output.LayerNorm", "output/LayerNorm", "norm"))),
    ("pooler.dense", "bert/pooler/dense", "dense"),
    ("cls.predictions.transform.dense", "cls/predictions/transform/dense", "dense"),
    ("cls.predictions.transform.LayerNorm", "cls/predictions/transform/LayerNorm", "norm"),
    ("cls.predictions", "cls/predictions", "bias"),
    ("cls.seq_relationship", "cls/seq_relationship", "head"),
    ("qa_outputs", "cls/squad", "head"),
    ("classifier", "", "head"),
)
# kind -> Hugging Face parameter -> (Google suffix, transposed).
_PARAMETERS = {"table": {"weight": ("", False)},
               "norm": {"weight": ("gamma", False), "bias": ("beta", False)},
               "dense": {"weight": ("kernel", True), "bias": ("bias", False)},
               "bias": {"bias": ("output_bias", False)},
               "head": {"weight": ("output_weights", False),
                        "bias": ("output_bias", False)}}
_NAMES = tuple((f"{module}.{parameter}", "/".join(filter(None, (scope, suffix))), transpose)
               for module, scope, kind in _MODULES
               for parameter, (suffix, transpose) in _PARAMETERS[kind].items())
_TO_GOOGLE = {theirs: (ours, transpose) for theirs, ours, transpose in _NAMES}
_TO_HUGGING_FACE = {ours: (theirs, transpose) for theirs, ours, transpose in _NAMES}
_HUGGING_FACE_LAYER = re.compile(r"(?<=^encoder\.layer\.)\d+(?=\.)")
_GOOGLE_LAYER = re.compile(r"(?<=^bert/encoder/layer_)\d+(?=/)")
_BACKBONE_MODULES = ("embeddings.", "encoder.", "pooler.")
# Buffers, not weights; the decoder's bias is cls.predictions.bias.
_HARMLESS = re.compile(r"(position_ids|token_type_ids)$|^cls\.predictions\.decoder\.bias$")
_DECODER = "cls.predictions.decoder.weight"


def _translate(name: str, layer: re.Pattern, table: dict):
    """``table``'s (name, transposed) for ``name`` (its layer index as {n}); or None."""
    match = layer.search(name)
    entry = table.get(layer.sub("{n}", name, count=1))
    if entry is None:
        return None
    return (entry[0].replace("{n}", match.group()) if match else entry[0]), entry[1]


@dataclasses.dataclass(frozen=True)
class HuggingFaceFolder:
    """A Hugging Face BERT folder as found on disk.

    Attributes:
      folder: the folder.
      config: from config.json, ``hidden_act`` mapped to ours.
      weights_file: model.safetensors, else pytorch_model.bin.
      vocab_file: vocab.txt when there.
      tokenizer_file: tokenizer.json when there.
      do_lower_case: tokenizer_config.json's ``do_lower_case``, else whether
        tokenizer.json's normalizer lower-cases; None when neither says.
    """
    folder: str
    config: BertConfig
    weights_file: str
    vocab_file: str | None
    tokenizer_file: str | None
    do_lower_case: bool | None


def _existing(folder: str, name: str) -> str | None:
    path = os.path.join(folder, name)
    return path if os.path.isfile(path) else None


def is_hugging_face_folder(path) -> bool:
    """Whether ``path`` is a folder with config.json and a weights file; never raises."""
    try:
        folder = os.fspath(path)
        return bool(_existing(folder, "config.json")) and any(
            _existing(folder, name) for name in WEIGHTS_FILES)
    except (TypeError, ValueError, OSError):
        return False


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except ValueError as error:  # also UnicodeDecodeError
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def _bert_config(values, path: str) -> BertConfig:
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(values).__name__}")
    if "model_type" not in values:
        raise ValueError(f"{path}: missing key 'model_type' (expected 'bert')")
    if values["model_type"] != "bert":
        raise ValueError(f"{path}: model_type {values['model_type']!r} is not BERT")
    for key, expected in _FIXED.items():
        if key in values and values[key] != expected:
            raise ValueError(f"{path}: key {key!r} is {values[key]!r}; the models here "
                             f"compute only {expected!r}")
    fields = {field.name: values[field.name] for field in dataclasses.fields(BertConfig)
              if field.name in values}
    if "hidden_act" in fields:
        activation = fields["hidden_act"]
        if not isinstance(activation, str) or activation not in _ACTIVATIONS_IN:
            raise ValueError(f"{path}: key 'hidden_act' {activation!r} has no counterpart "
                             f"here (expected one of {', '.join(_ACTIVATIONS_IN)})")
        fields["hidden_act"] = _ACTIVATIONS_IN[activation]
    return BertConfig.from_dict(fields, source=path)


def _read_vocab_txt(path: str) -> list:
    """Tokens by id: line i of a vocab.txt, stripped (as `load_vocab` reads it)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 ({error})") from None
    if lines[-1] == "":
        lines.pop()
    return [line.strip() for line in lines]


def _lowercases(normalizer) -> bool:
    kind = normalizer.get("type") if isinstance(normalizer, dict) else None
    if kind == "Sequence":
        return any(_lowercases(part) for part in normalizer.get("normalizers", ()))
    return kind == "Lowercase" or (kind == "BertNormalizer"
                                   and bool(normalizer.get("lowercase")))


def _check_vocab_size(path: str, size: int, config: BertConfig, config_file: str):
    if size > config.vocab_size:
        raise ValueError(f"{path} has {size} tokens, more than vocab_size "
                         f"{config.vocab_size} of {config_file}")


def open_hugging_face_folder(path) -> HuggingFaceFolder:
    """Reads and checks a Hugging Face BERT folder's config and tokenizer files.

    Raises:
      ValueError: one line naming the file (and key): no config.json or
        weights file; config.json not JSON, not BERT, a missing or bad key, a
        ``hidden_act`` with no counterpart here, a layer-norm epsilon other
        than 1e-12; a tokenizer.json that is not WordPiece; a vocabulary
        larger than config.json's ``vocab_size``.
    """
    folder = os.fspath(path)
    config_file = os.path.join(folder, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"{config_file}: no such file (not a Hugging Face folder)")
    weights_file = next(filter(None, (_existing(folder, name) for name in WEIGHTS_FILES)),
                        None)
    if weights_file is None:
        raise ValueError(f"{folder}: no {' or '.join(WEIGHTS_FILES)} (sharded weights "
                         f"are not read)")
    config = _bert_config(_read_json(config_file), config_file)
    vocab_file = _existing(folder, "vocab.txt")
    tokenizer_file = _existing(folder, "tokenizer.json")
    do_lower_case = None
    if vocab_file:
        _check_vocab_size(vocab_file, len(_read_vocab_txt(vocab_file)), config, config_file)
    if tokenizer_file:
        tokenizer = _read_json(tokenizer_file)
        tokens = tokenizer_json_vocabulary(tokenizer_file)
        _check_vocab_size(tokenizer_file, len(tokens), config, config_file)
        do_lower_case = _lowercases(tokenizer.get("normalizer"))
    tokenizer_config_file = _existing(folder, "tokenizer_config.json")
    if tokenizer_config_file:
        said = _read_json(tokenizer_config_file)
        said = said.get("do_lower_case") if isinstance(said, dict) else None
        if isinstance(said, bool):
            do_lower_case = said
    return HuggingFaceFolder(folder, config, weights_file, vocab_file, tokenizer_file,
                             do_lower_case)


def hugging_face_vocabulary(source: HuggingFaceFolder) -> list:
    """The tokens by id: vocab.txt's, else tokenizer.json's WordPiece vocab.

    Raises:
      ValueError: the folder has neither file, or tokenizer.json's is not
        WordPiece with ids 0..n-1.
    """
    if source.vocab_file:
        return _read_vocab_txt(source.vocab_file)
    if source.tokenizer_file:
        return tokenizer_json_vocabulary(source.tokenizer_file)
    raise ValueError(f"{source.folder}: no vocab.txt or tokenizer.json")


def _read_safetensors(path: str) -> dict:
    try:
        with open(path, "rb") as file:
            (size,) = struct.unpack("<Q", file.read(8))
            header = json.loads(file.read(size))
    except (struct.error, ValueError) as error:
        raise ValueError(f"{path}: not a safetensors file ({error})") from None
    header.pop("__metadata__", None)
    if all(entry["dtype"] != "BF16" for entry in header.values()):
        return safetensors.numpy.load_file(path)
    # numpy has no bfloat16 (safetensors.numpy refuses it): its bits are the
    # upper half of a float32's.
    data = np.memmap(path, np.uint8, mode="r", offset=8 + size)
    arrays = {}
    with safetensors.safe_open(path, framework="np") as file:
        for key in file.keys():
            start, end = header[key]["data_offsets"]
            if header[key]["dtype"] == "BF16":
                bits = data[start:end].view("<u2").astype(np.uint32) << 16
                arrays[key] = bits.view(np.float32).reshape(header[key]["shape"])
            else:
                arrays[key] = file.get_tensor(key)
    return arrays


def _read_pytorch(path: str) -> dict:
    try:
        import torch
    except ImportError:
        raise ImportError(f"{path}: reading pytorch_model.bin needs PyTorch "
                          f"(pip install torch)") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {key: (value.float() if value.is_floating_point() else value).numpy()
            for key, value in state.items()}


def _google_name(key: str):
    """(Google name, transposed) of a Hugging Face key; None when it has none."""
    key = re.sub(r"^bert\.", "", key)
    key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                 re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))
    return _translate(key, _HUGGING_FACE_LAYER, _TO_GOOGLE)


def read_hugging_face_weights(source) -> dict:
    """A Hugging Face BERT's weights under original BERT checkpoint names.

    Args:
      source: a `HuggingFaceFolder`, or the path of one.

    Returns:
      dict Google name -> float32 numpy array in the checkpoint layout
      (kernels [in, out]), the input of
      `packed_bert_tf.models.load_google_weights`. Keys with no Google name
      are left out and logged, except buffers (``position_ids``).

    Raises:
      ValueError: as `open_hugging_face_folder`; a stored masked-LM decoder
        that is not the word-embedding table.
      ImportError: a pytorch_model.bin without PyTorch installed.
    """
    folder = (source if isinstance(source, HuggingFaceFolder)
              else open_hugging_face_folder(source))
    path = folder.weights_file
    state = (_read_safetensors(path) if path.endswith(".safetensors")
             else _read_pytorch(path))
    weights, unmapped = {}, []
    for key, value in state.items():
        name = _google_name(key)
        if name is None:
            if not _HARMLESS.search(key) and not key.endswith(_DECODER):
                unmapped.append(key)
            continue
        value = np.asarray(value, np.float32)  # float16 and bfloat16 too
        weights[name[0]] = np.ascontiguousarray(value.T) if name[1] else value
    decoder = next((key for key in state if key.endswith(_DECODER)), None)
    if decoder and not np.array_equal(np.asarray(state[decoder], np.float32),
                                      weights.get("bert/embeddings/word_embeddings")):
        raise ValueError(f"{path}: {decoder} is not the word-embedding table; an untied "
                         f"masked-LM decoder is not supported")
    if unmapped:
        logging.warning("%s: %d weights with no BERT checkpoint name left out: %s", path,
                        len(unmapped), ", ".join(unmapped))
    return weights


def _hugging_face_name(google: str):
    """(Hugging Face key in a task model's file, transposed) of a Google name."""
    key, transpose = _translate(google, _GOOGLE_LAYER, _TO_HUGGING_FACE)
    return ("bert." + key if key.startswith(_BACKBONE_MODULES) else key), transpose


def save_hugging_face(model, folder, *, vocab_file=None, do_lower_case=None) -> str:
    """Writes a model as a Hugging Face BERT folder that ``from_pretrained`` reads.

    config.json (``architectures`` the ``transformers`` class of the model's
    heads), model.safetensors (float32) and, with ``vocab_file``, vocab.txt
    and tokenizer_config.json. Written into a temporary sibling folder that
    gets ``folder``'s name at the end, so a failure leaves nothing.

    Args:
      model: a `BertPretrainingModel` (``BertForPreTraining``),
        `BertSquadModel` (``BertForQuestionAnswering``) or
        `BertClassifierModel` (``BertForSequenceClassification``).
      folder: a new or empty folder.
      vocab_file: the model's BERT vocab.txt, copied.
      do_lower_case: the tokenizer's, written to tokenizer_config.json.

    Returns:
      ``folder`` (normalised) as a string.

    Raises:
      ValueError: another kind of model; ``folder`` exists and is not an
        empty folder; the vocabulary is larger than the model's.
      OSError: a file could not be written, naming it.
    """
    folder = os.path.normpath(os.fspath(folder))
    architecture = next((name for kind, name in _ARCHITECTURES if isinstance(model, kind)),
                        None)
    if architecture is None:
        raise ValueError(f"{folder}: a {type(model).__name__} has no Hugging Face class; "
                         f"expected a BertPretrainingModel, BertSquadModel or "
                         f"BertClassifierModel")
    if os.path.exists(folder) and not (os.path.isdir(folder) and not os.listdir(folder)):
        raise ValueError(f"{folder}: exists and is not an empty folder")
    config = model.bert_config
    if vocab_file is not None:
        _check_vocab_size(vocab_file, len(_read_vocab_txt(vocab_file)), config,
                          f"{model.name}'s config")
    values = {"architectures": [architecture], "model_type": "bert", **config.to_dict(),
              "hidden_act": _ACTIVATIONS_OUT[config.hidden_act],
              "layer_norm_eps": LAYER_NORM_EPSILON, "pad_token_id": 0,
              "tie_word_embeddings": True}
    if isinstance(model, BertClassifierModel):
        labels = [f"LABEL_{index}" for index in range(model.num_labels)]
        values.update(num_labels=model.num_labels, id2label=dict(enumerate(labels)),
                      label2id={label: index for index, label in enumerate(labels)})
        if model.is_regression:
            values["problem_type"] = "regression"
    tensors = {}
    for google, value in google_named_weights(model).items():
        key, transpose = _hugging_face_name(google)
        tensors[key] = np.ascontiguousarray(value.T if transpose else value, np.float32)

    temporary = temporary_name(folder)
    os.makedirs(temporary)
    try:
        write_json_atomically(os.path.join(temporary, "config.json"), values,
                              sort_keys=True)
        try:
            # The metadata save_pretrained writes: older transformers refuse a
            # file without it.
            safetensors.numpy.save_file(
                tensors, os.path.join(temporary, "model.safetensors"),
                metadata={"format": "pt"})
        except Exception as error:
            raise OSError(f"cannot write {os.path.join(folder, 'model.safetensors')} "
                          f"({write_error_reason(error)})") from None
        if vocab_file is not None:
            shutil.copyfile(vocab_file, os.path.join(temporary, "vocab.txt"))
            tokenizer = {"tokenizer_class": "BertTokenizer"}
            if do_lower_case is not None:
                tokenizer["do_lower_case"] = bool(do_lower_case)
            write_json_atomically(os.path.join(temporary, "tokenizer_config.json"),
                                  tokenizer, sort_keys=True)
        os.replace(temporary, folder)  # an empty folder is replaced
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return folder
