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
absl refuses before the flags are parsed. `reference_modules` imports them
with their flags on a private `FlagValues`, parsed with the defaults
(``preserve_unused_tokens=False``: google-research/bert's behaviour before
that flag existed). Nothing of the package is changed or copied.

The package's ``create_training_instances`` predates whole-word masking
(``do_whole_word_mask``, added to google-research/bert after the package was
published): it masks word pieces independently.
"""

from __future__ import annotations

import functools
import importlib
import types

# The define functions google-research/bert's two modules call.
_DEFINES = ("DEFINE_string", "DEFINE_bool", "DEFINE_integer", "DEFINE_float")


@functools.cache
def reference_modules() -> tuple[types.ModuleType, types.ModuleType]:
    """``(bert.create_pretraining_data, bert.tokenization)``, imported with their
    flags on a private, parsed `absl.flags.FlagValues`.

    Raises ImportError when `bert-tensorflow` is not installed.
    """
    from absl import flags as absl_flags
    from tensorflow.python.platform import flags as tf_flags  # tf.compat.v1.flags

    private = absl_flags.FlagValues()
    # bert.tokenization defines its flag through absl.flags, and
    # bert.create_pretraining_data through tf.compat.v1.flags; both read
    # `FLAGS` from the module they define through.
    patches = {(module, name): functools.partial(getattr(absl_flags, name),
                                                 flag_values=private)
               for module in (absl_flags, tf_flags) for name in _DEFINES}
    patches.update({(absl_flags, "FLAGS"): private, (tf_flags, "FLAGS"): private})
    saved = {key: getattr(*key) for key in patches}
    try:
        for (module, name), value in patches.items():
            setattr(module, name, value)
        create_pretraining_data = importlib.import_module("bert.create_pretraining_data")
        tokenization = importlib.import_module("bert.tokenization")
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
    if tokenization.FLAGS is not private:
        raise RuntimeError("bert.tokenization was imported before reference_modules(): "
                          "its flags are on absl's global FlagValues")
    private(["google_bert"])  # no arguments: every flag keeps its default
    return create_pretraining_data, tokenization
