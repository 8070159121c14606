"""The shared layer checks: config round trip, eager and symbolic call, a .keras
save and load, one training step."""

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf


def _flat(structure):
    return tf.nest.flatten(structure)


def run_layer_checks(layer_class, init_kwargs, call_args, expected_output_shapes, *,
                     expected_num_trainable_weights=None, seed=0):
    """Checks every layer of the package must pass.

    The config round trip, eager and symbolic calls (shapes, dtypes), the
    same outputs after a ``.keras`` save and ``keras.models.load_model`` (the
    layer registered with Keras), and one training step.

    Args:
      layer_class: the layer class.
      init_kwargs: constructor arguments (each must come back from get_config).
      call_args: dict name -> numpy array; the first entry is passed
        positionally, the others by name.
      expected_output_shapes: the output shape, or a list for several outputs.
      expected_num_trainable_weights: checked when given.
      seed: TensorFlow's random seed, set first (``tf.random.set_seed``).

    Returns:
      The built layer and its eager outputs.
    """
    tf.random.set_seed(seed)
    names = list(call_args)

    def call(layer, arguments, **kwargs):
        return layer(arguments[names[0]], **{n: arguments[n] for n in names[1:]}, **kwargs)

    # get_config mirrors __init__ and round-trips.
    layer = layer_class(**init_kwargs)
    config = layer.get_config()
    for key, value in init_kwargs.items():
        assert config[key] == value, (key, config[key], value)
    restored = layer_class.from_config(config)
    assert restored.get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert keras.saving.deserialize_keras_object(serialized).get_config() == config

    # Eager call.
    tensors = {name: tf.constant(value) for name, value in call_args.items()}
    outputs = call(layer, tensors)
    if not isinstance(expected_output_shapes, list):
        expected_output_shapes = [expected_output_shapes]
    assert [tuple(o.shape) for o in _flat(outputs)] == [tuple(s) for s in
                                                         expected_output_shapes]
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights

    # The restored layer with the same weights computes the same outputs.
    call(restored, tensors)
    restored.set_weights(layer.get_weights())
    for got, want in zip(_flat(call(restored, tensors)), _flat(outputs)):
        np.testing.assert_array_equal(got, want)

    # Symbolic call: shapes and dtypes from keras.Input.
    symbolic = {name: keras.Input(batch_shape=value.shape, dtype=str(value.dtype),
                                  name=name) for name, value in call_args.items()}
    symbolic_outputs = call(layer_class(**init_kwargs), symbolic)
    assert [tuple(o.shape) for o in _flat(symbolic_outputs)] == \
        [tuple(s) for s in expected_output_shapes]
    assert [keras.backend.standardize_dtype(o.dtype) for o in _flat(symbolic_outputs)] \
        == [keras.backend.standardize_dtype(o.dtype) for o in _flat(outputs)]

    # Saved in a .keras file (inside a functional model: only models are saved)
    # and loaded back by Keras, which rebuilds the layer from its registered
    # name and config: the same outputs, exactly.
    saved = keras.Model(symbolic, call(layer, symbolic))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layer.keras")
        saved.save(path)
        loaded = keras.models.load_model(path)
    reloaded_layer = [sub for sub in loaded.layers if isinstance(sub, layer_class)]
    assert len(reloaded_layer) == 1 and reloaded_layer[0].get_config() == config
    for got, want in zip(_flat(loaded(tensors)), _flat(outputs)):
        np.testing.assert_array_equal(got, want)

    # One training step: every trainable weight gets a gradient and moves.
    if layer.trainable_weights:
        rng = np.random.default_rng(seed)
        with tf.GradientTape() as tape:
            trained = _flat(call(layer, tensors, training=True))
            loss = tf.add_n([
                tf.reduce_sum(tf.cast(o, tf.float32) * rng.standard_normal(o.shape)
                              .astype(np.float32))
                for o in trained if o.dtype.is_floating])
        gradients = tape.gradient(loss, layer.trainable_weights)
        assert all(g is not None for g in gradients), \
            [w.path for w, g in zip(layer.trainable_weights, gradients) if g is None]
        before = [w.numpy().copy() for w in layer.trainable_weights]
        keras.optimizers.SGD(learning_rate=0.1).apply(gradients, layer.trainable_weights)
        for weight, old in zip(layer.trainable_weights, before):
            assert not np.array_equal(weight.numpy(), old), f"{weight.path} did not move"
    return layer, outputs
