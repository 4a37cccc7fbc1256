"""Hold a frame's Kafka acknowledgement until a written snapshot covers its bucket.

Faust commits a partition's offset up to the first event not yet acked. The
worker acks a frame only once the bucket it went into is closed, scored and a
snapshot of the group's state covering it written to its table (every K-th bucket:
``streams.worker.checkpoints``); until then the frame sits in worker memory only. So a
crash (or a rebalance: Faust seeks to the committed offsets) re-delivers the frames
of still-open buckets and of closed ones not checkpointed yet: they merge again
(merging is idempotent) and are scored again from the restored snapshot, while
frames of buckets it covers are late and dropped. Open buckets survive without
being saved anywhere but the frames topic itself.

Bookkeeping only: events are anything with ``ack()``.
"""

from __future__ import annotations

from typing import Protocol


class Ackable(Protocol):
    def ack(self) -> object: ...


class BucketAcks:
    """Events per (group, bucket ts), acked when the group's buckets up to ts have closed."""

    def __init__(self) -> None:
        self._held: dict[str, dict[int, list[Ackable]]] = {}

    def hold(self, group: str, ts: int, event: Ackable) -> None:
        self._held.setdefault(group, {}).setdefault(ts, []).append(event)

    def release(self, group: str, closed_upto: int) -> int:
        """Ack every held event of ``group`` whose bucket is ``<= closed_upto``; how many."""
        buckets = self._held.get(group)
        if not buckets:
            return 0
        acked = 0
        for ts in [t for t in buckets if t <= closed_upto]:
            for event in buckets.pop(ts):
                event.ack()
                acked += 1
        if not buckets:
            del self._held[group]
        return acked

    def release_all(self, group: str) -> int:
        """Ack every held event of ``group`` (it ended: nothing of it is left to restore)."""
        events = [e for events in self._held.pop(group, {}).values() for e in events]
        for event in events:
            event.ack()
        return len(events)

    def drop(self, group: str) -> int:
        """Forget ``group``'s events without acking them (another worker owns it now)."""
        return sum(len(events) for events in self._held.pop(group, {}).values())

    def __len__(self) -> int:
        return sum(len(events) for buckets in self._held.values() for events in buckets.values())
