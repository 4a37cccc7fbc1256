"""streams.ingest.wal: records survive a reopen, a torn tail is skipped, segments go once
out; the bound, a failing disk and an unusable directory; and the log in the ingest across a
kill (in-process: a builder and a log, the kill = dropping them without a flush)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from click.testing import CliRunner

from streams.cli import main
from streams.frames import Frame
from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.ingest.server import Ingest
from streams.ingest.wal import WalRefused, WalUnusable, WriteAheadLog
from streams.settings import Settings
from streams.telemetry.metrics import IngestMetrics

B = 30_000


def test_bodies_are_replayed_after_a_reopen_and_a_torn_tail_is_skipped(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    wal.append(b"first")
    wal.append(b"second")
    wal.close()
    (segment,) = tmp_path.glob("*.wal")
    with segment.open("ab") as f:
        f.write(b"\x20\x00\x00\x00\x00\x00")  # a kill in the middle of the next record
    assert [body for _, body in WriteAheadLog(tmp_path).replay()] == [b"first", b"second"]


def test_a_body_past_max_bytes_is_refused_as_full_and_nothing_of_it_is_kept(
    tmp_path: Path,
) -> None:
    wal = WriteAheadLog(tmp_path, max_bytes=100)
    wal.append(b"x" * 60)
    assert (wal.held_bytes, wal.room_for(24), wal.room_for(25)) == (68, True, False)
    with pytest.raises(WalRefused, match="68 of 100 bytes held") as refused:
        wal.append(b"y" * 25)
    assert refused.value.reason == "full"
    wal.append(b"z" * 24)  # what fits still goes in
    wal.close()
    assert [body for _, body in WriteAheadLog(tmp_path).replay()] == [b"x" * 60, b"z" * 24]


def test_a_disk_that_fails_a_write_refuses_that_body_and_the_next_goes_to_a_new_segment(
    tmp_path: Path,
) -> None:
    """The next segment's name points at /dev/full (a real device whose writes fail with
    ENOSPC): the body is refused, its empty segment removed; once the disk takes writes
    again the next body lands in a segment of its own, and the log replays whole."""
    wal = WriteAheadLog(tmp_path)
    (tmp_path / "000000000001.wal").symlink_to("/dev/full")
    with pytest.raises(WalRefused, match="No space left on device") as refused:
        wal.append(b"lost")
    assert refused.value.reason == "write_error"
    assert (list(tmp_path.glob("*.wal")), wal.held_bytes) == ([], 0)
    wal.append(b"kept")
    wal.close()
    assert [body for _, body in WriteAheadLog(tmp_path).replay()] == [b"kept"]


def test_a_directory_that_cannot_be_written_stops_the_start_naming_it(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(WalUnusable, match=f"{tmp_path}/file/wal cannot be written"):
        WriteAheadLog(tmp_path / "file" / "wal")


def test_peerwatch_ingest_on_an_unwritable_log_stops_with_one_line_naming_it_and_the_setting(
    tmp_path: Path,
) -> None:
    """Defaults but for the datadir, which is a file: the log's directory under it cannot be
    made, and the ingest says so in one line before it listens (exit 1, no traceback)."""
    (tmp_path / "file").write_text("not a directory")
    done = CliRunner().invoke(main, ["ingest"], env={"PEERWATCH_DATADIR": str(tmp_path / "file")})
    assert done.exit_code == 1
    (line,) = done.stderr.splitlines()
    assert line == (
        f"Error: WalUnusable: write-ahead log {tmp_path}/file/ingest-wal cannot be written "
        "(NotADirectoryError: Not a directory); it is <datadir>/ingest-wal (ingest_wal_dir "
        "unset): set ingest_wal_dir or datadir to a writable directory, or ingest_wal to false"
    )


def test_a_second_process_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path)
    with pytest.raises(WalUnusable, match="in use by another process"):
        WriteAheadLog(tmp_path)
    wal.close()
    WriteAheadLog(tmp_path).close()  # free again once the first gave it up (or died)


def test_a_replay_that_stops_half_way_leaves_every_segment_for_the_next_start(
    tmp_path: Path,
) -> None:
    wal = WriteAheadLog(tmp_path, roll_s=0.0)
    for body in (b"one", b"two"):
        wal.append(body)
        wal.checkpoint(None, sequence=0, sent=0, state_current=False)  # rolled, kept
    wal.close()
    wal = WriteAheadLog(tmp_path)
    next(wal.replay())  # and the replay dies there
    assert wal.checkpoint(None, sequence=0, sent=0) == 0
    wal.close()
    wal = WriteAheadLog(tmp_path)
    assert [body for _, body in wal.replay()] == [b"one", b"two"]
    assert wal.checkpoint(None, sequence=0, sent=0) == 2


def test_a_segment_waits_for_a_kept_state_that_covers_it(tmp_path: Path) -> None:
    """The caller's state changed since it was last kept (``state_current=False``): the
    segments after that keep stay, whatever else says they could go."""
    wal = WriteAheadLog(tmp_path, roll_s=0.0)
    wal.keep_state(b"before")
    wal.append(b"body")
    wal.filed(10 * B)
    assert wal.checkpoint(None, sequence=1, sent=1, state_current=False) == 0
    wal.keep_state(b"after")
    assert wal.checkpoint(None, sequence=1, sent=1, state_current=False) == 1
    wal.close()
    assert WriteAheadLog(tmp_path).kept_state() == b"after"


def test_a_segment_goes_only_once_its_frames_were_emitted_and_left_the_queue(
    tmp_path: Path,
) -> None:
    wal = WriteAheadLog(tmp_path, roll_s=0.0)
    wal.append(b"body")
    wal.filed(11 * B)  # the builder's newest open bucket once the body was added
    # bucket 11 still open: kept, whatever the producer did
    assert wal.checkpoint(10 * B, sequence=0, sent=0) == 0
    assert wal.checkpoint(11 * B, sequence=2, sent=2) == 0
    # bucket 11 emitted, 4 frames enqueued by then (sequence 4) but only 3 out: kept
    assert wal.checkpoint(12 * B, sequence=4, sent=3) == 0
    assert wal.checkpoint(12 * B, sequence=9, sent=4) == 1
    assert list(tmp_path.glob("*.wal")) == []


class Delivered:
    """The ingest's producer as the log sees it, with a Kafka that takes every frame at once:
    ``sequence`` frames handed over, all of them out of the queue (``left_queue``)."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def enqueue(self, frames: Iterable[Frame]) -> None:
        self.frames.extend(frames)

    @property
    def sequence(self) -> int:
        return len(self.frames)

    @property
    def left_queue(self) -> int:
        return len(self.frames)


def scrape(node: str, ts: int) -> bytes:
    """One scrape of ``node``'s node_exporter at ``ts``: a gauge (``node_procs_running``) and
    a counter of 1,000 interrupts a second (``node_intr_total``)."""
    labels = {"instance": f"{node}:9100", "job": "node", "cluster": "c"}
    return encode_write_request(
        [
            Series({"__name__": "node_procs_running", **labels}, [(ts, 5.0)]),
            Series({"__name__": "node_intr_total", **labels}, [(ts, float(ts))]),
        ]
    )


def ingest_on(directory: Path, delivered: Delivered) -> Ingest:
    """An ingest with its log in ``directory`` that keeps a segment per body and its scrape
    phases at every flush (a segment waits for the phases that cover it)."""
    ingest = Ingest(
        Settings(ingest_wal_dir=directory),
        delivered,  # type: ignore[arg-type]
        IngestMetrics(),
    )
    assert ingest.wal is not None
    ingest.wal.roll_s = 0.0
    ingest.keep_phases_s = 0.0
    return ingest


def run(ingest: Ingest, delivered: Delivered, scrapes: Iterable[tuple[int, str]]) -> None:
    """Each scrape through the ingest's work-thread steps: a write, then a flush."""
    for ts, node in scrapes:
        ingest._decode_and_add(scrape(node, ts))
        delivered.enqueue(ingest._close_due())
        ingest._checkpoint()


def kill(ingest: Ingest) -> None:
    """kill -9: nothing flushed, nothing drained; the kernel closes its files (and so frees
    the log's lock for the next ingest, which replays what the log kept)."""
    assert ingest.wal is not None
    ingest.wal.close()


def recent_bucket() -> int:
    return int(time.time() * 1000) // B * B - 10 * B


def test_a_sample_filed_in_the_next_round_survives_a_kill_after_its_segment_went(
    tmp_path: Path,
) -> None:
    """Target ``early`` is scraped 0.5 s into each bucket; one scrape comes 0.8 s early, at
    29.7 s of bucket 1: the builder files it in bucket 2 (its round), not in bucket 1 (its
    timestamp). Target ``late`` (at +20 s) then moves the watermark past bucket 1's end: a
    log that judged by timestamps deleted the early scrape's segment while bucket 2 was
    still open, and after a kill and a replay the frame (early, bucket 2) was gone."""
    b0 = recent_bucket()
    delivered = Delivered()
    first = ingest_on(tmp_path, delivered)
    run(
        first,
        delivered,
        [
            (b0 + 500, "early"),
            (b0 + 20_000, "late"),
            (b0 + B + 500, "early"),
            (b0 + B + 20_000, "late"),  # bucket 0 closes
            (b0 + 2 * B - 300, "early"),  # jittered early: bucket 2's round
            (b0 + 2 * B + 20_000, "late"),  # the watermark passes bucket 1's end: it closes
        ],
    )
    assert ("early", b0 + 2 * B) not in {(f.node, f.ts) for f in delivered.frames}  # still open
    kill(first)
    second = ingest_on(tmp_path, Delivered())
    second._replay()
    frames = delivered.frames + second.builder.flush_all()
    assert ("early", b0 + 2 * B) in {(f.node, f.ts) for f in frames}


def test_a_replayed_open_bucket_has_its_counter_rates(tmp_path: Path) -> None:
    """The log keeps the round before the open buckets: the replay sees each counter's
    previous sample, so the open bucket's frame has its rate as the killed process's would."""
    b0 = recent_bucket()
    delivered = Delivered()
    first = ingest_on(tmp_path, delivered)
    scrapes = [(b0 + k * B + 5_000, "a") for k in range(3)]
    scrapes += [(b0 + k * B + 20_000, "b") for k in range(3)]
    run(first, delivered, sorted(scrapes))  # buckets 0 and 1 closed, 2 open
    assert first.wal is not None and first.wal.segments == 4  # bucket 0's went
    kill(first)
    second = ingest_on(tmp_path, Delivered())
    second._replay()
    replayed = {(f.node, f.ts): f.values for f in second.builder.flush_all()}
    assert replayed[("a", b0 + 2 * B)] == {"procs_running": 5.0, "intr_rate": 1000.0}


def test_a_restarted_ingest_files_samples_into_the_rounds_learnt_before(tmp_path: Path) -> None:
    """The scrape phases outlive the process (kept in the log's directory): a restarted
    ingest files a target's scrape that came 0.8 s early into its round, as the one before
    would have, instead of learning a phase from it and putting it a bucket earlier."""
    b0 = recent_bucket()
    first = ingest_on(tmp_path, Delivered())
    run(first, Delivered(), [(b0 + 500, "early")])  # its phase: 0.5 s into the bucket
    first.builder.flush_all()
    first._checkpoint(roll=True)  # a clean stop: the log empties, the phases stay
    kill(first)
    second = ingest_on(tmp_path, Delivered())
    second._replay()
    second._decode_and_add(scrape("early", b0 + 2 * B - 300))
    assert [(f.node, f.ts) for f in second.builder.flush_all()] == [("early", b0 + 2 * B)]
