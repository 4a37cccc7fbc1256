"""Which closed bucket gets a group's snapshot written: every K-th, not every one.

A group's snapshot (``Pipeline.snapshot``, ~275 KB for 60 nodes) was encoded and
produced to the ``group-state`` changelog after each of its buckets. Written every
``every_buckets`` buckets instead, the frames since the last one stay un-acked
(``streams.worker.acks``): a killed worker's successor restores the older snapshot and Kafka
re-delivers those frames, which are scored again from it. Nothing is lost; the price
is up to ``every_buckets`` buckets of replay per group after a crash or rebalance.

The cadence is aligned on the bucket index (``ts // bucket_ms``): the snapshot is
written when a group's bucket of index K-1, 2K-1, ... (or the first after it) closes, so
every group checkpoints on the same buckets and the per-node GPU state handed between groups
(``streams.worker.node_health``) is saved by both at one point of the stream. A snapshot is
written at once, off the cadence, when

* the buckets just scored changed an alert or gave advice: a successor would re-send
  them (a duplicate alert event) if it scored them again;
* a node was handed to the group from another one: the giver may have written an
  off-cadence snapshot without it since the last aligned one, and without this the
  node's GPU state would be in no snapshot.

Bookkeeping only: the worker asks, writes and says so.
"""

from __future__ import annotations


class Checkpoints:
    """Per group, the newest bucket its last written snapshot covers."""

    def __init__(self, every_buckets: int, bucket_ms: int) -> None:
        if every_buckets < 1:
            raise ValueError(f"every_buckets must be >= 1, not {every_buckets}")
        self.every_buckets = every_buckets
        self.bucket_ms = bucket_ms
        self._written: dict[str, int] = {}

    def covered(self, group: str) -> int:
        """The newest bucket ts of ``group``'s last written (or restored) snapshot; -1: none."""
        return self._written.get(group, -1)

    def due(self, group: str, closed_upto: int, urgent: bool = False) -> bool:
        """Whether ``group``'s snapshot should be written now that its buckets up to
        ``closed_upto`` have closed: an aligned K-th bucket was passed, or ``urgent``."""
        last = self.covered(group)
        if closed_upto <= last:
            return False  # nothing new since (a tick that closed nothing)
        if urgent or last < 0:  # (a new group's first bucket: it is in the table at once)
            return True
        # the K-th bucket of each block of K (indexes K-1, 2K-1, ...), or past it
        block, one = self.bucket_ms * self.every_buckets, self.bucket_ms
        return (closed_upto + one) // block > (last + one) // block

    def wrote(self, group: str, closed_upto: int) -> None:
        """``group``'s snapshot covering its buckets up to ``closed_upto`` was written (or
        restored from the table)."""
        self._written[group] = closed_upto

    def forget(self, group: str) -> None:
        self._written.pop(group, None)
