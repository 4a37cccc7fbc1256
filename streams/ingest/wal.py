"""The ingest's write-ahead log: a body is on disk before it is answered 204.

Why a log and not "answer only what Kafka acknowledged": a sample reaches Kafka
inside its node's frame, and a frame is produced when its 30-s bucket closes
(tens of seconds after the sample came, past Prometheus' 30 s request timeout).
So each accepted body is appended (length, CRC-32, the body as received) and
fsynced before the reply; on start every segment on disk is replayed into the
builder. Replayed samples may produce a frame twice; the worker merges frames
idempotently, so a duplicate costs nothing while a loss would cost a bucket.

Segments roll every ``roll_s``. A closed segment is deleted once every frame
its samples went into has been emitted *and* the frames emitted by then have
left the producer's queue (acknowledged or dropped). Which bucket a sample went
into is the builder's word, not its timestamp's: the builder files a sample by
its scrape's round (``streams.ingest.scrape_phase``), and a scrape taken just
before a bucket's end by a target whose round is the next bucket sits in that
next bucket, still open when the timestamp's bucket has closed. So each segment
keeps the builder's newest open bucket after each of its bodies was added (an
upper bound of where they went: ``FrameBuilder.open_buckets``), and is done
once the caller's ``keep_from`` bucket is past it (the ingest keeps the open
buckets and the round before them: see ``streams.ingest.server``). A torn
record at the end of a segment (a kill mid-write) was never answered 204 and
is skipped.

A replay must file each sample where the killed process did, so the log also
keeps the caller's *state* beside the segments (``keep_state``: the ingest's
learnt scrape phases), written atomically; a segment goes only once a state
written after its bodies, or one still current (``checkpoint(state_current=)``),
covers it.

Used from the ingest's work thread only.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.ingest")

_HEADER = struct.Struct("<II")  # body length, CRC-32 of the body


@dataclass
class _Segment:
    path: Path
    number: int
    # the builder's newest open bucket after one of its bodies was added: none of its
    # samples went into a later bucket (None: none went into any)
    last_bucket: int | None = None
    emitted_at: int | None = None  # producer sequence once all its frames were emitted


class WriteAheadLog:
    def __init__(self, directory: Path, *, roll_s: float = 1.0) -> None:
        self.directory = directory
        self.roll_s = roll_s
        directory.mkdir(parents=True, exist_ok=True)
        self._closed: list[_Segment] = [_Segment(p, int(p.stem)) for p in self._on_disk()]
        self._next = 1 + max((s.number for s in self._closed), default=0)
        self._current: _Segment | None = None
        self._file: BinaryIO | None = None
        self._opened_at = 0.0
        self._state_covers = 0  # segments numbered up to this are covered by the kept state

    def _on_disk(self) -> list[Path]:
        return sorted(self.directory.glob("*.wal"), key=lambda p: int(p.stem))

    @property
    def _state_path(self) -> Path:
        return self.directory / "state"

    def kept_state(self) -> bytes | None:
        """What ``keep_state`` wrote last (by this process or the one before), if anything."""
        try:
            return self._state_path.read_bytes()
        except FileNotFoundError:
            return None

    def keep_state(self, data: bytes) -> None:
        """Write ``data`` beside the segments, whole or not at all (write, fsync, rename);
        it covers every body appended so far."""
        written = self._state_path.with_suffix(".tmp")
        with open(written, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(written, self._state_path)
        self._state_covers = self._next - 1

    @property
    def segments(self) -> int:
        return len(self._closed) + (self._current is not None)

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """(segment index, body) of every complete record of the segments found at start."""
        for i, segment in enumerate(self._closed):
            yield from ((i, body) for body in _records(segment.path))

    def replayed(self, index: int, newest_open_bucket: int | None) -> None:
        """The builder's newest open bucket after a body of replayed segment ``index`` was
        added again."""
        segment = self._closed[index]
        segment.last_bucket = _newer(segment.last_bucket, newest_open_bucket)

    def append(self, body: bytes) -> None:
        """Write ``body`` durably (fsync) into the current segment; then add it to the
        builder and say where it went (``filed``)."""
        if self._file is None:
            self._current = _Segment(self.directory / f"{self._next:012d}.wal", self._next)
            self._next += 1
            self._file = open(self._current.path, "ab")  # noqa: SIM115 (closed in roll)
            self._opened_at = time.monotonic()
        assert self._current is not None
        self._file.write(_HEADER.pack(len(body), zlib.crc32(body)) + body)
        self._file.flush()
        os.fsync(self._file.fileno())

    def filed(self, newest_open_bucket: int | None) -> None:
        """The builder's newest open bucket once the body just appended was added to it."""
        assert self._current is not None
        self._current.last_bucket = _newer(self._current.last_bucket, newest_open_bucket)

    def checkpoint(
        self,
        keep_from: int | None,
        sequence: int,
        sent: int,
        *,
        roll: bool = False,
        state_current: bool = True,
    ) -> int:
        """After a flush: roll an old segment, delete those whose frames are out; how many.

        ``keep_from``: the oldest bucket still needed (None: none is), segments whose
        samples all went into earlier buckets are done; ``sequence``: frames handed to
        the producer so far, those of the flush included; ``sent``: how many of them have
        left its queue (in order: retries go back to its head). ``roll``: close the
        current segment whatever its age (shutdown). ``state_current``: the kept state
        still holds (nothing changed since ``keep_state``).
        """
        age = time.monotonic() - self._opened_at
        if self._file is not None and (roll or age >= self.roll_s):
            self._file.close()
            self._file = None
            assert self._current is not None
            self._closed.append(self._current)
            self._current = None
        if state_current:
            self._state_covers = self._next - 1
        for segment in self._closed:
            if segment.emitted_at is None and _all_emitted(segment, keep_from):
                segment.emitted_at = sequence
        deleted = 0
        while self._closed and self._done(self._closed[0], sent):
            self._closed.pop(0).path.unlink(missing_ok=True)
            deleted += 1
        return deleted

    def _done(self, segment: _Segment, sent: int) -> bool:
        at = segment.emitted_at
        return at is not None and sent >= at and segment.number <= self._state_covers

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _all_emitted(segment: _Segment, keep_from: int | None) -> bool:
    """Whether ``segment`` holds nothing of the buckets from ``keep_from`` on (a later
    sample reopening one of its buckets is another segment's)."""
    last = segment.last_bucket
    return last is None or keep_from is None or keep_from > last


def _newer(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    at = 0
    while at + _HEADER.size <= len(data):
        size, crc = _HEADER.unpack_from(data, at)
        body = data[at + _HEADER.size : at + _HEADER.size + size]
        if len(body) < size or zlib.crc32(body) != crc:
            log.warning("wal_torn_record", path=path, offset=at)  # never answered 204
            return
        yield body
        at += _HEADER.size + size
