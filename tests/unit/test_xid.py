"""detectors.xid: kernel-line parsing, DCGM gauge change detection, escalation, state."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.xid.catalog import XidCatalog
from detectors.xid.escalation import EscalationParams, XidDecision, XidEscalator
from detectors.xid.events import XidEvent
from detectors.xid.gauge import XidGaugeParams, XidGaugeTracker
from detectors.xid.kernel_log import normalize_pci_bus_id, parse_kernel_line

S = 1_000
MIN = 60 * S
H = 60 * MIN


# --------------------------------------------------------------------------- kernel lines

LINES = [
    # (line, pci_bus_id, xid, pid, process, substatus)
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "0000:3b:00.0", 79, 1234, "python3", None,
    ),
    (  # no pid / name at all
        "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
        "0000:2b:00.0", 79, None, None, None,
    ),
    (  # dmesg --ctime prefix, pid unknown
        "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', "
        "name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction",
        "0000:cb:00.0", 13, None, None, None,
    ),
    (  # dmesg monotonic prefix, upper-case hex in the bus id
        "[449410.332316] NVRM: Xid (PCI:0000:D8:00): 74, pid='<unknown>', name=<unknown>, "
        "NVLink: fatal error detected on link 14(0x100000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
        "0000:d8:00.0", 74, None, None, None,
    ),
    (  # journald / syslog prefix
        "May 18 19:02:39 gpu071 kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, "
        "name=python3, Ch 00000001 caused by previous Xid 149",
        "0000:dc:00.0", 45, 1818990, "python3", None,
    ),
    (  # 8-digit PCI domain (VMs, dcgm-exporter style)
        "NVRM: Xid (PCI:00000000:3b:00): 94, pid=5678, name=pt_main_thread, "
        "Contained: SM (0x1). RST: No, D-RST: No",
        "0000:3b:00.0", 94, 5678, "pt_main_thread", None,
    ),
    (  # 8-digit domain that needs all 8 digits
        "NVRM: Xid (PCI:00010000:3b:00): 31, pid=77, name=train, MMU Fault: ENGINE GRAPHICS",
        "00010000:3b:00.0", 31, 77, "train", None,
    ),
    (  # /dev/kmsg record
        "4,1032,98765432,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=2671, name=nvidia-smi, "
        "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
        "0000:9b:00.0", 119, 2671, "nvidia-smi", None,
    ),
    (  # syslog + dmesg timestamp, trailing junk
        "Oct 01 13:00:00 host kernel: [ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, "
        "GPU has fallen off the bus.)\n",
        "0000:03:00.0", 79, None, None, None,
    ),
    (  # old driver: no "PCI:" prefix
        "NVRM: Xid (0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000",
        "0000:01:00.0", 31, None, None, None,
    ),
    (  # device number above 0x0f
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping",
        "0000:10:1c.0", 63, 1896, None, None,
    ),
    (  # NVLink5, fatal, link-event code 38 in IntrInfo bits 20-25
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 "
        "(0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        "0000:00:00.0", 149, None, None, "Fatal:NETIR_LINK_EVT:38:0x00000000",
    ),
    (  # NVLink5, GB200 domain, link -1
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 "
        "(0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
        "0019:01:00.0", 149, None, None, "Fatal:NETIR:0:0x00000000",
    ),
    (  # NVLink5, non-fatal with an error status
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 "
        "(0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
        "0018:01:00.0", 145, None, None, "Nonfatal:RLW_RXPIPE:0:0x00000008",
    ),
    (  # NVLink5 line with pid/name in front of the unit
        "NVRM: Xid (PCI:0000:01:00): 144, pid=9, name=python3, SAW_MVB Non-fatal XC0 i0 Link 0 "
        "(0x00000001 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
        "0000:01:00.0", 144, 9, "python3", "Nonfatal:SAW_MVB:0:0x00000008",
    ),
    (  # recovery action summary
        "NVRM: Xid (PCI:0008:01:00.0): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x2 (Node Reboot Required)",
        "0008:01:00.0", 154, None, None, "NODE_REBOOT_REQUIRED",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "pci", "xid", "pid", "process", "substatus"), LINES)
def test_parse_kernel_line_variants(line, pci, xid, pid, process, substatus):
    event = parse_kernel_line(line)
    assert event is not None
    assert (event.pci_bus_id, event.xid, event.pid) == (pci, xid, pid)
    assert (event.process, event.substatus) == (process, substatus)
    assert event.source == "log"
    assert event.raw == line.strip()
    assert (event.node, event.gpu, event.ts_ms) == (None, None, None)


GARBAGE = [
    "",
    "   ",
    "hello world",
    "NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
    "NVRM: system has fallen off the bus and is not responding to commands.",  # no bus id
    "NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014 (fallen off the bus earlier)",  # a header
    "nvidia-smi: GPU 0000:3b:00.0 has fallen off the bus",  # not the driver
    "NVRM: Xid (43, pid: 5678): ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",  # no bus id
    "NVRM: Xid (PCI:0000:3b:00): abc, pid=1",
    "NVRM: Xid (PCI:0000:3b:00): 0, pid=1, name=x, zero is not an XID",
    "NVRM: Xid (PCI:zzzz:3b:00): 79, bad domain",
    "NVRM: Xid (PCI:000:3b:00): 79, three-digit domain",
    "NVRM: Xid (PCI:0000:3b:00): 1234567, too many digits",
    "NVRM: Xid (PCI:0000:3b:00",
    "NVRM: Xid",
    "nvrm: xid (pci:0000:3b:00): 79",  # the driver never writes it this way
    "\x00\x01\x02 NVRM: Xid (PCI:\x00",
]


FALLEN_OFF = [
    # the driver's own words, without an ``Xid`` prefix: the XID 79 event
    ("NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.", "0000:3b:00.0"),
    ("[  613.42] NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", "0000:2b:00.0"),
    ("Oct 30 09:49:36 pc kernel: NVRM: GPU at PCI:0000:17:00.0 has fallen off the bus.",
     "0000:17:00.0"),
    ("NVRM: The NVIDIA GPU 0000:0e:00.0 (PCI ID: 10de:1b06) installed in this system has "
     "fallen off the bus and is not responding to commands.", "0000:0e:00.0"),
    ("NVRM: GPU at 00000000:C1:00.0 has fallen off the bus.", "0000:c1:00.0"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "pci"), FALLEN_OFF)
def test_a_fallen_off_the_bus_line_without_xid_prefix_is_xid_79(line, pci):
    event = parse_kernel_line(line)
    assert event is not None
    assert (event.xid, event.pci_bus_id, event.source, event.raw) == (79, pci, "log", line)


def test_the_xid_line_and_its_fallen_off_companion_name_the_same_gpu():
    """The driver prints both for one fault: same XID, same bus id, so one incident."""
    xid = parse_kernel_line(
        "NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    )
    companion = parse_kernel_line("NVRM: GPU 0000:03:00.0: GPU has fallen off the bus.")
    assert xid is not None and companion is not None
    assert (xid.xid, xid.pci_bus_id) == (companion.xid, companion.pci_bus_id)


@pytest.mark.parametrize("line", GARBAGE)
def test_parse_kernel_line_returns_none_for_garbage(line):
    assert parse_kernel_line(line) is None


@pytest.mark.parametrize("not_text", [None, b"NVRM: Xid (PCI:0000:3b:00): 79, x", 79, ["x"]])
def test_parse_kernel_line_returns_none_for_non_text(not_text):
    assert parse_kernel_line(not_text) is None


_FRAGMENTS = st.sampled_from(
    ["NVRM: Xid (", "PCI:", "0000:3b:00", "00000000:", "): ", "79", "145", "154", ", ", "pid=",
     "'<unknown>'", "name=", "Fatal", "Nonfatal", " (0x", "ffffffff ", ")", "to 0x2 (", "\n", "::",
     "NVRM: GPU ", "at ", "The NVIDIA GPU ", " (PCI ID: 10de:2330)", " has fallen off the bus"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.lists(st.one_of(_FRAGMENTS, st.text(max_size=5))).map("".join)))
def test_parse_kernel_line_never_raises(text):
    event = parse_kernel_line(text)
    if event is not None:
        assert event.xid >= 1
        assert event.pci_bus_id is not None


_HEXS = "0123456789abcdefABCDEF"


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.sampled_from(["", "[12.5] ", "Jan 1 00:00:00 h kernel: ", "6,1,2,-;"]),
    domain=st.one_of(
        st.text(_HEXS, min_size=4, max_size=4), st.text(_HEXS, min_size=8, max_size=8)
    ),
    bus=st.text(_HEXS, min_size=2, max_size=2),
    dev=st.text(_HEXS, min_size=2, max_size=2),
    xid=st.integers(1, 999_999),
    pid=st.one_of(st.none(), st.integers(0, 10**9)),
    tail=st.text(st.characters(blacklist_characters="\n\r"), max_size=40),
)
def test_parse_kernel_line_reads_back_what_was_written(prefix, domain, bus, dev, xid, pid, tail):
    pid_part = "" if pid is None else f"pid={pid}, name=python3, "
    line = f"{prefix}NVRM: Xid (PCI:{domain}:{bus}:{dev}): {xid}, {pid_part}{tail}"
    event = parse_kernel_line(line)
    assert event is not None
    assert event.xid == xid
    assert event.pid == pid
    assert event.pci_bus_id == normalize_pci_bus_id(f"{domain}:{bus}:{dev}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:3b:00", "0000:3b:00.0"),
        ("PCI:0000:3B:00", "0000:3b:00.0"),
        ("00000000:3B:00.0", "0000:3b:00.0"),  # dcgm-exporter's pci_bus_id label
        ("00000019:01:00.1", "0019:01:00.1"),
        ("00010000:01:00.0", "00010000:01:00.0"),
        ("3b:00.0", None),
        ("0000:3b:00.8", None),
        ("", None),
    ],
)
def test_normalize_pci_bus_id_matches_log_and_dcgm_forms(text, expected):
    assert normalize_pci_bus_id(text) == expected


def test_event_with_origin_places_it_and_round_trips():
    event = parse_kernel_line(LINES[0][0])
    assert event is not None
    placed = event.with_origin(node="gpu071", gpu="3", ts_ms=1_700_000_000_000)
    assert (placed.node, placed.gpu, placed.xid) == ("gpu071", "3", 79)
    assert placed.ts_ms == 1_700_000_000_000
    assert XidEvent.from_dict(json.loads(json.dumps(placed.to_dict()))) == placed


@pytest.mark.parametrize(("xid", "source"), [(0, "log"), (-3, "log"), (True, "log"), (79, "dmesg")])
def test_event_rejects_invalid_fields(xid, source):
    with pytest.raises(ValueError):
        XidEvent(xid, source)


# --------------------------------------------------------------------------- gauge


def feed(values, tracker=None, *, gpu="0", start=0, step=30 * S):
    """Feed gauge values at 30-s steps; return the XID codes of the events."""
    tracker = tracker if tracker is not None else XidGaugeTracker()
    out = []
    for i, value in enumerate(values):
        event = tracker.observe("n1", gpu, start + i * step, value)
        if event is not None:
            assert (event.node, event.gpu, event.source) == ("n1", gpu, "metric")
            out.append(event.xid)
    return out


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0, 79, 79, 79, 79], [79]),  # the same value repeated is one XID
        ([0, 145, 79], [145, 79]),  # a new code is a new XID
        ([0, 94, 94], [94]),
        ([0, 94, 0, 94], [94, 94]),  # back to 0 (exporter restart), then again: a new XID
        ([0, 94, 31, 94], [94, 31, 94]),  # the same code after another code: new
        ([0, 0, 0], []),
        ([0, 145, 145, 149, 149, 79, 45], [145, 149, 79, 45]),
        ([0, 94.0, np.float64(94), np.int64(79)], [94, 79]),  # numpy scalars
        ([0, math.nan, 94, math.nan, 94], [94]),  # NaN / stale marker changes nothing
        ([0, 94, -1, 94, 94.5, 94, math.inf], [94]),  # invalid values are ignored
    ],
)
def test_gauge_emits_on_change_to_a_non_zero_code(values, expected):
    assert feed(values) == expected


@pytest.mark.parametrize(
    ("initial_known", "values", "expected"),
    [
        (True, [79, 79, 79], []),  # after a restart: already known, no re-page
        (True, [79, 79, 145], [145]),  # ...but the next change is new
        (True, [79, 0, 79], [79]),
        (False, [79, 79, 79], [79]),  # backfill: the first value counts
        (False, [94, 0, 94], [94, 94]),
        (True, [0, 79], [79]),  # a zero first sample is simply "no XID yet"
    ],
)
def test_gauge_first_observation_semantics(initial_known, values, expected):
    tracker = XidGaugeTracker(XidGaugeParams(initial_known=initial_known))
    assert feed(values, tracker) == expected


def test_gauge_restart_with_restored_state_does_not_repage():
    tracker = XidGaugeTracker()
    assert feed([0, 79, 79], tracker) == [79]
    state = json.loads(json.dumps(tracker.to_dict()))
    restored = XidGaugeTracker.from_dict(state)
    assert feed([79, 79], restored, start=10 * MIN) == []
    assert feed([45], restored, start=20 * MIN) == [45]


def test_gauge_restart_without_state_treats_current_values_as_known():
    assert feed([0, 79, 79], XidGaugeTracker()) == [79]
    assert feed([79, 79], XidGaugeTracker(), start=10 * MIN) == []


def test_gauge_ignores_out_of_order_and_duplicate_samples():
    tracker = XidGaugeTracker()
    assert tracker.observe("n1", "0", 60 * S, 0) is None
    assert tracker.observe("n1", "0", 30 * S, 79) is None  # older than the last sample
    assert tracker.observe("n1", "0", 60 * S, 79) is None  # same timestamp (a resend)
    event = tracker.observe("n1", "0", 90 * S, 79)
    assert event is not None and event.ts_ms == 90 * S


def test_gauge_tracks_gpus_independently():
    tracker = XidGaugeTracker()
    for gpu in ("0", "1"):
        tracker.observe("n1", gpu, 0, 0)
    assert tracker.observe("n1", "0", 30 * S, 79) is not None
    assert tracker.observe("n1", "1", 30 * S, 79) is not None
    assert tracker.observe("n2", "0", 30 * S, 79) is None  # first sample of n2: known
    assert len(tracker) == 3


def test_gauge_event_carries_pci_bus_id_when_given():
    tracker = XidGaugeTracker()
    tracker.observe("n1", "0", 0, 0)
    event = tracker.observe("n1", "0", 30 * S, 119, pci_bus_id="00000000:3B:00.0")
    assert event is not None and event.pci_bus_id == "00000000:3B:00.0"


def test_gauge_prune_forgets_quiet_gpus():
    tracker = XidGaugeTracker()
    tracker.observe("n1", "0", 0, 0)
    tracker.observe("n1", "1", 10 * MIN, 0)
    assert tracker.prune(5 * MIN) == 1
    assert len(tracker) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40))
def test_gauge_events_are_exactly_the_changes_to_non_zero(values):
    codes = [0, *values]  # a known zero start
    expected = [b for a, b in itertools.pairwise(codes) if b != a and b != 0]
    assert feed(codes) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=30), st.data())
def test_gauge_state_round_trip_at_any_point_changes_nothing(values, data):
    cut = data.draw(st.integers(1, len(values) - 1))
    whole = feed(values)
    first = XidGaugeTracker()
    head = feed(values[:cut], first)
    second = XidGaugeTracker.from_dict(json.loads(json.dumps(first.to_dict())))
    tail = feed(values[cut:], second, start=cut * 30 * S)
    assert head + tail == whole


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from((0.0, 94.0, 94, True, 1.0, math.nan, 79.0, -1.0, 94.5, 0)),
            st.sampled_from((30 * S, 30 * S, 0, -30 * S)),
        ),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_gauge_fed_straight_through_matches_one_restored_before_every_sample(samples, known):
    """A repeated code takes a shortcut in ``observe``; a tracker restored from its state
    before every sample must see the same events and hold the same state."""
    params = XidGaugeParams(initial_known=known)
    straight, restored = XidGaugeTracker(params), XidGaugeTracker(params)
    ts = 0
    for value, gap in samples:
        ts += gap
        restored = XidGaugeTracker.from_dict(json.loads(json.dumps(restored.to_dict())), params)
        assert straight.observe("n1", "0", ts, value) == restored.observe("n1", "0", ts, value)
        assert straight.to_dict() == restored.to_dict()


@pytest.mark.parametrize("bad", [{"version": 2}, {"version": 1, "series": [{"node": "n"}]}])
def test_gauge_from_dict_rejects_bad_state(bad):
    with pytest.raises((ValueError, KeyError)):
        XidGaugeTracker.from_dict(bad)


def test_gauge_params_validate():
    with pytest.raises(ValueError, match="initial_known"):
        XidGaugeParams(initial_known="yes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- escalation


def at(xid, ts, *, gpu="0", node="n1", substatus=None, source="log"):
    return XidEvent(xid, source, substatus=substatus).with_origin(node=node, gpu=gpu, ts_ms=ts)


def run(catalog, events, params=None):
    return XidEscalator(catalog, params).decide_all(events)


@pytest.mark.parametrize(
    ("first", "second", "gap", "expected"),
    [
        (119, 119, 2 * H, "CONTACT_SUPPORT"),  # second RESET_GPU within 24 h
        (119, 120, 23 * H, "CONTACT_SUPPORT"),  # any reset-class pair counts
        (95, 79, 6 * H, "CONTACT_SUPPORT"),  # RESET_GPU then RESTART_BM
        (119, 119, 24 * H, "CONTACT_SUPPORT"),  # the window's edge is inside
        (119, 119, 24 * H + 1, "RESET_GPU"),  # outside the window: not escalated
        (119, 119, 3 * 24 * H, "RESET_GPU"),
        (94, 119, 1 * H, "RESET_GPU"),  # the first was not reset-class
        (119, 94, 1 * H, "RESTART_APP"),  # the second is not reset-class
        (119, 119, 30 * S, "RESET_GPU"),  # same incident (burst): not a repeat
    ],
)
def test_second_reset_class_xid_within_window_escalates(nvidia, first, second, gap, expected):
    _, d2 = run(nvidia, [at(first, 0), at(second, gap)])
    assert d2.action == expected
    assert d2.escalated == (expected == "CONTACT_SUPPORT")
    if d2.escalated:
        assert d2.severity == "critical"
        assert "reset-class" in d2.reason
        assert d2.catalog_action == nvidia.lookup(second).action


def test_79_repeated_escalates_to_contact_support(nvidia):
    d1, d2 = run(nvidia, [at(79, 0), at(79, 30 * H)], EscalationParams(window_ms=48 * H))
    assert (d1.action, d1.escalated) == ("RESTART_BM", False)
    assert (d2.action, d2.escalated) == ("CONTACT_SUPPORT", True)
    assert "again" in d2.reason


def test_repeat_action_comes_from_the_catalog(nvidia):
    """An operator rule: 94 twice on one GPU within the window → reset the GPU."""
    catalog = XidCatalog.from_data(
        {"profiles": {"nvidia": nvidia.to_dict()}},
        "nvidia",
        overrides={"xid": {"94": {"repeat_action": "RESET_GPU"}}},
    )
    d1, d2 = run(catalog, [at(94, 0), at(94, 3 * H)])
    assert (d1.action, d2.action, d2.escalated) == ("RESTART_APP", "RESET_GPU", True)


def test_report_profile_79_is_contact_support_at_once(report):
    (d,) = run(report, [at(79, 0)])
    assert (d.action, d.escalated, d.severity) == ("CONTACT_SUPPORT", False, "critical")


def test_report_profile_nvlink_then_bus_fault_is_one_incident(report):
    """gpu071: XID 145, 149, then 79 a scrape later — one incident, highest action wins."""
    d145, d149, d79, d45 = run(report, [at(145, 0), at(149, 1 * S), at(79, 30 * S), at(45, 31 * S)])
    assert [d.action for d in (d145, d149, d79, d45)] == [
        "RESET_GPU", "RESET_GPU", "CONTACT_SUPPORT", "CONTACT_SUPPORT"
    ]  # fmt: skip
    assert [d.changed for d in (d145, d149, d79, d45)] == [True, False, True, False]
    assert not any(d.escalated for d in (d145, d149, d79, d45))
    assert {d.incident_ts_ms for d in (d145, d149, d79, d45)} == {0}


def test_nvidia_profile_nvlink_burst_does_not_count_as_a_repeat(nvidia):
    events = [
        at(145, 0, substatus="Fatal:RLW_REMAP:0:0x00000040"),
        at(149, 2 * S, substatus="Fatal:NETIR_LINK_EVT:1:0x00000000"),
        at(79, 30 * S),
    ]
    decisions = run(nvidia, events)
    assert [d.action for d in decisions] == ["RESET_GPU", "RESET_GPU", "RESTART_BM"]
    assert not any(d.escalated for d in decisions)


def test_incident_action_is_never_lowered(nvidia):
    d79, d45, d43 = run(nvidia, [at(79, 0), at(45, 5 * S), at(43, 10 * S)])
    assert [d.action for d in (d79, d45, d43)] == ["RESTART_BM"] * 3
    assert [d.catalog_action for d in (d79, d45, d43)] == ["RESTART_BM", "IGNORE", "IGNORE"]
    assert "already at RESTART_BM" in d45.reason


def test_ignorable_xids_do_not_keep_an_incident_open(nvidia):
    """A stream of XID 63 every 4 min must not swallow a real repeat an hour later."""
    events = [at(119, 0)] + [at(63, i * 4 * MIN) for i in range(1, 16)] + [at(119, 61 * MIN)]
    decisions = run(nvidia, events)
    assert decisions[-1].action == "CONTACT_SUPPORT"
    assert decisions[-1].incident_ts_ms > 0  # not the first incident


def test_ignore_alone_is_no_action(nvidia):
    (d,) = run(nvidia, [at(43, 0)])
    assert (d.action, d.changed, d.retry_after_ms) == ("IGNORE", False, None)


def test_gpus_escalate_independently(nvidia):
    decisions = run(
        nvidia, [at(119, 0, gpu="0"), at(119, 1 * H, gpu="1"), at(119, 1 * H, node="n2")]
    )
    assert [d.action for d in decisions] == ["RESET_GPU"] * 3


def test_substatus_refines_the_decision(nvidia):
    (d,) = run(nvidia, [at(149, 0, substatus="Fatal:NETIR_LINK_EVT:38:0x00000000")])
    assert (d.action, d.substatus, d.changed) == ("IGNORE", "Fatal:NETIR_LINK_EVT:38", False)


def test_unknown_xid_decision_is_conservative(nvidia):
    (d,) = run(nvidia, [at(321, 0)])
    assert (d.action, d.severity, d.name) == ("CONTACT_SUPPORT", "warning", "Unknown XID")
    assert "not in the 'nvidia' catalog" in d.reason


def test_event_without_origin_is_rejected(nvidia):
    event = parse_kernel_line(LINES[0][0])
    assert event is not None
    with pytest.raises(ValueError, match="with_origin"):
        XidEscalator(nvidia).decide(event)


def test_late_event_joins_the_open_incident(nvidia):
    _, d2 = run(nvidia, [at(79, 60 * S), at(119, 30 * S)])
    assert (d2.action, d2.escalated, d2.incident_ts_ms) == ("RESTART_BM", False, 60 * S)


# --------------------------------------------------------------------------- retry backoff


@pytest.mark.parametrize(
    ("times", "expected_min"),
    [
        ([0], [10]),
        ([0, 1 * H, 2 * H], [10, 20, 40]),  # the report's 10 → 20 → 40 min
        ([0, 1 * H, 2 * H, 3 * H, 4 * H], [10, 20, 40, 40, 40]),  # the last step repeats
        ([0, 1 * H, 4 * H], [10, 20, 10]),  # > 2 h apart: the job ran in between
        ([0, 2 * H, 4 * H], [10, 20, 40]),  # the streak gap's edge is inside
    ],
)
def test_restart_app_retry_backoff(nvidia, times, expected_min):
    decisions = run(nvidia, [at(94, t) for t in times])
    assert [d.action for d in decisions] == ["RESTART_APP"] * len(times)
    assert [d.retry_after_ms for d in decisions] == [m * MIN for m in expected_min]
    assert "retry in" in decisions[-1].reason


def test_a_burst_of_restart_app_lines_is_one_retry(nvidia):
    decisions = run(nvidia, [at(13, 0), at(13, 100), at(13, 200), at(31, 2 * S)])
    assert [d.retry_after_ms for d in decisions] == [10 * MIN] * 4
    assert [d.changed for d in decisions] == [True, False, False, False]


def test_a_reset_breaks_the_restart_app_streak(nvidia):
    events = [at(94, 0), at(94, 1 * H), at(119, 2 * H), at(94, 3 * H)]
    decisions = run(nvidia, events)
    assert decisions[2].retry_after_ms is None
    assert decisions[3].retry_after_ms == 10 * MIN


def test_ignorable_incidents_do_not_break_the_streak(nvidia):
    decisions = run(nvidia, [at(94, 0), at(63, 30 * MIN), at(94, 1 * H)])
    assert decisions[2].retry_after_ms == 20 * MIN


def test_backoff_is_configurable(nvidia):
    params = EscalationParams(retry_backoff_ms=(1 * MIN, 5 * MIN))
    decisions = run(nvidia, [at(31, t * H) for t in range(3)], params)
    assert [d.retry_after_ms for d in decisions] == [1 * MIN, 5 * MIN, 5 * MIN]


def test_restart_app_after_escalation_to_reset_gets_no_retry_delay(nvidia):
    _, d95 = run(nvidia, [at(94, 0), at(95, 10 * S)])
    assert (d95.action, d95.retry_after_ms) == ("RESET_GPU", None)


# --------------------------------------------------------------------------- state


SCENARIO = [
    at(119, 0),
    at(45, 5 * S),
    at(94, 1 * H),
    at(94, 2 * H),
    at(119, 3 * H),
    at(79, 3 * H + 30 * S),
    at(149, 5 * H, substatus="Fatal:NETIR_LINK_EVT:38:0x00000000"),
    at(79, 6 * H, gpu="1"),
    at(79, 20 * H, gpu="1"),
    at(94, 30 * H),
    at(31, 31 * H),
    at(63, 31 * H + 1 * MIN),
    at(321, 40 * H, node="n2"),
]


@pytest.mark.parametrize("cut", range(1, len(SCENARIO)))
def test_escalator_state_round_trip_at_any_point_changes_nothing(nvidia, cut):
    whole = run(nvidia, SCENARIO)
    first = XidEscalator(nvidia)
    head = first.decide_all(SCENARIO[:cut])
    state = json.loads(json.dumps(first.to_dict()))
    second = XidEscalator.from_dict(state, nvidia)
    tail = second.decide_all(SCENARIO[cut:])
    assert head + tail == whole


_EVENT = st.builds(
    lambda xid, dt, gpu, sub: (xid, dt, gpu, sub),
    st.sampled_from([13, 31, 43, 45, 63, 79, 94, 95, 119, 145, 149, 154, 321]),
    st.integers(0, 6 * H),
    st.sampled_from(["0", "1"]),
    st.sampled_from([None, "Fatal", "Nonfatal:RLW_REMAP:0:0x00000001", "NODE_REBOOT_REQUIRED"]),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_EVENT, min_size=2, max_size=25), st.data())
def test_escalator_round_trip_property(nvidia, steps, data):
    events, ts = [], 0
    for xid, dt, gpu, sub in steps:
        ts += dt
        events.append(at(xid, ts, gpu=gpu, substatus=sub))
    cut = data.draw(st.integers(1, len(events) - 1))
    whole = run(nvidia, events)
    first = XidEscalator(nvidia)
    head = first.decide_all(events[:cut])
    second = XidEscalator.from_dict(json.loads(json.dumps(first.to_dict())), nvidia)
    assert head + second.decide_all(events[cut:]) == whole
    for d in whole:  # an escalation always lands on a more disruptive action
        assert d.action != "IGNORE" or not d.changed


def test_escalator_state_stays_bounded(nvidia):
    params = EscalationParams(max_xids_per_gpu=8)
    esc = XidEscalator(nvidia, params)
    for i in range(200):
        esc.decide(at(200 + i, i * 10 * MIN))  # 200 distinct codes, one per incident
    (row,) = esc.to_dict()["gpus"]
    assert len(row["seen_before"]) <= 8 and len(row["xids"]) <= 8
    assert len(json.dumps(esc.to_dict())) < 2_000


def test_escalator_prune_forgets_gpus_past_every_window(nvidia):
    esc = XidEscalator(nvidia)
    esc.decide_all([at(119, 0, gpu="0"), at(119, 20 * H, gpu="1")])
    assert esc.prune(25 * H) == 1
    assert len(esc) == 1
    assert esc.decide(at(119, 30 * H, gpu="0")).action == "RESET_GPU"


@pytest.mark.parametrize(
    "bad",
    [
        {"version": 9},
        {"version": 1, "gpus": [{"node": "n", "gpu": "0", "action": "NOPE"}]},
    ],
)
def test_escalator_from_dict_rejects_bad_state(nvidia, bad):
    with pytest.raises(ValueError):
        XidEscalator.from_dict(bad, nvidia)


def test_decision_round_trips_through_json(nvidia):
    for d in run(nvidia, SCENARIO):
        assert XidDecision.from_dict(json.loads(json.dumps(d.to_dict()))) == d


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_ms": 0}, "window_ms"),
        ({"window_ms": 1.5}, "window_ms"),
        ({"incident_gap_ms": True}, "incident_gap_ms"),
        ({"incident_gap_ms": 24 * H}, "shorter than window_ms"),
        ({"retry_backoff_ms": ()}, "retry_backoff_ms"),
        ({"retry_backoff_ms": [10 * MIN]}, "retry_backoff_ms"),
        ({"retry_backoff_ms": (10 * MIN, -1)}, "retry_backoff_ms"),
        ({"retry_streak_gap_ms": -5}, "retry_streak_gap_ms"),
        ({"repeated_reset_action": "PANIC"}, "repeated_reset_action"),
        ({"max_xids_per_gpu": 0}, "max_xids_per_gpu"),
    ],
)
def test_escalation_params_validate(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EscalationParams(**kwargs)
