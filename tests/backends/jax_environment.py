"""The environment of the tests' JAX subprocesses."""

import os

from tests.tool_runs import tool_environment

#: XLA:CPU's elemental IR emitters instead of its fusion emitters: for these
#: tiny models a half to a third of the compile time, for JAX's compiled
#: functions and for each op it compiles when run eagerly (the whole
#: equivalence check: 36 s of CPU -> 23 s). TensorFlow, which the keras-hub
#: check imports, accepts the flag too.
FUSION_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"


def jax_environment(**extra) -> dict:
    """`tool_environment` with ``KERAS_BACKEND=jax`` and `FUSION_EMITTERS_OFF`
    added to this process's XLA flags."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} {FUSION_EMITTERS_OFF}".strip()
    return tool_environment(KERAS_BACKEND="jax", XLA_FLAGS=flags, **extra)
