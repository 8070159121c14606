"""BERT pre-training on packed or unpacked records: the run and the task.

`packed_bert_tf.pretraining.run` knows the options (``run_pretraining.py``'s
flags) and the order of a run; `packed_bert_tf.pretraining.task` knows the
model's losses, the datasets and the input checks, with explicit arguments.
The shape of `packed_bert_tf.squad` (``run.py`` + ``task.py``).

Beside them: ``hyperparameters`` (the packing-aware hyper-parameter
adjustment, Krell et al., arXiv 2107.02027, section 3.3, and the packing
factor it reads), ``mlperf`` and ``mlperf_log`` (the run as MLPerf's rules see
it, and its MLPerf log), ``comparison`` (runs' summaries side by side).
"""
