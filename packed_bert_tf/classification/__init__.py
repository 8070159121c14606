"""Sentence (pair) classification and regression on GLUE and XNLI, packed.

`glue` knows the tasks and their TSV files, `metrics` the scores GLUE reports
and its submission format (both need only numpy, scipy and the standard
library); `features` tokenises examples as google-research/bert's
run_classifier.py does, `packing` lays them out in packed (or padded) rows
and unpacks per-example logits, `dataset` makes the tf.data pipelines and
predicts, `task` is what the shared `Trainer` needs, and `run` is the whole
run of ``run_classifier.py``. Importing this package imports none of them
(nor TensorFlow).
"""
