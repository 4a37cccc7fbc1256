"""Hold Python's cyclic garbage collector over a block that makes many small objects.

Building a round of series (the simulator), feeding one (the offline path) or a
remote_write body (the ingest) allocates thousands of small acyclic objects; with
the collector on it runs several times per block and rescans everything still held
downstream, which more than doubles the block's cost. Nothing is lost: the next pass runs after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off for the block (if it was on), back on after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
