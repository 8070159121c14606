"""tf.distribute strategies and mixed precision, chosen by name (the scripts' flags)."""

from __future__ import annotations

import threading

import keras
import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
MIXED_PRECISION = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


#: Seconds `create_strategy` waits for the workers of ``TF_CONFIG`` to connect.
CLUSTER_TIMEOUT_SECONDS = 300.0


def create_strategy(name: str = "default", *, tpu: str | None = None,
                    devices=None, cluster_timeout_seconds: float = CLUSTER_TIMEOUT_SECONDS
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
        return tf.distribute.TPUStrategy(connect_to_tpu(tpu))
    raise ValueError(f"--distribution_strategy={name!r} is not one of "
                     f"{', '.join(STRATEGIES)}")


#: Seconds to wait for a TPU to answer (`connect_to_tpu`).
TPU_CONNECT_TIMEOUT = 120


def connect_to_tpu(tpu: str | None, timeout: float = TPU_CONNECT_TIMEOUT):
    """Connects to and initialises the TPU of ``--tpu``; its cluster resolver.

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
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
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
        raise ValueError(f"--distribution_strategy=tpu --tpu={tpu or ''}: no TPU "
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
