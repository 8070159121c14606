"""Reading and writing google-research/bert TF1 name-based checkpoints.

Letters: V vocab, P max positions, T token types, H hidden, I intermediate size.

The original checkpoints name every variable by its TF1 scope::

    bert/embeddings/word_embeddings                      [V, H]
    bert/embeddings/position_embeddings                  [P, H]
    bert/embeddings/token_type_embeddings                [T, H]
    bert/embeddings/LayerNorm/gamma|beta                 [H]
    bert/encoder/layer_N/attention/self/query/kernel     [H, H]  (key, value)
    bert/encoder/layer_N/attention/output/dense/kernel   [H, H]
    bert/encoder/layer_N/attention/output/LayerNorm/...  [H]
    bert/encoder/layer_N/intermediate/dense/kernel       [H, I]
    bert/encoder/layer_N/output/dense/kernel             [I, H]
    bert/encoder/layer_N/output/LayerNorm/...            [H]
    bert/pooler/dense/kernel|bias                        [H, H], [H]
    cls/predictions/transform/dense/kernel|bias          [H, H], [H]
    cls/predictions/transform/LayerNorm/gamma|beta       [H]
    cls/predictions/output_bias                          [V]
    cls/seq_relationship/output_weights                  [2, H]  (a transposed Dense kernel)
    cls/seq_relationship/output_bias                     [2]
    cls/squad/output_weights|output_bias                 [2, H], [2]  (fine-tuned SQuAD)

(every dense also has a ``bias``). Optimizer state (``.../adam_m``,
``.../adam_v``, ``global_step`` and the like) is ignored on load.
"""

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf
from absl import logging

# Checkpoint entries that hold optimizer or training state, never weights.
_OPTIMIZER_STATE = re.compile(
    r"(^|/)(adam_m|adam_v|Adam|Adam_1|LAMB|LAMB_1|Momentum|global_step|"
    r"loss_scale|good_steps|current_loss_scale)(_\d+)?$")


@dataclasses.dataclass(frozen=True)
class CheckpointLoadReport:
    """What `load_google_checkpoint` did.

    Attributes:
      loaded: checkpoint names copied into the model.
      missing: names the model has but the checkpoint lacks (left as they were).
      unused: checkpoint names that are neither model weights nor optimizer state.
    """
    loaded: tuple
    missing: tuple
    unused: tuple


@dataclasses.dataclass(frozen=True)
class _Mapping:
    variable: object  # keras.Variable
    transpose: bool = False


def _variable_map(model) -> dict:
    """Google name -> model variable, in checkpoint order.

    The embeddings and encoder of the model, then its heads: those its
    ``google_checkpoint_heads()`` lists (name -> (variable, transposed)) when
    it has that method, else the pre-training heads.
    """
    if not model.built:
        model.build()
    mapping = {}
    embeddings = model.embeddings
    mapping["bert/embeddings/word_embeddings"] = _Mapping(
        embeddings.word_embeddings.embeddings)
    mapping["bert/embeddings/position_embeddings"] = _Mapping(
        embeddings.position_embedding.embeddings)
    mapping["bert/embeddings/token_type_embeddings"] = _Mapping(
        embeddings.token_type_embeddings.embeddings)

    def layer_norm(prefix, layer):
        mapping[f"{prefix}/gamma"] = _Mapping(layer.gamma)
        mapping[f"{prefix}/beta"] = _Mapping(layer.beta)

    def dense(prefix, layer):
        mapping[f"{prefix}/kernel"] = _Mapping(layer.kernel)
        mapping[f"{prefix}/bias"] = _Mapping(layer.bias)

    layer_norm("bert/embeddings/LayerNorm", embeddings.layer_norm)
    for index, block in enumerate(model.encoder.blocks):
        prefix = f"bert/encoder/layer_{index}"
        dense(f"{prefix}/attention/self/query", block.attention.query)
        dense(f"{prefix}/attention/self/key", block.attention.key)
        dense(f"{prefix}/attention/self/value", block.attention.value)
        dense(f"{prefix}/attention/output/dense", block.attention.output_dense)
        layer_norm(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm)
        dense(f"{prefix}/intermediate/dense", block.intermediate_dense)
        dense(f"{prefix}/output/dense", block.output_dense)
        layer_norm(f"{prefix}/output/LayerNorm", block.output_layer_norm)
    heads = getattr(model, "google_checkpoint_heads", None)
    if heads is not None:
        for name, (variable, transpose) in heads().items():
            mapping[name] = _Mapping(variable, transpose=transpose)
        return mapping
    dense("bert/pooler/dense", model.next_sentence_head.pooler_dense)
    dense("cls/predictions/transform/dense", model.masked_lm_head.transform_dense)
    layer_norm("cls/predictions/transform/LayerNorm", model.masked_lm_head.layer_norm)
    mapping["cls/predictions/output_bias"] = _Mapping(model.masked_lm_head.output_bias)
    classifier = model.next_sentence_head.classifier
    mapping["cls/seq_relationship/output_weights"] = _Mapping(classifier.kernel,
                                                              transpose=True)
    mapping["cls/seq_relationship/output_bias"] = _Mapping(classifier.bias)
    return mapping


def google_variable_shapes(model) -> dict:
    """Checkpoint name -> shape in the checkpoint, for every weight of ``model``.

    In checkpoint order; builds the model if needed.
    """
    return {name: _checkpoint_shape(target) for name, target in _variable_map(model).items()}


def _checkpoint_shape(mapping: _Mapping) -> tuple:
    shape = tuple(mapping.variable.shape)
    return shape[::-1] if mapping.transpose else shape


def load_google_checkpoint(model, path) -> CheckpointLoadReport:
    """Copies the weights of an original BERT checkpoint into ``model``.

    Nothing is assigned unless every shape matches. Missing and unused names
    are logged (warning) and returned; optimizer state is skipped silently.

    Args:
      model: a `BertPretrainingModel` or `BertSquadModel` (built here if it
        is not).
      path: the checkpoint prefix (``.../bert_model.ckpt``) or a directory
        holding a ``checkpoint`` state file.

    Returns:
      `CheckpointLoadReport`.

    Raises:
      ValueError: listing every name whose shape differs from the model's.
    """
    reader = tf.train.load_checkpoint(os.fspath(path))
    shapes = reader.get_variable_to_shape_map()
    mapping = _variable_map(model)

    mismatches = [
        f"{name}: checkpoint {tuple(shapes[name])}, model expects "
        f"{_checkpoint_shape(target)}"
        for name, target in mapping.items()
        if name in shapes and tuple(shapes[name]) != _checkpoint_shape(target)]
    if mismatches:
        raise ValueError(f"{path}: {len(mismatches)} shape mismatch(es) between the "
                         f"checkpoint and the model's config:\n  "
                         + "\n  ".join(mismatches))

    loaded = []
    for name, target in mapping.items():
        if name not in shapes:
            continue
        value = np.asarray(reader.get_tensor(name))
        if target.transpose:
            value = value.T
        target.variable.assign(value.astype(target.variable.dtype))
        loaded.append(name)
    missing = tuple(name for name in mapping if name not in shapes)
    unused = tuple(sorted(name for name in shapes
                          if name not in mapping and not _OPTIMIZER_STATE.search(name)))
    logging.info("%s: loaded %d variables", path, len(loaded))
    if missing:
        logging.warning("%s: %d model variables not in the checkpoint (left as "
                        "initialised): %s", path, len(missing), ", ".join(missing))
    if unused:
        logging.warning("%s: %d checkpoint variables unused: %s", path, len(unused),
                        ", ".join(unused))
    return CheckpointLoadReport(tuple(loaded), missing, unused)


def save_google_checkpoint(model, path) -> str:
    """Writes the model's weights as an original-BERT TF1 checkpoint.

    The result reads with ``tf.train.load_checkpoint(path).get_tensor(name)``
    and loads back with `load_google_checkpoint` (float32 tensors).

    Args:
      model: a `BertPretrainingModel` or `BertSquadModel` (built here if it
        is not).
      path: the checkpoint prefix to write (``.index`` and ``.data-*`` files);
        its directory is created.

    Returns:
      ``path`` as a string.
    """
    path = os.fspath(path)
    mapping = _variable_map(model)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    tensors = []
    for target in mapping.values():
        value = tf.cast(tf.convert_to_tensor(target.variable), tf.float32)
        tensors.append(tf.transpose(value) if target.transpose else value)
    tf.raw_ops.SaveV2(prefix=path, tensor_names=list(mapping),
                      shape_and_slices=[""] * len(mapping), tensors=tensors)
    return path
