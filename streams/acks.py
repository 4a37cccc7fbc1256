"""Hold a frame's Kafka acknowledgement until its bucket has been scored.

Faust commits a partition's offset up to the first event not yet acked. The
worker acks a frame only once the bucket it went into is closed, scored and the
group's state written to its table; until then the frame sits in worker memory
only. So a crash (or a rebalance: Faust seeks to the committed offsets) re-delivers
the frames of still-open buckets: they merge again (merging is idempotent), while
frames of buckets already closed are late and dropped. Open buckets survive
without being saved anywhere but the frames topic itself.

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

    def drop(self, group: str) -> int:
        """Forget ``group``'s events without acking them (another worker owns it now)."""
        return sum(len(events) for events in self._held.pop(group, {}).values())

    def __len__(self) -> int:
        return sum(len(events) for buckets in self._held.values() for events in buckets.values())
