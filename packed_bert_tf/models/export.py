"""Export a packed model as a TensorFlow SavedModel for serving.

Letters: B batch, S sequence length, D max sequences per pack, M masked-LM slots.

The SavedModel's ``serving_default`` (also ``serve``) signature takes one
int32 tensor per feature the model reads, named as the feature: [B, S] per
token, [B, D] per sequence, [B, M] per masked-LM slot; B is free, S, D and M
are fixed at export. It returns the model's serving outputs (its logits) by
name. A client packs its sequences exactly as for training (S = 6, D = 2)::

    input_ids   a1 a2 a3 b1 b2 0
    input_mask   1  1  1  2  2 0
    segment_ids  0  0  1  0  1 0
    positions    0  1  2  0  1 0

and reads each sequence's outputs back by its index in ``input_mask``
(per-token logits) or its slot d (per-sequence logits [B, D, ...]).

Reading it back needs TensorFlow alone, not this package::

    served = tf.saved_model.load(export_dir)
    outputs = served.signatures["serving_default"](input_ids=..., input_mask=..., ...)
"""

from __future__ import annotations

from collections.abc import Mapping

import keras
import tensorflow as tf

from packed_bert_tf.models.packed_model import FEATURE_DIMENSIONS, PackedModel

#: The endpoint name; ``serving_default`` is the same function.
ENDPOINT = "serve"


def serving_input_signature(model, *, max_seq_length: int,
                            max_sequences_per_pack: int | None = None,
                            max_predictions_per_seq: int | None = None,
                            input_features: dict | None = None) -> list:
    """The [`tf.TensorSpec`] of the model's features, int32 [None, S|D|M], in order.

    Args:
      model: a `PackedModel` (its `input_features`), or any model when
        ``input_features`` is given.
      max_seq_length: S.
      max_sequences_per_pack: D, needed when a feature is per sequence.
      max_predictions_per_seq: M, needed when a feature is per masked-LM slot.
      input_features: feature name -> "S", "D" or "M"; default the model's.

    Raises:
      ValueError: the model declares no features, a letter is unknown, or a
        size the features need is missing or below 1.
    """
    if input_features is None:
        declared = getattr(model, "input_features", None)
        input_features = declared() if callable(declared) else None
    if not input_features:
        raise ValueError(f"{type(model).__name__} declares no input features: pass "
                         f"input_features={{name: 'S' | 'D' | 'M'}}")
    sizes = {"S": ("max_seq_length", max_seq_length),
             "D": ("max_sequences_per_pack", max_sequences_per_pack),
             "M": ("max_predictions_per_seq", max_predictions_per_seq)}
    signature = []
    for name, letter in input_features.items():
        if letter not in FEATURE_DIMENSIONS:
            raise ValueError(f"feature {name!r}: dimension {letter!r} is not one of "
                             f"{', '.join(FEATURE_DIMENSIONS)}")
        argument, size = sizes[letter]
        if size is None or size < 1:
            raise ValueError(f"{type(model).__name__} reads {name} [B, {letter}]: "
                             f"{argument} must be given (>= 1), got {size}")
        signature.append(tf.TensorSpec([None, size], tf.int32, name=name))
    return signature


def export_for_serving(model, export_dir: str, *, max_seq_length: int,
                       max_sequences_per_pack: int | None = None,
                       max_predictions_per_seq: int | None = None,
                       output_names=None, input_features: dict | None = None) -> str:
    """Writes ``model`` as a SavedModel whose signature serves packed batches.

    Args:
      model: a built `PackedModel` (`BertSquadModel`, `BertPretrainingModel`,
        ...), or any Keras model called on a feature dict that returns a dict,
        with ``input_features``. A model built under a ``tf.distribute``
        strategy is exported from a plain copy (its config and weights), so
        the SavedModel holds ordinary variables and no worker of a cluster
        takes part: call this outside the strategy's scope.
      export_dir: the SavedModel folder (created; an existing SavedModel
        there is replaced).
      max_seq_length: S, as `serving_input_signature`.
      max_sequences_per_pack: D, as `serving_input_signature`.
      max_predictions_per_seq: M, as `serving_input_signature`.
      input_features: as `serving_input_signature`.
      output_names: the outputs to serve, for a model that returns a dict;
        default the model's ``SERVING_OUTPUTS`` (else every output). A model
        that returns one tensor serves it as ``output_0``.

    Returns:
      ``export_dir``.

    Raises:
      ValueError: as `serving_input_signature`; an output name the model
        does not return; ``export_dir`` is a file.
    """
    signature = serving_input_signature(
        model, max_seq_length=max_seq_length, max_sequences_per_pack=max_sequences_per_pack,
        max_predictions_per_seq=max_predictions_per_seq, input_features=input_features)
    names = [spec.name for spec in signature]
    if not model.built:
        if not isinstance(model, PackedModel):  # other models build on a first call
            raise ValueError(f"{type(model).__name__} is not built: call it on a batch "
                             f"first")
        model.build()
    model = _undistributed(model)
    if output_names is None:
        output_names = tuple(getattr(model, "SERVING_OUTPUTS", ()))
    output_names = tuple(output_names)
    if output_names:  # an unknown name fails here, with the names there are
        example = model({spec.name: tf.zeros([1, spec.shape[1]], tf.int32)
                         for spec in signature}, training=False)
        available = tuple(example) if isinstance(example, Mapping) else ()
        unknown = [name for name in output_names if name not in available]
        if unknown:
            raise ValueError(f"{type(model).__name__} has no output {', '.join(unknown)} "
                             f"(its outputs: {', '.join(available) or 'one tensor'})")
    if tf.io.gfile.exists(export_dir) and not tf.io.gfile.isdir(export_dir):
        raise ValueError(f"export folder {export_dir} is a file")

    def serve(*tensors):
        # Positional tensors named by the signature: a SavedModel signature
        # needs flat, named inputs, not a dict argument.
        outputs = model(dict(zip(names, tensors)), training=False)
        if not isinstance(outputs, Mapping):
            return outputs  # one tensor: served as "output_0"
        return {name: outputs[name] for name in output_names or tuple(outputs)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(ENDPOINT, serve, input_signature=signature)
    archive.write_out(export_dir, verbose=False)
    return export_dir


def _undistributed(model):
    """``model``, or a copy with plain variables when it was built under a strategy.

    Keras records the strategy a model was created under (None outside any);
    reading the weights to copy them needs no collective, where a SavedModel
    of mirrored or multi-worker variables would carry their placement.
    """
    if getattr(model, "_distribute_strategy", None) is None:
        return model
    if tf.distribute.has_strategy():
        raise ValueError(f"export {type(model).__name__} outside the strategy's scope "
                         f"(its copy must get plain variables)")
    copy = type(model).from_config(model.get_config())
    if not copy.built:
        copy.build()
    copy.set_weights(model.get_weights())
    return copy
