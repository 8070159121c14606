"""keras-hub's `BertBackbone` weights in and out of the models here.

Letters: V vocab, P max positions, T token types, H hidden, N heads,
E head size (H / N), I intermediate size.

A keras-hub preset (``bert_base_en_uncased`` and the like) then fine-tunes
packed::

    backbone = keras_hub.models.BertBackbone.from_preset("bert_base_en_uncased")
    config = bert_config_from_keras_hub(backbone)
    model = BertSquadModel.from_bert_config(config)  # or BertPretrainingModel, ...
    report = load_keras_hub_backbone(model, backbone)

keras-hub's variables go through the original BERT checkpoint names of
`packed_bert_tf.models.google_checkpoint` (one set of shape checks and one
report for every source)::

    token_embedding.embeddings              [V, H]    bert/embeddings/word_embeddings
    position_embedding.position_embeddings  [P, H]    bert/embeddings/position_embeddings
    segment_embedding.embeddings            [T, H]    bert/embeddings/token_type_embeddings
    embeddings_layer_norm.gamma|beta        [H]       bert/embeddings/LayerNorm/gamma|beta
    transformer_layer_N.
      _self_attention_layer.query_dense     [H, N, E] .../attention/self/query/kernel [H, H]
        (bias [N, E]; key_dense, value_dense alike)   (bias [H]; kernels [H, H])
      _self_attention_layer.output_dense    [N, E, H] .../attention/output/dense/kernel
      _self_attention_layer_norm            [H]       .../attention/output/LayerNorm
      _feedforward_intermediate_dense       [H, I]    .../intermediate/dense
      _feedforward_output_dense             [I, H]    .../output/dense
      _feedforward_layer_norm               [H]       .../output/LayerNorm
    pooled_dense.kernel|bias                [H, H]    bert/pooler/dense/kernel|bias

(``.../`` is ``bert/encoder/layer_N/``. The checkpoint's kernels are
[in, out] like Keras's, so the attention tensors are plain reshapes of them;
keras-hub's own ``utils/transformers/convert_bert.py`` transposes Hugging
Face's [out, in] and reshapes the same way.) The pooler
loads into every model whose `BertBackbone` has one (the pre-training and
classifier models); a model without one (SQuAD's) reports it unused. The task heads are not in a backbone and stay
as initialised (reported missing).

The two models compute the same function: keras-hub's BERT uses the tanh
approximation of GELU (``keras_hub.src.utils.keras_utils.gelu_approximate``),
which is ``hidden_act="gelu"`` here (original BERT's), and layer-norm epsilon
1e-12 in the embeddings and every layer, as here; `bert_config_from_keras_hub`
checks both on the backbone it reads. keras-hub has one dropout rate for the
residual branches and the attention probabilities; our config has two.

keras-hub is an optional extra (``pip install -e '.[keras-hub]'``): it is
imported only inside these functions.
"""

import numpy as np
from absl import logging

from packed_bert_tf.data.tokenization import load_vocab
from packed_bert_tf.layers.ops import gelu
from packed_bert_tf.models.backbone import LAYER_NORM_EPSILON
from packed_bert_tf.models.config import BertConfig

# The private pieces: the backbone side is one more set of `_Mapping` targets.
from packed_bert_tf.models.google_checkpoint import (
    CheckpointLoadReport,
    _assign_arrays,
    _Mapping,
    _read_arrays,
    google_named_weights,
    load_google_weights,
)

MISSING_KERAS_HUB = ("keras-hub is not installed; install the optional extra with "
                     "pip install -e '.[keras-hub]'")

# keras-hub's BERT initialises every kernel with TruncatedNormal(0.02)
# (bert_backbone.bert_kernel_initializer); nothing in the backbone records it.
_KERAS_HUB_INITIALIZER_RANGE = 0.02

# BertConfig field -> BertBackbone attribute, for the fields that fix weight shapes.
_STRUCTURE = (("vocab_size", "vocabulary_size"), ("hidden_size", "hidden_dim"),
              ("num_hidden_layers", "num_layers"), ("num_attention_heads", "num_heads"),
              ("intermediate_size", "intermediate_dim"),
              ("max_position_embeddings", "max_sequence_length"),
              ("type_vocab_size", "num_segments"))


def _keras_hub():
    try:
        import keras_hub
    except ImportError as error:
        if error.name == "keras_hub":  # absent, not broken
            raise ImportError(MISSING_KERAS_HUB) from error
        # E.g. a tensorflow-text built for another TensorFlow: say so, not "missing".
        raise ImportError(f"keras-hub is installed but does not import ({error}); "
                          f"reinstall the extra with pip install -e '.[keras-hub]'"
                          ) from error
    return keras_hub


def _describe(backbone) -> str:
    return f"keras-hub {type(backbone).__name__} {backbone.name!r}"


def _check_backbone(backbone) -> None:
    keras_hub = _keras_hub()
    if not isinstance(backbone, keras_hub.models.BertBackbone):
        raise ValueError(f"expected a keras_hub.models.BertBackbone, got "
                         f"{type(backbone).__name__}")


def bert_config_from_keras_hub(backbone) -> BertConfig:
    """The `BertConfig` of a keras-hub `BertBackbone`.

    Both dropout probabilities are keras-hub's one ``dropout``;
    ``initializer_range`` is keras-hub's 0.02; ``hidden_act`` is "gelu" (the
    tanh approximation, which keras-hub's BERT uses too).

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: ``backbone`` is not a `BertBackbone`, or one whose
        activation is not the tanh GELU, whose layers normalise first, or
        whose layer-norm epsilon is not BERT's 1e-12 (its outputs would
        differ from any model here).
    """
    _check_backbone(backbone)
    layers = backbone.transformer_layers
    probe = np.linspace(-5.0, 5.0, 41, dtype=np.float32)
    problems = []
    # Compared by value, not by name: the erf GELU differs from the tanh one by
    # up to 4.7e-4 here (near x = -2.7); keras's tanh GELU and ours differ by
    # 1e-7 (float32 rounding).
    expected = np.asarray(gelu(probe))
    problems.extend(f"{layer.name}'s activation is not the tanh-approximated GELU "
                    f"(BertConfig hidden_act 'gelu')" for layer in layers
                    if np.abs(np.asarray(layer.activation(probe)) - expected).max() > 1e-5)
    epsilons = {"embeddings_layer_norm": backbone.embeddings_layer_norm.epsilon}
    epsilons.update((layer.name, layer.layer_norm_epsilon) for layer in layers)
    problems.extend(f"{name} has layer-norm epsilon {epsilon}, the models here "
                    f"{LAYER_NORM_EPSILON}"
                    for name, epsilon in epsilons.items() if epsilon != LAYER_NORM_EPSILON)
    problems.extend(f"{layer.name} normalises first (pre-layer-norm); BERT normalises "
                    f"after the residual sum" for layer in layers if layer.normalize_first)
    if problems:
        raise ValueError(f"{_describe(backbone)} is not the BERT of these models: "
                         + "; ".join(problems))
    return BertConfig(
        vocab_size=backbone.vocabulary_size, hidden_size=backbone.hidden_dim,
        num_hidden_layers=backbone.num_layers, num_attention_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim, hidden_act="gelu",
        hidden_dropout_prob=float(backbone.dropout),
        attention_probs_dropout_prob=float(backbone.dropout),
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments,
        initializer_range=_KERAS_HUB_INITIALIZER_RANGE)


def _check_same_structure(model, backbone) -> None:
    """One ValueError naming every field in which the two models differ."""
    ours = model.bert_config
    theirs = bert_config_from_keras_hub(backbone)
    differences = [f"{field} (keras-hub {attribute}): backbone {getattr(theirs, field)}, "
                   f"model {getattr(ours, field)}"
                   for field, attribute in _STRUCTURE
                   if getattr(ours, field) != getattr(theirs, field)]
    if ours.hidden_act != theirs.hidden_act:
        differences.append(f"hidden_act: backbone {theirs.hidden_act!r} (tanh GELU), "
                           f"model {ours.hidden_act!r}")
    if differences:
        raise ValueError(f"{_describe(backbone)} does not match the model's BertConfig "
                         f"({len(differences)} difference(s)):\n  "
                         + "\n  ".join(differences))


def _backbone_map(backbone) -> dict:
    """Google name -> `_Mapping` onto the backbone's variable, in checkpoint order."""
    hidden = backbone.hidden_dim
    mapping = {
        "bert/embeddings/word_embeddings": _Mapping(backbone.token_embedding.embeddings),
        "bert/embeddings/position_embeddings": _Mapping(
            backbone.position_embedding.position_embeddings),
        "bert/embeddings/token_type_embeddings": _Mapping(
            backbone.segment_embedding.embeddings),
    }

    def layer_norm(prefix, layer):
        mapping[f"{prefix}/gamma"] = _Mapping(layer.gamma)
        mapping[f"{prefix}/beta"] = _Mapping(layer.beta)

    def dense(prefix, layer, kernel_shape=None, bias_shape=None):
        # EinsumDense kernels [H, N, E] or [N, E, H] are reshapes of [H, H].
        mapping[f"{prefix}/kernel"] = _Mapping(layer.kernel, shape=kernel_shape)
        mapping[f"{prefix}/bias"] = _Mapping(layer.bias, shape=bias_shape)

    layer_norm("bert/embeddings/LayerNorm", backbone.embeddings_layer_norm)
    for index, block in enumerate(backbone.transformer_layers):
        prefix = f"bert/encoder/layer_{index}"
        attention = block._self_attention_layer
        for name in ("query", "key", "value"):
            dense(f"{prefix}/attention/self/{name}", getattr(attention, f"{name}_dense"),
                  (hidden, hidden), (hidden,))
        dense(f"{prefix}/attention/output/dense", attention.output_dense,
              (hidden, hidden))
        layer_norm(f"{prefix}/attention/output/LayerNorm", block._self_attention_layer_norm)
        dense(f"{prefix}/intermediate/dense", block._feedforward_intermediate_dense)
        dense(f"{prefix}/output/dense", block._feedforward_output_dense)
        layer_norm(f"{prefix}/output/LayerNorm", block._feedforward_layer_norm)
    dense("bert/pooler/dense", backbone.pooled_dense)
    return mapping


def keras_hub_named_weights(backbone) -> dict:
    """A keras-hub `BertBackbone`'s weights under original BERT checkpoint names.

    Returns:
      dict name -> float32 numpy array in the checkpoint layout (attention
      kernels [H, H], biases [H]), the input of
      `packed_bert_tf.models.load_google_weights`.

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: ``backbone`` is not a `BertBackbone`.
    """
    _check_backbone(backbone)
    return _read_arrays(_backbone_map(backbone))


def load_keras_hub_backbone(model, backbone) -> CheckpointLoadReport:
    """Copies a keras-hub `BertBackbone`'s weights into one of our models.

    The embeddings and encoder always load; the pooler loads into a model
    that has one and is reported unused otherwise; the model's task heads
    are reported missing (left as initialised). Nothing is assigned unless
    the structures match. After loading, the model (``packed=False``) gives
    keras-hub's ``sequence_output`` (and, at each sequence's [CLS], its
    ``pooled_output``) to float32 rounding, and packed, every sequence of a
    pack the same.

    Args:
      model: a `BertPretrainingModel`, `BertSquadModel` or any model of this
        package with a ``bert_config`` (built here if it is not).
      backbone: a `keras_hub.models.BertBackbone`, e.g. from
        ``BertBackbone.from_preset(...)``.

    Returns:
      `CheckpointLoadReport` of the checkpoint names.

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: naming every config field in which the backbone and the
        model's `BertConfig` differ (vocab, hidden, layers, heads,
        intermediate, max positions, token types, activation), or a backbone
        these models cannot reproduce (see `bert_config_from_keras_hub`).
    """
    _check_same_structure(model, backbone)
    return load_google_weights(model, keras_hub_named_weights(backbone),
                               source=_describe(backbone))


def write_keras_hub_backbone(model, backbone) -> CheckpointLoadReport:
    """Copies one of our models' weights into a keras-hub `BertBackbone`.

    The way back of `load_keras_hub_backbone`: the embeddings and encoder,
    and the pooler if the model has one (else the backbone's stays as it
    was and is reported missing); the model's task heads are reported
    unused.

    Returns:
      `CheckpointLoadReport`: ``loaded`` the names written, ``missing`` the
      backbone's names the model lacks, ``unused`` the model's names the
      backbone lacks.

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: as `load_keras_hub_backbone`.
    """
    _check_same_structure(model, backbone)
    weights = google_named_weights(model)
    return _assign_arrays(_backbone_map(backbone),
                          {name: value.shape for name, value in weights.items()},
                          weights.__getitem__,
                          source=f"{model.name} -> {_describe(backbone)}", kind="model",
                          target="keras-hub backbone")


def to_keras_hub_backbone(model, **kwargs):
    """A new keras-hub `BertBackbone` of the model's config, holding its weights.

    keras-hub has a single dropout rate: the backbone gets
    ``hidden_dropout_prob`` (a different ``attention_probs_dropout_prob`` is
    logged). A model without a pooler leaves the backbone's randomly
    initialised (logged by `write_keras_hub_backbone`).

    Args:
      model: one of our models with a ``bert_config`` whose ``hidden_act``
        is "gelu".
      **kwargs: passed to `BertBackbone` (``dtype``, ``name``).

    Returns:
      `keras_hub.models.BertBackbone`.

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: the model's activation is not "gelu" (keras-hub's BERT
        has only the tanh GELU).
    """
    keras_hub = _keras_hub()
    config = model.bert_config
    if config.hidden_act != "gelu":
        raise ValueError(f"{model.name}: hidden_act {config.hidden_act!r}; keras-hub's "
                         f"BertBackbone has only 'gelu' (the tanh approximation)")
    if config.attention_probs_dropout_prob != config.hidden_dropout_prob:
        logging.warning("%s: keras-hub has one dropout rate; the backbone uses "
                        "hidden_dropout_prob %s, not attention_probs_dropout_prob %s",
                        model.name, config.hidden_dropout_prob,
                        config.attention_probs_dropout_prob)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size, **kwargs)
    write_keras_hub_backbone(model, backbone)
    return backbone


def write_keras_hub_vocabulary(tokenizer, path) -> str:
    """Writes a keras-hub `BertTokenizer`'s vocabulary as a BERT ``vocab.txt``.

    One token per line, line number = id, for
    `packed_bert_tf.data.tokenization.WordPieceTokenizer` (and the data
    generators' ``--vocab_file``) with ``do_lower_case=tokenizer.lowercase``.
    Our tokenizer strips accents when it lower-cases (original BERT);
    keras-hub's only with ``strip_accents=True``, so a tokenizer whose two
    settings differ is logged: accented text would split differently.

    Args:
      tokenizer: a `keras_hub.models.BertTokenizer` with its vocabulary.
      path: the file to write.

    Returns:
      ``path`` as a string.

    Raises:
      ImportError: keras-hub is not installed.
      ValueError: a token is empty or holds white space at its ends or a line
        break (it would not survive one-token-per-line), or the written file
        is not a BERT vocabulary (`load_vocab`: special tokens, [PAD] = 0).
    """
    keras_hub = _keras_hub()
    if not isinstance(tokenizer, keras_hub.models.BertTokenizer):
        raise ValueError(f"expected a keras_hub.models.BertTokenizer, got "
                         f"{type(tokenizer).__name__}")
    path = str(path)
    tokens = list(tokenizer.get_vocabulary())
    for index, token in enumerate(tokens):
        if not token or token != token.strip() or "\n" in token or "\r" in token:
            raise ValueError(f"{path}: keras-hub token {index} ({token!r}) cannot be "
                             f"one line of a vocab.txt")
    if bool(tokenizer.lowercase) != bool(tokenizer.strip_accents):
        logging.warning("%s: keras-hub's tokenizer has lowercase=%s, strip_accents=%s; "
                        "WordPieceTokenizer(do_lower_case=%s) %s accents", path,
                        tokenizer.lowercase, tokenizer.strip_accents, tokenizer.lowercase,
                        "strips" if tokenizer.lowercase else "keeps")
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(f"{token}\n" for token in tokens)
    load_vocab(path)  # raises, naming the file, unless it is a BERT vocabulary
    return path
