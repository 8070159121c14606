"""The options every training front end has (run_pretraining.py, run_squad.py,
run_classifier.py), as one dataclass base.

`packed_bert_tf.pretraining.run.PretrainingOptions` and
`packed_bert_tf.training.fine_tuning.FineTuningOptions` subclass
`TrainingOptions`, adding their own options and the shared ones whose
defaults differ (``max_seq_length``, ``optimizer``). The front ends' flags
of the same names take their defaults from these fields.
"""

from __future__ import annotations

import dataclasses

from packed_bert_tf.training.distribution import CLUSTER_TIMEOUT_SECONDS

#: --batching: several sequences per row (packs); one per row at
#: --max_seq_length; one per row in length-bucketed batches.
BATCHING = ("packed", "bucketed", "padded")


@dataclasses.dataclass
class TrainingOptions:
    """What a training run is given, whatever its task.

    Attributes:
      bert_config_file: ``bert_config.json`` of the model.
      output_dir: the run's folder: checkpoints, summaries, results.
      init_checkpoint: the weights to start from, in any form
        (`packed_bert_tf.models.pretrained_weights`: an original BERT
        checkpoint, a run of this package, a Hugging Face or keras-hub
        folder); ignored once ``output_dir`` holds a checkpoint of the run.
      allow_partial_init_checkpoint: start the backbone weights that
        ``init_checkpoint`` lacks from random instead of refusing.
      do_train: train.
      train_batch_size: rows per micro-batch over all replicas (packs, when
        packing).
      learning_rate: the peak learning rate.
      steps_per_update: micro-batches per optimizer update (gradient
        accumulation).
      step_unit: what the step counts count: ``micro_batch`` or ``update``
        (`packed_bert_tf.training.step_counting`).
      clip_by_global_norm_after_gradient_allreduce: clip the accumulated
        gradient once per update instead of each micro-batch's.
      save_checkpoints_steps: steps between checkpoints (one at the end too).
      keep_checkpoint_max: checkpoints kept.
      iterations_per_loop: steps per call of the compiled training loop.
      log_every_n_steps: steps between log points.
      seed: seeds the weights, dropout and data order (and the fine-tuning
        front ends' packing); None: the run's own (`startup.resolve_seed`:
        the seed its output folder was started with, else one drawn).
      max_sequences_per_pack: sequences per packed row, at most.
      batching: one of `BATCHING`.
      bucket_boundaries: ``batching="bucketed"``: bucket upper edges (None:
        four equal buckets).
      pool_size: ``batching="bucketed"``: rows sorted into buckets together.
      distribution_strategy: the ``tf.distribute`` strategy's name
        (`packed_bert_tf.training.distribution.STRATEGIES`).
      tpu: the TPU's name or address (``distribution_strategy="tpu"``).
      use_tpu, tpu_zone, gcp_project, master, num_tpu_cores: the reference
        scripts' TPU flags, with their meaning there
        (`packed_bert_tf.training.distribution.choose_strategy`).
      cluster_timeout_seconds: how long the workers of ``TF_CONFIG`` have to
        connect (``distribution_strategy="multi_worker_mirrored"``).
      jit_compile: XLA-compile the per-replica step.
      mixed_precision: ``none``, ``bf16`` or ``fp16`` compute (float32
        variables).
      progress_bar: a Keras progress bar while training; None: when stderr
        is a terminal (it has no flag).
      peak_flops_per_second: one device's peak in the compute dtype, for the
        model FLOPs utilisation (`packed_bert_tf.training.flops`); None:
        measured.
    """

    bert_config_file: str | None = None
    output_dir: str | None = None
    init_checkpoint: str | None = None
    allow_partial_init_checkpoint: bool = False
    do_train: bool = False
    train_batch_size: int = 32
    learning_rate: float = 5e-5
    steps_per_update: int = 1
    step_unit: str = "micro_batch"
    clip_by_global_norm_after_gradient_allreduce: bool = False
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 3
    iterations_per_loop: int = 100
    log_every_n_steps: int = 100
    seed: int | None = None
    max_sequences_per_pack: int = 3
    batching: str = "packed"
    bucket_boundaries: tuple | None = None
    pool_size: int = 8192
    distribution_strategy: str = "default"
    tpu: str | None = None
    use_tpu: bool = False
    tpu_zone: str | None = None
    gcp_project: str | None = None
    master: str | None = None
    num_tpu_cores: int | None = None
    cluster_timeout_seconds: float = CLUSTER_TIMEOUT_SECONDS
    jit_compile: bool = True
    mixed_precision: str = "none"
    progress_bar: bool | None = None
    peak_flops_per_second: float | None = None


__all__ = ["BATCHING", "TrainingOptions"]
