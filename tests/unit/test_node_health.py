"""Per-GPU health follows the node across groups
(streams.worker.node_health through the Pipeline)."""

from __future__ import annotations

import json

import pytest

from detectors.gpu_health import REMAP_ALERT, XID_ALERT, GpuHealthParams
from detectors.group import ScoringParams
from detectors.xid.events import XidEvent
from detectors.xid.kernel_log import parse_kernel_line
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame
from streams.worker.pipeline import Pipeline, Scored

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(10)]


@pytest.fixture(scope="module")
def catalog():  # type: ignore[no-untyped-def]
    return load_xid_catalog("report")


def pipeline(catalog) -> Pipeline:  # type: ignore[no-untyped-def]
    return Pipeline(DEFAULT_FEATURES, ScoringParams(), catalog)


def healthy(**extra: float) -> dict[str, float]:
    return {"xid_last@0": 0.0, "xid_last@1": 0.0, **extra}


def bucket(
    p: Pipeline, i: int, placed: dict[str, dict[str, dict[str, float]]]
) -> dict[str, list[Scored]]:
    """Bucket ``i``: ``placed[group][node]`` frames in, every group's scored bucket out."""
    ts = T0 + i * B
    for group, frames in placed.items():
        for node, values in frames.items():
            p.add(Frame(group, node, ts, values), ts / 1000)
    return {g: p.due(g, ts / 1000 + 60) for g in p.windows}


def xid_changes(out: dict[str, list[Scored]], alertname: str = XID_ALERT):  # type: ignore[no-untyped-def]
    return [
        (g, c.node, c.status, dict(c.labels).get("gpu"))
        for g, scored in out.items()
        for s in scored
        for c in s.changes
        if c.alertname == alertname
    ]


def in_job(**moved: dict[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    """Every node in job-a except ``moved``, which report in the fallback group."""
    job = {n: healthy() for n in NODES if n not in moved}
    return {"job-a": job, **({"cluster": dict(moved)} if moved else {})}


def test_an_xid_in_the_first_frame_after_a_move_still_alerts_in_that_bucket(catalog) -> None:  # type: ignore[no-untyped-def]
    """The job died of the XID: the scrape carrying it no longer has the job label."""
    p = pipeline(catalog)
    for i in range(5):
        assert xid_changes(bucket(p, i, in_job())) == []
    out = bucket(p, 5, in_job(n03=healthy(**{"xid_last@1": 79.0})))
    assert xid_changes(out) == [("cluster", "n03", "firing", "1")]


def test_per_gpu_values_of_a_frame_whose_bucket_a_departure_emptied_still_count(catalog) -> None:  # type: ignore[no-untyped-def]
    """GPU series in job-a, host series in the fallback group: each bucket's departure
    notice drops the node from job-a's open bucket; its GPU values must not go with it."""
    p = pipeline(catalog)
    for i in range(6):
        ts = T0 + i * B
        xid = 94.0 if i == 5 else 0.0
        gpu_group = "cluster" if i == 5 else "job-a"  # the label vanishes with the XID
        for n in NODES:
            p.add(Frame("job-a", n, ts, healthy()), ts / 1000)
        p.add(Frame(gpu_group, "n09", ts, healthy(**{"xid_last@1": xid})), ts / 1000)
        p.add(Frame("job-a", "n09", ts, {}, left=True), ts / 1000)
        p.add(Frame("cluster", "n09", ts, {"procs_running": 40.0}), ts / 1000)
        out = {g: p.due(g, ts / 1000 + 60) for g in list(p.windows)}
        assert xid_changes(out) == ([("cluster", "n09", "firing", "1")] if i == 5 else [])


def test_a_bucket_the_old_group_closed_first_is_judged_in_the_new_one(catalog) -> None:  # type: ignore[no-untyped-def]
    """job-a closes the XID's bucket before the node's frame (now in the fallback group)
    arrives: the frame is still judged, in its own bucket."""
    p = pipeline(catalog)
    for i in range(5):
        bucket(p, i, in_job())
    ts = T0 + 5 * B
    for n in NODES:
        if n != "n06":
            p.add(Frame("job-a", n, ts, healthy()), ts / 1000)
    assert p.due("job-a", ts / 1000 + 60)  # closed without n06
    p.add(Frame("cluster", "n06", ts, healthy(**{"xid_last@0": 149.0})), ts / 1000)
    (scored,) = p.due("cluster", ts / 1000 + 60)
    xids = [c for c in scored.changes if c.alertname == XID_ALERT]
    assert [(c.node, c.bucket_ts) for c in xids] == [("n06", ts)]


def test_a_remap_trend_continues_across_a_move(catalog) -> None:  # type: ignore[no-untyped-def]
    p = pipeline(catalog)
    rows = {"remap_correctable@0": 3.0, "remap_uncorrectable@0": 0.0}
    for i in range(5):
        placed = in_job()
        placed["job-a"]["n04"] = healthy(**rows)
        bucket(p, i, placed)
    risen = healthy(**{**rows, "remap_uncorrectable@0": 2.0})
    out = bucket(p, 5, {"job-b": {"n04": risen}})  # taken into a new job
    assert xid_changes(out, REMAP_ALERT) == [("job-b", "n04", "firing", "0")]


def test_a_firing_xid_alert_keeps_its_group_and_resolves_once_after_the_move(catalog) -> None:  # type: ignore[no-untyped-def]
    p = pipeline(catalog)
    p.node_health.params = p.gpu_params = GpuHealthParams(xid_hold_buckets=3)
    bucket(p, 0, in_job())
    placed = in_job()
    placed["job-a"]["n02"] = healthy(**{"xid_last@0": 94.0})
    assert xid_changes(bucket(p, 1, placed)) == [("job-a", "n02", "firing", "0")]
    resolved = []
    for i in range(2, 6):
        out = bucket(p, i, in_job(n02=healthy(**{"xid_last@0": 94.0})))
        active = [a for s in out["cluster"] for a in s.active if a.alertname == XID_ALERT]
        assert all(a.group == "job-a" for a in active)  # identity kept while firing
        assert not [a for s in out["job-a"] for a in s.active if a.alertname == XID_ALERT]
        for g, scored in out.items():
            resolved += [
                (g, c.group, c.status)
                for s in scored
                for c in s.changes
                if c.alertname == XID_ALERT
            ]
    assert resolved == [("cluster", "job-a", "resolved")]


def test_node_state_survives_snapshot_and_restore_and_still_follows_the_node(catalog) -> None:  # type: ignore[no-untyped-def]
    p = pipeline(catalog)
    for i in range(3):
        bucket(p, i, in_job())
    snap = json.loads(json.dumps(p.snapshot("job-a")))
    assert set(snap["nodes"]) == set(NODES)
    q = pipeline(catalog)
    q.restore("job-a", snap)
    out = bucket(q, 3, in_job(n07=healthy(**{"xid_last@0": 79.0})))
    assert xid_changes(out) == [("cluster", "n07", "firing", "0")]
    # the moved node's state now lives in its new home's snapshot, not the old one's
    assert "n07" in q.snapshot("cluster")["nodes"]
    assert "n07" not in q.snapshot("job-a")["nodes"]


def test_restore_keeps_the_newest_copy_of_a_node(catalog) -> None:  # type: ignore[no-untyped-def]
    p = pipeline(catalog)
    for i in range(3):
        bucket(p, i, in_job())
    stale = json.loads(json.dumps(p.snapshot("job-a")))  # n05 still in job-a here
    for i in range(3, 5):
        bucket(p, i, in_job(n05=healthy()))
    newer = json.loads(json.dumps(p.snapshot("cluster")))
    q = pipeline(catalog)
    q.restore("cluster", newer)
    q.restore("job-a", stale)  # an idle group's old snapshot must not take the node back
    assert q.node_health.home("n05") == "cluster"
    out = bucket(q, 5, in_job(n05=healthy(**{"xid_last@1": 79.0})))
    assert xid_changes(out) == [("cluster", "n05", "firing", "1")]


def test_a_log_xid_of_a_node_that_moved_is_judged_in_its_new_group(catalog) -> None:  # type: ignore[no-untyped-def]
    """The shipper still names the old job; the XID follows the node."""
    p = pipeline(catalog)
    bucket(p, 0, in_job())
    bucket(p, 1, in_job(n08=healthy()))
    line = parse_kernel_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
    assert line is not None
    p.add_log_xid("job-a", line.with_origin(node="n08", gpu="0000:3b:00.0", ts_ms=T0 + 2 * B))
    out = bucket(p, 2, in_job(n08=healthy()))
    assert xid_changes(out) == [("cluster", "n08", "firing", "0000:3b:00.0")]


def test_a_log_xid_needs_its_node() -> None:
    from streams.worker.node_health import NodeHealth

    health = NodeHealth(load_xid_catalog("report"), GpuHealthParams())
    with pytest.raises(ValueError):
        health.add_log_xid("g", XidEvent(79, "log"))


# --- one XID seen twice: in the kernel log (by PCI bus id) and in DCGM (by GPU index) ----------

BUS_IDS = {"0": "00000000:1B:00.0", "1": "00000000:3B:00.0"}  # dcgm-exporter's pci_bus_id
KERNEL = (
    "[ 8123.4] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has fallen off the bus."
)
FALLEN = "[ 8123.4] NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus."


def dcgm_frames(builder, ts: int, xid_gpu1: float) -> list:  # type: ignore[no-untyped-def]
    """One scrape of dcgm-exporter's XID gauge on n01's two GPUs, through the frame builder."""
    from streams.ingest.series import Series

    series = [
        Series(
            {"__name__": "DCGM_FI_DEV_XID_ERRORS", "instance": "n01:9400", "cluster": "job-a",
             "gpu": gpu, "pci_bus_id": pci},
            [(ts + 5_000, xid_gpu1 if gpu == "1" else 0.0)],
        )
        for gpu, pci in BUS_IDS.items()
    ]  # fmt: skip
    builder.add(series)
    return builder.flush_all()


def run_xid_twice(catalog, line: str, log_bucket: int, gauge_bucket: int):  # type: ignore[no-untyped-def]
    from streams.ingest.builder import FrameBuilder

    builder = FrameBuilder(DEFAULT_FEATURES)
    p = pipeline(catalog)
    changes = []
    for i in range(6):
        ts = T0 + i * B
        if i == log_bucket:
            event = parse_kernel_line(line)
            assert event is not None
            p.add_log_xid(
                "job-a", event.with_origin(node="n01", gpu="0000:3b:00.0", ts_ms=ts + 9_000)
            )
        for frame in dcgm_frames(builder, ts, 79.0 if i >= gauge_bucket else 0.0):
            p.add(frame, ts / 1000)
        changes += [c for s in p.due("job-a", ts / 1000 + 60) for c in s.changes]
    return [(c.alertname, c.node, c.status, dict(c.labels)["gpu"]) for c in changes]


def test_frames_carry_the_pci_bus_id_of_each_gpu() -> None:
    from streams.ingest.builder import FrameBuilder

    (frame,) = dcgm_frames(FrameBuilder(DEFAULT_FEATURES), T0, 0.0)
    assert {k: v for k, v in frame.gpus.items() if k.startswith("pci_bus_id@")} == {
        f"pci_bus_id@{g}": pci for g, pci in BUS_IDS.items()
    }


@pytest.mark.parametrize(("log_bucket", "gauge_bucket"), [(3, 3), (3, 4), (4, 3)])
@pytest.mark.parametrize("line", [KERNEL, FALLEN])
def test_a_kernel_line_and_the_dcgm_gauge_of_one_xid_are_one_alert(
    catalog, line: str, log_bucket: int, gauge_bucket: int
) -> None:  # type: ignore[no-untyped-def]
    """Same XID, same GPU, same or adjacent bucket: one PeerwatchXid, on the GPU's index."""
    assert run_xid_twice(catalog, line, log_bucket, gauge_bucket) == [
        (XID_ALERT, "n01", "firing", "1")
    ]


def test_the_pci_map_survives_a_restore(catalog) -> None:  # type: ignore[no-untyped-def]
    from streams.ingest.builder import FrameBuilder

    p = pipeline(catalog)
    for frame in dcgm_frames(FrameBuilder(DEFAULT_FEATURES), T0, 0.0):
        p.add(frame, T0 / 1000)
    p.due("job-a", T0 / 1000 + 60)
    q = pipeline(catalog)
    q.restore("job-a", json.loads(json.dumps(p.snapshot("job-a"))))
    event = parse_kernel_line(KERNEL)
    assert event is not None
    q.add_log_xid("job-a", event.with_origin(node="n01", gpu="0000:3b:00.0", ts_ms=T0 + B))
    q.add(Frame("job-a", "n01", T0 + B, {"xid_last@0": 0.0, "xid_last@1": 79.0}), T0 / 1000 + 30)
    (change,) = [c for s in q.due("job-a", T0 / 1000 + 90) for c in s.changes]
    assert dict(change.labels)["gpu"] == "1"


def test_a_node_handed_to_a_group_marks_that_group_once(catalog) -> None:  # type: ignore[no-untyped-def]
    """The worker writes the receiving group's snapshot at its next bucket
    (streams.worker.checkpoints): the giver's may since have been written without the node."""
    p = pipeline(catalog)
    for i in range(2):
        bucket(p, i, in_job())
    assert not p.node_health.take_handed("job-a")  # nodes that start in a group are not handed
    bucket(p, 2, in_job(n07=healthy()))
    assert p.node_health.take_handed("cluster")
    assert not p.node_health.take_handed("cluster")
    assert not p.node_health.take_handed("job-a")


def test_a_replay_from_the_last_aligned_snapshots_hands_the_node_over_again(catalog) -> None:  # type: ignore[no-untyped-def]
    """Snapshots written every K buckets: after a crash both groups restore the same
    bucket's, and the frames re-delivered after it move the node and judge its XID as the
    uninterrupted run did."""
    later = [in_job(), in_job(n07=healthy()), in_job(n07=healthy(**{"xid_last@0": 79.0}))]
    p = pipeline(catalog)
    for i in range(3):
        bucket(p, i, in_job())
    saved = {g: json.loads(json.dumps(p.snapshot(g))) for g in p.windows}
    want = [xid_changes(bucket(p, 3 + i, placed)) for i, placed in enumerate(later)]
    q = pipeline(catalog)
    for group, snap in saved.items():
        q.restore(group, snap)
    got = [xid_changes(bucket(q, 3 + i, placed)) for i, placed in enumerate(later)]
    assert got == want == [[], [], [("cluster", "n07", "firing", "0")]]
