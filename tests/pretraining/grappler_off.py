"""Imported for its effect: TensorFlow's graph optimizer off in this process
(`tf.config.optimizer`), and in the children forked from it (`tests.forked_tools`
preloads it). Each run's new step functions spend seconds in the optimizer, and
the checks that use this are not about it."""

import tensorflow as tf

tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
