"""A node that leaves its job is a departure, not a silent node."""

from __future__ import annotations

import pytest

from detectors.group import ScoringParams
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame, decode_frame, encode_frame
from streams.ingest.builder import FrameBuilder
from streams.ingest.series import Series
from streams.worker.pipeline import Pipeline
from streams.worker.windows import GroupWindow


def _procs(node: str, ts: int, job: str | None) -> Series:
    labels = {"__name__": "node_procs_running", "instance": f"{node}:9100", "cluster": "c"}
    if job:
        labels["train_job"] = job
    return Series(labels, [(ts, 12.0)])


def _builder() -> FrameBuilder:
    return FrameBuilder(DEFAULT_FEATURES, group_labels=("train_job",), grace_ms=0)


@pytest.mark.parametrize(("hold", "departed_at"), [(0, 30_000), (1, 60_000), (2, 90_000)])
def test_losing_the_group_label_emits_one_departure_after_the_hold(
    hold: int, departed_at: int
) -> None:
    b = FrameBuilder(
        DEFAULT_FEATURES, group_labels=("train_job",), grace_ms=0, membership_hold_buckets=hold
    )
    b.add([_procs("n1", 1_000, "job-a")])
    for k in range(1, 5):
        b.add([_procs("n1", 1_000 + k * 30_000, None)])
    frames = b.close_due(10**9)
    assert [(f.group, f.node, f.ts) for f in frames if f.left] == [("job-a", "n1", departed_at)]
    assert sorted(f.ts for f in frames if not f.left) == list(range(0, departed_at, 30_000))


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
    win.leave("n2", 30_000, now_s=100.0)
    assert win.expected_at(30_000) == frozenset({"n1"})


# --- group membership per node, from any of its series (issue 8 part 1) -------------------------

B = 30_000


def _node_round(
    node: str, k: int, job: str | None, *, xid: float = 0.0, dcgm_job: bool = True
) -> list[Series]:
    """Round k of one node: node_exporter at +2 s without any job label, dcgm-exporter at
    +25 s with ``hpc_job`` on its GPU series (when ``job`` and ``dcgm_job``)."""
    host = {"cluster": "c"}
    gpu = {"cluster": "c", "gpu": "0", **({"hpc_job": job} if job and dcgm_job else {})}
    return [
        Series(
            {"__name__": "node_procs_running", "instance": f"{node}:9100", **host},
            [(k * B + 2_000, 12.0)],
        ),
        Series(
            {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": f"{node}:9400", **gpu},
            [(k * B + 25_000, 60.0)],
        ),
        Series(
            {"__name__": "DCGM_FI_DEV_XID_ERRORS", "instance": f"{node}:9400", **gpu},
            [(k * B + 25_000, xid)],
        ),
    ]


def _job_builder(*group_labels: str, **kwargs: object) -> FrameBuilder:
    return FrameBuilder(DEFAULT_FEATURES, group_labels=group_labels, grace_ms=0, **kwargs)  # type: ignore[arg-type]


def _run(b: FrameBuilder, rounds: list[list[Series]]) -> list:
    out = []
    for batch in rounds:
        b.add(batch)
        out += b.close_due_by_watermark()
    return out + b.flush_all()


@pytest.mark.parametrize("group_labels", [("hpc_job", "cluster"), ("hpc_job",)])
def test_node_exporter_series_follow_the_job_label_of_the_gpu_series(
    group_labels: tuple[str, ...],
) -> None:
    """Issue 8 part 1: 19 departure frames in 10 rounds before; now none, one group."""
    frames = _run(_job_builder(*group_labels), [_node_round("n1", k, "job-7") for k in range(10)])
    assert not [f for f in frames if f.left]
    assert {f.group for f in frames} == {"job-7"}
    assert [f.ts for f in frames] == [k * B for k in range(10)]
    # complete from the first bucket on: node_exporter's series of the node's first
    # bucket wait for the GPU series to name the job (or move from the cluster with it)
    assert all({"procs_running", "gpu_temp_c"} <= f.values.keys() for f in frames)


def test_a_node_s_unlabelled_series_wait_for_a_later_request_that_names_the_job() -> None:
    """node_exporter's request at +2 s, dcgm-exporter's at +25 s: one complete first frame."""
    b = _job_builder("hpc_job")
    node_exporter, *dcgm = _node_round("n1", 0, "job-7")
    first = b.add([node_exporter])
    second = b.add(dcgm)
    assert (first.accepted, first.dropped, second.accepted, second.dropped) == (0, {}, 3, {})
    (frame,) = b.flush_all()
    assert frame.group == "job-7"
    assert {"procs_running", "gpu_temp_c"} <= frame.values.keys()


def test_first_bucket_moves_whole_from_the_fallback_group_to_the_job() -> None:
    """node_exporter (cluster only) arrives first, then the GPU series name the job: the
    node's first frame is the job's, complete, and nothing departs from the cluster."""
    frames = _run(_job_builder("hpc_job", "cluster"), [_node_round("n1", 0, "job-7")])
    assert [(f.group, f.left, sorted(f.values)[:2]) for f in frames] == [
        ("job-7", False, ["gpu_temp_c", "procs_running"])
    ]


def test_an_xid_in_the_scrape_where_the_job_label_vanished_lands_in_the_old_group() -> None:
    """Issue 8 part 9: the job died of the XID; the epilog removed the label in that scrape."""
    rounds = [_node_round("n1", k, "job-7") for k in range(5)]
    rounds.append(_node_round("n1", 5, None, xid=79.0))
    frames = _run(_job_builder("hpc_job", "cluster"), rounds)
    (xid_frame,) = [f for f in frames if f.values.get("xid_last@0") == 79.0]
    assert (xid_frame.group, xid_frame.ts, xid_frame.left) == ("job-7", 5 * B, False)


def test_membership_holds_for_the_hold_buckets_then_departs_once() -> None:
    b = _job_builder("hpc_job", "cluster", membership_hold_buckets=2)
    rounds = [_node_round("n1", k, "job-7" if k < 3 else None) for k in range(8)]
    frames = _run(b, rounds)
    assert [(f.group, f.ts) for f in frames if f.left] == [("job-7", 5 * B)]
    assert {f.ts: f.group for f in frames if not f.left} == {
        **{k * B: "job-7" for k in range(5)},
        **{k * B: "c" for k in range(5, 8)},
    }


def test_a_different_job_label_moves_the_node_at_once() -> None:
    rounds = [_node_round("n1", k, "job-7" if k < 3 else "job-8") for k in range(5)]
    frames = _run(_job_builder("hpc_job", "cluster"), rounds)
    assert [(f.group, f.ts) for f in frames if f.left] == [("job-7", 3 * B)]
    assert {f.ts: f.group for f in frames if not f.left} == {
        **{k * B: "job-7" for k in range(3)},
        **{k * B: "job-8" for k in range(3, 5)},
    }


def test_a_job_label_only_on_gpu_series_joins_a_spare_from_its_cluster() -> None:
    """A spare (cluster only) taken into a job departs from the cluster when the label shows."""
    rounds = [_node_round("n1", k, "job-7" if k >= 2 else None) for k in range(4)]
    frames = _run(_job_builder("hpc_job", "cluster"), rounds)
    assert [(f.group, f.ts) for f in frames if f.left] == [("c", 2 * B)]
    assert {f.ts: f.group for f in frames if not f.left} == {
        0: "c",
        B: "c",
        2 * B: "job-7",
        3 * B: "job-7",
    }


def test_nodes_not_seen_for_the_series_ttl_are_forgotten() -> None:
    """Issue 9: 1 M distinct nodes took the builder to 5 GB; node state is bounded by the TTL."""
    b = FrameBuilder(DEFAULT_FEATURES, series_ttl_ms=120_000, grace_ms=0)
    b.add([_procs(f"old{i}", 1_000, "c") for i in range(1_000)])
    assert b.tracked_nodes == 1_000
    for k in range(1, 12):
        b.add([_procs("n1", 1_000 + k * B, "c")])
        b.close_due_by_watermark()
    assert b.tracked_nodes == 1


def test_a_forgotten_node_that_comes_back_is_a_new_member() -> None:
    b = FrameBuilder(DEFAULT_FEATURES, series_ttl_ms=60_000, grace_ms=0)
    b.add([_procs("n2", 1_000, "c")])
    for k in range(1, 8):
        b.add([_procs("n1", 1_000 + k * B, "c")])
        b.close_due_by_watermark()
    b.add([_procs("n2", 1_000 + 8 * B, "c")])
    assert [(f.node, f.ts) for f in b.flush_all() if f.node == "n2"] == [("n2", 8 * B)]


# --- roles (issue 8 part 7) ---------------------------------------------------------------------


def test_a_role_label_on_any_series_of_a_node_is_carried_on_its_frames_and_sticks() -> None:
    b = _job_builder("cluster", role_labels=("pipeline_stage",))
    rounds = []
    for k in range(3):
        batch = _node_round("n1", k, None) + _node_round("n2", k, None)
        if k == 0:  # the trainer target carries the role, once
            batch.append(
                Series(
                    {
                        "__name__": "DCGM_FI_DEV_GPU_UTIL",
                        "instance": "n1:9400",
                        "cluster": "c",
                        "gpu": "0",
                        "pipeline_stage": "3",
                    },
                    [(k * B + 25_000, 99.0)],
                )
            )
        rounds.append(batch)
    frames = _run(b, rounds)
    assert {(f.node, f.ts, f.role) for f in frames} == {
        *(("n1", k * B, "3") for k in range(3)),
        *(("n2", k * B, None) for k in range(3)),
    }


def test_frames_have_no_role_without_role_labels() -> None:
    frames = _run(_job_builder("cluster"), [_node_round("n1", 0, None)])
    assert [f.role for f in frames] == [None]


def test_the_role_travels_on_the_wire_record() -> None:
    frame = Frame("job-7", "n1", 0, {"procs_running": 1.0}, role="stage-3")
    record = decode_frame(encode_frame(frame))
    assert (record.group, record.node, record.role) == ("job-7", "n1", "stage-3")
    assert decode_frame(encode_frame(Frame("c", "n1", 0, {}))).role is None


def test_a_departure_sent_before_the_old_groups_last_frame_still_departs() -> None:
    """The builder emits a departure when the node moves, but the node's last frame in
    the old group when that bucket closes, which can be later: the frame must not make
    the node a member again (20 buckets of false PeerwatchNodeSilent in the old group)."""
    b = FrameBuilder(DEFAULT_FEATURES, group_labels=("hpc_job", "cluster"), grace_ms=15_000)
    node_exporter = {"__name__": "node_procs_running", "instance": "n1:9100", "cluster": "c"}
    dcgm = {"__name__": "DCGM_FI_DEV_GPU_TEMP", "instance": "n1:9400", "cluster": "c",
            "gpu": "0", "hpc_job": "job-7"}  # fmt: skip
    frames: list[Frame] = []
    # node_exporter late in bucket 0 (cluster only); the job's GPU series first in bucket 1
    for series in ([node_exporter, 28_000], [dcgm, B + 1_000], [node_exporter, B + 28_000]):
        b.add([Series(series[0], [(series[1], 12.0)])])
        frames += b.close_due_by_watermark()
    assert [(f.group, f.ts, f.left) for f in frames] == [("c", B, True), ("c", 0, False)]
    p = Pipeline(DEFAULT_FEATURES, ScoringParams(), load_xid_catalog("nvidia"))
    for f in frames:  # as the worker does: each frame, then what is due
        p.add(f, now_s=0.0)
        p.due(f.group, now_s=0.0)
    win = p.windows["c"]
    assert win.expected_at(0) == frozenset({"n1"})  # it was the cluster's in bucket 0
    assert win.expected_at(B) == win.expected_at(5 * B) == frozenset()


def test_frames_of_the_buckets_a_node_is_held_in_are_on_hold() -> None:
    """The label gone (the scheduler took the node out of the job at a restart): the hold
    keeps its frames in the job for two buckets, marked on hold; labelled ones are not."""
    rounds = [_node_round("n1", k, "job-7" if k < 3 else None) for k in range(7)]
    frames = _run(_job_builder("hpc_job", "cluster", membership_hold_buckets=2), rounds)
    held = {f.ts: f.on_hold for f in frames if f.group == "job-7" and not f.left}
    assert held == {0: False, B: False, 2 * B: False, 3 * B: True, 4 * B: True}
    assert not any(f.on_hold for f in frames if f.group == "c")


def test_a_node_is_on_hold_until_its_label_shows_again() -> None:
    """On hold = the label not seen in the bucket nor since: a frame closed before the
    label came back is on hold, one closed after it is not (the node stayed)."""
    for close_early, on_hold in ((True, True), (False, False)):
        b = _job_builder("hpc_job")
        frames = []
        for k in range(5):
            b.add(_node_round("n1", k, None if k == 2 else "job-7"))
            if close_early or k != 2:
                frames += b.close_due((k + 1) * B)
        expected = [(k * B, on_hold and k == 2) for k in range(5)]
        assert [(f.ts, f.on_hold) for f in frames] == expected
        assert not [f for f in frames if f.left]


def test_on_hold_travels_on_the_wire_record() -> None:
    frame = Frame("job-7", "n1", 0, {"procs_running": 1.0}, on_hold=True)
    assert decode_frame(encode_frame(frame)).on_hold is True
    plain = decode_frame(encode_frame(Frame("c", "n1", 0, {})))
    assert plain.on_hold is False


def test_a_node_is_on_hold_in_a_bucket_only_if_every_partial_frame_says_so() -> None:
    """Two ingests: one saw only node_exporter (no label), the other the GPU series."""
    win = GroupWindow("job-7", DEFAULT_FEATURES, 30_000, 10.0, membership_buckets=4)
    win.add("n1", 0, {"procs_running": 12.0}, {}, 0.0, on_hold=True)
    win.add("n2", 0, {"procs_running": 12.0}, {}, 0.0, on_hold=True)
    win.add("n1", 0, {"gpu_temp_c": 60.0}, {}, 0.0, on_hold=False)
    (closed,) = win.due(100.0)
    assert closed.on_hold == frozenset({"n2"})
