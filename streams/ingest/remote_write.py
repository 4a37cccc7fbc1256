"""Prometheus remote_write 1.0 codec: snappy block format around a protobuf ``WriteRequest``.

Wire format (prompb, proto3)::

    WriteRequest { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }  # 3, 4: exemplars,
    Label        { string name = 1; string value = 2; }                       # histograms (ignored)
    Sample       { double value = 1; int64 timestamp = 2; }                   # timestamp in ms

The message classes are built at import time from a ``FileDescriptorProto`` written
out below, in a private descriptor pool (no protoc, no generated module, no clash
with another copy of prompb registered in the default pool).

Decoding is on the ingest's hot path (design target: >= 350,000 samples/s on one
core), and upb parses a whole request in a fraction of the time Python needs to
walk the parsed objects. So ``WriteRequestDecoder`` parses the request with a
*view* in which each ``TimeSeries`` stays raw bytes, and handles the shape
Prometheus actually sends -- one sample per ``TimeSeries``, labels first -- without
building per-label objects: the bytes before the 18-byte (or 9-byte for a value of
0.0) sample tail are looked up in a cache of label dicts, the double is unpacked
with ``struct`` and the 6-byte timestamp varint comes from a small cache too.
A label prefix enters the cache only after the full protobuf parse of that series
has confirmed that the prefix is a complete, valid label encoding with no
samples; a later ``prefix + tail`` is therefore the same message by construction.
Anything else (several samples, unusual encodings, a cache miss) takes the full
parse -- whose labels come from a cache of validated (name, value) pairs keyed by
each Label's bytes -- so every decoded series is validated one way or the other.
At fleet scale a process sees far more distinct series than any cache holds; the
optional ``metric_names`` prefilter then matters most: series no feature reads
(~95 % of an exporter's output) are skipped before their labels are decoded.

The optional compiled decoder (``native/``, the ``peerwatch_native`` extension) takes
the bodies Prometheus sends first; anything it does not fully understand it hands
back whole, and this module's decoder -- the reference -- decodes it (see
``WriteRequestDecoder(native=...)``).

Errors::

    ValueError
     └── RemoteWriteError   the body is not a valid remote_write 1.0 request
                            (one-line reason; the HTTP layer answers 400)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from itertools import islice
from typing import Any, cast

import cramjam
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from detectors.errors import InputError
from streams.ingest.series import SampleBatch, Series

try:  # the compiled fast path (native/); the pure-Python decoder below is the fallback
    from peerwatch_native import Decoder as _NativeDecoder
except ImportError:  # pragma: no cover - depends on the install
    _NativeDecoder = None

NATIVE_AVAILABLE = _NativeDecoder is not None
"""True if the compiled decoder is installed (built by ``pip install .`` where cargo is on PATH)."""
_native_by_default = NATIVE_AVAILABLE  # ``native=None``; the tests run both ways
DECODER_CHOICES: dict[str, bool | None] = {"auto": None, "native": True, "python": False}
"""``ingest_decoder`` -> ``WriteRequestDecoder(native=...)``."""


def uses_native(native: bool | None) -> bool:
    """Whether ``WriteRequestDecoder(native=...)`` decodes compiled (``None``: if installed)."""
    return (_native_by_default and _NativeDecoder is not None) if native is None else native


NOT_INSTALLED = (
    "the compiled remote_write decoder (peerwatch_native) is not installed: it builds with "
    "peerwatch where cargo is on PATH at install time, or comes as a wheel (docs/install.md)"
)

__all__ = [
    "DECODER_CHOICES",
    "NATIVE_AVAILABLE",
    "NOT_INSTALLED",
    "STALE_NAN",
    "STALE_NAN_BITS",
    "RemoteWriteError",
    "WriteRequestDecoder",
    "decode_write_request",
    "encode_write_request",
    "is_stale_marker",
    "uses_native",
]


class RemoteWriteError(InputError):
    """The body is not a valid remote_write 1.0 request; the message says why in one line."""


# --- stale marker -----------------------------------------------------------------------------

STALE_NAN_BITS = 0x7FF0000000000002
"""Bit pattern of Prometheus' stale marker: a NaN that means "this series ended"."""

_DOUBLE = struct.Struct("<d")
_STALE_BYTES = struct.pack("<Q", STALE_NAN_BITS)
STALE_NAN: float = _DOUBLE.unpack(_STALE_BYTES)[0]


def is_stale_marker(v: float) -> bool:
    """True only for the exact stale-marker NaN (any other NaN is an ordinary missing value)."""
    return v != v and _DOUBLE.pack(v) == _STALE_BYTES


# --- schema -------------------------------------------------------------------------------------

_F = descriptor_pb2.FieldDescriptorProto

# prompb's remote_write 1.0 messages (types.proto + remote.proto), plus the decoding
# views, as data: message -> (field, number, scalar type or message type name). Every
# message or bytes field of these is repeated, every scalar one optional.
_MESSAGES: dict[str, list[tuple[str, int, int | str]]] = {
    "Label": [("name", 1, _F.TYPE_STRING), ("value", 2, _F.TYPE_STRING)],
    "Sample": [("value", 1, _F.TYPE_DOUBLE), ("timestamp", 2, _F.TYPE_INT64)],
    "TimeSeries": [("labels", 1, ".prometheus.Label"), ("samples", 2, ".prometheus.Sample")],
    # MetricMetadata.type is an enum on the wire; an int32 reads the same varint.
    "MetricMetadata": [
        ("type", 1, _F.TYPE_INT32),
        ("metric_family_name", 2, _F.TYPE_STRING),
        ("help", 4, _F.TYPE_STRING),
        ("unit", 5, _F.TYPE_STRING),
    ],
    "WriteRequest": [
        ("timeseries", 1, ".prometheus.TimeSeries"),
        ("metadata", 3, ".prometheus.MetricMetadata"),
    ],
    # Same wire formats as WriteRequest and TimeSeries, but a TimeSeries (resp. a
    # Label) stays undecoded bytes: a length-delimited field reads as bytes or as a
    # message alike. Raw bytes are what the decoder's caches are keyed by.
    "TimeSeriesView": [("labels", 1, _F.TYPE_BYTES), ("samples", 2, ".prometheus.Sample")],
    "WriteRequestView": [
        ("timeseries", 1, _F.TYPE_BYTES),
        ("metadata", 3, ".prometheus.MetricMetadata"),
    ],
}


def _schema() -> descriptor_pb2.FileDescriptorProto:
    """``_MESSAGES`` as one proto3 file of package ``prometheus``."""
    file = descriptor_pb2.FileDescriptorProto(
        name="peerwatch/prompb_remote_write.proto", package="prometheus", syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind in fields:
            added = message.field.add(name=field_name, number=number)
            if isinstance(kind, str):
                added.type, added.type_name = _F.TYPE_MESSAGE, kind
            else:
                added.type = kind
            repeated = added.type in (_F.TYPE_MESSAGE, _F.TYPE_BYTES)
            added.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    return file


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_schema())


def _message_class(name: str) -> Any:  # generated classes have no static type
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"prometheus.{name}"))


Label = _message_class("Label")
Sample = _message_class("Sample")
TimeSeries = _message_class("TimeSeries")
MetricMetadata = _message_class("MetricMetadata")
WriteRequest = _message_class("WriteRequest")
_WriteRequestView = _message_class("WriteRequestView")
_TimeSeriesView = _message_class("TimeSeriesView")


# --- decoding -----------------------------------------------------------------------------------

_FRAMED_SNAPPY_MAGIC = b"\xff\x06\x00\x00sNaPpY"
_GZIP_MAGIC = b"\x1f\x8b"

# One-sample tails as proto3 encodes them: field 2 (Sample) of 16 bytes holding
# field 1 (double, 8 bytes) and field 2 (varint timestamp, 6 bytes: every epoch-ms
# timestamp from 1971 to 2109); a value of +0.0 is the default and is left out.
_TAIL_VALUE = b"\x12\x10\x09"  # then 8 bytes double, 0x10, 6 bytes varint
_TAIL_VALUE_LEN = 18
_TAIL_ZERO = b"\x12\x07\x10"  # then 6 bytes varint
_TAIL_ZERO_LEN = 9
_TS_TAG = 0x10


def _varint6(b: bytes) -> int | None:
    """A 6-byte varint's value, or None if ``b`` is not exactly one 6-byte varint."""
    if b[0] & b[1] & b[2] & b[3] & b[4] & 0x80 and not b[5] & 0x80:
        return (
            (b[0] & 0x7F)
            | (b[1] & 0x7F) << 7
            | (b[2] & 0x7F) << 14
            | (b[3] & 0x7F) << 21
            | (b[4] & 0x7F) << 28
            | b[5] << 35
        )
    return None


def _short(labels: dict[str, str]) -> str:
    text = ",".join(f"{k}={v!r}" for k, v in labels.items())
    return text if len(text) <= 200 else text[:197] + "..."


class WriteRequestDecoder:
    """Decodes remote_write 1.0 bodies into ``Series``, caching label dicts across requests.

    ``metric_names``, when given, keeps only series with one of these names; the
    others are counted in ``skipped_series`` and skipped before their labels are
    decoded (a node exports ~800 series, a frame uses a few dozen, and at fleet
    scale a process sees far more distinct series than any cache holds, so the
    cheap skip is what keeps decoding fast). Skipped series are not validated.

    The returned ``Series.labels`` dicts are shared between series and requests
    (that is what makes decoding cheap): treat them as read-only. The caches are
    bounded (oldest entry out first); one decoder belongs to one thread.

    ``native``: True to decode with the compiled decoder (an error if it is not
    installed), False for pure Python, None (default) for the compiled one if
    installed. Both give the same series and errors; the compiled one hands the
    bodies it does not fully understand to the pure-Python code (counted in
    ``fallback_bodies``).
    """

    def __init__(
        self,
        *,
        metric_names: Iterable[str] | None = None,
        label_cache_size: int = 200_000,
        max_body_bytes: int = 64 * 1024 * 1024,
        max_series_per_request: int = 500_000,
        native: bool | None = None,
    ) -> None:
        if label_cache_size < 0 or max_body_bytes <= 0 or max_series_per_request <= 0:
            raise ValueError(
                "label_cache_size must be >= 0, max_body_bytes and max_series_per_request > 0"
            )
        self.max_series_per_request = max_series_per_request
        self.metric_names = None if metric_names is None else frozenset(metric_names)
        self._wanted = (
            None if self.metric_names is None else frozenset(n.encode() for n in self.metric_names)
        )
        self.label_cache_size = label_cache_size
        self.max_body_bytes = max_body_bytes
        self.skipped_series = 0
        self._labels: dict[bytes, dict[str, str]] = {}  # label prefix -> labels
        self._pairs: dict[bytes, tuple[str, str]] = {}  # one encoded Label -> (name, value)
        self._timestamps: dict[bytes, int] = {}
        native = uses_native(native)
        if native and _NativeDecoder is None:
            raise RuntimeError(f"{NOT_INSTALLED}; set ingest_decoder to python or auto")
        self._native = (
            None
            if _NativeDecoder is None or not native
            else _NativeDecoder(
                Series,
                metric_names=None if self.metric_names is None else sorted(self.metric_names),
                label_cache_size=label_cache_size,
                max_body_bytes=max_body_bytes,
                max_series_per_request=max_series_per_request,
            )
        )
        self.fallback_bodies = 0
        self._columns = getattr(self._native, "decode_columns", None)

    @property
    def native(self) -> bool:
        """True if the compiled decoder decodes first."""
        return self._native is not None

    @property
    def cached_label_sets(self) -> int:
        """Label dicts the decoder caches (the compiled decoder's, if it runs)."""
        return len(self._labels) if self._native is None else self._native.cached_label_sets

    def decode(self, body: bytes) -> list[Series]:
        """All float samples of ``body``; an empty list for a metadata-only request.

        Series that carry no float sample (native histograms, exemplars only) are
        skipped: peerwatch has no use for them.
        """
        if self._native is not None:
            done = self._native.decode(body)
            if done is not None:
                series, skipped = done
                self.skipped_series += skipped
                return series
            self.fallback_bodies += 1
        return self._decode_reference(body)

    def decode_batch(self, body: bytes) -> SampleBatch | list[Series]:
        """``decode``, in columns (``SampleBatch``) when the compiled decoder took the body
        and every series has one sample -- what ``FrameBuilder.add_batch`` is fastest on;
        else the series as ``decode`` gives them. Same samples, same errors either way.
        """
        if self._native is not None and self._columns is None:
            return self.decode(body)  # an extension built before decode_columns
        if self._native is not None:
            done = self._native.decode_columns(body)
            if done is not None:
                decoded, columns, skipped = done
                self.skipped_series += skipped
                if columns is None:
                    return cast(list[Series], decoded)
                return SampleBatch(
                    decoded, np.frombuffer(columns[0], np.int64), np.frombuffer(columns[1])
                )
            self.fallback_bodies += 1
        return self._decode_reference(body)

    def _decode_reference(self, body: bytes) -> list[Series]:
        """The pure-Python decoder: every body, every valid encoding, every error."""
        view = self._parse_view(self._decompress(body))
        # Refused whole, before any work: accepting the first N would answer 204 for data
        # thrown away, and a 400 tells Prometheus (and its log) that retrying cannot help.
        count = len(view.timeseries)
        if count > self.max_series_per_request:
            raise RemoteWriteError(
                f"request has {count} series, above the limit of {self.max_series_per_request} "
                "(ingest_max_series_per_request); send smaller batches"
            )
        get_labels = self._labels.get
        get_ts = self._timestamps.get
        unpack_double = _DOUBLE.unpack_from
        wanted = self._wanted
        skipped = 0
        out: list[Series] = []
        append = out.append
        for raw in view.timeseries:
            if wanted is not None:
                # Skip a series whose __name__ is surely unwanted without decoding its labels:
                # find the name label by its bytes, trusting only a single occurrence (a label
                # *value* could hold the same bytes) and a one-byte length; anything unclear
                # goes on to the full parse. Assumes the Label is written name field first,
                # as every Prometheus encoder does.
                at = raw.find(_NAME_LABEL)
                if at >= 0 and raw.find(_NAME_LABEL, at + 11) < 0:
                    size = raw[at + 11] if at + 11 < len(raw) else 0x80
                    if size < 0x80 and raw[at + 12 : at + 12 + size] not in wanted:
                        skipped += 1
                        continue
            # Fast path: a known label prefix followed by exactly one sample.
            if raw[-_TAIL_VALUE_LEN:-15] == _TAIL_VALUE and raw[-7] == _TS_TAG:
                head, value = raw[:-_TAIL_VALUE_LEN], unpack_double(raw, len(raw) - 15)[0]
            elif raw[-_TAIL_ZERO_LEN:-6] == _TAIL_ZERO:
                head, value = raw[:-_TAIL_ZERO_LEN], 0.0
            else:
                head = None
            if head is not None and (labels := get_labels(head)) is not None:
                ts_bytes = raw[-6:]
                ts = get_ts(ts_bytes)
                if ts is None:
                    ts = self._timestamp(ts_bytes)
                if ts is not None:
                    append(Series(labels, [(ts, value)]))
                    continue
            series = self._decode_series(raw)
            if series is not None:
                append(series)
        self.skipped_series += skipped
        return out

    def _decompress(self, body: bytes) -> bytes:
        if not body:
            raise RemoteWriteError("empty body (expected a snappy-compressed WriteRequest)")
        if body.startswith(_FRAMED_SNAPPY_MAGIC):
            raise RemoteWriteError(
                "body is in the snappy framed (stream) format; remote_write needs the block format"
            )
        if body.startswith(_GZIP_MAGIC):
            raise RemoteWriteError("body is gzip-compressed; remote_write needs snappy block")
        try:
            size = cramjam.snappy.decompress_raw_len(body)
        except Exception as exc:  # cramjam raises its own DecompressionError and ValueError
            raise RemoteWriteError(self._not_snappy()) from exc
        if size > self.max_body_bytes:
            raise RemoteWriteError(
                f"body claims {size} bytes decompressed, more than the limit of "
                f"{self.max_body_bytes} (or it is not snappy block-compressed)"
            )
        try:
            return bytes(cramjam.snappy.decompress_raw(body))
        except Exception as exc:
            raise RemoteWriteError(self._not_snappy()) from exc

    @staticmethod
    def _not_snappy() -> str:
        return (
            "body is not snappy block-compressed (did you send the framed format, "
            "or an uncompressed body?)"
        )

    @staticmethod
    def _parse_view(raw: bytes) -> Any:
        try:
            return _WriteRequestView.FromString(raw)
        except DecodeError as exc:
            raise RemoteWriteError(
                "protobuf WriteRequest could not be parsed (truncated, or not a WriteRequest)"
            ) from exc

    def _timestamp(self, ts_bytes: bytes) -> int | None:
        ts = _varint6(ts_bytes)
        if ts is not None:
            if len(self._timestamps) >= 65_536:
                self._timestamps.clear()  # many distinct scrape times: start over, cheap
            self._timestamps[ts_bytes] = ts
        return ts

    def _decode_series(self, raw: bytes) -> Series | None:
        """Full protobuf parse of one TimeSeries; caches its label prefix if usually shaped."""
        try:
            ts = _TimeSeriesView.FromString(raw)
        except DecodeError as exc:
            raise RemoteWriteError(
                "protobuf WriteRequest could not be parsed (a TimeSeries is malformed)"
            ) from exc
        labels = self._labels_of(ts.labels)
        if self.metric_names is not None and labels["__name__"] not in self.metric_names:
            self.skipped_series += 1
            return None
        samples = [(s.timestamp, s.value) for s in ts.samples]
        if not samples:
            return None
        if len(samples) == 1 and self.label_cache_size:
            self._remember_prefix(raw, labels)
        return Series(labels, samples)

    def _labels_of(self, encoded: Iterable[bytes]) -> dict[str, str]:
        """Validated labels from encoded Label messages; an empty value means "no label".

        Label pairs repeat across series (host, job, cluster, GPU UUID), so each
        encoded Label is parsed and validated once and then looked up by its bytes.
        """
        pairs = self._pairs
        get_pair = pairs.get
        items = []
        for label in encoded:
            pair = get_pair(label)
            if pair is None:
                pair = self._parse_label(label)
            items.append(pair)
        labels = dict(items)
        if len(labels) != len(items):
            names = [name for name, _ in items]
            twice = next(n for n in names if names.count(n) > 1)
            raise RemoteWriteError(f"series has label {twice!r} twice ({_short(labels)})")
        if "" in labels.values():
            labels = {name: value for name, value in items if value}
        if not labels.get("__name__"):
            raise RemoteWriteError(f"series without __name__ ({_short(labels)})")
        return labels

    def _parse_label(self, encoded: bytes) -> tuple[str, str]:
        try:
            label = Label.FromString(encoded)
        except DecodeError as exc:
            raise RemoteWriteError(
                "protobuf WriteRequest could not be parsed (a Label is malformed)"
            ) from exc
        if not label.name:
            raise RemoteWriteError(f"series has a label with an empty name (value {label.value!r})")
        pair = (label.name, label.value)
        if len(self._pairs) >= _PAIR_CACHE_SIZE:
            self._pairs.clear()  # cheap to refill: the next requests bring the same pairs
        self._pairs[encoded] = pair
        return pair

    def _remember_prefix(self, raw: bytes, labels: dict[str, str]) -> None:
        """Cache ``raw``'s label prefix if ``raw`` is exactly labels + the fast-path tail.

        Parsing a concatenation of protobuf encodings equals merging their parses.
        So if the prefix parses on its own (it ends at a field boundary) without a
        sample, its labels are ``raw``'s labels, and any later ``prefix + tail``
        with a well-formed one-sample tail means these labels and that sample.
        """
        if raw[-_TAIL_VALUE_LEN:-15] == _TAIL_VALUE and raw[-7] == _TS_TAG:
            prefix = raw[:-_TAIL_VALUE_LEN]
        elif raw[-_TAIL_ZERO_LEN:-6] == _TAIL_ZERO:
            prefix = raw[:-_TAIL_ZERO_LEN]
        else:
            return
        if _varint6(raw[-6:]) is None:
            return
        try:
            head = _TimeSeriesView.FromString(prefix)
        except DecodeError:
            return  # the tail pattern was part of a label value: never a fast-path candidate
        if head.samples:
            return
        cache = self._labels
        if len(cache) >= self.label_cache_size:
            # The oldest eighth goes at once. Deleting a dict's first key one insert at a
            # time made each ``next(iter(cache))`` scan every slot freed before it: quadratic
            # once series turn over (257 s for one 15 MB body of distinct series).
            for key in list(islice(cache, max(1, self.label_cache_size // 8))):
                del cache[key]
        cache[prefix] = labels


_PAIR_CACHE_SIZE = 100_000
_NAME_LABEL = b"\x0a\x08__name__\x12"  # the first 11 bytes of Label{name="__name__", ...}


_default_decoder = WriteRequestDecoder()


def decode_write_request(body: bytes) -> list[Series]:
    """Decode a remote_write 1.0 body (snappy block + protobuf) into series.

    Raises ``RemoteWriteError`` with a one-line reason when the body is not a
    valid request. A metadata-only request decodes to ``[]``. Label dicts may be
    shared between series: treat them as read-only.

    >>> body = encode_write_request([Series({"__name__": "up"}, [(1000, 1.0)])])
    >>> decode_write_request(body)
    [Series(labels={'__name__': 'up'}, samples=[(1000, 1.0)])]
    """
    return _default_decoder.decode(body)


# --- encoding -----------------------------------------------------------------------------------


def encode_write_request(series: Iterable[Series]) -> bytes:
    """A remote_write 1.0 body for ``series`` (labels sorted by name), as Prometheus sends it.

    No validation: tests use it to build invalid requests too.
    """
    request = WriteRequest()
    add_series = request.timeseries.add
    for s in series:
        ts = add_series()
        add_label = ts.labels.add
        for name in sorted(s.labels):
            add_label(name=name, value=s.labels[name])
        add_sample = ts.samples.add
        for timestamp, value in s.samples:
            add_sample(value=value, timestamp=timestamp)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
