"""google-research/bert's pre-training data tool, from the `bert-tensorflow` package.

The benchmark and the equivalence test compare `data_prep.create_pretraining_data`
with google-research/bert's ``create_pretraining_data.py`` and its
pure-Python ``tokenization.py`` as the `bert-tensorflow` package (1.0.4,
the ``reference`` extra: ``pip install -e '.[reference]'``) ships them,
unmodified. As a command it runs as it is::

    python -m bert.create_pretraining_data --input_file=... --output_file=...
        --vocab_file=...

In a process of ours its modules need one shim, and this module is that shim:
at import they define their absl flags (``input_file``, ``vocab_file``,
``do_lower_case``, ... and ``preserve_unused_tokens``) on absl's global
`FlagValues`, where they clash with the flags of our own tools, and
``tokenization.FullTokenizer`` reads ``FLAGS.preserve_unused_tokens``, which
absl refuses before the flags are parsed. `reference_module` imports them
(and the reference's ``run_classifier`` and ``run_squad``, whose data code the
tests compare with) with their flags on a private `FlagValues`, parsed with the defaults
(``preserve_unused_tokens=False``: google-research/bert's behaviour before
that flag existed). Nothing of the package is changed or copied.

The package's ``create_training_instances`` predates whole-word masking
(``do_whole_word_mask``, added to google-research/bert after the package was
published): it masks word pieces independently.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types

# The define functions google-research/bert's modules call.
_DEFINES = ("DEFINE_string", "DEFINE_bool", "DEFINE_integer", "DEFINE_float")


def _import_with_private_flags(name: str) -> types.ModuleType:
    """Imports ``name`` with the absl flags it defines on a new, parsed
    `FlagValues`; an empty module stands in for ``tensorflow.contrib``."""
    from absl import flags as absl_flags
    from tensorflow.python.platform import flags as tf_flags  # tf.compat.v1.flags

    private = absl_flags.FlagValues()
    # bert.tokenization defines its flag through absl.flags, the scripts
    # through tf.compat.v1.flags; each reads `FLAGS` from the module it
    # defines through.
    patches = {(module, define): functools.partial(getattr(absl_flags, define),
                                                   flag_values=private)
               for module in (absl_flags, tf_flags) for define in _DEFINES}
    patches.update({(absl_flags, "FLAGS"): private, (tf_flags, "FLAGS"): private})
    saved = {key: getattr(*key) for key in patches}
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.ModuleType("tensorflow.contrib.layers")
    present = sys.modules.setdefault("tensorflow.contrib", contrib)
    try:
        for (module, define), value in patches.items():
            setattr(module, define, value)
        module = importlib.import_module(name)
    finally:
        for (module_, define), value in saved.items():
            setattr(module_, define, value)
        if present is contrib:  # not the modules the import brought in
            del sys.modules["tensorflow.contrib"]
    private(["google_bert"])  # no arguments: every flag keeps its default
    return module


def reference_module(name: str) -> types.ModuleType:
    """``bert.NAME`` (``tokenization``, ``create_pretraining_data``,
    ``run_classifier``, ``run_squad``, ...) with its flags on a private,
    parsed `absl.flags.FlagValues`; each script gets its own, since the
    scripts define flags of the same names.

    ``bert.modeling`` imports ``tensorflow.contrib.layers`` (gone since
    TensorFlow 2.0) for its ``layer_norm`` alone: an empty module stands in
    for ``tensorflow.contrib`` while it is imported, so the reference's data
    code runs and calling ``bert.modeling.layer_norm`` raises AttributeError.

    Raises ImportError when `bert-tensorflow` is not installed, and
    RuntimeError when the module was imported before with its flags on
    absl's global `FlagValues`.
    """
    from absl import flags as absl_flags

    full_name = f"bert.{name}"
    # sys.modules, not a cache here: this file is imported afresh as
    # ``google_bert`` when a benchmark runs as a script.
    module = sys.modules.get(full_name) or _import_with_private_flags(full_name)
    if getattr(module, "FLAGS", None) is absl_flags.FLAGS:
        raise RuntimeError(f"{full_name} was imported before reference_module(): "
                           "its flags are on absl's global FlagValues")
    return module


def reference_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """``(bert.create_pretraining_data, bert.tokenization)`` (see
    `reference_module`)."""
    return reference_module("create_pretraining_data"), reference_module("tokenization")
