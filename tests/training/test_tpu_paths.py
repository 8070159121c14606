"""The --distribution_strategy=tpu paths, as far as a CPU can run them: the whole
step compiled as one XLA computation (a TPU's way), the static-shape rule, and
the connection's errors, each one line that names it."""

import os
import types

import pytest
import tensorflow as tf

from packed_bert_tf.training import distribution
from tests.tool_runs import REPOSITORY, run_main, run_tool
from tests.training.test_trainer import _iterator
from tests.training.trainer_checks import (
    functions_run_eagerly,
    make_trainer,
    max_relative_difference,
    micro_batches,
    random_features,
    weights,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]


def test_the_whole_step_compiled_at_once_takes_the_same_steps():
    # The reference's default under accumulation: clipping per micro-batch
    # (the optimizer's own clipping is the plain step, compiled the same way).
    micro_batch_clipnorm = 1.0
    elements = [micro_batches(random_features(seed, 4), 2) for seed in range(3)]
    # The reference uncompiled, run eagerly: the claim is the whole step's
    # compilation (test_trainer.py checks the traced steps).
    parts = make_trainer(steps_per_update=2, micro_batch_clipnorm=micro_batch_clipnorm,
                         learning_rate=0.05, jit_compile=False)
    with functions_run_eagerly():
        parts.train_steps(_iterator(elements), 3)
    whole = make_trainer(steps_per_update=2, micro_batch_clipnorm=micro_batch_clipnorm,
                         learning_rate=0.05)
    whole_trainer = type(whole)(whole.model, whole.optimizer, task=whole.task,
                                steps_per_update=2, jit_compile="whole_step",
                                micro_batch_clipnorm=micro_batch_clipnorm)
    result = whole_trainer.train_steps(_iterator(elements), 3)
    assert result.first_nonfinite_step == -1
    assert max_relative_difference(weights(whole_trainer), weights(parts)) < 1e-4
    assert whole_trainer._replica_step_function.experimental_get_tracing_count() == 1
    assert not whole_trainer.jit_compile  # the parts are not compiled on their own
    assert int(whole_trainer.step.numpy()) == 6


def test_the_whole_step_stand_in_is_for_one_replica():
    trainer = make_trainer(jit_compile=False)
    two_replicas = types.SimpleNamespace(num_replicas_in_sync=2)
    with pytest.raises(ValueError, match="jit_compile='whole_step' off a TPU is for one replica"):
        type(trainer)(trainer.model, trainer.optimizer, task=trainer.task,
                      strategy=two_replicas, jit_compile="whole_step")


def test_bucketed_batches_are_refused_on_a_tpu(monkeypatch):
    strategy = tf.distribute.get_strategy()
    distribution.check_static_shapes("bucketed", strategy)  # not a TPU: fine
    monkeypatch.setattr(distribution, "is_tpu_strategy", lambda strategy: True)
    distribution.check_static_shapes("packed", strategy)
    with pytest.raises(ValueError, match="--batching=bucketed gives batches of several "
                                         "shapes, which a TPU would compile one by one"):
        distribution.check_static_shapes("bucketed", strategy)


_NO_TPU = [
    ("", "--distribution_strategy=tpu --tpu=: no TPU (ValueError: Please provide a TPU "
         "Name to connect to.)"),
    ("local", "--distribution_strategy=tpu --tpu=local: no TPU (NotFoundError: TPUs not "
              "found in the cluster."),
]


@pytest.fixture(scope="module")
def no_tpu_runs(tmp_path_factory):
    """The connections (`tests.training.tpu_connect_check`, one per TPU name of
    `_NO_TPU`) and the front end's run, in this process, one after the other
    (a local TPU name leaves the eager context as it is)."""
    config = os.path.join(REPOSITORY, "configs", "demo_bert_config.json")
    output_dir = tmp_path_factory.mktemp("no_tpu")
    runs = [run_main("tests.training.tpu_connect_check", tpu) for tpu, _ in _NO_TPU]
    for flags in (["--distribution_strategy=tpu", "--tpu=local"],
                  ["--use_tpu", "--tpu_name=local"]):  # ours, the reference's
        runs.append(run_main("run_pretraining.py", f"--bert_config_file={config}",
                             f"--output_dir={output_dir}", "--do_train", "--input_file=x",
                             *flags))
    return runs


@pytest.mark.parametrize("tpu, message", _NO_TPU)
def test_a_tpu_that_is_not_there_is_one_error(no_tpu_runs, tpu, message):
    result = no_tpu_runs[[name for name, _ in _NO_TPU].index(tpu)]
    assert result.returncode == 1, result.stderr[-2000:]
    _, error = result.stdout.strip().split(" ", 1)
    assert error.startswith(message)


def test_a_tpu_address_nobody_answers_at_is_one_error():
    # Nobody answers there: TensorFlow alone would wait for ever. A process of
    # its own: the abandoned connection stays blocked setting the eager
    # context's server, and the claim is that the process ends all the same
    # (with the one error, well within this run's deadline).
    result = run_tool("tests.training.tpu_connect_check", "grpc://127.0.0.1:9",
                      timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    _, error = result.stdout.strip().split(" ", 1)
    assert error.startswith("--tpu=grpc://127.0.0.1:9: no answer from the TPU within 3 s")


@pytest.mark.parametrize("index, flags", [(-2, "--distribution_strategy=tpu --tpu=local"),
                                          (-1, "--use_tpu --tpu=local")])
def test_the_front_end_says_there_is_no_tpu_in_one_line(no_tpu_runs, index, flags):
    result = no_tpu_runs[index]
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"run_pretraining: {flags}: no TPU (NotFoundError: TPUs not found in the cluster.")
