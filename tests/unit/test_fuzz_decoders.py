"""Decoders under attack: a short fuzz run per decoder, hypothesis properties (derandomized),
and each of issue 9's probe shapes with its defined outcome.

The full run (>= 100,000 inputs per decoder) is ``python -m bench.fuzz``.
"""

from __future__ import annotations

import contextlib
import io
import math
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import fuzz_wire as wire
from bench.fuzz import fuzz
from bench.fuzz_targets import (
    _SETTINGS_PROBES,
    _TOML_PROBES,
    HUGE_VALUE,
    NOW_MS,
    TARGETS,
    distinct_series_body,
    toml_document,
)
from detectors.xid.catalog import XidCatalog
from detectors.xid.kernel_log import parse_kernel_line
from streams.catalog import load_xid_catalog, xid_catalog_data
from streams.deploy_config import catalog_metric_names
from streams.ingest.builder import frame_builder_for
from streams.ingest.membership import MembershipError, MembershipFile, parse_event
from streams.ingest.remote_write import (
    STALE_NAN,
    RemoteWriteError,
    WriteRequestDecoder,
    is_stale_marker,
)
from streams.settings import Settings, load_settings
from streams.sources.xid_log import kernel_lines

QUICK = settings(
    derandomize=True,
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- a short fuzz run of every decoder ---------------------------------------------------------


@pytest.mark.parametrize(
    ("decoder", "n"),
    [
        ("remote_write", 600),
        ("xid_log", 3_000),
        ("settings", 600),
        ("xid_catalog", 600),
        ("membership", 2_000),
    ],
)
def test_short_fuzz_run_finds_no_crash_wrong_answer_or_hang(decoder: str, n: int) -> None:
    report = fuzz(TARGETS[decoder](), n, seed=1, probes=False)
    assert report.inputs == n
    assert (dict(report.crashes), dict(report.wrong), report.hangs) == ({}, {}, 0), report.lines()
    assert report.accepted > 0 and (report.rejected > 0 or decoder == "xid_log")


# --- remote_write: properties -----------------------------------------------------------------

_LABEL_BYTES = st.one_of(
    st.sampled_from([b"__name__", b"instance", b"cluster", b"gpu", b"", b"node_intr_total"]),
    st.binary(max_size=12),
)
_VALUES = st.one_of(
    st.sampled_from([math.nan, STALE_NAN, math.inf, -math.inf, 1e308, -1e308, -0.0, 0.0]),
    st.floats(allow_nan=True, allow_infinity=True),
)
_TIMESTAMPS = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.integers(NOW_MS - 10**6, NOW_MS + 10**6)
)
_SERIES = st.tuples(
    st.lists(st.tuples(_LABEL_BYTES, _LABEL_BYTES), max_size=5),
    st.lists(st.tuples(_VALUES, _TIMESTAMPS), max_size=3),
)


@QUICK
@given(st.lists(_SERIES, max_size=8))
def test_decoder_agrees_with_a_full_protobuf_parse(series: list) -> None:
    """Any request the wire encoder can write (invalid ones included) decodes as the reference
    says, through the fast path and the caches alike (one decoder across all examples)."""
    raw = wire.request(wire.series(labels, samples) for labels, samples in series)
    try:
        want = wire.comparable(wire.reference_decode(raw))
    except RemoteWriteError:
        want = None
    for _ in range(2):  # the second time, label prefixes come from the cache
        try:
            got = wire.comparable(_SHARED_DECODER.decode(wire.compress(raw)))
        except RemoteWriteError:
            got = None
        assert got == want


_SHARED_DECODER = WriteRequestDecoder(label_cache_size=16)


@QUICK
@given(st.binary(max_size=512))
def test_any_bytes_decode_or_raise_remote_write_error(body: bytes) -> None:
    for candidate in (body, wire.compress(body)):
        with contextlib.suppress(RemoteWriteError):
            WriteRequestDecoder().decode(candidate)


# --- remote_write: the probe shapes and their outcomes ------------------------------------------

NODE = [(b"__name__", b"node_procs_running"), (b"cluster", b"c1"), (b"instance", b"h1:9100")]


def decoded(*timeseries: bytes) -> list:
    return WriteRequestDecoder().decode(wire.compress(wire.request(timeseries)))


def builder_outcome(series: list, now_ms: int = NOW_MS) -> dict[str, int]:
    builder = frame_builder_for(Settings())
    stats = builder.add(series, now_s=now_ms / 1000)
    return {"accepted": stats.accepted, **stats.dropped}


@pytest.mark.parametrize(
    ("value", "reason"),
    [(math.nan, "non_finite"), (math.inf, "non_finite"), (-math.inf, "non_finite")],
)
def test_non_finite_values_decode_and_are_dropped_as_non_finite(value: float, reason: str) -> None:
    (series,) = decoded(wire.series(NODE, [(value, NOW_MS)]))
    assert struct.pack("<d", series.samples[0][1]) == struct.pack("<d", value)
    assert builder_outcome([series]) == {"accepted": 0, reason: 1}


def test_stale_marker_decodes_bit_exact_and_ends_the_series() -> None:
    (series,) = decoded(wire.series(NODE, [(STALE_NAN, NOW_MS)]))
    assert is_stale_marker(series.samples[0][1])
    assert builder_outcome([series]) == {"accepted": 0, "stale": 1}


@pytest.mark.parametrize("value", [1e308, -1e308, 5e-324])
def test_extreme_finite_values_decode_exactly_and_are_accepted(value: float) -> None:
    (series,) = decoded(wire.series(NODE, [(value, NOW_MS)]))
    assert series.samples == [(NOW_MS, value)]
    assert builder_outcome([series]) == {"accepted": 1}


def test_a_sum_past_1e308_drops_that_feature_not_the_frame() -> None:
    """Two series of one node at 1e308 sum to inf: procs_running is left out of the frame,
    the node's other features are still emitted."""
    body = wire.request(
        [
            wire.series([*NODE, (b"ns", b"a")], [(1e308, NOW_MS)]),
            wire.series([*NODE, (b"ns", b"b")], [(1e308, NOW_MS)]),
            wire.series([(b"__name__", b"node_sockstat_TCP_alloc"), *NODE[1:]], [(12.0, NOW_MS)]),
        ]
    )
    builder = frame_builder_for(Settings())
    builder.add(WriteRequestDecoder().decode(wire.compress(body)), now_s=NOW_MS / 1000)
    (frame,) = builder.flush_all()
    assert frame.values == {"tcp_alloc": 12.0}


def test_duplicate_and_out_of_order_samples_are_dropped_with_their_reason() -> None:
    (series,) = decoded(
        wire.series(NODE, [(1.0, NOW_MS), (2.0, NOW_MS), (3.0, NOW_MS - 1000), (4.0, NOW_MS + 1)])
    )
    assert [ts for ts, _ in series.samples] == [NOW_MS, NOW_MS, NOW_MS - 1000, NOW_MS + 1]
    assert builder_outcome([series]) == {"accepted": 2, "duplicate": 1, "out_of_order": 1}


def test_far_future_samples_are_dropped_as_future_and_far_past_ones_as_late() -> None:
    year_ms = 365 * 86_400_000
    future, now, past = (
        decoded(wire.series([*NODE, (b"i", x)], [(1.0, ts)]))[0]
        for x, ts in ((b"f", NOW_MS + year_ms), (b"n", NOW_MS), (b"p", NOW_MS - year_ms))
    )
    assert builder_outcome([now, future, past]) == {"accepted": 1, "future": 1, "late": 1}


@pytest.mark.parametrize("ts", [-(2**63), -1, 0, 1, 2**35 - 1, 2**42, 2**62, 2**63 - 1])
def test_timestamps_outside_the_fast_path_decode_exactly(ts: int) -> None:
    """The fast path reads 6-byte varints (1971-2109); every other int64 takes the full parse."""
    decoder = WriteRequestDecoder()
    for _ in range(2):
        (series,) = decoder.decode(wire.compress(wire.request([wire.series(NODE, [(1.5, ts)])])))
        assert series.samples == [(ts, 1.5)]


def test_labels_out_of_order_are_the_same_series() -> None:
    """Prometheus sorts labels; another sender may not. Same dict, same series: the second
    counter sample gives a rate."""
    labels = [(b"__name__", b"node_intr_total"), (b"cluster", b"c1"), (b"instance", b"h1:9100")]
    first, second = decoded(
        wire.series(labels, [(100.0, NOW_MS)]),
        wire.series(labels[::-1], [(400.0, NOW_MS + 1000)]),
    )
    assert first.labels == second.labels
    builder = frame_builder_for(Settings())
    builder.add([first, second], now_s=NOW_MS / 1000)
    (frame,) = builder.flush_all()
    assert frame.values["intr_rate"] == pytest.approx(300.0)


def test_a_label_name_twice_rejects_the_body_naming_it() -> None:
    with pytest.raises(RemoteWriteError, match="'cluster' twice"):
        decoded(wire.series([*NODE, (b"cluster", b"c2")], [(1.0, NOW_MS)]))


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3\x28", b"\xed\xa0\x80"])
def test_non_utf8_label_bytes_reject_the_body(bad: bytes) -> None:
    with pytest.raises(RemoteWriteError, match="malformed"):
        decoded(wire.series([*NODE, (b"pod", b"p" + bad)], [(1.0, NOW_MS)]))


def test_non_utf8_in_a_series_no_feature_reads_leaves_the_rest_accepted() -> None:
    """The ingest's prefilter skips unread series before decoding their labels: one bad byte
    there does not cost the request's valid series."""
    body = wire.compress(
        wire.request(
            [
                wire.series([(b"__name__", b"node_load1"), (b"pod", b"\xff")], [(1.0, NOW_MS)]),
                wire.series(NODE, [(3.0, NOW_MS)]),
            ]
        )
    )
    (series,) = WriteRequestDecoder(metric_names=catalog_metric_names()).decode(body)
    assert series.labels["__name__"] == "node_procs_running"


def test_a_1_1_mb_label_value_decodes_intact() -> None:
    for decoder in (
        WriteRequestDecoder(),
        WriteRequestDecoder(metric_names={"node_procs_running"}),
    ):
        raw = wire.request([wire.series([*NODE, (b"zz", HUGE_VALUE)], [(1.0, NOW_MS)])])
        (series,) = decoder.decode(wire.compress(raw))
        assert len(series.labels["zz"]) == 1_100_000


def test_a_body_of_many_distinct_series_decodes_every_one() -> None:
    raw = distinct_series_body(20_000)
    got = WriteRequestDecoder(label_cache_size=1_000).decode(wire.compress(raw))
    assert wire.comparable(got) == wire.comparable(wire.reference_decode(raw))
    assert len({s.labels["instance"] for s in got}) == 20_000


# --- kernel XID log lines -----------------------------------------------------------------------

LINE = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has fallen off the bus.\n"


def test_non_utf8_bytes_in_the_kernel_log_do_not_stop_the_lines_after_them() -> None:
    lines = list(kernel_lines(io.BytesIO(b"driver says \xff\xfe\xc3(\n" + LINE)))
    assert lines[0] == "driver says \ufffd\ufffd\ufffd(\n"
    assert [parse_kernel_line(line) is not None for line in lines] == [False, True]


@QUICK
@given(st.binary(max_size=300))
def test_any_kernel_log_bytes_parse_or_are_ignored(data: bytes) -> None:
    for line in kernel_lines(io.BytesIO(data + b"\n" + LINE)):
        event = parse_kernel_line(line)
        assert event is None or event.xid >= 1


# --- config files -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [*_SETTINGS_PROBES, "[" * 5000 + "]" * 5000])
def test_hostile_yaml_settings_load_or_raise_value_error(tmp_path: Path, text: str) -> None:
    """YAML syntax errors, non-string keys, deep nesting, tags, aliases: a ValueError (the
    CLI prints it as one line; before, YAMLError, AttributeError and RecursionError escaped)."""
    path = tmp_path / "peerwatch.yml"
    path.write_text(text)
    with contextlib.suppress(ValueError):
        load_settings(path)


@pytest.mark.parametrize("text", _TOML_PROBES)
def test_hostile_toml_settings_raise_value_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "peerwatch.toml"
    path.write_text(text)
    with pytest.raises(ValueError):
        load_settings(path)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{1: 2}", "setting names are strings"),
        ("a: [", "not valid YAML"),
        ("[" * 5000, "nested too deeply"),
        ("!!python/object:os.system {}", "not valid YAML"),
    ],
)
def test_settings_file_errors_name_the_file_and_the_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "peerwatch.yml"
    path.write_text(text)
    with pytest.raises(ValueError, match=reason):
        load_settings(path)


def test_a_settings_file_above_256_kib_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "peerwatch.yml"
    path.write_text("# padding\n" * 30_000)
    with pytest.raises(ValueError, match="at most"):
        load_settings(path)


def test_non_utf8_settings_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "peerwatch.toml"
    path.write_bytes(b'kafka = "\xff"\n')
    with pytest.raises(ValueError, match="not valid TOML"):
        load_settings(path)


_GOOD_SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "bucket_s": st.integers(1, 3600),
        "grace_s": st.floats(0, 1e6),
        "node_labels": st.lists(st.text("abcxyz_", min_size=1, max_size=8), min_size=1),
        "kafka": st.text(max_size=20),
        "topic_partitions": st.integers(1, 64),
        "alertmanager_url": st.none() | st.just("http://am:9093"),
    },
)


@settings(derandomize=True, deadline=None, max_examples=80)
@given(_GOOD_SETTINGS, st.sampled_from([".yml", ".toml"]))
def test_valid_settings_files_load_as_written(table: dict, suffix: str) -> None:
    import tempfile

    import yaml

    if suffix == ".toml":
        table = {k: v for k, v in table.items() if v is not None}  # TOML has no null
        text = toml_document(table)
    else:
        text = yaml.safe_dump(table)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"peerwatch{suffix}"
        path.write_text(text)
        loaded = load_settings(path)
    for name, value in table.items():
        assert getattr(loaded, name) == value


# --- XID catalog overrides --------------------------------------------------------------------

_TOML_SCALARS = st.one_of(
    st.sampled_from(["critical", "warning", "info", "RESET_GPU", "IGNORE", "WORKFLOW_X", ""]),
    st.text(max_size=6),
    st.integers(),
    st.booleans(),
    st.floats(),
)
_TABLES = st.recursive(
    _TOML_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["xid", "79", "0", "x", "unknown", "severity", "action", "substatus", "name"]
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@QUICK
@given(st.dictionaries(st.sampled_from(["xid", "unknown", "description", "bogus"]), _TABLES))
def test_any_override_table_builds_a_catalog_or_raises_value_error(overrides: dict) -> None:
    try:
        catalog = XidCatalog.from_data(_SHIPPED, overrides=overrides)
    except ValueError:
        return
    for code in (*catalog.codes(), 1):
        catalog.lookup(code)


_SHIPPED = xid_catalog_data()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"a = " + b"[" * 5000, "nested too deeply"),
        (b'[xid.79]\nname = "\xff"\n', "not valid TOML"),
        (b"[xid.79\n", "not valid TOML"),
    ],
)
def test_hostile_override_files_raise_value_error_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "xid-overrides.toml"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=reason) as caught:
        load_xid_catalog("nvidia", path)
    assert str(path) in str(caught.value)


# --- scheduler membership events --------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"[" * 100_000, b'{"job": ' + b'{"a": ' * 50_000])
def test_a_deeply_nested_membership_event_is_a_membership_error(raw: bytes) -> None:
    """json raises RecursionError, no ValueError: it escaped the sources' handlers, and one
    such message on the jobs topic stopped membership (replayed from the start each restart)."""
    with pytest.raises(MembershipError, match="nested too deeply"):
        parse_event(raw)


def test_the_membership_file_goes_on_after_a_deeply_nested_line(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    good = b'{"job": "llm-42", "state": "running", "nodes": ["gpu064"], "ts": 1}'
    path.write_bytes(b"[" * 100_000 + b"\n" + good + b"\n")
    (event,) = MembershipFile(path).poll()
    assert (event.job, event.nodes) == ("llm-42", frozenset({"gpu064"}))
