"""streams.worker.acks.BucketAcks: a frame is acked only once its bucket has closed."""

from __future__ import annotations

from streams.worker.acks import BucketAcks

B = 30_000


class Event:
    def __init__(self) -> None:
        self.acks = 0

    def ack(self) -> bool:
        self.acks += 1
        return True


def test_events_of_open_buckets_stay_unacked() -> None:
    held = BucketAcks()
    old, new = Event(), Event()
    held.hold("job-a", 0, old)
    held.hold("job-a", B, new)
    assert held.release("job-a", closed_upto=0) == 1
    assert (old.acks, new.acks) == (1, 0)
    assert len(held) == 1


def test_release_acks_every_bucket_up_to_the_closed_one_once() -> None:
    held = BucketAcks()
    events = [Event() for _ in range(4)]
    for i, event in enumerate(events):
        held.hold("job-a", (i // 2) * B, event)
    assert held.release("job-a", closed_upto=B) == 4
    assert held.release("job-a", closed_upto=B) == 0
    assert [e.acks for e in events] == [1, 1, 1, 1]
    assert len(held) == 0


def test_groups_are_released_apart() -> None:
    held = BucketAcks()
    a, b = Event(), Event()
    held.hold("job-a", 0, a)
    held.hold("job-b", 0, b)
    held.release("job-a", closed_upto=0)
    assert (a.acks, b.acks) == (1, 0)


def test_a_dropped_group_is_never_acked() -> None:
    """A group that moved to another worker: its offsets are that worker's to commit."""
    held = BucketAcks()
    event = Event()
    held.hold("job-a", 0, event)
    assert held.drop("job-a") == 1
    assert held.release("job-a", closed_upto=B) == 0
    assert event.acks == 0
