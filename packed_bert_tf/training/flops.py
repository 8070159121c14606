"""Model FLOPs utilisation (MFU): a training run's model FLOPs per second over
the peak FLOPs per second of the devices it runs on.

The count (`EncoderShape.training_flops`) is the standard one for
transformers: per real token, 6 N for the matrix multiplies by the weights
(Kaplan et al. 2020, "Scaling Laws for Neural Language Models", section 2.1:
2 N forward, twice that backward) and 12 L H C for attention (PaLM,
Chowdhery et al. 2022, appendix B: ``6 N + 12 L H Q T`` per token, H Q the
hidden size): the forward pass multiplies Q K^T and A V, 2 H C each per
token and layer for a context of C tokens, and the backward pass twice that.
BERT's attention is bidirectional: every token sees its whole context (Kaplan's
``2 n_layer n_ctx d_attn`` forward is a causal model's, whose mean context is
half of it).

Conventions, the same for every task:

* N counts the encoder's weight matrices only, L (4 H^2 + 2 H I): no
  embedding tables, biases, layer norms, pooler or task heads (PaLM's MFU:
  non-embedding parameters). The heads run on a few positions per sequence
  (the masked-LM head on about 15 % of the tokens, the others on one), so
  the count is slightly conservative.
* Only real tokens count: padding earns nothing.
* A token's attention context C is its own sequence's length (in a pack, the
  tokens of its sequence; padded, the real tokens of its row), not S: a
  sequence of l tokens costs 12 L H l^2 in attention, and a batch the sum of
  its sequences' l^2 (``attention_pairs``, counted by
  `packed_bert_tf.training.trainer.batch_statistics`).

The peak (`measure_peak_flops_per_second`) is that of one device, measured by
timing a large square matrix multiply in the run's compute dtype (float32,
bfloat16 under ``mixed_bfloat16``, float16 under ``mixed_float16``) on the
run's first device, after a warm-up; or given (``--peak_flops_per_second``).
On a GPU float32 matrix multiplies use TF32 by default, for the model as for
the peak. A run over several devices divides by the peak times the devices
(`peak_devices`).
"""

from __future__ import annotations

import dataclasses
import time

#: The compute dtype of each ``--mixed_precision`` mode.
COMPUTE_DTYPES = {"none": "float32", "bf16": "bfloat16", "fp16": "float16"}

#: Matrix size of the measured peak: large enough to be compute-bound.
ACCELERATOR_MATMUL_SIZE = 4096
CPU_MATMUL_SIZE = 1024


@dataclasses.dataclass(frozen=True)
class EncoderShape:
    """What the FLOP count needs of a BERT encoder (L, H, I).

    Attributes:
      num_layers: L, transformer blocks.
      hidden_size: H.
      intermediate_size: I, the feed-forward width.
    """

    num_layers: int
    hidden_size: int
    intermediate_size: int

    @classmethod
    def of_config(cls, config) -> "EncoderShape":
        """The shape of a `packed_bert_tf.models.BertConfig` (or anything with
        its ``num_hidden_layers``, ``hidden_size`` and ``intermediate_size``)."""
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size)

    @property
    def parameters(self) -> int:
        """N: the weights of the encoder's matrix multiplies, L (4 H^2 + 2 H I)
        (Q, K, V and the attention output; the feed-forward's two)."""
        H, I = self.hidden_size, self.intermediate_size
        return self.num_layers * (4 * H * H + 2 * H * I)

    def training_flops(self, tokens: float, attention_pairs: float) -> float:
        """FLOPs of a forward and backward pass over ``tokens`` real tokens in
        sequences whose squared lengths sum to ``attention_pairs``:
        ``6 N tokens + 12 L H attention_pairs``.

        Example:
          >>> shape = EncoderShape(num_layers=2, hidden_size=4, intermediate_size=8)
          >>> shape.parameters  # 2 x (4 x 16 + 2 x 32)
          256
          >>> shape.training_flops(tokens=5, attention_pairs=3 ** 2 + 2 ** 2)
          8928.0
        """
        return float(6 * self.parameters * tokens
                     + 12 * self.num_layers * self.hidden_size * attention_pairs)


@dataclasses.dataclass(frozen=True)
class Peak:
    """The peak FLOPs per second of one device.

    Attributes:
      flops_per_second: the peak.
      source: ``measured`` (`measure_peak_flops_per_second`) or ``flag``
        (``--peak_flops_per_second``).
      dtype: the compute dtype measured (None when given).
    """

    flops_per_second: float
    source: str
    dtype: str | None = None

    def __post_init__(self):
        if not self.flops_per_second > 0:
            raise ValueError(f"a peak must be > 0 FLOPs per second, got "
                             f"{self.flops_per_second}")


def check_peak_flag(value: float | None) -> None:
    """Refuses a ``--peak_flops_per_second`` that is not > 0 (None: measure)."""
    if value is not None and not value > 0:
        raise ValueError(f"--peak_flops_per_second must be > 0, got {value}")


def measure_peak_flops_per_second(dtype: str = "float32", *, size: int | None = None,
                                  device: str | None = None,
                                  min_seconds: float = 0.05) -> float:
    """The FLOPs per second of an ``size`` x ``size`` matrix multiply.

    One multiply warms up; then the number of multiplies per trial doubles
    until a trial lasts ``min_seconds``, and the best of three such trials
    counts (2 size^3 FLOPs each). About half a second on a 2-core CPU.

    Args:
      dtype: the compute dtype (a `tf.dtypes` name).
      size: the matrices' size; default `ACCELERATOR_MATMUL_SIZE` on a GPU or
        TPU, `CPU_MATMUL_SIZE` on a CPU.
      device: where to run (a TensorFlow device name); None: TensorFlow's
        default placement (the first GPU, if any).
      min_seconds: the length of a trial.
    """
    import contextlib

    import tensorflow as tf

    if device is None:
        accelerators = tf.config.list_logical_devices("GPU") + \
            tf.config.list_logical_devices("TPU")
        on_accelerator = bool(accelerators)
    else:
        on_accelerator = tf.DeviceSpec.from_string(device).device_type in ("GPU", "TPU")
    size = size or (ACCELERATOR_MATMUL_SIZE if on_accelerator else CPU_MATMUL_SIZE)
    with tf.device(device) if device else contextlib.nullcontext():
        a = tf.random.normal([size, size], dtype=tf.float32)
        a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)

        def trial(count: int) -> float:
            started = time.perf_counter()
            for _ in range(count):
                product = tf.matmul(a, b)
            product[0, 0].numpy()  # waits for the device
            return time.perf_counter() - started

        trial(1)
        count = 1
        while (seconds := trial(count)) < min_seconds:
            count *= 2
        seconds = min(seconds, trial(count), trial(count))
    return 2 * size ** 3 * count / seconds


def peak_devices(strategy) -> int:
    """The devices a run's peak is multiplied by: its replicas on GPUs or TPUs;
    on CPUs, the machines (the replicas of a machine share its cores, which
    the peak measured on one already uses)."""
    replicas = strategy.num_replicas_in_sync
    try:
        local = list(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy: one device
        return 1
    if any("CPU" in device.upper().rsplit("/", 1)[-1] for device in local):
        return max(1, replicas // max(1, len(local)))
    return replicas


def run_peak(given: float | None, mixed_precision: str, *, strategy=None,
             measured: float = 0.0) -> Peak:
    """The peak of one of the run's devices: ``given`` (the flag), else the one
    ``measured`` by an earlier segment of the run (a run resumed is one run,
    its MFU over one peak), else measured now in the compute dtype of
    ``mixed_precision`` (`COMPUTE_DTYPES`) on the strategy's first device."""
    check_peak_flag(given)
    if given is not None:
        return Peak(float(given), "flag")
    dtype = COMPUTE_DTYPES[mixed_precision]
    if measured > 0:
        return Peak(measured, "measured", dtype)
    device = None
    if strategy is not None:
        try:
            device = strategy.extended.worker_devices[0]
        except RuntimeError:  # the default strategy: default placement
            device = None
    return Peak(measure_peak_flops_per_second(dtype, device=device), "measured", dtype)


@dataclasses.dataclass(frozen=True)
class Utilisation:
    """A run's model FLOPs utilisation: its encoder and its devices' peak.

    Attributes:
      encoder: the model's `EncoderShape`.
      peak: one device's `Peak`.
      devices: the devices the run uses (`peak_devices`).
    """

    encoder: EncoderShape
    peak: Peak
    devices: int = 1

    @property
    def peak_flops_per_second(self) -> float:
        """The run's peak: one device's times `devices`."""
        return self.peak.flops_per_second * self.devices

    def values(self, tokens: float, attention_pairs: float, seconds: float) -> dict:
        """``model_flops_per_second`` and ``mfu`` of ``tokens`` real tokens
        (``attention_pairs``: their sequences' squared lengths summed) trained
        in ``seconds``; 0 when no time passed."""
        flops = self.encoder.training_flops(tokens, attention_pairs)
        per_second = flops / seconds if seconds > 0 else 0.0
        return {"model_flops_per_second": per_second,
                "mfu": per_second / self.peak_flops_per_second}

    def describe(self) -> dict:
        """The peak and the count's convention, for a run's summary."""
        return {"peak_flops_per_second": self.peak_flops_per_second,
                "peak_flops_source": self.peak.source,
                "peak_flops_dtype": self.peak.dtype, "peak_devices": self.devices,
                "flops_parameters": self.encoder.parameters}


__all__ = ["COMPUTE_DTYPES", "EncoderShape", "Peak", "Utilisation", "check_peak_flag",
           "measure_peak_flops_per_second", "peak_devices", "run_peak"]
