"""BertConfig: the hyper-parameters of ``bert_config.json``."""

import dataclasses
import json
import numbers

from absl import logging

from packed_bert_tf.layers.ops import ACTIVATION_NAMES

_INT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "max_position_embeddings", "type_vocab_size")
_PROBABILITY_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The standard ``bert_config.json`` of google-research/bert.

    Attributes:
      vocab_size: V, rows of the word-embedding table.
      hidden_size: H.
      num_hidden_layers: number of transformer blocks.
      num_attention_heads: N; H must be divisible by it.
      intermediate_size: I, width of the feed-forward layer.
      hidden_act: activation of the feed-forward layer and the masked-LM
        transform: "gelu" (tanh approximation, as original BERT),
        "gelu_exact" (the erf form: Hugging Face's "gelu"), "relu", "tanh"
        or "linear".
      hidden_dropout_prob: dropout on embeddings and residual branches.
      attention_probs_dropout_prob: dropout on attention probabilities.
      max_position_embeddings: P, rows of the position table (>= S).
      type_vocab_size: rows of the token-type table.
      initializer_range: stddev of the truncated-normal initializers.
    """
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    def __post_init__(self):
        _validate(dataclasses.asdict(self), source="BertConfig")

    @classmethod
    def from_dict(cls, values: dict, *, source: str = "BertConfig") -> "BertConfig":
        """A config from a dict holding every field; other keys are ignored (logged).

        Raises:
          ValueError: naming ``source`` and the key, for a missing key or a
            value of the wrong type or range.
        """
        if not isinstance(values, dict):
            raise ValueError(f"{source}: expected a JSON object, got "
                             f"{type(values).__name__}")
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in values]
        if missing:
            raise ValueError(f"{source}: missing key {missing[0]!r}"
                             + (f" (also missing: {', '.join(missing[1:])})"
                                if len(missing) > 1 else ""))
        extra = sorted(set(values) - set(names))
        if extra:
            logging.info("%s: ignoring keys %s", source, ", ".join(extra))
        chosen = {name: values[name] for name in names}
        _validate(chosen, source=source)
        return cls(**chosen)

    @classmethod
    def from_json_file(cls, path) -> "BertConfig":
        """Reads a ``bert_config.json``; errors name the file and the key."""
        with open(path, encoding="utf-8") as file:
            try:
                values = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not valid JSON ({error})") from error
        return cls.from_dict(values, source=str(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def first_difference(self, other: "BertConfig") -> tuple | None:
        """(key, this value, the other's) of the first key where the two
        differ, in field order; None when they are equal."""
        mine, theirs = self.to_dict(), other.to_dict()
        return next(((key, mine[key], theirs[key]) for key in mine
                     if mine[key] != theirs[key]), None)

    def to_json_file(self, path) -> None:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.to_dict(), file, indent=2, sort_keys=True)
            file.write("\n")


def _validate(values: dict, *, source: str) -> None:
    def bad(key, expected):
        raise ValueError(f"{source}: key {key!r} must be {expected}, "
                         f"got {values[key]!r}")

    for key in _INT_KEYS:
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            bad(key, "a positive integer")
    for key in _PROBABILITY_KEYS:
        value = values[key]
        if (isinstance(value, bool) or not isinstance(value, numbers.Real)
                or not 0.0 <= value < 1.0):
            bad(key, "a number in [0, 1)")
    value = values["initializer_range"]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value <= 0:
        bad("initializer_range", "a positive number")
    if values["hidden_act"] not in ACTIVATION_NAMES:
        bad("hidden_act", f"one of {', '.join(map(repr, ACTIVATION_NAMES))}")
    if values["hidden_size"] % values["num_attention_heads"]:
        raise ValueError(f"{source}: key 'hidden_size' ({values['hidden_size']}) must be "
                         f"divisible by 'num_attention_heads' "
                         f"({values['num_attention_heads']})")
