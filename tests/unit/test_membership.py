"""A node that leaves its job is a departure, not a silent node."""

from __future__ import annotations

from detectors.features import DEFAULT_FEATURES
from streams.ingest.frames import FrameBuilder
from streams.ingest.series import Series
from streams.windows import GroupWindow


def _procs(node: str, ts: int, job: str | None) -> Series:
    labels = {"__name__": "node_procs_running", "instance": f"{node}:9100", "cluster": "c"}
    if job:
        labels["train_job"] = job
    return Series(labels, [(ts, 12.0)])


def _builder() -> FrameBuilder:
    return FrameBuilder(DEFAULT_FEATURES, group_labels=("train_job",), grace_ms=0)


def test_losing_the_group_label_emits_one_departure_for_the_old_group() -> None:
    b = _builder()
    b.add([_procs("n1", 1_000, "job-a")])
    b.add([_procs("n1", 31_000, None)])
    b.add([_procs("n1", 61_000, None)])
    left = [f for f in b.close_due(10**9) if f.left]
    assert [(f.group, f.node, f.ts) for f in left] == [("job-a", "n1", 30_000)]


def test_moving_to_another_group_departs_from_the_first() -> None:
    b = _builder()
    b.add([_procs("n1", 1_000, "job-a")])
    b.add([_procs("n1", 31_000, "job-b")])
    frames = b.close_due(10**9)
    assert [(f.group, f.left) for f in frames if f.left] == [("job-a", True)]
    assert {(f.group, f.ts) for f in frames if not f.left} == {("job-a", 0), ("job-b", 30_000)}


def test_a_steady_member_never_departs() -> None:
    b = _builder()
    for i in range(5):
        b.add([_procs("n1", 1_000 + 30_000 * i, "job-a")])
    assert not [f for f in b.close_due(10**9) if f.left]


def test_window_forgets_a_departed_node_so_it_is_not_expected() -> None:
    win = GroupWindow("job-a", DEFAULT_FEATURES, 30_000, grace_s=20.0, membership_buckets=20)
    for node in ("n1", "n2"):
        win.add(node, 0, {"procs_running": 10.0}, {}, now_s=0.0)
    win.due(now_s=100.0)
    win.leave("n2")
    assert win.expected_at(30_000) == frozenset({"n1"})
