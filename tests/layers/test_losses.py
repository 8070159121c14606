"""`WeightedSum` and `weighted_mean`: the design every loss of the package follows."""

import numpy as np
import tensorflow as tf

from packed_bert_tf.layers import WeightedSum, cross_replica_sum, weighted_mean


def test_weighted_mean_divides_total_by_count():
    np.testing.assert_allclose(
        float(weighted_mean(WeightedSum(tf.constant(6.0), tf.constant(4.0)))), 1.5)


def test_weighted_mean_of_nothing_is_zero_not_nan():
    assert float(weighted_mean(WeightedSum(tf.constant(0.0), tf.constant(0.0)))) == 0.0


def test_cross_replica_sum_is_identity_outside_a_strategy():
    assert float(cross_replica_sum(tf.constant(3.0))) == 3.0
