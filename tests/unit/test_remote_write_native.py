"""The compiled remote_write decoder (native/) against the pure-Python one, its reference:
the same bodies give the same series, the same skipped counts and the same errors."""

from __future__ import annotations

import dataclasses
import gc
import gzip
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.ingest import remote_write as rw
from streams.ingest.remote_write import (
    STALE_NAN,
    RemoteWriteError,
    WriteRequestDecoder,
    encode_write_request,
)
from streams.ingest.series import SampleBatch, Series
from streams.lab.simulator.run import MAX_SAMPLES_PER_SEND, split_samples
from tests.unit.test_remote_write import comparable, field, series_strategy, varint

T0 = 1_700_000_000_000


def outcome(decoder: WriteRequestDecoder, body: bytes) -> object:
    """What a decoder makes of ``body``: its series (floats as bits) and skipped count, or
    the error's message."""
    before = decoder.skipped_series
    try:
        series = decoder.decode(body)
    except RemoteWriteError as exc:
        return ("error", str(exc))
    return comparable(series), decoder.skipped_series - before


def batch_outcome(decoder: WriteRequestDecoder, body: bytes) -> object:
    """``outcome`` of ``decode_batch``: its columns read back as series."""
    before = decoder.skipped_series
    try:
        decoded = decoder.decode_batch(body)
    except RemoteWriteError as exc:
        return ("error", str(exc))
    series = decoded.series() if isinstance(decoded, SampleBatch) else decoded
    return comparable(series), decoder.skipped_series - before


def both(**kwargs: object) -> tuple[WriteRequestDecoder, WriteRequestDecoder]:
    return WriteRequestDecoder(native=False, **kwargs), WriteRequestDecoder(native=True, **kwargs)  # type: ignore[arg-type]


def assert_same(body: bytes, **kwargs: object) -> WriteRequestDecoder:
    """Cold and warm (second decode: caches filled), both decoders agree; the native one."""
    reference, native = both(**kwargs)
    columns = WriteRequestDecoder(native=True, **kwargs)  # type: ignore[arg-type]
    for _ in range(2):
        expected = outcome(reference, body)
        assert outcome(native, body) == expected
        assert batch_outcome(columns, body) == expected
    return native


def sample(value: float, ts: int) -> bytes:
    return b"\x09" + struct.pack("<d", value) + b"\x10" + varint(ts)


def label(name: bytes, value: bytes) -> bytes:
    return field(1, field(1, name) + field(2, value))


def body_of(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def fleet_bodies() -> list[bytes]:
    """A scrape round of the simulated cluster, as the simulator's remote_write sends it."""
    from streams.lab.simulator.cluster import ClusterSimulator
    from streams.lab.simulator.scenarios import get_scenario

    config = get_scenario("gpu-slow").config_for(3)
    series = ClusterSimulator(config).scrape(config.start_ms)
    return [encode_write_request(b) for b in split_samples(series, MAX_SAMPLES_PER_SEND)]


def test_prometheus_shaped_bodies_decode_natively_and_alike() -> None:
    bodies = fleet_bodies()
    wanted = {"DCGM_FI_DEV_GPU_UTIL", "node_load1", "up"}
    for kwargs in ({}, {"metric_names": wanted}, {"label_cache_size": 0}):
        reference, native = both(**kwargs)
        columns = WriteRequestDecoder(native=True, **kwargs)  # type: ignore[arg-type]
        for _ in range(2):
            for body in bodies:
                expected = outcome(reference, body)
                assert outcome(native, body) == expected
                assert batch_outcome(columns, body) == expected
                # Prometheus' shape: one sample per series, so columns
                assert isinstance(columns.decode_batch(body), SampleBatch)
        assert native.fallback_bodies == columns.fallback_bodies == 0  # no body left to Python


ODD = {
    "several samples, stale marker, NaN, zero, negative": Series(
        {"__name__": "m", "instance": "n1:9100"},
        [(T0, 1.0), (T0 + 1, STALE_NAN), (T0 + 2, float("nan")), (T0 + 3, 0.0), (T0 + 4, -2.5)],
    ),
    "timestamps 0, negative, huge": Series({"__name__": "m"}, [(0, 1.0), (-5, 2.0), (2**62, 3.0)]),
    "unsorted labels, unicode": Series(
        {"zz": "é\u0800", "__name__": "m", "a": "\U0001f600"}, [(T0, 1.0)]
    ),
    "no samples (skipped)": Series({"__name__": "m", "x": "y"}, []),
}


@pytest.mark.parametrize("name", list(ODD))
def test_odd_but_valid_series_decode_natively_and_alike(name: str) -> None:
    native = assert_same(encode_write_request([ODD[name], Series({"__name__": "up"}, [(T0, 1.0)])]))
    assert native.fallback_bodies == 0


UNUSUAL = {
    "empty label value": label(b"__name__", b"up")
    + field(1, field(1, b"job"))
    + field(2, sample(1.0, T0)),
    "value before name in a Label": field(1, field(2, b"up") + field(1, b"__name__"))
    + field(2, sample(1.0, T0)),
    "exemplar field": label(b"__name__", b"up") + field(2, sample(1.0, T0)) + field(3, b""),
    "histogram field": label(b"__name__", b"up") + field(4, b"\x08\x01"),
    "labels after a sample": field(2, sample(1.0, T0)) + label(b"__name__", b"up"),
    "sample fields reversed": label(b"__name__", b"up")
    + field(2, b"\x10" + varint(T0) + b"\x09" + struct.pack("<d", 4.0)),
    "repeated sample field": label(b"__name__", b"up")
    + field(2, b"\x09" + struct.pack("<d", 1.0) + b"\x09" + struct.pack("<d", 7.0)),
}


@pytest.mark.parametrize("name", list(UNUSUAL))
def test_unusual_encodings_decode_alike(name: str) -> None:
    assert_same(body_of(field(1, UNUSUAL[name]) + field(1, label(b"__name__", b"up"))))


def test_metadata_is_left_to_the_reference() -> None:
    metadata = field(3, b"\x08\x01" + field(2, b"up") + field(4, b"help"))
    native = assert_same(body_of(metadata))
    assert native.fallback_bodies == 2


MALFORMED = {
    "empty": b"",
    "gzip": gzip.compress(b"x"),
    "framed snappy": bytes(cramjam.snappy.compress(b"abc")),
    "not snappy": b"\x05hello world",
    "truncated snappy": body_of(field(1, label(b"__name__", b"up")))[:-3],
    "truncated protobuf": body_of(
        field(1, label(b"__name__", b"up") + field(2, sample(1.0, T0)))[:-2]
    ),
    "label twice": body_of(
        field(1, label(b"__name__", b"a") + label(b"__name__", b"b") + field(2, sample(1.0, T0)))
    ),
    "no __name__": body_of(field(1, label(b"job", b"x") + field(2, sample(1.0, T0)))),
    "empty label name": body_of(
        field(1, label(b"", b"x") + label(b"__name__", b"up") + field(2, sample(1.0, T0)))
    ),
    "invalid UTF-8": body_of(field(1, label(b"__name__", b"\xff\xfe") + field(2, sample(1.0, T0)))),
    "varint past the end": body_of(field(1, label(b"__name__", b"up") + field(2, b"\x10\xff\xff"))),
    "wire type 7": body_of(field(1, label(b"__name__", b"up") + b"\x0f")),
}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("prefilter", [False, True])
def test_malformed_bodies_fail_alike(name: str, prefilter: bool) -> None:
    kwargs = {"metric_names": {"up", "a"}} if prefilter else {}
    reference, native = both(**kwargs)
    for _ in range(2):
        assert outcome(native, MALFORMED[name]) == outcome(reference, MALFORMED[name])


def test_limits_are_the_reference_s() -> None:
    body = encode_write_request([Series({"__name__": f"m{i}"}, [(T0, 1.0)]) for i in range(11)])
    for kwargs in ({"max_series_per_request": 10}, {"max_body_bytes": 64}):
        reference, native = both(**kwargs)
        assert outcome(native, body)[0] == "error"
        assert outcome(native, body) == outcome(reference, body)


def test_label_dicts_are_handed_out_again_and_the_cache_is_bounded() -> None:
    """The frame builder memoises per label dict: the same labels must come back as the
    same dict; the cache stays within its size (oldest out)."""
    decoder = WriteRequestDecoder(native=True, label_cache_size=4)
    series = [Series({"__name__": f"m{i}"}, [(T0, float(i))]) for i in range(3)]
    body = encode_write_request(series)
    first, second = decoder.decode(body), decoder.decode(body)
    assert all(a.labels is b.labels for a, b in zip(first, second, strict=True))
    decoder.decode(
        encode_write_request([Series({"__name__": f"n{i}"}, [(T0, 1.0)]) for i in range(9)])
    )
    assert 0 < decoder.cached_label_sets <= 4


def test_native_series_are_ordinary_series() -> None:
    assert [f.name for f in dataclasses.fields(Series)] == ["labels", "samples"]
    (s,) = WriteRequestDecoder(native=True).decode(
        encode_write_request([Series({"__name__": "up"}, [(T0, 1.5)])])
    )
    assert type(s) is Series and s == Series({"__name__": "up"}, [(T0, 1.5)])
    assert repr(s) == repr(Series({"__name__": "up"}, [(T0, 1.5)]))
    assert gc.is_tracked(s) and gc.is_tracked(s.samples)
    s.samples.append((T0 + 1, 2.0))  # an ordinary list
    assert s.name == "up"


def test_native_required_but_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rw, "_NativeDecoder", None)
    with pytest.raises(RuntimeError, match="not installed"):
        WriteRequestDecoder(native=True)
    assert not WriteRequestDecoder().native  # auto falls back to pure Python


@settings(max_examples=300, deadline=None)
@given(
    st.lists(series_strategy, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.booleans(),
)
def test_corrupted_requests_decode_or_fail_alike(
    series: list[Series], edits: list[tuple[int, int]], prefilter: bool
) -> None:
    raw = bytearray(cramjam.snappy.decompress_raw(encode_write_request(series)))
    for position, byte in edits:
        raw[position % len(raw)] = byte
    kwargs = {"metric_names": {s.name for s in series[::2]}} if prefilter else {}
    assert_same(body_of(bytes(raw)), **kwargs)


def test_a_decoder_made_in_one_thread_decodes_in_another() -> None:
    """The ingest makes its decoder at start-up and decodes on its worker thread."""
    from concurrent.futures import ThreadPoolExecutor

    decoder = WriteRequestDecoder(native=True)
    body = encode_write_request([Series({"__name__": "up"}, [(T0, 1.0)])])
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(decoder.decode, body).result() == decoder.decode(body)


@pytest.mark.parametrize(("choice", "native"), [("native", True), ("python", False)])
def test_ingest_decoder_setting_picks_the_decoder(choice: str, native: bool) -> None:
    from streams.settings import Settings

    setting = Settings(ingest_decoder=choice).ingest_decoder  # type: ignore[arg-type]
    assert WriteRequestDecoder(native=rw.DECODER_CHOICES[setting]).native is native
    assert WriteRequestDecoder(native=rw.DECODER_CHOICES["auto"]).native is rw.NATIVE_AVAILABLE
    with pytest.raises(ValueError, match="ingest_decoder"):
        Settings(ingest_decoder="rust")  # type: ignore[arg-type]


def test_an_extension_without_columns_still_decodes_batches() -> None:
    """An older build of native/ (no decode_columns) gives decode_batch the series."""
    body = fleet_bodies()[0]
    decoder = WriteRequestDecoder(native=True)
    decoder._columns = None  # as getattr finds it on an extension built before
    decoded = decoder.decode_batch(body)
    assert isinstance(decoded, list)
    assert comparable(decoded) == comparable(WriteRequestDecoder(native=False).decode(body))
