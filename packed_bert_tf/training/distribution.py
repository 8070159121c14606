"""tf.distribute strategies and mixed precision, chosen by name (the scripts' flags)."""

from __future__ import annotations

import dataclasses
import threading

import keras
import tensorflow as tf
from absl import logging

STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
MIXED_PRECISION = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


#: Seconds `create_strategy` waits for the workers of ``TF_CONFIG`` to connect.
CLUSTER_TIMEOUT_SECONDS = 300.0


@dataclasses.dataclass(frozen=True)
class StrategyChoice:
    """The strategy a run's flags ask for, ours or the reference scripts'.

    Attributes:
      name: one of `STRATEGIES`.
      tpu: the TPU's name or address (``name="tpu"``).
      tpu_zone: the TPU's Cloud zone (``name="tpu"``; None: found by the
        resolver).
      gcp_project: the TPU's Cloud project (likewise).
      devices: the devices of ``mirrored`` (None: `create_strategy`'s).
      num_replicas: the replicas the flags require (None: all there are).
      described: the flags that chose it, for errors.
    """

    name: str = "default"
    tpu: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    devices: tuple | None = None
    num_replicas: int | None = None
    described: str = "--distribution_strategy=default"


def choose_strategy(options) -> StrategyChoice:
    """The strategy of ``options``: ``--distribution_strategy`` and ``--tpu``,
    or the hardware flags of the MLPerf reference and google-research/bert
    with their meaning there:

    - ``--use_tpu``: the TPU of ``--tpu_name`` (the same flag as ``--tpu``)
      or of ``--master`` (its address), in ``--tpu_zone`` of
      ``--gcp_project``; ``--num_tpu_cores``: the cores it must have (the
      run uses all of a TPU's cores).
    - ``--num_gpus`` (run_pretraining.py): N > 0 mirrors the run over the
      first N GPUs, 0 leaves it on the default device.

    Raises:
      ValueError: one line, before anything is built: flags that contradict
        each other, or fewer GPUs than ``--num_gpus``. The TPU flags without
        a TPU run are ignored, as the reference scripts ignore them, with a
        warning naming them.
    """
    name, tpu = options.distribution_strategy, options.tpu
    use_tpu, master = getattr(options, "use_tpu", False), getattr(options, "master", None)
    num_gpus = getattr(options, "num_gpus", 0) or 0
    location = dict(tpu_zone=getattr(options, "tpu_zone", None),
                    gcp_project=getattr(options, "gcp_project", None))
    cores = getattr(options, "num_tpu_cores", None)
    for flag, value in (("num_gpus", num_gpus), ("num_tpu_cores", cores)):
        if value is not None and value < (1 if flag == "num_tpu_cores" else 0):
            raise ValueError(f"--{flag} must be >= {1 if flag == 'num_tpu_cores' else 0}, "
                             f"got {value}")
    if use_tpu and name not in ("default", "tpu"):
        raise ValueError(f"--use_tpu and --distribution_strategy={name} ask for two "
                         f"strategies: --use_tpu is --distribution_strategy=tpu")
    if num_gpus and (use_tpu or name not in ("default", "mirrored")):
        other = "--use_tpu" if use_tpu else f"--distribution_strategy={name}"
        raise ValueError(f"--num_gpus={num_gpus} and {other} ask for two strategies: "
                         f"--num_gpus is --distribution_strategy=mirrored over that many "
                         f"GPUs")
    if use_tpu or name == "tpu":
        if master and tpu and master != tpu:
            raise ValueError(f"--tpu_name={tpu} and --master={master} name two TPUs")
        described = ("--use_tpu" if use_tpu else "--distribution_strategy=tpu") + \
            f" --tpu={tpu or master or ''}"
        return StrategyChoice("tpu", tpu or master, num_replicas=cores,
                              described=described, **location)
    ignored = [f"--{flag}={value}" for flag, value in
               [("tpu", tpu), ("master", master), *location.items(),
                ("num_tpu_cores", cores)] if value is not None]
    if ignored:  # as the reference scripts ignore them without --use_tpu
        logging.warning("%s: ignored without --use_tpu (or --distribution_strategy=tpu)",
                        " ".join(ignored))
    if num_gpus:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < num_gpus:
            raise ValueError(f"--num_gpus={num_gpus} but this machine has {len(gpus)} "
                             f"GPU{'' if len(gpus) == 1 else 's'}")
        return StrategyChoice("mirrored", devices=tuple(g.name for g in gpus[:num_gpus]),
                              described=f"--num_gpus={num_gpus}")
    return StrategyChoice(name, described=f"--distribution_strategy={name}")


def create_chosen_strategy(choice: StrategyChoice, *,
                           cluster_timeout_seconds: float = CLUSTER_TIMEOUT_SECONDS
                           ) -> tf.distribute.Strategy:
    """`create_strategy` for a `StrategyChoice`, its replicas checked.

    Raises:
      ValueError: the strategy has other than ``choice.num_replicas``
        replicas (a TPU of another size than ``--num_tpu_cores``), or no TPU.
    """
    strategy = create_strategy(choice.name, tpu=choice.tpu, devices=choice.devices,
                               cluster_timeout_seconds=cluster_timeout_seconds,
                               tpu_location=(choice.tpu_zone, choice.gcp_project),
                               described=choice.described)
    replicas = strategy.num_replicas_in_sync
    if choice.num_replicas is not None and replicas != choice.num_replicas:
        raise ValueError(f"--num_tpu_cores={choice.num_replicas} but {choice.described} "
                         f"has {replicas} cores (a run uses all of a TPU's cores)")
    return strategy


def create_strategy(name: str = "default", *, tpu: str | None = None,
                    devices=None, cluster_timeout_seconds: float = CLUSTER_TIMEOUT_SECONDS,
                    tpu_location: tuple = (None, None), described: str | None = None
                    ) -> tf.distribute.Strategy:
    """The strategy for ``--distribution_strategy``.

    Args:
      name: ``"default"``, ``"mirrored"``, ``"multi_worker_mirrored"`` or
        ``"tpu"``. ``default``: no distribution, the first device
        (``tf.distribute``'s default strategy). ``mirrored``: every local GPU,
        or every logical CPU device when there is no GPU.
        ``multi_worker_mirrored``: synchronous data parallelism across the
        workers of ``TF_CONFIG`` (`packed_bert_tf.training.cluster`).
        ``tpu``: the TPU named by `tpu` (a name, ``grpc://`` address or
        ``local``).
      tpu: str, optional. The TPU to connect to, for ``name="tpu"``.
      devices: list of str, optional. The devices of ``mirrored`` (default:
        see above).
      cluster_timeout_seconds: float. ``multi_worker_mirrored``: how long to
        wait for every worker to connect; then the process exits with one
        line (a bad ``TF_CONFIG`` raises `cluster.ClusterError` at once).
      tpu_location: ``(zone, project)`` of the TPU in Google Cloud (None:
        found by the resolver).
      described: the flags that asked for a TPU, for its errors (default:
        ``--distribution_strategy=tpu --tpu=TPU``).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is None and not tf.config.list_logical_devices("GPU"):
            devices = [device.name for device in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        from packed_bert_tf.training import cluster

        return cluster.create_multi_worker_strategy(
            cluster.current_task(name), timeout_seconds=cluster_timeout_seconds)
    if name == "tpu":
        return tf.distribute.TPUStrategy(connect_to_tpu(
            tpu, location=tpu_location,
            described=described or f"--distribution_strategy=tpu --tpu={tpu or ''}"))
    raise ValueError(f"--distribution_strategy={name!r} is not one of "
                     f"{', '.join(STRATEGIES)}")


#: Seconds to wait for a TPU to answer (`connect_to_tpu`).
TPU_CONNECT_TIMEOUT = 120


def connect_to_tpu(tpu: str | None, timeout: float = TPU_CONNECT_TIMEOUT, *,
                   location: tuple = (None, None), described: str | None = None):
    """Connects to and initialises the TPU of ``--tpu``; its cluster resolver.

    ``location``: ``(zone, project)`` in Google Cloud (None: found by the
    resolver). ``described``: the flags that asked for it, for the error
    (default: ``--distribution_strategy=tpu --tpu=TPU``).

    TensorFlow waits forever for an address nobody answers at; here the wait
    is bounded (the connection runs in a daemon thread, abandoned after
    ``timeout`` seconds).

    Raises:
      ValueError: no TPU name, no TPU there (naming ``--tpu`` and
        TensorFlow's reason), or no answer within ``timeout`` seconds.
    """
    outcome: dict = {}

    def connect():
        try:
            zone, project = location
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
                tpu=tpu or "", zone=zone, project=project)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
            outcome["resolver"] = resolver
        except (ValueError, RuntimeError, tf.errors.OpError) as error:
            outcome["error"] = error

    thread = threading.Thread(target=connect, name="connect_to_tpu", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ValueError(f"--tpu={tpu}: no answer from the TPU within {timeout:g} s")
    if "error" in outcome:
        error = outcome["error"]
        message = getattr(error, "message", None) or str(error)
        described = described or f"--distribution_strategy=tpu --tpu={tpu or ''}"
        raise ValueError(f"{described}: no TPU "
                         f"({type(error).__name__}: {message.splitlines()[0][:200]})")
    return outcome["resolver"]


def is_tpu_strategy(strategy: tf.distribute.Strategy) -> bool:
    """TPU strategies compile the whole step; no ``jit_compile`` inside them."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def check_static_shapes(batching: str, strategy: tf.distribute.Strategy) -> None:
    """A TPU compiles the step for one shape: ``--batching=bucketed`` (batches of
    several shapes) is refused there, before anything is built."""
    if batching == "bucketed" and is_tpu_strategy(strategy):
        raise ValueError("--batching=bucketed gives batches of several shapes, which a "
                         "TPU would compile one by one: use --batching=packed or padded "
                         "on --distribution_strategy=tpu")


def set_mixed_precision(mode: str) -> str:
    """Sets the global Keras dtype policy for ``--mixed_precision`` and returns its name.

    ``bf16``: bfloat16 compute, float32 variables (no loss scaling needed).
    ``fp16``: float16 compute, float32 variables; the trainer wraps the
    optimizer in a dynamic `keras.optimizers.LossScaleOptimizer`.
    """
    if mode not in MIXED_PRECISION:
        raise ValueError(f"--mixed_precision={mode!r} is not one of "
                         f"{', '.join(MIXED_PRECISION)}")
    keras.mixed_precision.set_global_policy(MIXED_PRECISION[mode])
    return MIXED_PRECISION[mode]


def check_global_batch_size(batch_size: int, strategy: tf.distribute.Strategy,
                            flag: str = "--train_batch_size") -> int:
    """The per-replica batch size; a clear error when it does not divide evenly."""
    replicas = strategy.num_replicas_in_sync
    if batch_size < 1 or batch_size % replicas:
        raise ValueError(f"{flag}={batch_size} is not a positive multiple of the "
                         f"{replicas} replicas in sync")
    return batch_size // replicas
