"""PackedModel: a `BertBackbone` and task heads on it, in Keras' workflow.

Letters: B batch, S sequence length, D max sequences per pack, M masked-LM
slots, H hidden.

In the manner of keras-hub's ``Task``: a task model takes a backbone
(``BertSquadModel(backbone)``, ``BertClassifierModel(backbone, 3)``) and
saves it in its config (serialised), next to its own arguments;
``from_bert_config`` builds the backbone from a `BertConfig` first. The
model consumes one feature dict (int32) and returns a dict of outputs.
Besides `keras.Model`'s own workflow, a `PackedModel` says which features
its ``call`` reads and which outputs a server wants, so that
`packed_bert_tf.models.export_for_serving` can build its serving signature,
and it refuses the one Keras ``compile`` option that does not work for it
(``jit_compile=True`` on several replicas).
"""

from __future__ import annotations

from typing import ClassVar

import keras

from packed_bert_tf.models.backbone import BertBackbone
from packed_bert_tf.models.config import BertConfig

#: The letters a feature's second dimension may be named by (see `PackedModel`).
FEATURE_DIMENSIONS = ("S", "D", "M")


class PackedModel(keras.Model):
    """Base of the task models: the backbone, its config, build, save and load.

    A task model adds its heads, its arguments and its ``call`` (and
    ``compute_loss``). The heads take the model's dtype policy: the
    backbone's unless ``dtype`` is given.

    Subclasses set:

    * ``INPUT_FEATURES``: feature name -> the letter of its second dimension
      ("S": [B, S] per token, "D": [B, D] per sequence, "M": [B, M] per
      masked-LM slot), for the features ``call`` reads (labels excluded).
    * ``SERVING_OUTPUTS``: the names of ``call``'s outputs a serving signature
      returns by default (the logits; not the [B, S, H] hidden states).
    * ``HEADS``: the attributes holding the heads; `build` builds each on
      [B, X, H] inputs (X: S, D or M).
    * ``ARGUMENTS``: the constructor's arguments after ``backbone``, each an
      attribute of the same name, which `get_config` returns.
    * ``POOLER``: whether a head reads the backbone's pooled output. The
      backbone has a pooler exactly when it does (`from_bert_config` gives
      it one; the constructor refuses a mismatch: an unused pooler would
      take no gradient).

    An unpacked model (``packed=False``) ignores ``positions``, so its
    `input_features` leave it out.

    Args:
      backbone: a `BertBackbone`. Pass it unbuilt: this model's `build`
        builds it under the model's name, so that its weight paths are
        ``<model>/backbone/...``, those run checkpoints are matched by.
      **kwargs: `keras.Model`'s (``name``, ``dtype``, ``trainable``).

    Raises:
      TypeError: ``backbone`` is not a `BertBackbone`.
      ValueError: the backbone has a pooler and the model reads none, or the
        other way round.
    """

    INPUT_FEATURES: ClassVar[dict] = {}
    SERVING_OUTPUTS: ClassVar[tuple] = ()
    HEADS: ClassVar[tuple] = ()
    ARGUMENTS: ClassVar[tuple] = ()
    POOLER: ClassVar[bool] = True

    def __init__(self, backbone: BertBackbone, **kwargs):
        name = type(self).__name__
        if not isinstance(backbone, BertBackbone):
            raise TypeError(f"{name} takes a BertBackbone, got a {type(backbone).__name__} "
                            f"({name}.from_bert_config(config) builds one from a config)")
        if backbone.pooler != self.POOLER:
            reads = "reads the pooled output" if self.POOLER else "reads no pooled output"
            raise ValueError(f"{name} {reads}: its BertBackbone needs pooler={self.POOLER}, "
                             f"got pooler={backbone.pooler}")
        if kwargs.get("dtype") is None:
            kwargs["dtype"] = backbone.dtype_policy
        super().__init__(**kwargs)
        self.backbone = backbone

    @classmethod
    def from_bert_config(cls, bert_config: BertConfig | dict, *args, packed: bool = True,
                         dtype=None, **kwargs):
        """The model on a new `BertBackbone` of ``bert_config``.

        Args:
          bert_config: a `BertConfig` (or its dict).
          *args: the class's arguments after ``backbone`` (``num_labels``).
          packed: the backbone's (see `BertBackbone`).
          dtype: the dtype policy of the backbone and the model (None: the
            global policy).
          **kwargs: the class's other keyword arguments.

        Returns:
          ``cls(BertBackbone(bert_config, packed=packed, pooler=cls.POOLER,
          dtype=dtype), *args, dtype=dtype, **kwargs)``, unbuilt.
        """
        backbone = BertBackbone(bert_config, packed=packed, pooler=cls.POOLER, dtype=dtype)
        return cls(backbone, *args, dtype=dtype, **kwargs)

    @property
    def bert_config(self) -> BertConfig:
        """The backbone's `BertConfig`."""
        return self.backbone.bert_config

    @property
    def packed(self) -> bool:
        """Whether the backbone reads packed rows (see `BertBackbone`)."""
        return self.backbone.packed

    def build(self, input_shape=None):
        """Creates every weight, the backbone's and each head's; none depends on
        B, S, D or M."""
        if self.built:
            return
        self.backbone.build()
        for head in self.HEADS:
            getattr(self, head).build((None, None, self.bert_config.hidden_size))
        self.built = True

    def input_features(self) -> dict:
        """Feature name -> letter of its second dimension, for what ``call`` reads."""
        features = dict(self.INPUT_FEATURES)
        if not self.packed:
            features.pop("positions", None)
        return features

    def copy_encoder_weights(self, source: PackedModel) -> None:
        """Copies the embeddings and encoder of another model of the same config
        (e.g. a trained `BertPretrainingModel`), and its pooler when both
        backbones have one, as an original pre-training checkpoint would; the
        heads are left as they are."""
        self.backbone.copy_weights_from(source.backbone)

    def get_config(self):
        """The constructor's arguments: ``backbone`` serialised, then `ARGUMENTS`.

        The backbone goes without its build state: `from_config` gives it
        back unbuilt, so that `build` builds it under the model's name (the
        weight paths of the model that was saved), built or not.
        """
        config = super().get_config()
        backbone = keras.layers.serialize(self.backbone)
        config["backbone"] = {key: value for key, value in backbone.items()
                              if key != "build_config"}
        config.update({argument: getattr(self, argument) for argument in self.ARGUMENTS})
        return config

    @classmethod
    def from_config(cls, config):
        """The model of a `get_config` dict.

        A config that holds ``bert_config`` (and ``packed``) in place of
        ``backbone``, as ``.keras`` files without a serialised backbone do,
        goes through `from_bert_config`; the weights and their paths are the
        same.
        """
        config = dict(config)
        backbone = config.pop("backbone", None)
        if backbone is None:
            return cls.from_bert_config(**config)
        if isinstance(backbone, dict):
            backbone = keras.layers.deserialize(backbone)
        return cls(backbone, **config)

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
