"""TensorFlow's graph optimizer (grappler) off for tests whose checks are not
about it: each new step or evaluation function's first run spends about a
second of CPU in it. The module imports TensorFlow alone."""

import contextlib

import tensorflow as tf


def switch_off_grappler() -> bool:
    """Switches the graph optimizer off in this process; whether it was off
    before."""
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer",
                                                                 False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    return before


@contextlib.contextmanager
def grappler_off():
    """The graph optimizer off for the block (a module fixture wraps its tests
    in it), restored after."""
    before = switch_off_grappler()
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})
