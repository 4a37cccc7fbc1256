"""streams.worker.checkpoints.Checkpoints: a group's snapshot every K-th bucket, aligned on the
bucket index, at once when urgent; with streams.worker.acks, what a crash leaves to replay."""

from __future__ import annotations

import pytest

from streams.worker.acks import BucketAcks
from streams.worker.checkpoints import Checkpoints
from tests.unit.test_acks import Event

B = 30_000


def written(
    checkpoints: Checkpoints, group: str, buckets: range, urgent: frozenset[int] = frozenset()
) -> list[int]:
    out = []
    for i in buckets:
        if checkpoints.due(group, i * B, urgent=i in urgent):
            checkpoints.wrote(group, i * B)
            out.append(i)
    return out


def test_every_bucket_with_one() -> None:
    assert written(Checkpoints(1, B), "job-a", range(5)) == [0, 1, 2, 3, 4]


def test_every_kth_bucket_aligned_on_the_index_whatever_the_groups_first_bucket() -> None:
    checkpoints = Checkpoints(4, B)
    assert written(checkpoints, "job-a", range(0, 13)) == [0, 3, 7, 11]
    # a group that starts later writes its first bucket, then on job-a's buckets
    assert written(checkpoints, "job-b", range(5, 13)) == [5, 7, 11]


def test_a_skipped_bucket_does_not_skip_the_checkpoint() -> None:
    """A group's buckets need not be consecutive (a bucket without frames does not exist):
    the first one past an aligned boundary is written."""
    checkpoints = Checkpoints(4, B)
    checkpoints.wrote("job-a", 1 * B)
    assert not checkpoints.due("job-a", 2 * B)
    assert checkpoints.due("job-a", 5 * B)


def test_urgent_writes_at_once_and_the_cadence_keeps_its_alignment() -> None:
    checkpoints = Checkpoints(4, B)
    assert written(checkpoints, "job-a", range(0, 9), urgent=frozenset({5})) == [0, 3, 5, 7]


def test_nothing_closed_since_the_last_snapshot_is_never_due() -> None:
    """A tick that closed no bucket, or a restore: the table already holds that state."""
    checkpoints = Checkpoints(4, B)
    checkpoints.wrote("job-a", 5 * B)  # restored from the table
    assert not checkpoints.due("job-a", 5 * B, urgent=True)
    assert checkpoints.covered("job-a") == 5 * B
    checkpoints.forget("job-a")
    assert checkpoints.covered("job-a") == -1


def test_k_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        Checkpoints(0, B)


def test_frames_are_released_only_up_to_the_written_snapshot() -> None:
    """With acks released at each written snapshot, a crash after bucket 10 leaves the
    frames of buckets 8 to 10 (and the open 11) un-acked: at most K buckets to replay."""
    checkpoints, held = Checkpoints(4, B), BucketAcks()
    frames = {i: Event() for i in range(12)}
    for i, event in frames.items():
        held.hold("job-a", i * B, event)
        closed = i - 1  # frames of bucket i close bucket i - 1
        if closed >= 0 and checkpoints.due("job-a", closed * B):
            checkpoints.wrote("job-a", closed * B)
            held.release("job-a", closed * B)
    assert [i for i, e in frames.items() if not e.acks] == [8, 9, 10, 11]


def test_an_ended_group_releases_every_held_frame() -> None:
    held = BucketAcks()
    events = [Event(), Event()]
    held.hold("job-a", B, events[0])
    held.hold("job-a", 9 * B, events[1])  # a late frame, held for the next bucket
    assert held.release_all("job-a") == 2
    assert [e.acks for e in events] == [1, 1]
    assert len(held) == 0
