"""docs/layers.md runs: its Python blocks, in order, in one namespace, and what
they claim holds."""

import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.slow  # the page trains, saves and exports two models

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "layers.md"


def python_blocks(text: str) -> list:
    """The code of every ```python block of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def test_python_blocks_are_found():
    blocks = python_blocks("a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\ny\n```\n")
    assert blocks == ["x = 1\n", "y\n"]


@pytest.fixture(scope="module")
def namespace(tmp_path_factory, monkeypatch_module):
    """What the page's blocks define, run in a fresh folder (they write files)."""
    monkeypatch_module.chdir(tmp_path_factory.mktemp("docs"))
    names = {"__name__": "docs_layers"}
    for index, block in enumerate(python_blocks(DOC.read_text())):
        exec(compile(block, f"{DOC.name} block {index + 1}", "exec"), names)
    return names


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_the_token_classifier_fits_in_40_lines():
    model_block = python_blocks(DOC.read_text())[0]
    assert "class PackedTokenClassifier" in model_block
    code_lines = [line for line in model_block.splitlines() if line.strip()]
    assert len(code_lines) < 40, len(code_lines)


def test_packed_logits_and_loss_equal_unpacked(namespace):
    # The page asserts these itself; here again, explicitly, as its text claims.
    packed, unpacked = namespace["packed_logits"], namespace["unpacked_logits"]
    assert packed.shape == (1, 16, 5) and unpacked.shape == (2, 16, 5)
    assert np.abs(packed[0, :6] - unpacked[0, :6]).max() <= 1e-5
    assert np.abs(packed[0, 6:15] - unpacked[1, :9]).max() <= 1e-5
    # The trained model too; and the test could fail: with one sequence index
    # for the whole row (no block-diagonal mask), b's logits change.
    model = namespace["model"]
    packed, unpacked = model(namespace["packed"]), model(namespace["unpacked"])
    assert np.abs(packed[0, 6:15] - unpacked[1, :9]).max() <= 1e-5
    one_sequence = dict(namespace["packed"])
    one_sequence["input_mask"] = tf.cast(one_sequence["input_mask"] > 0, tf.int32)
    assert np.abs(model(one_sequence)[0, 6:15] - unpacked[1, :9]).max() > 1e-3


def test_fit_lowers_the_loss(namespace):
    losses = namespace["losses"]
    assert len(losses) == 5 and losses[-1] < 0.8 * losses[0]


def test_saved_and_served_models_give_the_models_outputs(namespace):
    model, packed = namespace["model"], namespace["packed"]
    np.testing.assert_array_equal(namespace["restored"](packed), model(packed))
    np.testing.assert_allclose(namespace["served"], model(packed), rtol=0, atol=1e-6)
    classifier = namespace["classifier"]
    assert type(classifier).__name__ == "BertClassifierModel"
    assert classifier.optimizer is not None
    serving = tf.saved_model.load("classifier_serving").signatures["serving_default"]
    rows = {name: tf.constant(value) for name, value in namespace["packs"].arrays.items()}
    served = serving(**{name: rows[name] for name in classifier.input_features()})
    np.testing.assert_allclose(served["logits"], classifier(rows)["logits"], rtol=0,
                               atol=1e-6)
