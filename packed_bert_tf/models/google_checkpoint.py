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

These names are also the common currency of other weight sources: any
mapping {name: array} loads with `load_google_weights` (keras-hub's
`BertBackbone` does, through `packed_bert_tf.models.keras_hub_weights`), and
`google_named_weights` gives a model's weights under these names.
"""

import dataclasses
import os
import re

import numpy as np
import tensorflow as tf
from absl import logging

from packed_bert_tf.filesystem import write_error_reason

# Checkpoint entries that hold optimizer or training state, never weights.
_OPTIMIZER_STATE = re.compile(
    r"(^|/)(adam_m|adam_v|Adam|Adam_1|LAMB|LAMB_1|Momentum|global_step|"
    r"loss_scale|good_steps|current_loss_scale)(_\d+)?$")


@dataclasses.dataclass(frozen=True)
class CheckpointLoadReport:
    """What `load_google_checkpoint` (or another loader by these names) did.

    Attributes:
      loaded: source names copied into the model.
      missing: names the model has but the source lacks (left as they were).
      unused: source names that are neither model weights nor optimizer state.
    """
    loaded: tuple
    missing: tuple
    unused: tuple


@dataclasses.dataclass(frozen=True)
class _Mapping:
    """Where a named array lives: ``variable``, transposed and/or reshaped.

    ``shape``: the named array's shape when the variable holds it reshaped
    (keras-hub's attention kernels are [H, N, E] for the checkpoint's
    [H, H]); None when it is the variable's shape (transposed if
    ``transpose``).
    """
    variable: object  # keras.Variable
    transpose: bool = False
    shape: tuple | None = None

    def checkpoint_shape(self) -> tuple:
        if self.shape is not None:
            return tuple(self.shape)
        shape = tuple(self.variable.shape)
        return shape[::-1] if self.transpose else shape

    def read(self) -> np.ndarray:
        """The variable's value in the checkpoint layout, float32."""
        value = tf.cast(tf.convert_to_tensor(self.variable), tf.float32).numpy()
        if self.transpose:
            value = value.T
        return value.reshape(self.checkpoint_shape())

    def assign(self, value) -> None:
        """Assigns a checkpoint-layout array (of `checkpoint_shape`)."""
        shape = tuple(self.variable.shape)
        value = np.asarray(value)
        # The inverse of `read`: undo the reshape, then the transpose.
        value = value.reshape(shape[::-1]).T if self.transpose else value.reshape(shape)
        self.variable.assign(value.astype(self.variable.dtype))


def _variable_map(model) -> dict:
    """Google name -> model variable, in checkpoint order.

    The model's backbone (embeddings, encoder, and the pooler when it has
    one), then its heads: those its ``google_checkpoint_heads()`` lists
    (name -> (variable, transposed)) when it has that method, else the
    pre-training heads.
    """
    if not model.built:
        model.build()
    mapping = {}
    backbone = model.backbone
    embeddings = backbone.embeddings
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
    for index, block in enumerate(backbone.encoder.blocks):
        prefix = f"bert/encoder/layer_{index}"
        dense(f"{prefix}/attention/self/query", block.attention.query)
        dense(f"{prefix}/attention/self/key", block.attention.key)
        dense(f"{prefix}/attention/self/value", block.attention.value)
        dense(f"{prefix}/attention/output/dense", block.attention.output_dense)
        layer_norm(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm)
        dense(f"{prefix}/intermediate/dense", block.intermediate_dense)
        dense(f"{prefix}/output/dense", block.output_dense)
        layer_norm(f"{prefix}/output/LayerNorm", block.output_layer_norm)
    if backbone.pooler_dense is not None:
        dense("bert/pooler/dense", backbone.pooler_dense)
    heads = getattr(model, "google_checkpoint_heads", None)
    if heads is not None:
        for name, (variable, transpose) in heads().items():
            mapping[name] = _Mapping(variable, transpose=transpose)
        return mapping
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
    return {name: target.checkpoint_shape() for name, target in _variable_map(model).items()}


def google_named_weights(model) -> dict:
    """Checkpoint name -> the model's weight as a float32 numpy array.

    In checkpoint order and layout (``cls/seq_relationship/output_weights``
    transposed to [2, H]), exactly what `save_google_checkpoint` writes;
    builds the model if needed.
    """
    return _read_arrays(_variable_map(model))


def _read_arrays(mapping: dict) -> dict:
    return {name: target.read() for name, target in mapping.items()}


def load_google_weights(model, weights, *, source: str = "weights") -> CheckpointLoadReport:
    """Copies arrays named as in original BERT checkpoints into ``model``.

    `load_google_checkpoint` for a source that is not a checkpoint file: a
    mapping {checkpoint name: array in the checkpoint layout}, such as
    `google_named_weights` of another model or
    `packed_bert_tf.models.keras_hub_weights.keras_hub_named_weights` of a
    keras-hub backbone. Same checks, same report.

    Args:
      model: a model that `load_google_checkpoint` accepts.
      weights: mapping name -> array-like.
      source: what the arrays are, for the messages.

    Returns:
      `CheckpointLoadReport`.

    Raises:
      ValueError: listing every name whose shape differs from the model's.
    """
    weights = {name: np.asarray(value) for name, value in weights.items()}
    return _assign_arrays(_variable_map(model),
                          {name: value.shape for name, value in weights.items()},
                          weights.__getitem__, source=source, kind="source")


def _assign_arrays(mapping: dict, shapes: dict, read, *, source: str, kind: str,
                   target: str = "model") -> CheckpointLoadReport:
    """Assigns ``read(name)`` to every target of ``mapping`` that ``shapes`` has.

    The one copy of the checks: nothing is assigned unless every shared name
    has the same shape on both sides; names on one side only are reported
    (optimizer state silently skipped).

    Args:
      mapping: name -> `_Mapping`, the targets.
      shapes: name -> shape of every array the source holds.
      read: name -> array in the checkpoint layout (called once per loaded
        name, so a checkpoint is read lazily).
      source: names the source in messages (a path, a backbone).
      kind: what the source is, in the messages ("checkpoint").
      target: what ``mapping`` belongs to, in the messages.

    Raises:
      ValueError: listing every name whose shape differs.
    """
    mismatches = [
        f"{name}: {kind} {tuple(shapes[name])}, {target} expects "
        f"{destination.checkpoint_shape()}"
        for name, destination in mapping.items()
        if name in shapes and tuple(shapes[name]) != destination.checkpoint_shape()]
    if mismatches:
        raise ValueError(f"{source}: {len(mismatches)} shape mismatch(es) between the "
                         f"{kind} and the {target}'s config:\n  "
                         + "\n  ".join(mismatches))

    loaded = []
    for name, destination in mapping.items():
        if name not in shapes:
            continue
        destination.assign(read(name))
        loaded.append(name)
    missing = tuple(name for name in mapping if name not in shapes)
    unused = tuple(sorted(name for name in shapes
                          if name not in mapping and not _OPTIMIZER_STATE.search(name)))
    logging.info("%s: loaded %d variables", source, len(loaded))
    if missing:
        logging.warning("%s: %d %s variables not in the %s (left as "
                        "initialised): %s", source, len(missing), target, kind,
                        ", ".join(missing))
    if unused:
        logging.warning("%s: %d %s variables unused: %s", source, len(unused), kind,
                        ", ".join(unused))
    return CheckpointLoadReport(tuple(loaded), missing, unused)


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
    return _assign_arrays(_variable_map(model), shapes,
                          lambda name: np.asarray(reader.get_tensor(name)),
                          source=os.fspath(path), kind="checkpoint")


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

    Raises:
      OSError: the checkpoint could not be written, naming it.
    """
    path = os.fspath(path)
    weights = google_named_weights(model)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    try:
        tf.raw_ops.SaveV2(prefix=path, tensor_names=list(weights),
                          shape_and_slices=[""] * len(weights),
                          tensors=[tf.constant(value) for value in weights.values()])
    except tf.errors.OpError as error:  # a full disk, say: name the checkpoint
        raise OSError(f"cannot write {path} ({write_error_reason(error)})") from None
    return path
