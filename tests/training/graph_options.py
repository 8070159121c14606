"""TensorFlow graph settings of the training tests (this module imports
TensorFlow alone: the light tests that use it import nothing else)."""

import contextlib

import tensorflow as tf


@contextlib.contextmanager
def grappler_off():
    """TensorFlow's graph optimizer off for the block: each new step function's
    first run spends about a second in it, and no check here is about it."""
    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer",
                                                                 False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})
