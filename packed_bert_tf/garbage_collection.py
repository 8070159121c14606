"""`cyclic_gc_paused`: Python's cyclic garbage collector off inside a block.

Code that allocates many short-lived containers and makes no reference
cycles (masking millions of instances, a packing plan of a hundred thousand
distinct strategies) gains nothing from the cyclic collector: reference
counting frees everything. Its passes still run every few hundred
allocations and walk every container alive. Plain Python.
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def cyclic_gc_paused():
    """Turns the cyclic garbage collector off inside the block, and back on
    after it if it was on (also when the block raises). Reference counting
    still frees every object without a cycle at once.

    Measured: making pretraining instances, about a tenth of the time; an
    `optimal` packing plan of a million sequences, about 0.2 s of the 1 s
    it takes (the plan's 100,000 distinct strategies are tuples).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
