"""The decoders the fuzzer attacks, each with a generator of hostile inputs and an oracle.

Every input is bytes (what reaches the decoder from the network, a log or a file):

- ``remote_write``: first byte 0 = an uncompressed WriteRequest, snappy-compressed before
  decoding (so mutations reach the protobuf layer); 2 = the same for fresh decoders (the
  big probes); anything else = the HTTP body as is.
  Two long-lived decoders (caches carry over between inputs, as in the ingest): one
  unfiltered with a small label cache, one with the ingest's metric-name prefilter.
  Oracle: both agree with ``fuzz_wire.reference_decode``.
- ``xid_log``: one kernel log line as bytes, read the way ``peerwatch xid-log`` reads
  stdin. Oracle: an event has an XID >= 1 and a normalised PCI bus id.
- ``settings``: first byte ``T`` = a TOML settings file, else YAML; ``load_settings``.
- ``xid_catalog``: an operator XID override file (TOML); ``load_xid_catalog``. Oracle: a
  catalog that loads answers ``lookup`` for every code.
- ``membership``: one scheduler job event (JSON), ``parse_event`` then a long-lived
  ``JobMembership``. Oracle: the nodes of an applied running event are in its job.

Generators include the probe shapes of issue 9: NaN, +-Inf, +-1e308, stale markers,
duplicate and out-of-order samples, timestamps far past / future, labels out of order or
twice, non-UTF-8 bytes, 1.1 MB label values, bodies of many distinct series.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import fuzz_wire as wire
from detectors.xid.actions import SEVERITIES
from detectors.xid.catalog import XidCatalog
from detectors.xid.kernel_log import normalize_pci_bus_id, parse_kernel_line
from streams.catalog import load_xid_catalog
from streams.deploy_config import catalog_metric_names
from streams.ingest.membership import JobMembership, MembershipError, parse_event
from streams.ingest.remote_write import STALE_NAN, RemoteWriteError, WriteRequestDecoder
from streams.settings import Settings, load_settings
from streams.sources.xid_log import kernel_lines


class Wrong(AssertionError):
    """The decoder returned, but not what its contract says (an oracle disagreed)."""


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]  # decode one input; raises Wrong on an oracle mismatch
    expected: tuple[type[BaseException], ...]  # the decoder's own errors: a rejection
    generate: Callable[[random.Random], bytes]
    seeds: tuple[bytes, ...]
    tokens: tuple[bytes, ...]  # dictionary for mutations
    # seconds the last run spent in the decoder itself (oracles excluded); None = all of run
    decode_s: Callable[[], float] | None = None
    # fixed inputs run before the random ones (too big to generate often)
    probes: Callable[[], Iterable[bytes]] = tuple


# --- remote_write ------------------------------------------------------------------------------

CATALOG_NAMES = catalog_metric_names()
_NAMES = (*CATALOG_NAMES, "node_load1", "up", "DCGM_FI_DEV_FB_USED")
NOW_MS = 1_764_547_200_000  # 2025-12-01: a fixed "now", so runs repeat
PROBE_VALUES = (
    0.0, -0.0, 1.0, 42.5, math.nan, STALE_NAN, math.inf, -math.inf, 1e308, -1e308, 5e-324,
    2.0**63, 2.0**64, -1.0,
)  # fmt: skip
PROBE_TIMESTAMPS = (
    NOW_MS, NOW_MS + 1, NOW_MS - 1, 0, 1, -1, 2**62, 2**63 - 1, -(2**63), 10**10,
    NOW_MS + 10 * 365 * 86_400_000, NOW_MS - 10 * 365 * 86_400_000, 2**35 - 1, 2**35, 2**42,
)  # fmt: skip
HUGE_VALUE = b"x" * 1_100_000  # a 1.1 MB label value


def _value(rng: random.Random) -> float:
    if rng.random() < 0.5:
        return rng.choice(PROBE_VALUES)
    return rng.uniform(-1e6, 1e6)


def _timestamp(rng: random.Random) -> int:
    if rng.random() < 0.6:
        return NOW_MS + rng.randrange(-3_600_000, 3_600_000)
    return rng.choice(PROBE_TIMESTAMPS)


def _label_set(rng: random.Random) -> list[wire.Label]:
    name = rng.choice(_NAMES).encode()
    labels = [
        (b"__name__", name),
        (b"instance", f"gpu{rng.randrange(100):03d}:9100".encode()),
        (b"cluster", rng.choice([b"c1", b"c2", b""])),
    ]
    if rng.random() < 0.5:
        labels.append((b"gpu", str(rng.randrange(8)).encode()))
    if rng.random() < 0.3:
        labels.append((b"operation", rng.choice([b"READ", b"WRITE", b"GETATTR"])))
    labels.sort()
    return labels


def _quirks(rng: random.Random, labels: list[wire.Label]) -> list[wire.Label]:
    """Out of order, twice, empty, non-UTF-8, missing __name__, huge: one of them, sometimes."""
    labels = list(labels)
    roll = rng.random()
    if roll < 0.05:
        rng.shuffle(labels)
    elif roll < 0.07:
        labels.append(rng.choice(labels))
    elif roll < 0.09:
        labels.append((b"", b"v"))
    elif roll < 0.11:
        i = rng.randrange(len(labels))
        labels[i] = (
            labels[i][0],
            labels[i][1] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]),
        )
    elif roll < 0.12:
        labels = [lab for lab in labels if lab[0] != b"__name__"]
    elif roll < 0.125:
        labels.append((b"zz_huge", HUGE_VALUE))
    return labels


def _samples(rng: random.Random) -> list[wire.Sample]:
    count = rng.choices([0, 1, 2, 5], weights=[3, 85, 8, 4])[0]
    samples = [(_value(rng), _timestamp(rng)) for _ in range(count)]
    if samples and rng.random() < 0.1:
        samples.append(samples[0])  # duplicate
    if len(samples) > 1 and rng.random() < 0.2:
        samples.reverse()  # out of order
    return samples


def _metadata(rng: random.Random) -> bytes:
    return (
        b"\x08"
        + wire.varint(rng.randrange(-1, 9))
        + wire.length_delimited(2, rng.choice(_NAMES).encode())
        + wire.length_delimited(4, b"help text")
    )


class RemoteWriteGenerator:
    """Requests that repeat label sets across calls (caches see hits) and add new ones."""

    def __init__(self) -> None:
        self._pool: list[list[wire.Label]] = []

    def __call__(self, rng: random.Random) -> bytes:
        roll = rng.random()
        if roll < 0.002:  # many distinct series in one body
            count = rng.randrange(2_000, 20_000)
            return b"\x00" + distinct_series_body(count, offset=rng.randrange(10**9))
        n = rng.choices([0, 1, 5, 30, 300], weights=[2, 30, 40, 25, 3])[0]
        timeseries = []
        for _ in range(n):
            if self._pool and rng.random() < 0.7:
                labels = rng.choice(self._pool)
            else:
                labels = _label_set(rng)
                if len(self._pool) < 5_000:
                    self._pool.append(labels)
            timeseries.append(wire.series(_quirks(rng, labels), _samples(rng)))
        metadata = [_metadata(rng) for _ in range(rng.choice([0, 0, 0, 2]))]
        raw = wire.request(timeseries, metadata)
        if roll < 0.1:  # a body that is not (only) a snappy block
            body = rng.choice([raw, wire.compress(raw)[: rng.randrange(1, 64)], b"\x1f\x8b" + raw])
            return b"\x01" + body
        return b"\x00" + raw


def _remote_write_target() -> Target:
    small_cache = WriteRequestDecoder(label_cache_size=64)
    prefiltered = WriteRequestDecoder(metric_names=CATALOG_NAMES)
    wanted = set(CATALOG_NAMES)
    spent = [0.0]

    def decode(decoder: WriteRequestDecoder, body: bytes) -> list | None:
        started = time.process_time()
        try:
            series = decoder.decode(body)
        except RemoteWriteError:
            return None
        finally:
            spent[0] = max(spent[0], time.process_time() - started)
        return wire.comparable(series)

    def run(data: bytes) -> None:
        spent[0] = 0.0
        if data[:1] in (b"\x00", b"\x02"):
            raw = data[1:]
            body = wire.compress(raw)
        else:
            raw, body = None, data[1:]
        if data[:1] == b"\x02":  # fresh decoders: a probe must not slow every later input
            got = decode(WriteRequestDecoder(label_cache_size=64), body)
            filtered = decode(WriteRequestDecoder(metric_names=CATALOG_NAMES), body)
        else:
            got = decode(small_cache, body)
            filtered = decode(prefiltered, body)
        if raw is None:
            if got is not None and filtered is None:
                raise Wrong("the prefiltered decoder rejected a body the full decoder took")
            if got is None:
                raise RemoteWriteError("rejected")
            return
        try:
            want = wire.comparable(wire.reference_decode(raw))
        except RemoteWriteError:
            want = None
        if got != want:
            raise Wrong(f"decoded {_count(got)} series, the reference {_count(want)}")
        if want is not None:
            kept = [s for s in want if dict(s[0])["__name__"] in wanted]
            if filtered != kept:
                raise Wrong(f"prefiltered: {_count(filtered)} series, expected {len(kept)}")
        if got is None:
            raise RemoteWriteError("rejected, as the reference does")

    seed_labels = [(b"__name__", b"node_intr_total"), (b"instance", b"h:9100")]
    seeds = (
        b"\x00" + wire.request([wire.series(seed_labels, [(1.0, NOW_MS)])]),
        b"\x00" + wire.request([wire.series(seed_labels, [(0.0, NOW_MS)])]),
        b"\x00" + wire.request([], [_metadata(random.Random(0))]),
        b"\x00" + wire.request([wire.series(seed_labels, [(STALE_NAN, NOW_MS), (1e308, 2**62)])]),
    )
    tokens = (
        b"\x0a", b"\x12", b"\x09", b"\x10", b"\x1a", b"\x22", b"\x80", b"\xff", b"\x00",
        b"\x0a\x08__name__\x12", b"\x12\x10\x09", b"\x12\x07\x10", b"\xff\xff\xff\xff\x0f",
        b"\xf8\x7f", b"\x02\x00\x00\x00\x00\x00\xf0\x7f",
    )  # fmt: skip
    return Target(
        "remote_write",
        run,
        (RemoteWriteError,),
        RemoteWriteGenerator(),
        seeds,
        tokens,
        lambda: spent[0],
        _remote_write_probes,
    )


def distinct_series_body(count: int, offset: int = 0) -> bytes:
    """An uncompressed request of ``count`` series that share no label set."""
    return wire.request(
        wire.series(
            [(b"__name__", b"node_intr_total"), (b"instance", b"host%d:9100" % (offset + i))],
            [(float(i), NOW_MS)],
        )
        for i in range(count)
    )


def _remote_write_probes() -> Iterator[bytes]:
    """Bodies of many distinct series, past the default label cache (200,000): ~2.4 MB."""
    yield b"\x02" + distinct_series_body(300_000)
    labels = [(b"__name__", b"node_procs_running"), (b"instance", b"h:9100")]
    yield b"\x02" + wire.request(
        [wire.series([*labels, (b"zz_huge", HUGE_VALUE)], [(1.0, NOW_MS)])]
    )


def _count(decoded: list | None) -> str:
    return "an error" if decoded is None else str(len(decoded))


# --- kernel XID log lines ----------------------------------------------------------------------

XID_LINES = (
    "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, "
    "GPU has fallen off the bus.",
    "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', "
    "name=<unknown>, Graphics Exception: ESR 0x50df30=0x107000e",
    "May 18 19:02:39 gpu071 kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, "
    "name=python3, Ch 00000008",
    "4,1032,98765432,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=2671, name=nvidia-smi, "
    "Timeout after 6s of waiting for RPC response from GPU1 GSP!",
    "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 "
    "(0x004505c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0008:01:00.0): 154, GPU recovery action changed from 0x0 (None) "
    "to 0x2 (Node Reboot Required)",
    "NVRM: Xid (PCI:00000000:3b:00): 94, pid=5678, name=pt_main_thread, Contained: SM (0x1)",
    "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
)
_XID_TOKENS = (
    "NVRM: Xid (", "PCI:", "0000:3b:00", "00000000:", "): ", "79", "145", "154", ", ", "pid=",
    "'<unknown>'", "name=", "Fatal", "Nonfatal", " (0x", "ffffffff ", ")", "to 0x2 (", "::",
    "\x00", "\u202e", "\udcff", "\ufeff", "９", " " * 64, "(" * 64, "0" * 64,
)  # fmt: skip


def _generate_xid_line(rng: random.Random) -> bytes:
    parts = [rng.choice(XID_LINES)] if rng.random() < 0.5 else []
    for _ in range(rng.randrange(0, 12)):
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(_XID_TOKENS))
    line = "".join(parts)
    if rng.random() < 0.02:  # long lines: backtracking regexes show up here
        line = rng.choice(_XID_TOKENS) * rng.randrange(1_000, 20_000) + line
    return line.encode("utf-8", "surrogatepass")


def _run_xid_line(data: bytes) -> None:
    for line in kernel_lines(io.BytesIO(data)):
        event = parse_kernel_line(line)
        if event is None:
            continue
        if event.xid < 1:
            raise Wrong(f"XID {event.xid} parsed")
        if event.pci_bus_id is None or normalize_pci_bus_id(event.pci_bus_id) != event.pci_bus_id:
            raise Wrong(f"PCI bus id {event.pci_bus_id!r} is not normalised")


def _xid_log_target() -> Target:
    return Target(
        "xid_log",
        _run_xid_line,
        (),  # parse_kernel_line never raises
        _generate_xid_line,
        tuple(line.encode() for line in XID_LINES),
        tuple(t.encode("utf-8", "surrogatepass") for t in _XID_TOKENS),
    )


# --- config files -----------------------------------------------------------------------------


def toml_value(value: object) -> str:
    """A TOML value (inline tables for dicts); enough for the fuzzer's documents."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
            + "}"
        )
    return json.dumps(str(value))


def toml_document(table: dict[str, object]) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())


_SETTING_VALUES: tuple[object, ...] = (
    0, 1, -1, 30, 9201, 65536, 2**63, 10**30, 1e300, 0.5, math.nan, math.inf,
    "", "x", "kafka://127.0.0.1:9092", "memory://", "30", "true", True, False, None,
    [], ["instance"], [""], [1, 2], ["cluster", "job"], {"a": 1}, "\x00", "é", "peerwatch-data",
)  # fmt: skip
_FIELDS = tuple(Settings.model_fields)


def _settings_table(rng: random.Random) -> dict[str, object]:
    table: dict[str, object] = {}
    for _ in range(rng.randrange(0, 8)):
        name = (
            rng.choice(_FIELDS)
            if rng.random() < 0.9
            else rng.choice(["nope", "bucket-s", "BUCKET_S"])
        )
        table[name] = rng.choice(_SETTING_VALUES)
    return table


_SETTINGS_PROBES = (
    "{1: 2}", "[" * 5000, "a: [", "---\na: 1\n---\nb: 2", "!!python/object:os.system {}",
    "? [a, b]\n: 1", "node_labels: &a [*a]", "bucket_s: .nan", "bucket_s: 1e400",
    "a: &a [1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d]\n",
    "bucket_s: !!binary aGVsbG8=", "bucket_s: 2001-12-14", "- 1\n- 2", "null", "''", "\ufeffa: 1",
)  # fmt: skip
_TOML_PROBES = (
    "a = " + "[" * 5000,
    "bucket_s = inf",
    "[a]\nb = 1\n[a]\nb = 2",
    "a = 1979-05-27T07:32:00Z",
)


def _generate_settings(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.05:
        return b"Y" + rng.choice(_SETTINGS_PROBES).encode()
    if roll < 0.08:
        return b"T" + rng.choice(_TOML_PROBES).encode()
    table = _settings_table(rng)
    if rng.random() < 0.5:
        return b"T" + toml_document({k: v for k, v in table.items() if v is not None}).encode()
    import yaml

    return b"Y" + yaml.safe_dump(table, allow_unicode=True).encode()


class _FileTarget:
    """Writes each input to one file (the loaders read paths) and loads it."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="peerwatch-fuzz-"))

    def path(self, suffix: str, content: bytes) -> Path:
        path = self.dir / f"input{suffix}"
        path.write_bytes(content)
        return path


def _settings_target() -> Target:
    files = _FileTarget()
    for name in [n for n in os.environ if n.upper().startswith("PEERWATCH_")]:
        del os.environ[name]  # the file alone decides

    def run(data: bytes) -> None:
        suffix = ".toml" if data[:1] == b"T" else ".yml"
        load_settings(files.path(suffix, data[1:]))

    seeds = (
        b"Y" + b"bucket_s: 30\nnode_labels: [instance]\n",
        b"T" + b'kafka = "kafka://k:9092"\n',
    )
    tokens = (
        b":",
        b"\n",
        b"- ",
        b"[",
        b"]",
        b"{",
        b"}",
        b"&a",
        b"*a",
        b"!!str",
        b"=",
        b'"',
        b"'",
        b"\xff",
    )
    return Target("settings", run, (ValueError,), _generate_settings, seeds, tokens)


_ACTIONS = ("IGNORE", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT", "WORKFLOW_X", "reset_gpu", "")
_OVERRIDE_VALUES: tuple[object, ...] = (
    *SEVERITIES,
    *_ACTIONS,
    "bogus",
    1,
    1.5,
    True,
    [],
    {},
    "x" * 300,
)


def _override_entry(rng: random.Random) -> dict[str, object]:
    fields = [
        "name",
        "severity",
        "action",
        "text",
        "note",
        "repeat_action",
        "inherit_substatus",
        "bogus",
    ]
    entry: dict[str, object] = {}
    for name in rng.sample(fields, rng.randrange(0, 5)):
        if name == "severity":
            entry[name] = (
                rng.choice(SEVERITIES) if rng.random() < 0.8 else rng.choice(_OVERRIDE_VALUES)
            )
        elif name in ("action", "repeat_action"):
            entry[name] = (
                rng.choice(_ACTIONS) if rng.random() < 0.8 else rng.choice(_OVERRIDE_VALUES)
            )
        elif name == "inherit_substatus":
            entry[name] = rng.choice([True, False, 1, "no"])
        else:
            entry[name] = rng.choice(_OVERRIDE_VALUES)
    return entry


def _generate_overrides(rng: random.Random) -> bytes:
    if rng.random() < 0.03:
        return rng.choice(_TOML_PROBES).encode()
    lines: list[str] = []
    if rng.random() < 0.2:
        lines.append(f"description = {toml_value(rng.choice(_OVERRIDE_VALUES))}")
    if rng.random() < 0.3:
        lines.append(f"unknown = {toml_value(_override_entry(rng))}")
    for _ in range(rng.randrange(0, 4)):
        key = rng.choice(
            ["79", "13", "154", "149", "1", "0", "-1", "abc", "٣", "1" * 5000, "999999"]
        )
        lines.append(f"[xid.{json.dumps(key)}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in _override_entry(rng).items())
        if rng.random() < 0.3:
            sub = rng.choice(["Fatal:NETIR_LINK_EVT", "a::b", "NODE_REBOOT_REQUIRED", "", " : "])
            lines.append(f"[xid.{json.dumps(key)}.substatus.{json.dumps(sub)}]")
            lines.extend(f"{k} = {toml_value(v)}" for k, v in _override_entry(rng).items())
    if rng.random() < 0.05:
        lines.append(rng.choice(["bogus = 1", "extends = 'report'", "xid = 3"]))
    return ("\n".join(lines) + "\n").encode()


def _xid_catalog_target() -> Target:
    files = _FileTarget()

    def run(data: bytes) -> None:
        catalog: XidCatalog = load_xid_catalog("nvidia", files.path(".toml", data))
        for code in (*catalog.codes(), 1, 999_999):
            catalog.lookup(code)
            catalog.lookup(code, "Fatal:NETIR_LINK_EVT:38:0x00000000")

    seeds = (
        b'[xid.79]\nseverity = "critical"\naction = "RESTART_BM"\n',
        b'[unknown]\nseverity = "info"\naction = "IGNORE"\n',
        b'[xid.149.substatus."Fatal:NETIR_LINK_EVT"]\n'
        b'severity = "critical"\naction = "RESET_GPU"\n',
    )
    tokens = (
        b"[",
        b"]",
        b".",
        b'"',
        b"=",
        b"\n",
        b"xid",
        b"substatus",
        b"severity",
        b"action",
        b"\xff",
    )
    return Target("xid_catalog", run, (ValueError,), _generate_overrides, seeds, tokens)


# --- scheduler membership events --------------------------------------------------------------

_MEMBERSHIP_PROBES = (
    b"[" * 100_000,
    b'{"job": ' + b"[" * 100_000,
    b'{"job": "j", "state": "running", "ts": 1, "nodes": ["a"], "nodes": []}',
    b'{"job": "j", "state": "running", "ts": NaN, "nodes": ["a"]}',
    b'{"job": "j", "state": "ended", "ts": 1e999}',
    b'{"job": "j", "state": "ended", "ts": ' + b"9" * 5000 + b"}",
    b'{"job": "\xff", "state": "ended", "ts": 1}',
    b'{"job": "\\ud800", "state": "ended", "ts": 1}',
)


def _pick(rng: random.Random, good: object, hostile: list[object]) -> object:
    return good if rng.random() < 0.85 else rng.choice(hostile)


def _generate_membership(rng: random.Random) -> bytes:
    if rng.random() < 0.05:
        return rng.choice(_MEMBERSHIP_PROBES)
    count = rng.choice([0, 1, 3, 64, 2000])
    nodes: list[object] = [f"gpu{rng.randrange(200):03d}" for _ in range(count)]
    if nodes:
        nodes[rng.randrange(count)] = _pick(rng, nodes[0], ["", 3, None, "é", "x" * 2000])
    event = {
        "job": _pick(rng, f"job-{rng.randrange(20)}", ["", 7, None, "x" * 2000, ["j"]]),
        "state": _pick(rng, rng.choice(["running", "ended"]), ["RUNNING", "", 1, None]),
        "ts": _pick(
            rng, NOW_MS + rng.randrange(-(10**6), 10**6), [0, -1, 2**53, 2**63, 1.5, True, "1"]
        ),
        "nodes": _pick(rng, nodes, [None, "gpu001", {}, [[]]]),
    }
    for key in [k for k in event if rng.random() < 0.05]:
        del event[key]
    return json.dumps(event).encode()


def _membership_target() -> Target:
    table = JobMembership()  # long-lived, as in the ingest: events apply in arrival order
    newest: dict[str, int] = {}

    def run(data: bytes) -> None:
        event = parse_event(data)
        table.apply(event)
        if event.ts >= newest.get(event.job, event.ts):  # applied, not an older redelivery
            newest[event.job] = event.ts
        else:
            return
        if event.state == "running":
            stray = [n for n in event.nodes if table.node_job.get(n) != event.job]
            if stray:
                raise Wrong(f"nodes {stray[:3]} of a running event are not in its job")

    seeds = (
        b'{"job": "llm-42", "state": "running", "nodes": ["gpu064", "gpu065"], "ts": 1}',
        b'{"job": "llm-42", "state": "ended", "ts": 2}',
    )
    tokens = (b"{", b"}", b"[", b"]", b'"', b":", b",", b"null", b"true", b"1e308", b"\\u0000")
    return Target("membership", run, (MembershipError,), _generate_membership, seeds, tokens)


TARGETS: dict[str, Callable[[], Target]] = {
    "remote_write": _remote_write_target,
    "xid_log": _xid_log_target,
    "settings": _settings_target,
    "xid_catalog": _xid_catalog_target,
    "membership": _membership_target,
}
