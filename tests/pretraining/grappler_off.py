"""Imported for its effect: TensorFlow's graph optimizer off in this process
and in the children forked from it (a fork server preloads this module: `tests.multi_worker.fork_server`),
for runs whose checks are not about the optimizer (`tests.graph_options`)."""

from tests.graph_options import switch_off_grappler

switch_off_grappler()
