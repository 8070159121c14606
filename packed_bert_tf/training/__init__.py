"""Training of the packed BERT models, shared by run_pretraining.py, run_squad.py
and run_classifier.py.

The modules, by concern:

- ``options``, ``flags``: the options every front end has
  (`options.TrainingOptions`) and the absl flags that fill them.
- ``output_dirs``, ``cluster``, ``distribution``: the output folder, the
  worker this process is (``TF_CONFIG``), the ``tf.distribute`` strategy and
  mixed precision.
- ``startup``: how every run starts (`startup.run_task`, `startup.start_run`):
  the model config, the dtype policy, the task's model and optimizer, and a
  `trainer.Trainer` restored from the run's checkpoints or initialised from
  an original BERT one.
- ``trainer``, ``step_counting``: the compiled distributed step (gradient
  accumulation) and how steps are counted.
- ``loop``, ``checkpoints``, ``progress``, ``interrupts``, ``trajectory``:
  the host loop, its checkpoints, logs and stop on a signal, and what a
  resumed run must keep.
- ``flops``: the model FLOPs count and the devices' peak, for the model
  FLOPs utilisation (MFU) the loop reports.
- ``optimizers``, ``lamb``, ``clipping``, ``schedules``: MLPerf's LAMB and
  AdamW, where the gradient is clipped, and the learning-rate schedule.
- ``fine_tuning``: what the fine-tuning front ends share.

The package itself exports the optimiser pieces below.
"""

from packed_bert_tf.training.lamb import DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, LAMB
from packed_bert_tf.training.schedules import PolynomialDecayWithWarmup

__all__ = ["DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY", "LAMB", "PolynomialDecayWithWarmup"]
