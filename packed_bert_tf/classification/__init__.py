"""Sentence (pair) classification and regression on GLUE and XNLI.

`glue` knows the tasks and their TSV files, `metrics` the scores GLUE reports
and its submission format; both need only numpy, scipy and the standard
library. Importing this package imports neither of them (nor TensorFlow).
"""
