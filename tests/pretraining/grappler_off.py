"""Imported for its effect: TensorFlow's graph optimizer off in this process
and in the children forked from it, or in a forked child that imports it
before its tool runs (`tests.graph_options.GRAPPLER_OFF`), for runs whose
checks are not about the optimizer."""

from tests.graph_options import switch_off_grappler

switch_off_grappler()
