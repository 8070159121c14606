"""`cyclic_gc_paused`: the collector off inside the block, restored after."""

import gc

import numpy as np
import pytest

from packed_bert_tf.garbage_collection import cyclic_gc_paused
from packed_bert_tf.packing import pack_histogram


@pytest.fixture
def gc_state():
    was_enabled = gc.isenabled()
    yield
    (gc.enable if was_enabled else gc.disable)()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(gc_state, enabled):
    (gc.enable if enabled else gc.disable)()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() == enabled


def test_the_collector_comes_back_when_the_block_raises(gc_state):
    gc.enable()
    with pytest.raises(ZeroDivisionError):
        with cyclic_gc_paused():
            1 / 0
    assert gc.isenabled()


def test_packing_runs_with_the_collector_paused(gc_state):
    gc.enable()
    seen = []
    histogram = np.zeros(64, np.int64)
    histogram[[9, 29, 49]] = 30, 20, 10
    plan = pack_histogram(histogram, 64, 4,
                          progress=lambda *_: seen.append(gc.isenabled()))
    assert plan.num_sequences == 60
    assert seen and not any(seen)
    assert gc.isenabled()
