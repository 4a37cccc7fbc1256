"""remote_write bodies byte by byte, for the fuzzer: an encoder that can write what protobuf
libraries refuse to (non-UTF-8 labels, duplicate names, any field order), and a reference
decoder that reads a body with one full protobuf parse and no caches.

The reference states the decoder's contract: labels with an empty value are absent, a
series needs a non-empty ``__name__``, a label name twice or an empty name rejects the
body, series without float samples are skipped. The fuzzer compares the real decoder
(fast path, caches, prefilter) against it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import cramjam
from google.protobuf.message import DecodeError

from streams.ingest.remote_write import RemoteWriteError, WriteRequest
from streams.ingest.series import Series

Label = tuple[bytes, bytes]
Sample = tuple[float, int]  # (value, timestamp ms), the wire order


def varint(n: int) -> bytes:
    """A protobuf varint; negative int64 values take ten bytes (two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def label(name: bytes, value: bytes) -> bytes:
    """An encoded Label as proto3 writes it: empty strings are left out."""
    body = (length_delimited(1, name) if name else b"") + (
        length_delimited(2, value) if value else b""
    )
    return length_delimited(1, body)


def sample(value: float, ts: int) -> bytes:
    """An encoded Sample as proto3 writes it: +0.0 and a zero timestamp are left out."""
    body = b""
    if struct.pack("<d", value) != b"\x00" * 8:
        body += b"\x09" + struct.pack("<d", value)
    if ts:
        body += b"\x10" + varint(ts)
    return length_delimited(2, body)


def series(labels: Sequence[Label], samples: Sequence[Sample]) -> bytes:
    """An encoded TimeSeries: labels in the given order (Prometheus sorts them), then samples."""
    return b"".join(label(n, v) for n, v in labels) + b"".join(sample(v, t) for v, t in samples)


def request(timeseries: Iterable[bytes], metadata: Iterable[bytes] = ()) -> bytes:
    """An uncompressed WriteRequest from encoded TimeSeries (and MetricMetadata) messages."""
    return b"".join(length_delimited(1, ts) for ts in timeseries) + b"".join(
        length_delimited(3, m) for m in metadata
    )


def compress(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def reference_decode(raw: bytes) -> list[Series]:
    """The series an uncompressed WriteRequest means; ``RemoteWriteError`` if it is invalid."""
    try:
        parsed = WriteRequest.FromString(raw)
    except DecodeError as exc:
        raise RemoteWriteError("not a WriteRequest") from exc
    out: list[Series] = []
    for ts in parsed.timeseries:
        items = [(lab.name, lab.value) for lab in ts.labels]
        names = [n for n, _ in items]
        if len(set(names)) != len(names):
            raise RemoteWriteError("a label name twice")
        if "" in names:
            raise RemoteWriteError("an empty label name")
        labels = {n: v for n, v in items if v}
        if not labels.get("__name__"):
            raise RemoteWriteError("no __name__")
        samples = [(s.timestamp, s.value) for s in ts.samples]
        if samples:
            out.append(Series(labels, samples))
    return out


def comparable(decoded: Iterable[Series]) -> list[tuple[tuple[tuple[str, str], ...], tuple]]:
    """Series as plain values; floats by bit pattern, so NaNs (and the stale NaN) compare."""
    return [
        (
            tuple(sorted(s.labels.items())),
            tuple((t, struct.pack("<d", v)) for t, v in s.samples),
        )
        for s in decoded
    ]
