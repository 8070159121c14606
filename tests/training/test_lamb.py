"""LAMB against a numpy transcription of MLPerf's formulas, in a training loop,
and under MirroredStrategy (2 logical CPUs, in a subprocess)."""

import contextlib
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from packed_bert_tf.training import LAMB, PolynomialDecayWithWarmup
from tests.tool_runs import run_json_check
from tests.training.numpy_lamb import LambReference, numpy_lamb

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


# ------------------------------------------------------------ numpy reference
def reference_learning_rate(peak, num_train_steps, num_warmup_steps):
    def learning_rate(step):
        if step < num_warmup_steps:
            return peak * step / num_warmup_steps
        return peak * (1 - min(step, num_train_steps) / num_train_steps)
    return learning_rate


# Each case: optimizer arguments and, for the reference, which paths get weight
# decay and the trust ratio (written out by hand, not derived by the code under
# test). Shapes and per-step gradients below.
SHAPES = {
    "dense/kernel": (3, 4),
    "dense/bias": (4,),
    "encoder/layer_norm/gamma": (4,),
    "embeddings/LayerNorm/beta": (4,),
    "zero_init/kernel": (2, 3),          # norm 0 at the first step
    "head/no_decay_kernel": (5,),        # zero gradient for the first two steps
}
CASES = {
    "mlperf_defaults": dict(
        arguments=dict(learning_rate=0.05),
        learning_rate=lambda step: 0.05,
        decayed={"dense/kernel", "zero_init/kernel", "head/no_decay_kernel"},
        adapted={"dense/kernel", "zero_init/kernel", "head/no_decay_kernel"},
        reference=dict(beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.01,
                       bias_correction=True, global_clipnorm=1.0)),
    "separate_lists_schedule_no_bias_correction": dict(
        arguments=dict(
            learning_rate=PolynomialDecayWithWarmup(0.2, num_train_steps=6,
                                                    num_warmup_steps=2),
            beta_1=0.8, beta_2=0.99, epsilon=1e-4, weight_decay_rate=0.05,
            exclude_from_weight_decay=["bias", "layer_norm", "LayerNorm", "no_decay"],
            exclude_from_layer_adaptation=["bias"], bias_correction=False,
            global_clipnorm=None),
        learning_rate=reference_learning_rate(0.2, 6, 2),
        decayed={"dense/kernel", "zero_init/kernel"},
        adapted={"dense/kernel", "zero_init/kernel", "head/no_decay_kernel",
                 "encoder/layer_norm/gamma", "embeddings/LayerNorm/beta"},
        reference=dict(beta_1=0.8, beta_2=0.99, epsilon=1e-4, weight_decay_rate=0.05,
                       bias_correction=False, global_clipnorm=None)),
}
NUM_STEPS = 5
GRADIENT_SCALES = [3.0, 0.2, 1.5, 0.05, 2.0]  # global norms above and below 1


def reference_of(case):
    """The case's hyper-parameters for `numpy_lamb`."""
    return LambReference(learning_rate=case["learning_rate"], decayed=case["decayed"],
                         adapted=case["adapted"], **case["reference"])


def initial_weights(rng):
    weights = {path: rng.normal(size=shape) for path, shape in SHAPES.items()}
    weights["zero_init/kernel"] = np.zeros(SHAPES["zero_init/kernel"])
    return weights


def gradients_per_step(rng):
    steps = []
    for step, scale in enumerate(GRADIENT_SCALES):
        gradients = {path: rng.normal(size=shape) for path, shape in SHAPES.items()}
        total = np.sqrt(sum(np.sum(g ** 2) for g in gradients.values()))
        gradients = {path: g * scale / total for path, g in gradients.items()}
        if step < 2:
            gradients["head/no_decay_kernel"] = np.zeros(SHAPES["head/no_decay_kernel"])
        steps.append(gradients)
    return steps


def keras_variables(weights, dtype):
    variables = []
    for path, value in weights.items():
        *scopes, name = path.split("/")
        with contextlib.ExitStack() as stack:
            for scope in scopes:
                stack.enter_context(keras.name_scope(scope))
            variables.append(keras.Variable(value, dtype=dtype, name=name))
    assert [v.path for v in variables] == list(weights)
    return variables


@pytest.mark.parametrize("execution", ["eager", "tf.function", "xla"])
@pytest.mark.parametrize("case_name", list(CASES))
def test_matches_numpy_reference_step_by_step(case_name, execution):
    case = CASES[case_name]
    rng = np.random.default_rng(7)
    weights, all_gradients = initial_weights(rng), gradients_per_step(rng)
    variables = keras_variables(weights, "float64")
    optimizer = LAMB(**case["arguments"])
    optimizer.build(variables)

    def apply(gradients):
        optimizer.apply_gradients(zip(gradients, variables))

    if execution != "eager":
        apply = tf.function(apply, jit_compile=execution == "xla")
    for step, gradients in enumerate(all_gradients, start=1):
        apply([tf.constant(gradients[path], tf.float64) for path in SHAPES])
        want, want_m, want_v = numpy_lamb(weights, all_gradients[:step],
                                          reference_of(case))
        for variable, momentum, velocity in zip(variables, optimizer._momentums,
                                                optimizer._velocities):
            path = variable.path
            np.testing.assert_allclose(variable.numpy(), want[path], rtol=1e-6, atol=1e-12,
                                       err_msg=f"{path} after step {step}")
            np.testing.assert_allclose(momentum.numpy(), want_m[path], rtol=1e-6,
                                       atol=1e-12, err_msg=f"m of {path}")
            np.testing.assert_allclose(velocity.numpy(), want_v[path], rtol=1e-6,
                                       atol=1e-12, err_msg=f"v of {path}")
    assert int(optimizer.iterations.numpy()) == NUM_STEPS


def test_float32_variables_follow_the_reference():
    case = CASES["mlperf_defaults"]
    rng = np.random.default_rng(7)
    weights, all_gradients = initial_weights(rng), gradients_per_step(rng)
    variables = keras_variables(weights, "float32")
    optimizer = LAMB(**case["arguments"])
    for gradients in all_gradients:
        optimizer.apply_gradients(
            (tf.constant(gradients[v.path], tf.float32), v) for v in variables)
    want, _, _ = numpy_lamb(weights, all_gradients, reference_of(case))
    for variable in variables:
        np.testing.assert_allclose(variable.numpy(), want[variable.path], rtol=1e-5,
                                   atol=1e-7, err_msg=variable.path)


def test_reference_cases_exercise_every_branch():
    # Guards the test above: clipping active and inactive, a zero-norm weight
    # and a zero update with the trust ratio on, so each `1.0` branch runs.
    rng = np.random.default_rng(7)
    weights, all_gradients = initial_weights(rng), gradients_per_step(rng)
    norms = [np.sqrt(sum(np.sum(g ** 2) for g in gradients.values()))
             for gradients in all_gradients]
    assert max(norms) > 1 > min(norms)
    assert np.linalg.norm(weights["zero_init/kernel"]) == 0
    assert np.all(all_gradients[0]["head/no_decay_kernel"] == 0)
    case = CASES["separate_lists_schedule_no_bias_correction"]
    assert "head/no_decay_kernel" in case["adapted"] - case["decayed"]


def test_exclusions_are_searched_in_the_variable_path():
    paths = ["bert/encoder/layer_0/attention/query/bias", "bert/encoder/layer_0/kernel",
             "bert/embeddings/layer_norm/gamma", "cls/predictions/output_bias",
             "bert/LayerNorm/beta", "bert/pooler/kernel"]
    variables = keras_variables({path: np.ones(2) for path in paths}, "float32")
    default = LAMB()
    assert [default.uses_weight_decay(v) for v in variables] == [
        False, True, False, False, False, True]
    assert [default.uses_layer_adaptation(v) for v in variables] == [
        False, True, False, False, False, True]
    separate = LAMB(exclude_from_weight_decay=["kernel"],
                    exclude_from_layer_adaptation=["pooler"])
    assert [separate.uses_weight_decay(v) for v in variables] == [
        True, False, True, True, True, False]
    assert [separate.uses_layer_adaptation(v) for v in variables] == [
        True, True, True, True, True, False]
    assert not LAMB(weight_decay_rate=0.0).uses_weight_decay(variables[1])


def test_get_config_round_trip_with_a_schedule():
    schedule = PolynomialDecayWithWarmup(1e-3, num_train_steps=100, num_warmup_steps=10,
                                         start_warmup_step=-5, end_learning_rate=1e-5,
                                         power=0.5)
    optimizer = LAMB(learning_rate=schedule, beta_1=0.85, beta_2=0.99, epsilon=1e-5,
                     weight_decay_rate=0.02, exclude_from_weight_decay=["bias"],
                     exclude_from_layer_adaptation=["LayerNorm"], bias_correction=False,
                     global_clipnorm=2.0, name="lamb_test")
    config = optimizer.get_config()
    assert {key: config[key] for key in (
        "beta_1", "beta_2", "epsilon", "weight_decay_rate", "exclude_from_weight_decay",
        "exclude_from_layer_adaptation", "bias_correction", "global_clipnorm", "name")} == {
        "beta_1": 0.85, "beta_2": 0.99, "epsilon": 1e-5, "weight_decay_rate": 0.02,
        "exclude_from_weight_decay": ["bias"], "exclude_from_layer_adaptation": ["LayerNorm"],
        "bias_correction": False, "global_clipnorm": 2.0, "name": "lamb_test"}
    serialized = json.loads(json.dumps(keras.optimizers.serialize(optimizer)))
    restored = keras.optimizers.deserialize(serialized)
    assert type(restored) is LAMB
    assert restored.get_config() == config
    assert isinstance(restored._learning_rate, PolynomialDecayWithWarmup)
    assert restored._learning_rate.get_config() == schedule.get_config()


def test_get_config_round_trip_with_a_float_and_defaults():
    optimizer = LAMB(learning_rate=0.01)
    config = optimizer.get_config()
    assert config["learning_rate"] == pytest.approx(0.01)
    assert config["exclude_from_weight_decay"] == ["LayerNorm", "layer_norm", "bias"]
    assert config["exclude_from_layer_adaptation"] is None
    assert (config["beta_1"], config["beta_2"], config["epsilon"],
            config["weight_decay_rate"], config["global_clipnorm"],
            config["bias_correction"]) == (0.9, 0.999, 1e-6, 0.01, 1.0, True)
    assert LAMB.from_config(config).get_config() == config


@pytest.mark.parametrize("argument, message", [
    (dict(weight_decay=0.01), "use weight_decay_rate"),
    (dict(clipnorm=1.0), "use global_clipnorm"),
    (dict(clipvalue=1.0), "use global_clipnorm"),
    (dict(beta_1=1.0), r"beta_1 and beta_2 must be in \[0, 1\), got beta_1=1.0"),
    (dict(epsilon=-1.0), "epsilon and weight_decay_rate must be >= 0"),
    (dict(exclude_from_weight_decay="bias"), "lists of regular expressions"),
])
def test_rejects_arguments_it_does_not_honour(argument, message):
    with pytest.raises(ValueError, match=message):
        LAMB(**argument)


# ------------------------------------------------------------ training loop
def tiny_model():
    """Token ids [B, 6] -> embeddings -> layer norm -> mean -> Dense 3 logits."""
    inputs = keras.Input((6,), dtype="int32")
    hidden = keras.layers.Embedding(20, 8, name="embeddings")(inputs)
    hidden = keras.layers.LayerNormalization(name="layer_norm")(hidden)
    hidden = keras.layers.GlobalAveragePooling1D()(hidden)
    hidden = keras.layers.Dense(8, activation="tanh", name="hidden")(hidden)
    return keras.Model(inputs, keras.layers.Dense(3, name="classifier")(hidden))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_custom_training_loop_decreases_the_loss(jit_compile):
    keras.utils.set_random_seed(0)
    model = tiny_model()
    rng = np.random.default_rng(0)
    token_ids = tf.constant(rng.integers(0, 20, (32, 6)), tf.int32)
    labels = tf.constant(rng.integers(0, 3, 32), tf.int32)
    optimizer = LAMB(learning_rate=PolynomialDecayWithWarmup(
        0.1, num_train_steps=40, num_warmup_steps=3))
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=jit_compile)
    def train_step(token_ids, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                labels, model(token_ids, training=True), from_logits=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    losses = [float(train_step(token_ids, labels)) for _ in range(20)]
    assert losses[1] == losses[0]  # the schedule's rate is 0 at step 0, as MLPerf's
    assert np.all(np.diff(losses[1:]) < 0), losses
    assert losses[-1] < 0.5 * losses[0], losses
    assert int(optimizer.iterations.numpy()) == 20


# ------------------------------------------------------------ MirroredStrategy
MIRRORED_SCRIPT = r'''
import json
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
# Grappler costs a second or so a step function, and is not what is checked.
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
import keras
import numpy as np
from packed_bert_tf.training import LAMB, PolynomialDecayWithWarmup
from tests.training.test_lamb import tiny_model

GLOBAL_BATCH, STEPS, LOSS_SCALE = 8, 4, 20.0  # scaled loss: clipping is active
rng = np.random.default_rng(0)
token_ids = rng.integers(0, 20, (GLOBAL_BATCH * STEPS, 6)).astype(np.int32)
labels = rng.integers(0, 3, GLOBAL_BATCH * STEPS).astype(np.int32)


class PerReplicaClippingLAMB(LAMB):
    """Keras' own clipping: each replica's gradients, before the sum."""
    _clip_gradients = keras.optimizers.Optimizer._clip_gradients
    _backend_update_step = keras.optimizers.Optimizer._backend_update_step


def train(strategy, optimizer_class):
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = tiny_model()
        optimizer = optimizer_class(learning_rate=PolynomialDecayWithWarmup(
            0.05, num_train_steps=10, num_warmup_steps=1))
        optimizer.build(model.trainable_variables)

    def replica_step(token_ids, labels):
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, model(token_ids, training=True), from_logits=True)
            loss = tf.reduce_sum(per_example) * (LOSS_SCALE / GLOBAL_BATCH)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return tf.linalg.global_norm(gradients)

    @tf.function
    def step(token_ids, labels):
        norms = strategy.run(replica_step, args=(token_ids, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, norms, axis=None)

    dataset = tf.data.Dataset.from_tensor_slices((token_ids, labels)).batch(GLOBAL_BATCH)
    gradient_norms = [float(step(*batch))
                      for batch in strategy.experimental_distribute_dataset(dataset)]
    return [v.numpy() for v in model.trainable_variables], gradient_norms


def relative_error(got, want):
    return max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(got, want))


mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
single, single_norms = train(tf.distribute.get_strategy(), LAMB)
replicated, _ = train(mirrored, LAMB)
per_replica_clipped, _ = train(mirrored, PerReplicaClippingLAMB)
print(json.dumps({
    "replicas": mirrored.num_replicas_in_sync,
    "min_gradient_norm": min(single_norms),
    "mirrored": relative_error(replicated, single),
    "per_replica_clipping": relative_error(per_replica_clipped, single),
}))
'''


@pytest.fixture(scope="module")
def mirrored_errors():
    return run_json_check("-c", MIRRORED_SCRIPT)


def test_mirrored_strategy_matches_the_single_device_run(mirrored_errors):
    assert mirrored_errors["replicas"] == 2
    assert mirrored_errors["min_gradient_norm"] > 1.0  # clipping ran at every step
    assert mirrored_errors["mirrored"] < 1e-6


def test_clipping_each_replica_before_the_sum_would_not(mirrored_errors):
    # Why LAMB clips after the all-reduce instead of using Keras' clipping.
    assert mirrored_errors["per_replica_clipping"] > 1e-3
