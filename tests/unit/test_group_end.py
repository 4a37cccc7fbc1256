"""A group that ends (every node departed, or its frames stopped) resolves its alerts and
is dropped: nothing would ever score it again, so they would fire (and be re-sent) forever."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from detectors.alerts import AlertChange
from detectors.group import ScoringParams
from detectors.xid.catalog import XidCatalog
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame
from streams.sinks.payloads import to_payload
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.pipeline import Pipeline, Scored

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(8)]
MEMBERSHIP = 20


@pytest.fixture(scope="module")
def catalog() -> XidCatalog:
    return load_xid_catalog("nvidia")


def busy(**extra: float) -> dict[str, float]:
    return {"gpu_util": 95.0, "procs_running": 14.0, "xid_last@0": 0.0, **extra}


def run(p: Pipeline, i: int, frames: dict[str, dict[str, float]], group: str = "job-a"):
    """Bucket ``i`` of ``group``: frames in at its end, what ``due`` gives a minute later."""
    ts = T0 + i * B
    for node, values in frames.items():
        p.add(Frame(group, node, ts, values), ts / 1000 + 30)
    return p.due(group, ts / 1000 + 90)


def firing(p: Pipeline, catalog: XidCatalog) -> set[tuple[str, str | None]]:
    """A job-a of 8 nodes in which n07 went silent and n03 had an XID: both alerts firing."""
    out: list[Scored] = []
    for i in range(6):
        out += run(p, i, {n: busy() for n in NODES})
    for i in range(6, 10):
        frames = {n: busy() for n in NODES if n != "n07"}
        frames["n03"] = busy(**{"xid_last@0": 79.0})
        out += run(p, i, frames)
    fired = {(c.alertname, c.node) for s in out for c in s.changes if c.status == "firing"}
    resolved = {(c.alertname, c.node) for s in out for c in s.changes if c.status == "resolved"}
    assert {("PeerwatchNodeSilent", "n07"), ("PeerwatchXid", "n03")} <= fired - resolved
    return fired - resolved


def test_when_every_node_departed_the_groups_alerts_resolve_and_it_is_dropped(
    catalog: XidCatalog,
) -> None:
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog, membership_buckets=MEMBERSHIP)
    open_alerts = firing(p, catalog)
    ts = T0 + 10 * B
    for node in NODES:
        p.add(Frame("job-a", node, ts, {}, left=True), ts / 1000)
    (end,) = p.due("job-a", ts / 1000 + 1)
    assert end.ended == "every node left the group"
    # the departed nodes' per-GPU health is theirs: it follows them, it does not end here
    assert {(c.alertname, c.node) for c in end.changes} == open_alerts - {("PeerwatchXid", "n03")}
    assert {c.status for c in end.changes} == {"resolved"}
    assert "job-a" not in p.windows and "job-a" not in p.groups
    assert p.node_health.home("n03") == "job-a"  # kept until its next frame says where it is


def test_when_its_frames_stop_for_membership_buckets_the_group_ends(catalog: XidCatalog) -> None:
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog, membership_buckets=MEMBERSHIP)
    open_alerts = firing(p, catalog)
    last_frame_s = (T0 + 9 * B) / 1000 + 30
    quiet_s = MEMBERSHIP * B / 1000
    assert p.groups_waiting(last_frame_s + quiet_s - 1) == []
    assert p.due("job-a", last_frame_s + quiet_s - 1) == []  # still going on: nothing resolves
    assert p.groups_waiting(last_frame_s + quiet_s) == ["job-a"]
    (end,) = p.due("job-a", last_frame_s + quiet_s)
    assert end.ended == f"no frame for {MEMBERSHIP} buckets"
    # every node went quiet with the job: all its alerts resolve, per-GPU ones too
    assert {(c.alertname, c.node): c.status for c in end.changes} == dict.fromkeys(
        open_alerts, "resolved"
    )
    assert all(c.reason.startswith("group ended (no frame") for c in end.changes)
    assert p.windows == {} and p.groups == {} and len(p.node_health) == 0


def test_a_group_with_members_that_keeps_sending_does_not_end(catalog: XidCatalog) -> None:
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog, membership_buckets=MEMBERSHIP)
    out = [s for i in range(2 * MEMBERSHIP) for s in run(p, i, {n: busy() for n in NODES[:3]})]
    assert not [s for s in out if s.ended]
    assert "job-a" in p.windows


def test_an_ended_group_that_comes_back_starts_afresh(catalog: XidCatalog) -> None:
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog, membership_buckets=MEMBERSHIP)
    firing(p, catalog)
    for node in NODES:
        p.add(Frame("job-a", node, T0 + 10 * B, {}, left=True), (T0 + 10 * B) / 1000)
    p.due("job-a", (T0 + 10 * B) / 1000 + 1)
    out = [s for i in range(40, 44) for s in run(p, i, {n: busy() for n in NODES})]
    assert [c for s in out for c in s.changes] == []
    assert all(not s.ended for s in out)


def test_an_ended_groups_metric_series_are_removed() -> None:
    """A gauge left behind would go on reporting the ended job's last bucket."""
    m = WorkerMetrics()
    for group in ("job-a", "job-b"):
        m.observe_phase(group, "save")
        m.buckets.labels(group=group).inc()
        m.bucket_nodes.labels(group=group).set(8)
    m.forget_group("job-a")
    m.forget_group("never-seen")  # nothing to remove: no error
    text = generate_latest(m.registry).decode()
    assert 'group="job-a"' not in text and 'group="job-b"' in text


def test_the_resolutions_carry_the_labels_the_alerts_fired_with(catalog: XidCatalog) -> None:
    """Alertmanager (and the sink's re-send list) match a resolution to its alert by labels."""
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog, membership_buckets=MEMBERSHIP)
    out = [s for i in range(6) for s in run(p, i, {n: busy() for n in NODES})]
    for i in range(6, 10):
        out += run(p, i, {n: busy() for n in NODES if n != "n07"})
    fired = {alert_key(c) for s in out for c in s.changes if c.status == "firing"}
    (end,) = p.due("job-a", (T0 + 9 * B) / 1000 + 30 + MEMBERSHIP * B / 1000)
    assert {alert_key(c) for c in end.changes} == fired


def alert_key(change: AlertChange) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(to_payload(change)["labels"].items()))
