"""Imported for its effect: TensorFlow's graph optimizer off in this process
and in the children forked from it (`tests.forked_tools` preloads this module),
for runs whose checks are not about the optimizer (`tests.graph_options`)."""

from tests.graph_options import switch_off_grappler

switch_off_grappler()
