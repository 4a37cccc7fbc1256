"""streams.ingest.wal: records survive a reopen, a torn tail is skipped, segments go once out."""

from __future__ import annotations

from pathlib import Path

from streams.ingest.wal import WriteAheadLog

B = 30_000


def test_bodies_are_replayed_after_a_reopen_and_a_torn_tail_is_skipped(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.append(b"first", 10 * B + 5)
    wal.append(b"second", 10 * B + 9)
    wal.close()
    (segment,) = tmp_path.glob("*.wal")
    with segment.open("ab") as f:
        f.write(b"\x20\x00\x00\x00\x00\x00")  # a kill in the middle of the next record
    assert [body for _, body in WriteAheadLog(tmp_path).replay()] == [b"first", b"second"]


def test_a_segment_goes_only_once_its_buckets_closed_and_its_frames_left_the_queue(
    tmp_path: Path,
) -> None:
    wal = WriteAheadLog(tmp_path, roll_s=0.0)
    wal.append(b"body", 10 * B + 5)
    # bucket 10 still open (watermark inside it): kept, whatever the producer did
    assert wal.checkpoint(10 * B + 20_000, B, open_frames=3, sequence=0, sent=0) == 0
    # bucket 10 closed, its 4 frames enqueued (sequence 4) but only 3 out: kept
    assert wal.checkpoint(11 * B, B, open_frames=1, sequence=4, sent=3) == 0
    assert wal.checkpoint(12 * B, B, open_frames=1, sequence=9, sent=4) == 1
    assert list(tmp_path.glob("*.wal")) == []
