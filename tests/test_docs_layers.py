"""docs/layers.md runs under TensorFlow: its Python blocks, in order, in one
namespace, and what they claim holds.

(The blocks not marked TensorFlow only run under JAX in
tests/backends/test_cross_backend.py, which reads them with
`backend_neutral_blocks`: this module imports TensorFlow only in its tests.)
"""

import pathlib
import re

import numpy as np
import pytest
from keras import ops

pytestmark = pytest.mark.slow  # the page trains, saves and exports two models

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "layers.md"
#: The first line of a block that runs under TensorFlow only.
TENSORFLOW_ONLY = "# TensorFlow only"


def python_blocks(text: str) -> list:
    """The code of every ```python block of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)


def backend_neutral_blocks(text: str) -> list:
    """(index, code) of the ```python blocks not marked `TENSORFLOW_ONLY`, in order."""
    return [(index, block) for index, block in enumerate(python_blocks(text))
            if not block.startswith(TENSORFLOW_ONLY)]


def test_python_blocks_are_found():
    blocks = python_blocks("a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\ny\n```\n")
    assert blocks == ["x = 1\n", "y\n"]
    text = "```python\nx = 1\n```\n```python\n# TensorFlow only: export\ny\n```\n"
    assert backend_neutral_blocks(text) == [(0, "x = 1\n")]


def test_only_the_savedmodel_export_is_marked_tensorflow_only():
    blocks = python_blocks(DOC.read_text())
    marked = [block for block in blocks if block.startswith(TENSORFLOW_ONLY)]
    assert len(blocks) == 7 and len(marked) == 2
    assert all("export_for_serving(" in block for block in marked)
    # The other blocks name no TensorFlow: they run under any backend.
    for _, block in backend_neutral_blocks(DOC.read_text()):
        assert not re.search(r"\btf\.|tensorflow|export_for_serving", block), block


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
    one_sequence["input_mask"] = ops.cast(ops.greater(one_sequence["input_mask"], 0),
                                          "int32")
    assert np.abs(model(one_sequence)[0, 6:15] - unpacked[1, :9]).max() > 1e-3


def test_fit_lowers_the_loss(namespace):
    losses = namespace["losses"]
    assert len(losses) == 5 and losses[-1] < 0.8 * losses[0]


def test_saved_and_served_models_give_the_models_outputs(namespace):
    import tensorflow as tf

    model, packed = namespace["model"], namespace["packed"]
    np.testing.assert_array_equal(namespace["restored"](packed), model(packed))
    np.testing.assert_allclose(namespace["served"], model(packed), rtol=1e-6, atol=1e-6)
    classifier = namespace["classifier"]
    assert type(classifier).__name__ == "BertClassifierModel"
    assert classifier.optimizer is not None
    serving = tf.saved_model.load("classifier_serving").signatures["serving_default"]
    rows = {name: tf.constant(value) for name, value in namespace["packs"].arrays.items()}
    served = serving(**{name: rows[name] for name in classifier.input_features()})
    np.testing.assert_allclose(served["logits"], classifier(rows)["logits"], rtol=1e-6,
                               atol=1e-6)
