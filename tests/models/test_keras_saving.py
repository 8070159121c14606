"""Every model of the package round-trips through a .keras file, compiled with the
project's optimizer and schedule; the wrong file is one clear error.

(The layers' .keras round trip is in tests/layers/layer_checks.py.)
"""

import json
import zipfile

import keras
import numpy as np
import pytest

from packed_bert_tf.models import PackedModel, load_model
from packed_bert_tf.training.lamb import LAMB
from packed_bert_tf.training.optimizers import AdamW, create_optimizer
from packed_bert_tf.training.schedules import AtUpdateSteps, PolynomialDecayWithWarmup
from tests.models.model_cases import MODEL_CASES, as_tensors, model_of, packed_dataset

pytestmark = pytest.mark.slow
CASES = pytest.mark.parametrize("case", MODEL_CASES, ids=[c.name for c in MODEL_CASES])


@CASES
def test_a_compiled_model_round_trips_through_a_keras_file(case, tmp_path):
    model = model_of(case)
    schedule = PolynomialDecayWithWarmup(1e-2, num_train_steps=20, num_warmup_steps=2)
    # Eager: the step only gives the optimizer state to save (tracing LAMB's
    # update costs seconds); fit's graph is tested in test_keras_fit.py.
    model.compile(optimizer=LAMB(AtUpdateSteps(schedule, 2), weight_decay_rate=0.01),
                  run_eagerly=True)
    model.fit(packed_dataset(case, [0]), epochs=1, verbose=0, shuffle=False)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = load_model(path, case.model_class)
    assert type(loaded) is case.model_class
    assert loaded.get_config() == model.get_config()
    # The backbone comes back built by the model: the paths hold its name.
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    assert loaded.weights[0].path.startswith(f"{model.name}/backbone/")
    batch = as_tensors(case.make_batch(3))
    want = model(batch)
    got = loaded(batch)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    # The optimizer comes back compiled, with its schedule, exclusions and
    # state (moments, step): training goes on where it stopped.
    assert isinstance(loaded.optimizer, LAMB) and loaded.compiled
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert int(loaded.optimizer.iterations) == 1
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
    for got_variable, want_variable in zip(loaded.optimizer.variables,
                                           model.optimizer.variables):
        np.testing.assert_array_equal(got_variable.numpy(), want_variable.numpy(),
                                      err_msg=want_variable.path)


@CASES
def test_loading_another_model_class_is_one_clear_error(case, tmp_path):
    path = str(tmp_path / "model.keras")
    model_of(case).save(path)
    for other in MODEL_CASES:
        if other.model_class is not case.model_class:
            with pytest.raises(ValueError) as error:
                load_model(path, other.model_class)
            assert str(error.value) == (f"{path} holds a {case.model_class.__name__}, "
                                        f"expected a {other.model_class.__name__}")
    assert type(load_model(path, PackedModel)) is case.model_class  # a base class
    assert type(keras.models.load_model(path)) is case.model_class  # Keras' own


def _as_config_without_backbone(path: str, model, old_path: str) -> dict:
    """Copies ``path`` to ``old_path`` with the model's config in the form
    that names the backbone by ``bert_config`` and ``packed``; returns it."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(old_path, "w") as target:
        for member in source.namelist():
            data = source.read(member)
            if member == "config.json":
                saved = json.loads(data)
                config = {key: value for key, value in saved["config"].items()
                          if key != "backbone"}
                saved["config"] = {**config, "bert_config": model.bert_config.to_dict(),
                                   "packed": model.packed}
                data = json.dumps(saved)
            target.writestr(member, data)
    return saved["config"]


@CASES
def test_a_file_whose_config_names_the_backbone_by_its_bert_config_loads(case, tmp_path):
    model = model_of(case, seed=1)
    path, old_path = str(tmp_path / "model.keras"), str(tmp_path / "old.keras")
    model.save(path)
    old_config = _as_config_without_backbone(path, model, old_path)
    assert "backbone" not in old_config and old_config["packed"] is True
    loaded = load_model(old_path, case.model_class)
    assert type(loaded) is case.model_class
    assert loaded.get_config() == model.get_config()
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    batch = as_tensors(case.make_batch(3))
    want = model(batch)
    got = loaded(batch)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_files_that_are_not_keras_archives_are_one_clear_error(tmp_path):
    text = tmp_path / "notes.keras"
    text.write_text("not a zip")
    no_config = tmp_path / "empty.keras"
    with zipfile.ZipFile(no_config, "w") as archive:
        archive.writestr("other.json", json.dumps({}))
    wrong_name = tmp_path / "model.h5"
    wrong_name.write_text("")
    cases = {
        str(text): f"{text} is not a .keras archive (no readable config.json in a zip "
                   f"file)",
        str(no_config): f"{no_config} is not a .keras archive (no readable config.json "
                        f"in a zip file)",
        str(tmp_path / "missing.keras"): f"{tmp_path / 'missing.keras'}: no such file",
        str(tmp_path): f"{tmp_path} is a folder, not a .keras file (a SavedModel export "
                       f"loads with tf.saved_model.load)",
        str(wrong_name): f"{wrong_name}: a Keras model file must end in .keras",
    }
    for path, message in cases.items():
        with pytest.raises(ValueError) as error:
            load_model(path)
        assert str(error.value) == message


def test_the_projects_optimizers_and_schedules_are_registered(tmp_path):
    schedule = AtUpdateSteps(PolynomialDecayWithWarmup(1e-3, 100, 10, end_learning_rate=1e-5),
                             4)
    for optimizer in (create_optimizer("lamb", schedule),
                      create_optimizer("adamw", schedule, weight_decay_rate=0.02)):
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(optimizer))
        assert type(restored) is type(optimizer)
        assert restored.get_config() == optimizer.get_config()
    restored_schedule = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(schedule))
    for step in (0, 5, 60):  # update 5 is global step 23, in the decay
        assert float(restored_schedule(step)) == float(schedule(step))
    # A compiled model with AdamW in a .keras file (no step taken: no state yet).
    case = MODEL_CASES[-1]
    model = model_of(case)
    model.compile(optimizer=create_optimizer("adamw", schedule))
    path = str(tmp_path / "adamw.keras")
    model.save(path)
    loaded = load_model(path, case.model_class)
    assert type(loaded.optimizer) is AdamW
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    assert loaded.optimizer.weight_decay_exclusions == ["LayerNorm", "layer_norm", "bias"]


def test_an_unregistered_custom_object_is_one_line(tmp_path, monkeypatch):
    # As in a process that saved the model and one that never imported its
    # module: the registrations removed after saving.
    @keras.saving.register_keras_serializable(package="tests")
    class Doubling(keras.layers.Layer):
        def call(self, inputs):
            return 2 * inputs

    @keras.saving.register_keras_serializable(package="tests")
    class Halving(keras.layers.Layer):
        def call(self, inputs):
            return inputs / 2

    @keras.saving.register_keras_serializable(package="tests")
    class ConstantRate(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.1

        def get_config(self):
            return {}

    inputs = keras.Input((3,))
    model = keras.Model(inputs, Halving()(Doubling()(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(ConstantRate()), loss="mse")
    path = str(tmp_path / "custom.keras")
    model.save(path)
    ones = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(load_model(path)(ones), ones)

    registry = keras.saving.get_custom_objects()
    monkeypatch.delitem(registry, "tests>ConstantRate")
    with pytest.raises(ValueError) as error:
        load_model(path)
    assert str(error.value) == (f"{path}: needs the custom object 'tests>ConstantRate', "
                                f"which is not registered in this process (import the "
                                f"module that defines it)")
    # Without the compile options the schedule is not needed.
    np.testing.assert_array_equal(load_model(path, compile=False)(ones), ones)
    monkeypatch.delitem(registry, "tests>Doubling")
    monkeypatch.delitem(registry, "tests>Halving")
    with pytest.raises(ValueError) as error:
        load_model(path)
    assert str(error.value) == (f"{path}: needs the custom objects 'tests>Doubling', "
                                f"'tests>Halving', 'tests>ConstantRate', which are not "
                                f"registered in this process (import the modules that "
                                f"define them)")
