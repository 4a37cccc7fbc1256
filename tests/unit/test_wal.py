"""streams.ingest.wal: records survive a reopen, a torn tail is skipped, segments go once out."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from streams.frames import Frame
from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.ingest.server import Ingest
from streams.ingest.wal import WriteAheadLog
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
    # kill -9: nothing flushed, nothing drained; a new ingest replays what the log kept
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
    second = ingest_on(tmp_path, Delivered())
    second._replay()
    second._decode_and_add(scrape("early", b0 + 2 * B - 300))
    assert [(f.node, f.ts) for f in second.builder.flush_all()] == [("early", b0 + 2 * B)]
