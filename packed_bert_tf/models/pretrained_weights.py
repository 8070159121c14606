"""Pre-trained weights in any form a BERT comes in: `find_pretrained_weights`
says what a path holds, `load_pretrained_weights` copies it into a model.

The forms (``--init_checkpoint`` of every front end takes each):

==============  ===============================================================
form            what the path is
==============  ===============================================================
``google``      google-research/bert's TF1 checkpoint: a ``bert_model.ckpt``
                prefix (its ``.index`` beside it), or a folder whose
                ``checkpoint`` file names one
``run``         a run of this package: its ``--output_dir`` (the newest of its
                training checkpoints and its exported ``model.ckpt-N``), its
                ``checkpoints/`` folder (the newest ``ckpt-N``), or one
                ``ckpt-N`` prefix
``hugging_face`` a ``transformers`` BERT folder: ``config.json`` and
                ``model.safetensors`` (or ``pytorch_model.bin``)
                (`packed_bert_tf.models.hugging_face`)
``keras_hub``   a keras-hub preset folder of a ``BertBackbone``: ``config.json``
                and ``model.weights.h5`` (read without network access)
==============  ===============================================================

Every form goes through the original BERT checkpoint names
(`packed_bert_tf.models.google_checkpoint`): one set of shape checks, one
report. A run's own checkpoints hold the Keras variables by their paths
(``backbone/encoder/layer_0/attention/query/kernel``); those of the target
model's variables with the same path load, whichever task wrote them, so the
encoder of a fine-tuning run starts another task.

`from_preset` makes a task model and loads it in one call, as keras-hub's
``from_preset`` does.

Never a silent random model: when any weight of the backbone (embeddings,
encoder, pooler) is not in the source, loading is refused in one line naming
the path and what it holds, unless ``allow_partial``. Task heads the source
lacks are named in the log and stay as initialised.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np
import tensorflow as tf

from packed_bert_tf.models import hugging_face
from packed_bert_tf.models.config import BertConfig
from packed_bert_tf.models.google_checkpoint import (
    CheckpointLoadReport,
    _variable_map,
    load_google_checkpoint,
    load_google_weights,
)

FORMS = ("google", "run", "hugging_face", "keras_hub")
#: The folder of a run's training checkpoints, and their files' name.
_RUN_CHECKPOINTS = "checkpoints"
_RUN_CHECKPOINT = re.compile(r"ckpt-(\d+)\.index")
#: A run's weights exported in the original BERT format.
_EXPORTED = re.compile(r"model\.ckpt-(\d+)\.index")
#: The name of a checkpoint's object graph (every TF2 checkpoint has it).
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
#: The keys under which a run checkpoint saves the model's variables.
_MODEL_VARIABLE_KEYS = ("model/", "optimizer/_trainable_variables/")
#: Original BERT names of the backbone's weights; the rest are task heads.
_BACKBONE_PREFIX = "bert/"
_KERAS_HUB_WEIGHTS = "model.weights.h5"
_KERAS_HUB_VOCABULARY = os.path.join("assets", "tokenizer", "vocabulary.txt")


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """What a path of weights holds (`find_pretrained_weights`).

    Attributes:
      path: the path as given.
      form: one of `FORMS`.
      checkpoint: what is read: a checkpoint prefix (``google``, ``run``) or
        the folder (``hugging_face``, ``keras_hub``).
      holds: what it is, in words, for messages ("run checkpoint ckpt-20
        with backbone, masked_lm_head, next_sentence_head").
      config: the model config the folder states (``hugging_face``,
        ``keras_hub``), else None (``--bert_config_file`` gives it).
      vocab_file: the folder's WordPiece vocabulary, when it has one: a
        ``vocab.txt``, or a ``tokenizer.json`` (which
        `packed_bert_tf.data.tokenization.load_vocab` reads too).
      do_lower_case: whether the folder's tokenizer lower-cases, when it says.
    """

    path: str
    form: str
    checkpoint: str
    holds: str
    config: BertConfig | None = None
    vocab_file: str | None = None
    do_lower_case: bool | None = None


def find_pretrained_weights(path) -> PretrainedWeights:
    """What ``path`` holds, in one of the `FORMS`.

    Raises:
      ValueError: one line naming ``path`` and what it holds instead (nothing,
        a folder of other files, a checkpoint of no known model) or, for a
        Hugging Face folder, the file and key at fault.
    """
    path = os.fspath(path)
    if tf.io.gfile.isdir(path):
        return _find_in_folder(path)
    if tf.io.gfile.exists(path + ".index"):
        return _checkpoint(path, path)
    raise ValueError(f"{path}: no such folder or checkpoint (no {path}.index)")


def _find_in_folder(folder: str) -> PretrainedWeights:
    names = set(tf.io.gfile.listdir(folder))
    if hugging_face.is_hugging_face_folder(folder):
        found = hugging_face.open_hugging_face_folder(folder)
        return PretrainedWeights(
            folder, "hugging_face", folder,
            f"a Hugging Face BERT folder ({os.path.basename(found.weights_file)})",
            config=found.config, vocab_file=found.vocab_file or found.tokenizer_file,
            do_lower_case=found.do_lower_case)
    if "config.json" in names and _KERAS_HUB_WEIGHTS in names:
        return _keras_hub_preset(folder)
    newest = _newest_run_checkpoint(folder)
    if newest is not None:
        return _checkpoint(folder, newest)
    state = tf.train.latest_checkpoint(folder)
    if state is not None and tf.io.gfile.exists(state + ".index"):
        return _checkpoint(folder, state)
    shown = sorted(name.rstrip("/") for name in names)
    listing = (f"it holds {len(shown)} entries: {', '.join(shown[:5])}"
               + (", ..." if len(shown) > 5 else "")) if shown else "it is empty"
    raise ValueError(
        f"{folder}: no BERT weights in a known form ({listing}); expected a "
        f"Hugging Face folder (config.json + model.safetensors), a keras-hub preset "
        f"(config.json + {_KERAS_HUB_WEIGHTS}), a run's --output_dir or its "
        f"{_RUN_CHECKPOINTS}/ folder, or a TF1 checkpoint with its 'checkpoint' file")


def _newest_run_checkpoint(folder: str) -> str | None:
    """The newest weights of a run's output folder or its ``checkpoints/``:
    the training checkpoint or the exported ``model.ckpt-N`` of the highest
    step (the exported one on a tie: the same weights, in the common form)."""
    found = []
    for directory, pattern, tie in ((os.path.join(folder, _RUN_CHECKPOINTS),
                                     _RUN_CHECKPOINT, 0), (folder, _RUN_CHECKPOINT, 0),
                                    (folder, _EXPORTED, 1)):
        if not tf.io.gfile.isdir(directory):
            continue
        for name in tf.io.gfile.listdir(directory):
            match = pattern.fullmatch(name)
            if match:
                found.append((int(match[1]), tie,
                              os.path.join(directory, name[:-len(".index")])))
    return max(found)[2] if found else None


def _checkpoint(path: str, prefix: str) -> PretrainedWeights:
    """A checkpoint prefix: a run's (TF2, with ``model/`` objects) or Google's."""
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as error:
        raise ValueError(f"{prefix}: not a readable checkpoint "
                         f"({str(error).splitlines()[0][:200]})") from None
    keys = list(reader.get_variable_to_shape_map())
    parts = _model_parts(_object_graph(reader)) if _OBJECT_GRAPH in keys else []
    if parts:
        return PretrainedWeights(path, "run", prefix,
                                 f"run checkpoint {os.path.basename(prefix)} with "
                                 f"{', '.join(parts)}")
    bert = sum(key.startswith(_BACKBONE_PREFIX) for key in keys)
    return PretrainedWeights(path, "google", prefix,
                             f"TF1 checkpoint {os.path.basename(prefix)} with {len(keys)} "
                             f"variables, {bert} of them under {_BACKBONE_PREFIX}")


def _object_graph(reader):
    """The checkpoint's object graph (a ``TrackableObjectGraph`` proto)."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH))
    return graph


def _model_parts(graph) -> list[str]:
    """The attributes of the checkpoint's ``model`` (``backbone``, ``span_head``,
    ...), in order; empty when it has no ``model``."""
    root = graph.nodes[0]
    model = next((child.node_id for child in root.children
                  if child.local_name == "model"), None)
    if model is None:
        return []
    return [child.local_name for child in graph.nodes[model].children
            if not child.local_name.startswith("_")]


def _keras_hub_preset(folder: str) -> PretrainedWeights:
    config_file = os.path.join(folder, "config.json")
    try:
        with tf.io.gfile.GFile(config_file) as file:
            saved = json.load(file)
    except json.JSONDecodeError as error:
        raise ValueError(f"{config_file}: not valid JSON ({error})") from None
    class_name = saved.get("registered_name") or saved.get("class_name") \
        if isinstance(saved, dict) else None
    if not class_name or "BertBackbone" not in class_name:
        raise ValueError(f"{config_file}: key 'registered_name' is {class_name!r}, not a "
                         f"keras-hub BertBackbone")
    from packed_bert_tf.models.keras_hub_weights import bert_config_from_keras_hub
    backbone = _keras_hub_backbone(folder)
    vocab_file = os.path.join(folder, _KERAS_HUB_VOCABULARY)
    return PretrainedWeights(
        folder, "keras_hub", folder, f"a keras-hub preset ({class_name})",
        config=bert_config_from_keras_hub(backbone),
        vocab_file=vocab_file if tf.io.gfile.exists(vocab_file) else None,
        do_lower_case=_keras_hub_lowercase(folder))


def _keras_hub_backbone(folder: str):
    from packed_bert_tf.models.keras_hub_weights import _keras_hub
    return _keras_hub().models.Backbone.from_preset(folder)


def _keras_hub_lowercase(folder: str) -> bool | None:
    tokenizer_file = os.path.join(folder, "tokenizer.json")
    if not tf.io.gfile.exists(tokenizer_file):
        return None
    with tf.io.gfile.GFile(tokenizer_file) as file:
        lowercase = json.load(file).get("config", {}).get("lowercase")
    return lowercase if isinstance(lowercase, bool) else None


def load_pretrained_weights(model, weights, *,
                            allow_partial: bool = False) -> CheckpointLoadReport:
    """Copies pre-trained weights of any form into ``model``.

    Args:
      model: a `BertPretrainingModel`, `BertSquadModel` or
        `BertClassifierModel` (built here if it is not).
      weights: a `PretrainedWeights`, or a path for `find_pretrained_weights`.
      allow_partial: load what there is when some backbone weight is not in
        the source (those stay as initialised, with a warning).

    Returns:
      `CheckpointLoadReport`, by original BERT names.

    Raises:
      ValueError: one line naming the path: nothing found there, a shape that
        differs (the name and both shapes), or, unless ``allow_partial``, a
        backbone weight the source lacks.
    """
    if not isinstance(weights, PretrainedWeights):
        weights = find_pretrained_weights(weights)
    source = f"{weights.path} ({weights.holds})"
    try:
        if weights.form == "google":
            report = load_google_checkpoint(model, weights.checkpoint)
        else:
            report = load_google_weights(model, _named_arrays(model, weights),
                                         source=source)
    except ValueError as error:  # a shape mismatch: its first line names the name
        lines = str(error).splitlines()
        raise ValueError(f"{lines[0]} {lines[1].strip() if len(lines) > 1 else ''}"
                         .strip()) from None
    # The missing ones are logged (a head the source lacks among them).
    backbone_missing = [name for name in report.missing
                        if name.startswith(_BACKBONE_PREFIX)]
    if backbone_missing and not allow_partial:
        raise ValueError(
            f"{source}: {len(backbone_missing)} of the model's backbone weights are not "
            f"there (first {backbone_missing[0]}); refusing to start them from random "
            f"(--allow_partial_init_checkpoint allows it)")
    return report


def from_preset(model_class, path, *args, bert_config: BertConfig | None = None,
                allow_partial: bool = False, **kwargs):
    """A ``model_class`` model holding the weights at ``path``, in any form.

    In the manner of keras-hub's ``from_preset``, for a folder or a checkpoint
    on disk: a Hugging Face or keras-hub folder states its config; a run of
    this package or an original BERT checkpoint needs ``bert_config``::

        squad = from_preset(BertSquadModel, "bert-base-uncased/")
        classifier = from_preset(BertClassifierModel, "runs/pretraining", 3,
                                 bert_config=config)

    Args:
      model_class: `BertPretrainingModel`, `BertSquadModel` or
        `BertClassifierModel`.
      path: the weights (`find_pretrained_weights`).
      *args: the class's arguments after the backbone (``num_labels``, ...).
      **kwargs: `PackedModel.from_bert_config`'s and the class's keyword
        arguments (``packed``, ...).
      bert_config: the config, when ``path`` states none; when it does, the
        two must agree.
      allow_partial: see `load_pretrained_weights`.

    Raises:
      ValueError: one line naming the path (and the key) at fault.
    """
    weights = find_pretrained_weights(path)
    config = weights.config or bert_config
    if config is None:
        raise ValueError(f"{weights.path} ({weights.holds}) states no config: pass "
                         f"bert_config")
    difference = bert_config.first_difference(config) if bert_config else None
    if difference:
        key, given, stated = difference
        raise ValueError(f"bert_config's {key!r} is {given!r} but {weights.path} "
                         f"has {stated!r}")
    model = model_class.from_bert_config(config, *args, **kwargs)
    model.build()
    load_pretrained_weights(model, weights, allow_partial=allow_partial)
    return model


def _named_arrays(model, weights: PretrainedWeights) -> dict:
    """The source's arrays under original BERT names, in their checkpoint layout."""
    if weights.form == "hugging_face":
        return hugging_face.read_hugging_face_weights(weights.checkpoint)
    if weights.form == "keras_hub":
        from packed_bert_tf.models.keras_hub_weights import keras_hub_named_weights
        return keras_hub_named_weights(_keras_hub_backbone(weights.checkpoint))
    return _run_checkpoint_arrays(model, weights.checkpoint)


def _run_checkpoint_arrays(model, prefix: str) -> dict:
    """A run checkpoint's weights under original BERT names, for ``model``.

    The checkpoint's object graph names each variable by its Keras path, the
    model's name first (``bert_squad_model/backbone/...``); without that
    first part a path is the same in every task model. A variable is saved
    once, under the first of its keys: ``model/...``, or the optimizer's list
    of the trainable ones (the encoder's blocks, held in a list, are saved
    only there).
    """
    reader = tf.train.load_checkpoint(prefix)
    graph = _object_graph(reader)
    keys = {}
    for node in graph.nodes:
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key.startswith(
                    _MODEL_VARIABLE_KEYS):
                path = attribute.full_name.partition("/")[2].removesuffix(":0")
                keys.setdefault(path, attribute.checkpoint_key)
    arrays = {}
    for name, target in _variable_map(model).items():
        key = keys.get(target.variable.path.partition("/")[2])
        if key is not None:
            value = np.asarray(reader.get_tensor(key))
            arrays[name] = value.T if target.transpose else value
    return arrays


__all__ = ["FORMS", "PretrainedWeights", "find_pretrained_weights", "from_preset",
           "load_pretrained_weights"]
