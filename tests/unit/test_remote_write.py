"""remote_write 1.0 codec: wire format, stale markers, error messages, the decode fast path."""

from __future__ import annotations

import math
import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.ingest import remote_write as rw
from streams.ingest.remote_write import (
    STALE_NAN,
    STALE_NAN_BITS,
    RemoteWriteError,
    WriteRequestDecoder,
    decode_write_request,
    encode_write_request,
    is_stale_marker,
)
from streams.ingest.series import Series

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["python", "native"])
def decoder_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs against the pure-Python decoder and the compiled one (which
    hands what it does not understand to the pure-Python code)."""
    native = request.param == "native"
    monkeypatch.setattr(rw, "_native_by_default", native)
    monkeypatch.setattr(rw, "_default_decoder", WriteRequestDecoder())
    assert rw._default_decoder.native is native
    return str(request.param)


# the fixture above is the same for every example
_fixture_ok = [HealthCheck.function_scoped_fixture]


def bits(v: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def comparable(series: list[Series]) -> list[tuple[dict[str, str], list[tuple[int, int]]]]:
    """Series with floats as bit patterns, so NaNs (and their payloads) compare exactly."""
    return [(dict(s.labels), [(t, bits(v)) for t, v in s.samples]) for s in series]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def snappy_literal_block(data: bytes) -> bytes:
    """Snappy block format by hand: length preamble + one literal element (< 2**16 bytes)."""
    n = len(data) - 1
    if n < 60:
        tag = bytes([n << 2])
    elif n < 256:
        tag = bytes([60 << 2, n])
    else:
        tag = bytes([61 << 2]) + n.to_bytes(2, "little")
    return varint(len(data)) + tag + data


def one_sample_request_by_hand() -> bytes:
    label_name = field(1, b"__name__") + field(2, b"up")
    label_job = field(1, b"job") + field(2, b"node")
    sample = b"\x09" + struct.pack("<d", 1.5) + b"\x10" + varint(T0)
    timeseries = field(1, label_name) + field(1, label_job) + field(2, sample)
    return field(1, timeseries)


# --- wire format ---------------------------------------------------------------------------------


def test_hand_built_body_decodes() -> None:
    """A body written byte by byte (snappy literal + protobuf) pins the wire format."""
    body = snappy_literal_block(one_sample_request_by_hand())
    assert decode_write_request(body) == [Series({"__name__": "up", "job": "node"}, [(T0, 1.5)])]


def test_encoder_writes_the_hand_built_protobuf() -> None:
    """The encoder's protobuf is byte-identical to the hand-built one (labels sorted by name)."""
    body = encode_write_request([Series({"job": "node", "__name__": "up"}, [(T0, 1.5)])])
    assert bytes(cramjam.snappy.decompress_raw(body)) == one_sample_request_by_hand()


def test_round_trip_keeps_labels_and_samples() -> None:
    series = [
        Series(
            {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(g), "Hostname": "n1"}, [(T0, 40.0 + g)]
        )
        for g in range(8)
    ] + [Series({"__name__": "node_intr_total", "instance": "n1:9100"}, [(T0, 0.0), (T0 + 1, 2.0)])]
    assert decode_write_request(encode_write_request(series)) == series


def test_zero_and_negative_values_round_trip_on_the_fast_path() -> None:
    """+0.0 is left out of the protobuf (proto3 default); it must still decode as 0.0."""
    decoder = WriteRequestDecoder()
    series = [Series({"__name__": "a"}, [(T0, 0.0)]), Series({"__name__": "b"}, [(T0, -0.0)])]
    body = encode_write_request(series)
    for _ in range(3):  # the first decode fills the label cache, the others use it
        assert comparable(decoder.decode(body)) == comparable(series)


def test_empty_label_values_mean_no_label() -> None:
    body = encode_write_request([Series({"__name__": "up", "pod": ""}, [(T0, 1.0)])])
    assert decode_write_request(body)[0].labels == {"__name__": "up"}


def test_series_without_float_samples_are_skipped() -> None:
    """A histogram-only or exemplar-only series carries nothing peerwatch uses."""
    body = encode_write_request(
        [Series({"__name__": "h"}, []), Series({"__name__": "up"}, [(T0, 1.0)])]
    )
    assert [s.name for s in decode_write_request(body)] == ["up"]


# --- stale marker --------------------------------------------------------------------------------


def test_stale_marker_has_prometheus_bit_pattern() -> None:
    assert STALE_NAN_BITS == 0x7FF0000000000002
    assert bits(STALE_NAN) == STALE_NAN_BITS


@pytest.mark.parametrize(
    ("value", "stale"),
    [
        (STALE_NAN, True),
        (float("nan"), False),
        (struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0], False),
        (-STALE_NAN, False),
        (math.inf, False),
        (0.0, False),
        (1.0, False),
    ],
)
def test_is_stale_marker_is_bit_exact(value: float, stale: bool) -> None:
    assert is_stale_marker(value) is stale


def test_stale_marker_survives_the_wire() -> None:
    decoder = WriteRequestDecoder()
    body = encode_write_request([Series({"__name__": "up"}, [(T0, STALE_NAN)])])
    for _ in range(2):
        (series,) = decoder.decode(body)
        assert is_stale_marker(series.samples[0][1])


# --- metadata-only and invalid requests ---------------------------------------------------------


def test_metadata_only_request_is_accepted_and_empty() -> None:
    """Prometheus >= 2.42 sends WriteRequests with only field 3 (metadata) every minute."""
    metadata = b"\x08\x01" + field(2, b"node_intr_total") + field(4, b"Total interrupts")
    body = cramjam.snappy.compress_raw(field(3, metadata) + field(3, metadata))
    assert decode_write_request(bytes(body)) == []


def test_empty_write_request_is_empty() -> None:
    assert decode_write_request(encode_write_request([])) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "empty body"),
        (bytes(cramjam.snappy.compress(one_sample_request_by_hand())), "framed"),
        (bytes(cramjam.gzip.compress(one_sample_request_by_hand())), "gzip"),
        (b"this is not snappy at all", "not snappy block-compressed"),
        (one_sample_request_by_hand(), "not snappy block-compressed"),
        (
            bytes(cramjam.snappy.compress_raw(one_sample_request_by_hand()))[:-3],
            "not snappy block-compressed",
        ),
        (
            bytes(cramjam.snappy.compress_raw(one_sample_request_by_hand()[:-4])),
            "could not be parsed",
        ),
        (bytes(cramjam.snappy.compress_raw(b"\xff\xff\xff")), "could not be parsed"),
    ],
    ids=[
        "empty",
        "framed-snappy",
        "gzip",
        "garbage",
        "uncompressed",
        "truncated-snappy",
        "truncated-protobuf",
        "not-protobuf",
    ],
)
def test_invalid_bodies_raise_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(RemoteWriteError, match=reason) as info:
        decode_write_request(body)
    assert "\n" not in str(info.value)


def test_remote_write_error_is_a_value_error() -> None:
    assert issubclass(RemoteWriteError, ValueError)


def request_body(*timeseries: object) -> bytes:
    return bytes(
        cramjam.snappy.compress_raw(rw.WriteRequest(timeseries=timeseries).SerializeToString())
    )


def one_sample() -> list[object]:
    return [rw.Sample(value=1.0, timestamp=T0)]


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ([("job", "node")], "without __name__"),
        ([("__name__", "up"), ("", "x")], "empty name"),
        ([("__name__", "up"), ("job", "a"), ("job", "b")], "'job' twice"),
    ],
    ids=["no-name", "empty-label-name", "duplicate-label"],
)
def test_invalid_series_are_rejected(labels: list[tuple[str, str]], reason: str) -> None:
    ts = rw.TimeSeries(labels=[rw.Label(name=n, value=v) for n, v in labels], samples=one_sample())
    with pytest.raises(RemoteWriteError, match=reason):
        decode_write_request(request_body(ts))


def test_body_above_the_decompressed_limit_is_rejected() -> None:
    decoder = WriteRequestDecoder(max_body_bytes=64)
    body = encode_write_request([Series({"__name__": "x" * 100}, [(T0, 1.0)])])
    with pytest.raises(RemoteWriteError, match="more than the limit"):
        decoder.decode(body)


# --- the fast path and its cache -----------------------------------------------------------------


def test_label_value_mimicking_a_sample_tail_decodes_correctly() -> None:
    """A label value that ends in bytes shaped like a one-sample tail must not confuse decoding."""
    fake_tail = "\x12\x10\x09" + "\x01" * 8 + "\x10" + "\u0800\u0080\x01"  # valid UTF-8
    assert len(fake_tail.encode()) == 18
    decoder = WriteRequestDecoder()
    series = [
        Series({"__name__": "up", "zz": fake_tail}, [(T0, 2.0)]),
        Series({"__name__": "up", "zz": "x" + fake_tail}, [(T0, 3.0)]),
    ]
    no_samples = Series({"__name__": "up", "zz": "y" + fake_tail}, [])
    body = encode_write_request([*series, no_samples])
    for _ in range(3):
        assert decoder.decode(body) == series


def test_label_cache_is_bounded() -> None:
    decoder = WriteRequestDecoder(label_cache_size=4)
    series = [Series({"__name__": f"m{i}"}, [(T0, float(i))]) for i in range(50)]
    body = encode_write_request(series)
    assert decoder.decode(body) == series
    assert decoder.decode(body) == series
    assert decoder.cached_label_sets <= 4


def distinct_encoded_series(n: int) -> list[bytes]:
    """``n`` encoded one-sample TimeSeries with distinct ``instance`` labels (digits patched
    into one encoding: building them as protobuf objects would dominate the test)."""
    template = rw.WriteRequest().timeseries.add()
    labels = {"__name__": "node_procs_running", "cluster": "fleet", "instance": "h-@@@@@@@@:9100"}
    for name, value in sorted(labels.items()):
        template.labels.add(name=name, value=value)
    template.samples.add(value=3.0, timestamp=T0)
    one = template.SerializeToString()
    return [one.replace(b"@@@@@@@@", b"%08d" % i) for i in range(n)]


def test_a_full_label_cache_evicts_its_oldest_entries_first() -> None:
    """Caching new series into a full cache drops the oldest eighth at once and keeps the
    newest (the cost of turning it over, once quadratic -- 257 s for one 15 MB body of
    distinct series -- is measured by ``python -m bench.decode_distinct_bench``)."""
    n = 1_000
    decoder = WriteRequestDecoder(label_cache_size=n)
    raws = distinct_encoded_series(3 * n)
    prefixes = [raw[:-18] for raw in raws]
    labels = {"__name__": "node_procs_running"}
    for i, raw in enumerate(raws):
        decoder._remember_prefix(raw, labels)
        kept = list(decoder._labels)
        assert len(kept) <= n
        assert kept == prefixes[i + 1 - len(kept) : i + 1]  # the newest, in order
    assert len(kept) > n - n // 8


def test_several_samples_per_series_decode_in_order() -> None:
    """vmagent batches several samples per TimeSeries (Prometheus sends one)."""
    decoder = WriteRequestDecoder()
    series = [Series({"__name__": "up"}, [(T0, 1.0), (T0 + 30_000, 0.0), (T0 + 60_000, STALE_NAN)])]
    body = encode_write_request(series)
    for _ in range(2):
        assert comparable(decoder.decode(body)) == comparable(series)


label_names = st.text(min_size=1, max_size=12).filter(lambda s: s != "__name__")
label_values = st.text(min_size=1, max_size=20)
samples = st.lists(
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True)),
    min_size=1,
    max_size=4,
)
series_strategy = st.builds(
    lambda name, labels, ss: Series({**labels, "__name__": name}, ss),
    label_values,
    st.dictionaries(label_names, label_values, max_size=6),
    samples,
)


@settings(max_examples=300, deadline=None, suppress_health_check=_fixture_ok)
@given(st.lists(series_strategy, max_size=8))
def test_decode_inverts_encode(series: list[Series]) -> None:
    """decode(encode(x)) == x for any labels and any float, NaN payloads included."""
    body = encode_write_request(series)
    assert comparable(decode_write_request(body)) == comparable(series)
    assert comparable(decode_write_request(body)) == comparable(series)  # warm cache


def reference_decode(body: bytes) -> object:
    """The plain way, independent of the decoder's views and caches: parse it all, then check."""
    try:
        request = rw.WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body)))
    except Exception:
        return "error"
    out = []
    for ts in request.timeseries:
        names = [label.name for label in ts.labels]
        if "" in names or len(set(names)) != len(names):
            return "error"
        labels = {label.name: label.value for label in ts.labels if label.value}
        if not labels.get("__name__"):
            return "error"
        if ts.samples:
            out.append(Series(labels, [(s.timestamp, s.value) for s in ts.samples]))
    return comparable(out)


def decode_or_error(decoder: WriteRequestDecoder, body: bytes) -> object:
    try:
        return comparable(decoder.decode(body))
    except RemoteWriteError:
        return "error"


_shared_warm_decoder = WriteRequestDecoder()


@settings(max_examples=400, deadline=None, suppress_health_check=_fixture_ok)
@given(
    st.lists(series_strategy, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_decoder_agrees_with_a_plain_full_parse_on_corrupted_requests(
    series: list[Series], edits: list[tuple[int, int]]
) -> None:
    """With caches filled by earlier requests, any (valid or corrupt) protobuf decodes exactly
    as a plain full parse reads it -- or both reject it."""
    raw = bytearray(cramjam.snappy.decompress_raw(encode_write_request(series)))
    for position, byte in edits:
        raw[position % len(raw)] = byte
    body = bytes(cramjam.snappy.compress_raw(bytes(raw)))
    expected = reference_decode(body)
    assert decode_or_error(WriteRequestDecoder(), body) == expected
    assert decode_or_error(_shared_warm_decoder, body) == expected
    assert decode_or_error(_shared_warm_decoder, body) == expected


# --- metric-name prefilter -----------------------------------------------------------------------


def test_prefilter_keeps_only_wanted_names_and_counts_the_rest() -> None:
    decoder = WriteRequestDecoder(metric_names={"node_intr_total"})
    series = [
        Series({"__name__": "node_cpu_seconds_total", "cpu": "0"}, [(T0, 1.0)]),
        Series({"__name__": "node_intr_total", "instance": "n1:9100"}, [(T0, 2.0)]),
        Series({"__name__": "node_load1"}, [(T0, 0.0)]),
    ]
    body = encode_write_request(series)
    for _ in range(2):
        assert decoder.decode(body) == [series[1]]
    assert decoder.skipped_series == 4


def test_prefilter_is_not_fooled_by_a_label_value_that_spells_a_name_label() -> None:
    """A value holding the bytes of ``__name__="x"`` must not make a wanted series look unwanted."""
    decoy = "\n\x08__name__\x12\x01x"
    decoder = WriteRequestDecoder(metric_names={"up"})
    series = [Series({"__name__": "up", "aaa": decoy}, [(T0, 1.0)])]
    assert decoder.decode(encode_write_request(series)) == series


@settings(max_examples=300, deadline=None, suppress_health_check=_fixture_ok)
@given(
    st.lists(series_strategy, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=2),
    st.sets(label_values, max_size=3),
)
def test_prefilter_equals_filtering_the_full_decode(
    series: list[Series], edits: list[tuple[int, int]], names: set[str]
) -> None:
    names |= {s.name for s in series[::2]}
    raw = bytearray(cramjam.snappy.decompress_raw(encode_write_request(series)))
    for position, byte in edits:
        raw[position % len(raw)] = byte
    body = bytes(cramjam.snappy.compress_raw(bytes(raw)))
    full = reference_decode(body)
    if full == "error":
        return  # skipped series are not validated, so the filtered decode may accept it
    assert isinstance(full, list)
    decoder = WriteRequestDecoder(metric_names=names)
    expected = [(labels, samples) for labels, samples in full if labels["__name__"] in names]
    assert comparable(decoder.decode(body)) == expected
    assert comparable(decoder.decode(body)) == expected
