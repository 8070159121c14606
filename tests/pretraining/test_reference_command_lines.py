"""The MLPerf reference README's command lines, as docs/run_pretraining.md
writes them out, run with their paths replaced: the hardware flags choose
this project's strategies, and the rest trains and evaluates."""

import json
import pathlib
import re
import shlex

import pytest
import tensorflow as tf

from packed_bert_tf.training import distribution, output_dirs
from packed_bert_tf.training.distribution import StrategyChoice, choose_strategy
from tests.conftest import SMALL_PREDICTIONS, SMALL_SEQ_LENGTH, write_unpacked_dataset
from tests.tool_runs import run_main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("grappler_off_for_module")]

DOC = pathlib.Path(__file__).parents[2] / "docs" / "run_pretraining.md"
NO_GPU = not tf.config.list_physical_devices("GPU")

#: Appended to a command line to run it here: small sizes (the later value
#: of a flag wins) and no compilation (no claim here is about XLA).
SMALL = [f"--max_seq_length={SMALL_SEQ_LENGTH}",
         f"--max_predictions_per_seq={SMALL_PREDICTIONS}", "--train_batch_size=4",
         "--eval_batch_size=8", "--num_train_steps=2", "--num_warmup_steps=1",
         "--iterations_per_loop=1", "--save_checkpoints_steps=0", "--max_eval_steps=2",
         "--seed=1", "--nojit_compile"]


def command_lines() -> list:
    """``(environment, arguments)`` of each shell block of the doc's section on
    the reference's command lines."""
    text = DOC.read_text()
    section = text.split("## The reference's command lines", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```shell\n(.*?)```", section, re.S):
        # A placeholder is one word, as the reader would fill it in.
        block = re.sub(r"<[^>]*>", lambda m: m[0].replace(" ", "\0"), block)
        words = [word.replace("\0", " ")
                 for word in shlex.split(block.replace("\\\n", " "))]
        environment = {}
        while "=" in words[0] and not words[0].startswith("-"):
            name, value = words.pop(0).split("=", 1)
            environment[name] = value
        assert words[0] in ("python", "python3") and words[1].endswith("run_pretraining.py")
        commands.append((environment, words[2:]))
    return commands


COMMANDS = command_lines()
GPU_TRAIN, GPU_EVAL, TPU_TRAIN, TPU_EVAL = range(4)


#: The flags the MLPerf reference's run_pretraining.py (and its README's TPU
#: command lines) adds to google-research/bert's.
MLPERF_FLAGS = {"optimizer", "poly_power", "start_warmup_step", "num_gpus",
                "steps_per_update", "keep_checkpoint_max", "lamb_beta_1", "lamb_beta_2",
                "lamb_weight_decay_rate", "log_epsilon"}


def test_every_reference_flag_is_a_flag_here():
    from tests.reference_bert import run_pretraining

    ours = set(re.findall(r"--(?:\[no\])?(\w+):", run_main("run_pretraining.py",
                                                             "--helpfull").stdout))
    theirs = set(run_pretraining().FLAGS)
    assert {"use_tpu", "tpu_name", "master"} <= theirs
    assert theirs | MLPERF_FLAGS <= ours


def test_the_doc_holds_the_readmes_four_command_lines():
    assert len(COMMANDS) == 4
    assert COMMANDS[GPU_TRAIN][0] == {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2"}
    assert "--num_gpus=8" in COMMANDS[GPU_TRAIN][1]
    assert "--use_tpu" in COMMANDS[TPU_EVAL][1]


@pytest.fixture(scope="module")
def files(config_file, tmp_path_factory):
    """The paths the commands name: the config, training and evaluation
    records, and an original BERT checkpoint (a tiny run's final weights)."""
    from packed_bert_tf.pretraining.run import run_pretraining
    from tests.pretraining.tiny_runs import options

    root = tmp_path_factory.mktemp("reference")
    records = write_unpacked_dataset(root / "tfrecords", num_files=2, per_file=64)
    evaluation = write_unpacked_dataset(root / "eval", num_files=1, per_file=32, seed=5)[0]
    run_pretraining(options(config_file, root / "start", input_file=records[0],
                            do_train=True, num_train_steps=3, jit_compile=False))
    return {"bert_config_file": config_file,
            "init_checkpoint": str(root / "start" / "model.ckpt-3"),
            "train": str(root / "tfrecords" / "unpacked-*"), "eval": evaluation}


def with_paths(arguments, files, output_dir) -> list:
    """The command's arguments, each path replaced by one of ``files``."""
    replaced = []
    for argument in arguments:
        name = argument[2:].split("=", 1)[0]
        if name == "input_file":
            is_eval = "eval_10k" in argument
            argument = f"--input_file={files['eval' if is_eval else 'train']}"
        elif name in ("bert_config_file", "init_checkpoint"):
            argument = f"--{name}={files[name]}"
        elif name == "output_dir":
            argument = f"--output_dir={output_dir}"
        replaced.append(argument)
    return replaced


def run(command: int, files, output_dir, *more):
    environment, arguments = COMMANDS[command]
    return run_main("run_pretraining.py", *with_paths(arguments, files, output_dir), *more,
                    env=environment)


@pytest.mark.skipif(not NO_GPU, reason="the machine has GPUs")
@pytest.mark.parametrize("command, gpus", [(GPU_TRAIN, 8), (GPU_EVAL, 1)])
def test_the_gpu_command_lines_ask_for_their_gpus_in_one_line(command, gpus, files,
                                                              tmp_path):
    result = run(command, files, tmp_path / "out")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == \
        f"run_pretraining: --num_gpus={gpus} but this machine has 0 GPUs"
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.parametrize("command, name, cores", [(TPU_TRAIN, "<tpu instance name>", 128),
                                                  (TPU_EVAL, "<eval tpu name>", 8)])
def test_the_tpu_command_lines_choose_their_tpu(command, name, cores, files, tmp_path,
                                                monkeypatch):
    chosen = []

    def no_tpu_here(choice, **_):
        chosen.append(choice)
        raise ValueError(f"{choice.described}: no TPU here")

    monkeypatch.setattr(output_dirs, "create_chosen_strategy", no_tpu_here)
    result = run(command, files, tmp_path / "out")
    assert chosen == [StrategyChoice("tpu", name, "<GCP zone>", "<GCP project>",
                                     num_replicas=cores,
                                     described=f"--use_tpu --tpu={name}")]
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == \
        f"run_pretraining: --use_tpu --tpu={name}: no TPU here"


def test_the_gpu_training_command_trains_on_the_default_device(files, tmp_path):
    result = run(GPU_TRAIN, files, tmp_path / "out", "--num_gpus=0", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "train_summary.json").read_text())
    assert summary["train"]["final_step"] == 2 and summary["replicas"] == 1
    assert "resumed from" not in result.stderr
    assert (tmp_path / "out" / "model.ckpt-2.index").exists()


def test_the_gpu_evaluation_command_evaluates_its_input_file(files, tmp_path):
    result = run(GPU_EVAL, files, tmp_path / "out", "--num_gpus=0", *SMALL,
                 "--verbosity=0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no --eval_input_file: evaluating --input_file, as the MLPerf reference does" \
        in result.stderr
    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    assert 0 <= results["masked_lm_accuracy"] <= 1
    assert results["sequences"] == 16  # --max_eval_steps=2 batches of 8


def test_the_tpu_training_command_trains_here_without_use_tpu(files, tmp_path):
    result = run(TPU_TRAIN, files, tmp_path / "out", "--nouse_tpu", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("--tpu=<tpu instance name> --tpu_zone=<GCP zone> --gcp_project=<GCP "
            "project> --num_tpu_cores=128: ignored without --use_tpu") in result.stderr
    summary = json.loads((tmp_path / "out" / "train_summary.json").read_text())
    options = summary["options"]
    assert options["lamb_epsilon"] == pytest.approx(1e-6, rel=1e-12)  # --log_epsilon=-6
    assert (options["lamb_beta_1"], options["lamb_beta_2"]) == (0.88, 0.88)
    assert options["start_warmup_step"] == -76
    assert summary["train"]["final_step"] == 2


def test_the_tpu_evaluation_command_evaluates_here_without_use_tpu(files, tmp_path):
    result = run(TPU_EVAL, files, tmp_path / "out", "--nouse_tpu", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out" / "eval_results.json").exists()


class _Options:
    distribution_strategy, tpu, use_tpu, master = "default", None, False, None
    tpu_zone = gcp_project = num_tpu_cores = None
    num_gpus = 0

    def __init__(self, **values):
        self.__dict__.update(values)


@pytest.mark.parametrize("values, message", [
    (dict(use_tpu=True, distribution_strategy="mirrored"),
     "--use_tpu and --distribution_strategy=mirrored ask for two strategies: --use_tpu "
     "is --distribution_strategy=tpu"),
    (dict(num_gpus=2, use_tpu=True),
     "--num_gpus=2 and --use_tpu ask for two strategies: --num_gpus is "
     "--distribution_strategy=mirrored over that many GPUs"),
    (dict(num_gpus=2, distribution_strategy="multi_worker_mirrored"),
     "--num_gpus=2 and --distribution_strategy=multi_worker_mirrored ask for two "
     "strategies"),
    (dict(use_tpu=True, tpu="a", master="grpc://b:8470"),
     "--tpu_name=a and --master=grpc://b:8470 name two TPUs"),
    (dict(num_gpus=-1), "--num_gpus must be >= 0, got -1"),
    (dict(use_tpu=True, num_tpu_cores=0), "--num_tpu_cores must be >= 1, got 0"),
])
def test_contradicting_hardware_flags_are_one_line(values, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        choose_strategy(_Options(**values))


def test_the_reference_hardware_flags_map_to_strategies():
    assert choose_strategy(_Options()) == StrategyChoice()
    assert choose_strategy(_Options(use_tpu=True, master="grpc://b:8470")) == \
        StrategyChoice("tpu", "grpc://b:8470", described="--use_tpu --tpu=grpc://b:8470")
    assert choose_strategy(_Options(distribution_strategy="tpu", tpu="t",
                                    tpu_zone="z")) == \
        StrategyChoice("tpu", "t", "z", described="--distribution_strategy=tpu --tpu=t")
    assert choose_strategy(_Options(distribution_strategy="mirrored")) == \
        StrategyChoice("mirrored", described="--distribution_strategy=mirrored")


def test_a_tpu_of_another_size_than_num_tpu_cores_is_one_line(monkeypatch):
    monkeypatch.setattr(distribution, "create_strategy",
                        lambda *args, **kwargs: tf.distribute.get_strategy())
    choice = StrategyChoice("tpu", "t", num_replicas=8, described="--use_tpu --tpu=t")
    with pytest.raises(ValueError, match=re.escape(
            "--num_tpu_cores=8 but --use_tpu --tpu=t has 1 cores (a run uses all of a "
            "TPU's cores)")):
        distribution.create_chosen_strategy(choice)
