"""Per-GPU health: XID alerts from the last-XID gauge, row-remap alerts, lifecycle."""

from __future__ import annotations

import json

import pytest

from detectors.alerts import AlertChange
from detectors.gpu_health import (
    REMAP_ALERT,
    XID_ALERT,
    GpuHealthParams,
    GpuHealthState,
    active_gpu_alerts,
    step_gpu_health,
)
from streams.catalog import load_xid_catalog

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    return load_xid_catalog("report")


def _frames(xids: dict[str, dict[str, float]] | None = None, **extra: dict[str, float]):  # type: ignore[no-untyped-def]
    """Two nodes × 2 GPUs with XID gauges (0 = none) plus per-node extras."""
    frames: dict[str, dict[str, float]] = {}
    for node in ("n1", "n2"):
        values = {f"xid_last@{g}": 0.0 for g in ("0", "1")}
        values.update((xids or {}).get(node, {}))
        values.update(extra.get(node, {}))
        frames[node] = values
    return frames


def _run(state, frames, i, params=None, **kw):  # type: ignore[no-untyped-def]
    return step_gpu_health(state, "job", T0 + i * B, frames, params or GpuHealthParams(), **kw)


def test_a_gauge_change_fires_one_xid_alert_with_the_action(catalog) -> None:  # type: ignore[no-untyped-def]
    state = GpuHealthState.new(catalog, GpuHealthParams())
    assert _run(state, _frames(), 0) == []
    changes = _run(state, _frames({"n2": {"xid_last@1": 79.0}}), 1)
    assert [(c.alertname, c.node, c.status, c.action) for c in changes] == [
        (XID_ALERT, "n2", "firing", "CONTACT_SUPPORT")
    ]
    assert dict(changes[0].labels) == {"gpu": "1", "class": "interconnect"}
    # the gauge keeps holding 79: no new alert
    assert _run(state, _frames({"n2": {"xid_last@1": 79.0}}), 2) == []


def test_an_old_xid_in_the_gauge_at_start_does_not_page(catalog) -> None:  # type: ignore[no-untyped-def]
    """The gauge holds the *last* XID: a value already there when we start is history."""
    state = GpuHealthState.new(catalog, GpuHealthParams())
    assert _run(state, _frames({"n1": {"xid_last@0": 94.0}}), 0) == []


def test_the_xid_alert_resolves_after_the_hold_without_new_xids(catalog) -> None:  # type: ignore[no-untyped-def]
    params = GpuHealthParams(xid_hold_buckets=3)
    state = GpuHealthState.new(catalog, params)
    _run(state, _frames(), 0, params)
    _run(state, _frames({"n1": {"xid_last@0": 94.0}}), 1, params)
    held = [_run(state, _frames({"n1": {"xid_last@0": 94.0}}), i, params) for i in (2, 3)]
    assert held == [[], []]
    resolved = _run(state, _frames({"n1": {"xid_last@0": 94.0}}), 4, params)
    assert [(c.alertname, c.status) for c in resolved] == [(XID_ALERT, "resolved")]
    assert active_gpu_alerts(state) == []


def test_a_precursor_alert_on_the_node_is_linked_with_its_lead(catalog) -> None:  # type: ignore[no-untyped-def]
    state = GpuHealthState.new(catalog, GpuHealthParams())
    _run(state, _frames(), 0)
    symptom = AlertChange(
        "PeerwatchNodeCollapse",
        "n1",
        "job",
        "firing",
        "critical",
        10.0,
        (),
        "collapse",
        T0 + 2 * B,
        T0 + 2 * B,
        T0 + 2 * B,
    )
    changes = _run(state, _frames({"n1": {"xid_last@0": 145.0}}), 4, symptoms=[symptom])
    assert changes[0].lead_s == 2 * B / 1000
    assert "PeerwatchNodeCollapse" in changes[0].reason


def test_uncorrectable_remaps_rising_fire_a_critical_remap_alert(catalog) -> None:  # type: ignore[no-untyped-def]
    state = GpuHealthState.new(catalog, GpuHealthParams())
    healthy = {"n1": {"remap_correctable@0": 3.0, "remap_uncorrectable@0": 0.0}}
    _run(state, _frames(**healthy), 0)
    bad = {"n1": {"remap_correctable@0": 3.0, "remap_uncorrectable@0": 2.0}}
    changes = _run(state, _frames(**bad), 1)
    assert [(c.alertname, c.node, c.severity) for c in changes] == [(REMAP_ALERT, "n1", "critical")]
    assert changes[0].action == "CONTACT_SUPPORT"


def test_state_round_trips_through_json_mid_incident(catalog) -> None:  # type: ignore[no-untyped-def]
    params = GpuHealthParams(xid_hold_buckets=3)
    a = GpuHealthState.new(catalog, params)
    _run(a, _frames(), 0, params)
    _run(a, _frames({"n1": {"xid_last@0": 94.0}}), 1, params)
    b = GpuHealthState.from_dict(json.loads(json.dumps(a.to_dict())), catalog, params)
    later = _frames({"n1": {"xid_last@0": 94.0}, "n2": {"xid_last@1": 79.0}})
    for i in range(2, 6):
        assert _run(a, later, i, params) == _run(b, later, i, params)


def test_params_are_validated() -> None:
    with pytest.raises(ValueError):
        GpuHealthParams(xid_hold_buckets=0)


def test_an_escalated_action_resolves_the_alert_and_fires_a_new_one(catalog) -> None:  # type: ignore[no-untyped-def]
    """64 (memory) then 79 (interconnect) in one incident: ``action`` is a label, so the alert
    with the old action resolves and one with the new action fires (no orphan label set)."""
    state = GpuHealthState.new(catalog, GpuHealthParams())
    _run(state, _frames(), 0)
    (first,) = _run(state, _frames({"n1": {"xid_last@0": 64.0}}), 1)
    old, again = _run(state, _frames({"n1": {"xid_last@0": 79.0}}), 2)
    assert (first.status, old.status, again.status) == ("firing", "resolved", "firing")
    assert (old.labels, old.action) == (first.labels, first.action)
    assert again.action != first.action
    assert again.labels == (("class", "interconnect"), ("gpu", "0"))
    assert [(a.labels, a.action) for a in active_gpu_alerts(state)] == [
        (again.labels, again.action)
    ]


def test_an_alert_superseded_in_the_bucket_it_fired_is_not_sent(catalog) -> None:  # type: ignore[no-untyped-def]
    """Two XIDs of one incident in one bucket (64, then 79 from the kernel log): only the
    escalated alert goes out, no firing-and-resolve of the first (the outbox would deliver
    the resolve alone, and chaos counted that firing as lost)."""
    from detectors.xid.events import XidEvent

    state = GpuHealthState.new(catalog, GpuHealthParams())
    _run(state, _frames(), 0)
    log_79 = XidEvent(xid=79, node="n1", gpu="0", ts_ms=T0 + B + 1_000, source="log")
    changes = _run(state, _frames({"n1": {"xid_last@0": 64.0}}), 1, log_events=[log_79])
    assert [(c.status, c.score) for c in changes] == [("firing", 79.0)]
    assert [a.score for a in active_gpu_alerts(state)] == [79.0]
