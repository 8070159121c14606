"""PackedModel: what every packed BERT model shares beyond the backbone.

Letters: B batch, S sequence length, D max sequences per pack, M masked-LM slots.

A model of the package consumes one feature dict (int32) and returns a dict
of outputs. Besides `keras.Model`'s own workflow, a `PackedModel` says which
features its ``call`` reads and which outputs a server wants, so that
`packed_bert_tf.models.export_for_serving` can build its serving signature,
and it refuses the one Keras ``compile`` option that does not work for it
(``jit_compile=True`` on several replicas).
"""

from __future__ import annotations

from typing import ClassVar

import keras

#: The letters a feature's second dimension may be named by (see `PackedModel`).
FEATURE_DIMENSIONS = ("S", "D", "M")


class PackedModel(keras.Model):
    """Base of the package's models: feature declarations and the ``jit_compile`` check.

    Subclasses set:

    * ``INPUT_FEATURES``: feature name -> the letter of its second dimension
      ("S": [B, S] per token, "D": [B, D] per sequence, "M": [B, M] per
      masked-LM slot), for the features ``call`` reads (labels excluded).
    * ``SERVING_OUTPUTS``: the names of ``call``'s outputs a serving signature
      returns by default (the logits; not the [B, S, H] hidden states).

    An unpacked model (``packed=False``) ignores ``positions``, so its
    `input_features` leave it out.
    """

    INPUT_FEATURES: ClassVar[dict] = {}
    SERVING_OUTPUTS: ClassVar[tuple] = ()

    def input_features(self) -> dict:
        """Feature name -> letter of its second dimension, for what ``call`` reads."""
        features = dict(self.INPUT_FEATURES)
        if not getattr(self, "packed", True):
            features.pop("positions", None)
        return features

    @property
    def jit_compile(self):
        """Whether Keras' ``fit`` XLA-compiles its step (``compile(jit_compile=...)``).

        ``True`` is refused under a strategy of several replicas: Keras
        XLA-compiles its whole distributed step, cross-replica sums and all,
        which fails on CPUs and GPUs ("Trying to access resource ...
        replica_1 located in device ..."). ``"auto"`` (the default) turns XLA
        off there by itself. To train with XLA on several replicas use
        `packed_bert_tf.training.trainer.Trainer`, which compiles each
        replica's forward and backward pass and sums outside.

        (A property rather than an override of ``compile``: Keras restores a
        saved model's compile options only for models whose ``compile`` is
        its own.)

        Raises:
          ValueError: ``jit_compile=True`` with more than one replica.
        """
        return keras.Model.jit_compile.fget(self)

    @jit_compile.setter
    def jit_compile(self, value):
        # Only TensorFlow's trainer has a tf.distribute strategy; the other
        # backends compile their step on global arrays.
        strategy = getattr(self, "distribute_strategy", None)
        replicas = 1 if strategy is None else strategy.num_replicas_in_sync
        if value is True and replicas > 1:
            raise ValueError(
                f"{type(self).__name__}.compile(jit_compile=True) under a strategy of "
                f"{replicas} replicas: Keras would XLA-compile the cross-replica sums, "
                f"which fails; use jit_compile=False (or 'auto'), or "
                f"packed_bert_tf.training.trainer.Trainer for XLA on several replicas")
        keras.Model.jit_compile.fset(self, value)
