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

import contextlib
import fcntl
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from detectors.errors import PeerwatchError
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.ingest")

_HEADER = struct.Struct("<II")  # body length, CRC-32 of the body


@dataclass
class _Segment:
    path: Path
    number: int
    size: int = 0  # bytes of whole records
    # the builder's newest open bucket after one of its bodies was added: none of its
    # samples went into a later bucket (None: none went into any)
    last_bucket: int | None = None
    emitted_at: int | None = None  # producer sequence once all its frames were emitted
    replayed: bool = True  # False for one found at start until ``replay`` went through it


class WalError(PeerwatchError, RuntimeError):
    """The write-ahead log cannot be used, or cannot take a body."""


class WalUnusable(WalError):
    """At start: the log's directory cannot be written, or another process holds it."""


class WalRefused(WalError):
    """A body the log did not take (the write gets 503, Prometheus sends it again):
    ``reason`` is ``full`` (the log holds ``max_bytes``) or ``write_error`` (the disk said
    no: full, read-only, failing)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class WriteAheadLog:
    """Segments of length-prefixed, CRC-checked bodies in ``directory``, held by one process.

    ``max_bytes`` bounds what the segments hold (None: unbounded); a body that would pass
    it is refused (``WalRefused("full")``). Opening checks that the directory can be
    written (a probe file written, fsynced and removed) and takes its lock, so a
    read-only disk or a second process on the same directory stops the start
    (``WalUnusable``) instead of losing what it answers.
    """

    def __init__(
        self, directory: Path, *, max_bytes: int | None = None, roll_s: float = 1.0
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.roll_s = roll_s
        self._lock = _locked(directory)
        try:
            self._closed: list[_Segment] = [
                _Segment(p, int(p.stem), p.stat().st_size, replayed=False) for p in self._on_disk()
            ]
        except OSError as exc:
            os.close(self._lock)
            raise WalUnusable(f"{directory}: its segments cannot be read ({_why(exc)})") from exc
        self._bytes = sum(s.size for s in self._closed)
        self._next = 1 + max((s.number for s in self._closed), default=0)
        self._current: _Segment | None = None
        self._fd: int | None = None
        self._opened_at = 0.0
        self._state_covers = 0  # segments numbered up to this are covered by the kept state

    def _on_disk(self) -> list[Path]:
        return sorted(self.directory.glob("*.wal"), key=lambda p: int(p.stem))

    @property
    def held_bytes(self) -> int:
        """What the segments on disk hold."""
        return self._bytes

    def room_for(self, size: int) -> bool:
        """Whether a body of ``size`` bytes fits under ``max_bytes``."""
        return self.max_bytes is None or self._bytes + _HEADER.size + size <= self.max_bytes

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
        it covers every body appended so far. A disk error leaves the old state (and the
        segments it does not cover) in place: logged, tried again at the next change."""
        written = self._state_path.with_suffix(".tmp")
        try:
            with open(written, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(written, self._state_path)
            _fsync_directory(self.directory)
        except OSError as exc:
            log.warning("wal_state_not_kept", path=written, error=_why(exc))
            return
        self._state_covers = self._next - 1

    @property
    def segments(self) -> int:
        return len(self._closed) + (self._current is not None)

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """(segment index, body) of every complete record of the segments found at start.
        A segment can go only once this went through all of it (a replay that failed
        half-way leaves the rest for the next start)."""
        for i, segment in enumerate(self._closed):
            if not segment.replayed:
                yield from ((i, body) for body in _records(segment.path))
                segment.replayed = True

    def replayed(self, index: int, newest_open_bucket: int | None) -> None:
        """The builder's newest open bucket after a body of replayed segment ``index`` was
        added again."""
        segment = self._closed[index]
        segment.last_bucket = _newer(segment.last_bucket, newest_open_bucket)

    def append(self, body: bytes) -> None:
        """Write ``body`` durably into the current segment: written and fsynced (a new
        segment's directory entry too) before this returns; then add it to the builder and
        say where it went (``filed``). ``WalRefused`` if it does not fit or the disk fails:
        then nothing of it is kept and the segments stay whole."""
        if not self.room_for(len(body)):
            raise WalRefused("full", f"{self._bytes} of {self.max_bytes} bytes held")
        record = _HEADER.pack(len(body), zlib.crc32(body)) + body
        try:
            if self._fd is None:
                self._open_segment()
            assert self._fd is not None and self._current is not None
            view = memoryview(record)
            while view:  # a write may take part of it (a signal, a nearly full disk)
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            path = self._current.path if self._current is not None else self.directory
            self._abandon_segment()
            raise WalRefused("write_error", f"{path}: {_why(exc)}") from exc
        self._current.size += len(record)
        self._bytes += len(record)

    def _open_segment(self) -> None:
        segment = _Segment(self.directory / f"{self._next:012d}.wal", self._next)
        self._fd = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC)
        self._current = segment
        self._next += 1
        self._opened_at = time.monotonic()
        _fsync_directory(self.directory)  # the new file's name survives a power cut too

    def _abandon_segment(self) -> None:
        """After a failed write: cut the segment back to its last whole record and close it
        (later bodies go to a new one, never after a torn record); one with no record goes."""
        segment, fd = self._current, self._fd
        self._current, self._fd = None, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, segment.size if segment is not None else 0)
            with contextlib.suppress(OSError):
                os.close(fd)
        if segment is None:
            return
        if segment.size:
            self._closed.append(segment)
        else:
            with contextlib.suppress(OSError):
                segment.path.unlink()

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
        if self._fd is not None and (roll or age >= self.roll_s):
            os.close(self._fd)
            self._fd = None
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
            segment = self._closed.pop(0)
            segment.path.unlink(missing_ok=True)
            self._bytes -= segment.size
            deleted += 1
        return deleted

    def _done(self, segment: _Segment, sent: int) -> bool:
        at = segment.emitted_at
        return at is not None and sent >= at and segment.number <= self._state_covers

    def close(self) -> None:
        """Close the current segment and give the directory up (a kill does the same)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock >= 0:
            os.close(self._lock)  # releases the flock
            self._lock = -1


def _locked(directory: Path) -> int:
    """``directory`` created if need be, checked writable, and locked for this process: the
    lock's file descriptor. ``WalUnusable`` naming the directory otherwise."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"peerwatch")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
        lock = os.open(directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise WalUnusable(f"{directory} cannot be written ({_why(exc)})") from exc
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        raise WalUnusable(f"{directory} is in use by another process") from None
    return lock


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    """``PermissionError: Permission denied``: the error without the path (said already)."""
    return f"{type(exc).__name__}: {exc.strerror or exc}"


def _all_emitted(segment: _Segment, keep_from: int | None) -> bool:
    """Whether ``segment`` holds nothing of the buckets from ``keep_from`` on (a later
    sample reopening one of its buckets is another segment's)."""
    last = segment.last_bucket
    return segment.replayed and (last is None or keep_from is None or keep_from > last)


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
