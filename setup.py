"""packed_bert_tf: packed BERT pre-training and fine-tuning in TensorFlow 2 / Keras 3."""

import pathlib
import re

from setuptools import Extension, find_packages, setup

_HERE = pathlib.Path(__file__).parent
_VERSION = re.search(r'__version__ = "([^"]+)"',
                     (_HERE / "packed_bert_tf" / "__init__.py").read_text()).group(1)

setup(
    name="packed_bert_tf",
    version=_VERSION,
    description=("Efficient sequence packing without cross-contamination "
                 "(Krell et al., arXiv 2107.02027) for BERT in TensorFlow 2 / Keras 3"),
    long_description=(_HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["packed_bert_tf", "packed_bert_tf.*",
                                    "data_prep", "data_prep.*"]),
    # The paper's length histograms (packed_bert_tf.packing.histograms).
    package_data={"packed_bert_tf.packing": ["paper_histograms/*.json"]},
    python_requires=">=3.10",
    # The record codec (packed_bert_tf.data.records.record_codec): optional, so that an
    # install without a C compiler still works (records then go through
    # TensorFlow, slower).
    ext_modules=[Extension("packed_bert_tf.data.records._record_codec",
                           ["packed_bert_tf/data/records/_record_codec.c"],
                           extra_compile_args=["-O3"], optional=True)],
    install_requires=[
        "tensorflow>=2.16",  # ships Keras 3
        "numpy>=1.23",
        "scipy>=1.15",  # HiGHS (its bindings, re-solved warm), milp, nnls
        "absl-py",
        "tokenizers",
        "apache-beam[tfrecord]",
        "matplotlib",
        # MLPerf's log (mlperf_logging.mllog) and its compliance checker.
        "mlperf-logging==4.1.68",
        # Hugging Face folders' model.safetensors (packed_bert_tf.models.hugging_face).
        "safetensors",
    ],
    extras_require={"test": ["pytest", "pytest-xdist>=3.8", "hypothesis",
                             # make lint: the rules of pyproject.toml's [tool.ruff].
                             "ruff==0.17.6",
                             # tests/backends: the models under KERAS_BACKEND=jax
                             # and KERAS_BACKEND=torch.
                             "jax[cpu]",
                             # The CPU build, 2.13.0+cpu, meets the pin: the tests need no GPU.
                             "torch==2.13.0",
                             # tests/models/test_hugging_face.py: folders it
                             # writes and reads, outputs to compare.
                             "transformers==5.25.0"],
                    # benchmarks/peer_benchmark.py: keras-hub's BERT beside ours.
                    "keras-hub": ["keras-hub==0.32.0"],
                    # What the tests and benchmarks compare against:
                    # google-research/bert's create_pretraining_data
                    # (benchmarks/google_bert.py) and Grain's packers.
                    "reference": ["bert-tensorflow==1.0.4", "grain==0.2.18"]},
)
