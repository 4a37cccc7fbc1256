"""The ingest's write-ahead log: a body is on disk before it is answered 204.

Why a log and not "answer only what Kafka acknowledged": a sample reaches Kafka
inside its node's frame, and a frame is produced when its 30-s bucket closes
(tens of seconds after the sample came, past Prometheus' 30 s request timeout).
So each accepted body is appended (length, CRC-32, the body as received) and
fsynced before the reply; on start every segment on disk is replayed into the
builder. Replayed samples may produce a frame twice; the worker merges frames
idempotently, so a duplicate costs nothing while a loss would cost a bucket.

Segments roll every ``roll_s``. A closed segment is deleted once every bucket
its samples fell in has closed (its newest sample's bucket ended at or before
the builder's watermark, or the builder holds no open frame) *and* the frames
emitted by then have left the producer's queue (acknowledged or dropped). A
torn record at the end of a segment (a kill mid-write) was never answered 204
and is skipped.

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
    newest_ts: int | None = None  # newest sample time (ms) of its bodies
    emitted_at: int | None = None  # producer sequence once all its buckets closed


class WriteAheadLog:
    def __init__(self, directory: Path, *, roll_s: float = 1.0) -> None:
        self.directory = directory
        self.roll_s = roll_s
        directory.mkdir(parents=True, exist_ok=True)
        self._closed: list[_Segment] = [_Segment(p) for p in self._on_disk()]
        self._next = 1 + max((int(s.path.stem) for s in self._closed), default=0)
        self._current: _Segment | None = None
        self._file: BinaryIO | None = None
        self._opened_at = 0.0

    def _on_disk(self) -> list[Path]:
        return sorted(self.directory.glob("*.wal"), key=lambda p: int(p.stem))

    @property
    def segments(self) -> int:
        return len(self._closed) + (self._current is not None)

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """(segment index, body) of every complete record of the segments found at start."""
        for i, segment in enumerate(self._closed):
            yield from ((i, body) for body in _records(segment.path))

    def replayed(self, index: int, newest_ts: int | None) -> None:
        """The newest sample time of replayed segment ``index``."""
        self._closed[index].newest_ts = _newer(self._closed[index].newest_ts, newest_ts)

    def append(self, body: bytes, newest_ts: int | None) -> None:
        """Write ``body`` durably (fsync) into the current segment."""
        if self._file is None:
            self._current = _Segment(self.directory / f"{self._next:012d}.wal")
            self._next += 1
            self._file = open(self._current.path, "ab")  # noqa: SIM115 (closed in roll)
            self._opened_at = time.monotonic()
        assert self._current is not None
        self._file.write(_HEADER.pack(len(body), zlib.crc32(body)) + body)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._current.newest_ts = _newer(self._current.newest_ts, newest_ts)

    def checkpoint(
        self,
        watermark_ms: int | None,
        bucket_ms: int,
        open_frames: int,
        sequence: int,
        sent: int,
        *,
        roll: bool = False,
    ) -> int:
        """After a flush: roll an old segment, delete those whose frames are out; how many.

        ``sequence``: frames handed to the producer so far; ``sent``: how many of them
        have left its queue (in order: retries go back to its head). ``roll``: close the
        current segment whatever its age (shutdown).
        """
        age = time.monotonic() - self._opened_at
        if self._file is not None and (roll or age >= self.roll_s):
            self._file.close()
            self._file = None
            assert self._current is not None
            self._closed.append(self._current)
            self._current = None
        for segment in self._closed:
            if segment.emitted_at is None and _all_closed(
                segment.newest_ts, watermark_ms, bucket_ms, open_frames
            ):
                segment.emitted_at = sequence
        deleted = 0
        while self._closed and (at := self._closed[0].emitted_at) is not None and sent >= at:
            self._closed.pop(0).path.unlink(missing_ok=True)
            deleted += 1
        return deleted

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _all_closed(
    newest: int | None, watermark: int | None, bucket_ms: int, open_frames: int
) -> bool:
    if open_frames == 0 or newest is None:
        return True
    return watermark is not None and newest - newest % bucket_ms + bucket_ms <= watermark


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
