"""Reading ``.keras`` files back, with one-line errors for the wrong file.

``model.save("x.keras")`` writes any model of the package (config, weights
and, once compiled, the optimizer with its schedule: every class is
registered with Keras). `load_model` reads it back like
``keras.models.load_model``, but first looks inside the archive, so that a
file that is not a ``.keras`` archive, or that holds another model than the
caller expects, fails with one line naming the file before anything is built.
"""

from __future__ import annotations

import json
import zipfile

import keras
import tensorflow as tf

#: The member of a ``.keras`` archive that describes the model.
CONFIG_MEMBER = "config.json"


def keras_file_class_name(path: str) -> str:
    """The class name of the model a ``.keras`` file holds (read from its config).

    Raises:
      ValueError: no such file, a folder, a name without ``.keras``, or a file
        that is not a ``.keras`` archive.
    """
    path = str(path)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{path}: no such file")
    if tf.io.gfile.isdir(path):
        raise ValueError(f"{path} is a folder, not a .keras file (a SavedModel export "
                         f"loads with tf.saved_model.load)")
    if not path.endswith(".keras"):
        raise ValueError(f"{path}: a Keras model file must end in .keras")
    try:
        with tf.io.gfile.GFile(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
            config = json.loads(archive.read(CONFIG_MEMBER))
    except (zipfile.BadZipFile, KeyError, ValueError, tf.errors.OpError):
        raise ValueError(f"{path} is not a .keras archive (no readable "
                         f"{CONFIG_MEMBER} in a zip file)") from None
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"{path} is not a .keras archive ({CONFIG_MEMBER} names no "
                         f"class)")
    return config["class_name"]


def load_model(path: str, expected_class: type | None = None, *, compile: bool = True):
    """``keras.models.load_model(path)``, checking what the file holds first.

    Args:
      path: a ``.keras`` file written by ``model.save``.
      expected_class: the class (or a base class, e.g. `PackedModel`) the
        model must be; None accepts any.
      compile: restore the optimizer and compile options too, when saved.

    Returns:
      The model, with its weights (and optimizer state when compiled).

    Raises:
      ValueError: as `keras_file_class_name`; ``"x.keras holds a
        BertSquadModel, expected a BertPretrainingModel"``; a file Keras
        cannot rebuild (its class not imported, damaged weights).
    """
    path = str(path)
    class_name = keras_file_class_name(path)
    if expected_class is not None:
        # Names first: the wrong model is refused before it is built.
        if class_name not in {cls.__name__ for cls in _with_subclasses(expected_class)}:
            raise ValueError(f"{path} holds a {class_name}, expected a "
                             f"{expected_class.__name__}")
    try:
        model = keras.models.load_model(path, compile=compile)
    except (TypeError, ValueError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(f"{path}: Keras cannot load its {class_name} "
                         f"({type(error).__name__}: {first_line})") from None
    if expected_class is not None and not isinstance(model, expected_class):
        raise ValueError(f"{path} holds a {type(model).__name__}, expected a "
                         f"{expected_class.__name__}")
    return model


def _with_subclasses(cls: type) -> list:
    """``cls`` and every subclass defined so far."""
    found, pending = [], [cls]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(current.__subclasses__())
    return found
