"""Reading ``.keras`` files back, with one-line errors for the wrong file.

``model.save("x.keras")`` writes any model of the package (config, weights
and, once compiled, the optimizer with its schedule: every class is
registered with Keras). `load_model` reads it back like
``keras.models.load_model``, but first looks inside the archive, so that a
file that is not a ``.keras`` archive, that holds another model than the
caller expects, or that needs a custom object this process has not
registered (a file written by another program, or under another backend),
fails with one line naming the file before anything is built.

A ``.keras`` file holds no backend: a model saved under TensorFlow loads
under JAX and computes the same. Local paths are read with plain file
access (`packed_bert_tf.filesystem`), so checking and loading a local
file imports no TensorFlow.
"""

from __future__ import annotations

import json
import zipfile

import keras

from packed_bert_tf import filesystem

#: The member of a ``.keras`` archive that describes the model.
CONFIG_MEMBER = "config.json"

#: Top-level modules whose objects Keras finds without a registration (it
#: imports its own, keras-hub's and the like itself; Python's builtins).
_IMPORTED_BY_KERAS = ("keras", "keras_hub", "keras_cv", "keras_nlp", "builtins")


def keras_file_config(path: str) -> dict:
    """The model config a ``.keras`` file holds (its ``config.json``).

    Raises:
      ValueError: no such file, a folder, a name without ``.keras``, or a file
        that is not a ``.keras`` archive.
    """
    path = str(path)
    if not filesystem.exists(path):
        raise ValueError(f"{path}: no such file")
    if filesystem.isdir(path):
        raise ValueError(f"{path} is a folder, not a .keras file (a SavedModel export "
                         f"loads with tf.saved_model.load)")
    if not path.endswith(".keras"):
        raise ValueError(f"{path}: a Keras model file must end in .keras")
    try:
        with filesystem.open_file(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
            config = json.loads(archive.read(CONFIG_MEMBER))
    except (zipfile.BadZipFile, KeyError, ValueError) + filesystem.file_errors(path):
        raise ValueError(f"{path} is not a .keras archive (no readable "
                         f"{CONFIG_MEMBER} in a zip file)") from None
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"{path} is not a .keras archive ({CONFIG_MEMBER} names no "
                         f"class)")
    return config


def keras_file_class_name(path: str) -> str:
    """The class name of the model a ``.keras`` file holds (read from its config).

    Raises:
      ValueError: as `keras_file_config`.
    """
    return keras_file_config(path)["class_name"]


def unregistered_custom_objects(config: dict, *, compile: bool = True) -> list:
    """The registered names of the custom objects ``config`` needs and this
    process does not know, in the order of the config, once each.

    A custom object is a class or function saved under a registered name
    (``package>Name``) from a module Keras does not import by itself (Keras
    imports its own, keras-hub's and the like). Keras finds it only once the
    module that registers it has been imported.

    Args:
      config: a ``.keras`` file's config (`keras_file_config`).
      compile: whether the compile options (optimizer, schedule) count.
    """
    missing = []

    def visit(node):
        if isinstance(node, list):
            for value in node:
                visit(value)
            return
        if not isinstance(node, dict):
            return
        name, module = node.get("registered_name"), node.get("module")
        if ("class_name" in node and isinstance(name, str) and isinstance(module, str)
                and module.split(".")[0] not in _IMPORTED_BY_KERAS
                and keras.saving.get_registered_object(name) is None
                and name not in missing):
            missing.append(name)
        for key, value in node.items():
            if compile or key != "compile_config":
                visit(value)

    visit(config)
    return missing


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
      ValueError: as `keras_file_config`; ``"x.keras holds a
        BertSquadModel, expected a BertPretrainingModel"``; ``"x.keras: needs
        the custom object 'pkg>Name', which is not registered in this process
        (import the module that defines it)"``; a file Keras cannot rebuild
        (damaged weights, say).
    """
    path = str(path)
    config = keras_file_config(path)
    class_name = config["class_name"]
    if expected_class is not None:
        # Names first: the wrong model is refused before it is built.
        if class_name not in {cls.__name__ for cls in _with_subclasses(expected_class)}:
            raise ValueError(f"{path} holds a {class_name}, expected a "
                             f"{expected_class.__name__}")
    missing = unregistered_custom_objects(config, compile=compile)
    if len(missing) == 1:
        raise ValueError(f"{path}: needs the custom object '{missing[0]}', which is not "
                         f"registered in this process (import the module that defines it)")
    if missing:
        names = ", ".join(f"'{name}'" for name in missing)
        raise ValueError(f"{path}: needs the custom objects {names}, which are not "
                         f"registered in this process (import the modules that define "
                         f"them)")
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
