"""streams.worker.windows.GroupWindow: when a group's bucket closes, and what it closes with."""

from __future__ import annotations

import json
import math

from streams.catalog import DEFAULT_FEATURES
from streams.worker.windows import ClosedBucket, GroupWindow

B = 30_000  # bucket length, ms
GRACE_S = 20.0
FRAME = {"procs_running": 10.0}


def window(membership_buckets: int = 20, lag_buckets: int = 2) -> GroupWindow:
    return GroupWindow(
        "job-a",
        DEFAULT_FEATURES,
        bucket_ms=B,
        grace_s=GRACE_S,
        membership_buckets=membership_buckets,
        lag_buckets=lag_buckets,
    )


def established(nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> GroupWindow:
    """A window whose first bucket (ts 0, every node reported) closed by grace at t=100 s."""
    win = window()
    for node in nodes:
        win.add(node, 0, FRAME, {}, now_s=80.0)
    assert [b.ts for b in win.due(now_s=100.0)] == [0]
    return win


def closed_ts(buckets: list[ClosedBucket]) -> list[int]:
    return [b.ts for b in buckets]


# --- the first bucket ---------------------------------------------------------------------------


def test_first_bucket_waits_even_when_every_node_seems_present() -> None:
    win = window()
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=1.0)
    assert win.due(now_s=GRACE_S - 0.1) == []


def test_first_bucket_closes_at_grace() -> None:
    win = window()
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=5.0)
    closed = win.due(now_s=GRACE_S)
    assert closed_ts(closed) == [0]
    assert closed[0].frames == {"n1": FRAME, "n2": FRAME}
    assert closed[0].expected == frozenset({"n1", "n2"})


def test_first_bucket_closes_when_overtaken_by_lag_buckets() -> None:
    win = window(lag_buckets=2)
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n1", B, FRAME, {}, now_s=0.1)
    assert win.due(now_s=0.2) == []  # one bucket newer is not enough
    win.add("n1", 2 * B, FRAME, {}, now_s=0.3)
    assert closed_ts(win.due(now_s=0.4)) == [0]


# --- later buckets ------------------------------------------------------------------------------


def test_later_bucket_closes_as_soon_as_every_expected_node_reported() -> None:
    win = established()
    win.add("n1", B, FRAME, {}, now_s=101.0)
    win.add("n2", B, FRAME, {}, now_s=101.0)
    assert win.due(now_s=101.0) == []
    win.add("n3", B, FRAME, {}, now_s=101.5)
    closed = win.due(now_s=101.5)
    assert closed_ts(closed) == [B]
    assert set(closed[0].frames) == {"n1", "n2", "n3"}


def test_grace_timeout_closes_a_bucket_with_missing_nodes_expected_but_absent() -> None:
    win = established()
    win.add("n1", B, FRAME, {}, now_s=110.0)
    win.add("n2", B, FRAME, {}, now_s=111.0)
    assert win.due(now_s=110.0 + GRACE_S - 0.1) == []
    closed = win.due(now_s=110.0 + GRACE_S)
    assert closed_ts(closed) == [B]
    assert closed[0].expected == frozenset({"n1", "n2", "n3"})
    assert set(closed[0].frames) == {"n1", "n2"}
    assert closed[0].expected - closed[0].frames.keys() == {"n3"}


def test_grace_counts_from_the_first_frame_of_the_bucket() -> None:
    win = established()
    win.add("n1", B, FRAME, {}, now_s=110.0)
    win.add("n2", B, FRAME, {}, now_s=125.0)  # a later frame does not restart the clock
    assert closed_ts(win.due(now_s=130.0)) == [B]


def test_newer_bucket_closes_older_ones_in_order() -> None:
    win = established()
    win.add("n1", B, FRAME, {}, now_s=101.0)
    win.add("n1", 2 * B, FRAME, {}, now_s=102.0)
    assert win.due(now_s=102.0) == []
    win.add("n1", 3 * B, FRAME, {}, now_s=103.0)  # lag_buckets=2 newer than 1*B only
    assert closed_ts(win.due(now_s=103.0)) == [B]
    win.add("n1", 5 * B, FRAME, {}, now_s=104.0)  # overtakes 2*B and 3*B together
    assert closed_ts(win.due(now_s=104.0)) == [2 * B, 3 * B]
    assert win.closed_upto == 3 * B


def test_a_ready_newer_bucket_closes_an_older_waiting_one_first() -> None:
    win = established(("n1", "n2"))
    win.add("n1", B, FRAME, {}, now_s=101.0)  # n2's frame for B is still on its way
    win.add("n1", 2 * B, FRAME, {}, now_s=102.0)
    win.add("n2", 2 * B, FRAME, {}, now_s=102.0)  # 2*B is complete
    closed = win.due(now_s=102.0)
    assert closed_ts(closed) == [B, 2 * B]
    assert set(closed[0].frames) == {"n1"}


def test_due_with_nothing_open_returns_nothing() -> None:
    assert window().due(now_s=1e9) == []


# --- late and partial frames --------------------------------------------------------------------


def test_frame_for_a_closed_bucket_is_late_and_dropped() -> None:
    win = established()
    assert win.add("n4", 0, FRAME, {}, now_s=101.0) is False
    assert win.add("n1", -B, FRAME, {}, now_s=101.0) is False
    assert win.oldest_open_age(now_s=101.0) == -math.inf  # nothing was opened
    assert "n4" not in win.last_seen  # a late frame does not make a node a member


def test_frame_for_an_open_bucket_is_taken() -> None:
    win = established()
    assert win.add("n1", B, FRAME, {}, now_s=101.0) is True


def test_partial_frames_of_one_node_merge_with_each_features_reduction() -> None:
    win = window()
    win.add(
        "n1",
        0,
        {"gpu_util": 90.0, "gpu_temp_c": 60.0, "procs_running": 10.0},
        {"gpu_util": "0", "gpu_temp_c": "0"},
        now_s=0.0,
    )
    win.add(
        "n1",
        0,
        {"gpu_util": 40.0, "gpu_temp_c": 70.0, "intr_rate": 5_000.0},
        {"gpu_util": "3", "gpu_temp_c": "5"},
        now_s=1.0,
    )
    (bucket,) = win.due(now_s=GRACE_S)
    assert bucket.frames == {
        "n1": {
            "gpu_util": 40.0,  # reduce=min
            "gpu_temp_c": 70.0,  # reduce=max
            "procs_running": 10.0,  # only in the first partial
            "intr_rate": 5_000.0,  # only in the second partial
        }
    }
    assert bucket.gpus == {"n1": {"gpu_util": "3", "gpu_temp_c": "5"}}


def test_merging_the_same_partial_frame_twice_changes_nothing() -> None:
    win = window()
    values, gpus = {"gpu_util": 55.0, "intr_rate": 9_000.0}, {"gpu_util": "1"}
    win.add("n1", 0, values, gpus, now_s=0.0)
    win.add("n1", 0, values, gpus, now_s=1.0)
    (bucket,) = win.due(now_s=GRACE_S)
    assert (bucket.frames, bucket.gpus) == ({"n1": values}, {"n1": gpus})


def test_adding_does_not_keep_a_reference_to_the_callers_dicts() -> None:
    win = window()
    values, gpus = {"gpu_util": 55.0}, {"gpu_util": "1"}
    win.add("n1", 0, values, gpus, now_s=0.0)
    values["gpu_util"], gpus["gpu_util"] = 0.0, "7"
    (bucket,) = win.due(now_s=GRACE_S)
    assert (bucket.frames["n1"], bucket.gpus["n1"]) == ({"gpu_util": 55.0}, {"gpu_util": "1"})


# --- membership ---------------------------------------------------------------------------------


def test_a_silent_node_stays_expected_for_membership_buckets() -> None:
    win = GroupWindow("job-a", DEFAULT_FEATURES, B, GRACE_S, membership_buckets=3)
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=0.0)
    win.due(now_s=GRACE_S)
    expected = {}
    for k in range(1, 6):  # only n1 reports from here on
        win.add("n1", k * B, FRAME, {}, now_s=100.0 * k)
        (bucket,) = win.due(now_s=100.0 * k + GRACE_S)
        expected[k] = bucket.expected
    assert [k for k, e in expected.items() if "n2" in e] == [1, 2, 3]
    assert expected[4] == expected[5] == frozenset({"n1"})


def test_a_node_silent_longer_than_membership_is_forgotten() -> None:
    win = GroupWindow("job-a", DEFAULT_FEATURES, B, GRACE_S, membership_buckets=3)
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=0.0)
    win.due(now_s=GRACE_S)
    for k in range(1, 5):
        win.add("n1", k * B, FRAME, {}, now_s=100.0 * k)
        win.due(now_s=100.0 * k + GRACE_S)
    assert set(win.last_seen) == {"n1"}


def test_with_membership_known_a_bucket_of_the_remaining_nodes_closes_at_once() -> None:
    win = GroupWindow("job-a", DEFAULT_FEATURES, B, GRACE_S, membership_buckets=1)
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=0.0)
    win.due(now_s=GRACE_S)
    win.add("n1", B, FRAME, {}, now_s=100.0)
    win.due(now_s=100.0 + GRACE_S)  # n2 missing once, still expected
    win.add("n1", 2 * B, FRAME, {}, now_s=200.0)
    assert closed_ts(win.due(now_s=200.0)) == [2 * B]  # n2 no longer holds the bucket back


def test_a_node_that_returns_is_expected_again() -> None:
    win = GroupWindow("job-a", DEFAULT_FEATURES, B, GRACE_S, membership_buckets=1)
    win.add("n1", 0, FRAME, {}, now_s=0.0)
    win.add("n2", 0, FRAME, {}, now_s=0.0)
    win.due(now_s=GRACE_S)
    for k in (1, 2, 3):
        win.add("n1", k * B, FRAME, {}, now_s=100.0 * k)
        win.due(now_s=100.0 * k + GRACE_S)
    assert win.expected_at(4 * B) == frozenset({"n1"})
    win.add("n2", 4 * B, FRAME, {}, now_s=400.0)
    assert win.expected_at(4 * B) == frozenset({"n1", "n2"})


def test_a_node_first_seen_in_a_newer_bucket_is_not_expected_in_an_older_one() -> None:
    """Members are the nodes seen in the ``membership_buckets`` up to a bucket, not after it."""
    win = established(("n1", "n2"))
    win.add("n1", B, FRAME, {}, now_s=101.0)
    win.add("n3", 2 * B, FRAME, {}, now_s=102.0)  # n3 joins the job one bucket later
    win.add("n2", B, FRAME, {}, now_s=103.0)  # bucket B now has every member of its time
    closed = win.due(now_s=103.0)
    assert closed_ts(closed) == [B]
    assert closed[0].expected == frozenset({"n1", "n2"})


def test_leave_stops_expecting_the_node_and_drops_its_open_frames() -> None:
    win = established()
    win.add("n3", B, FRAME, {}, now_s=101.0)
    win.leave("n3", B, now_s=101.0)
    win.add("n1", B, FRAME, {}, now_s=101.0)
    win.add("n2", B, FRAME, {}, now_s=101.0)
    (bucket,) = win.due(now_s=101.0)
    assert bucket.expected == frozenset({"n1", "n2"})
    assert set(bucket.frames) == {"n1", "n2"}


# --- snapshot / restore -------------------------------------------------------------------------


def test_snapshot_survives_json_and_restores_progress_and_membership() -> None:
    win = established()
    win.add("n1", B, FRAME, {}, now_s=101.0)  # an open bucket: not part of the snapshot
    snap = json.loads(json.dumps(win.snapshot()))
    restored = window()
    restored.restore(snap)
    assert restored.closed_upto == win.closed_upto == 0
    assert restored.last_seen == {"n1": B, "n2": 0, "n3": 0}  # seen in the open bucket too
    assert restored.snapshot() == win.snapshot()


def test_restored_window_drops_late_frames_and_closes_complete_buckets_at_once() -> None:
    restored = window()
    restored.restore(established().snapshot())
    assert restored.add("n1", 0, FRAME, {}, now_s=200.0) is False
    for node in ("n1", "n2", "n3"):
        restored.add(node, B, FRAME, {}, now_s=200.0)
    assert closed_ts(restored.due(now_s=200.0)) == [B]  # membership known: no first-bucket wait


def test_restore_from_an_empty_snapshot_is_a_fresh_window() -> None:
    win = established()
    win.restore({})
    assert (win.closed_upto, win.last_seen) == (-1, {})


# --- oldest_open_age ----------------------------------------------------------------------------


def test_oldest_open_age_is_minus_infinity_without_open_buckets() -> None:
    assert window().oldest_open_age(now_s=50.0) == -math.inf


def test_oldest_open_age_counts_from_the_oldest_first_arrival() -> None:
    win = window()
    win.add("n1", B, FRAME, {}, now_s=10.0)
    win.add("n1", 0, FRAME, {}, now_s=12.0)  # an older bucket that arrived later
    win.add("n2", B, FRAME, {}, now_s=14.0)
    assert win.oldest_open_age(now_s=25.0) == 15.0


def test_oldest_open_age_drops_once_the_bucket_closed() -> None:
    win = window()
    win.add("n1", 0, FRAME, {}, now_s=10.0)
    win.due(now_s=10.0 + GRACE_S)
    assert win.oldest_open_age(now_s=100.0) == -math.inf


def test_a_departed_node_that_sends_a_newer_frame_is_a_member_again() -> None:
    win = established()
    win.leave("n3", B, now_s=101.0)
    win.add("n3", B, FRAME, {}, now_s=101.0)  # the departure's bucket: not the group's
    assert "n3" not in win.expected_at(B)
    win.add("n3", 3 * B, FRAME, {}, now_s=102.0)
    assert "n3" not in win.expected_at(2 * B)
    assert "n3" in win.expected_at(3 * B)


def test_a_departure_survives_a_snapshot() -> None:
    win = established()
    win.leave("n3", 2 * B, now_s=101.0)
    restored = window()
    restored.restore(json.loads(json.dumps(win.snapshot())))
    restored.add("n3", B, FRAME, {}, now_s=101.0)  # an older frame, after the restart
    assert "n3" in restored.expected_at(B)
    assert "n3" not in restored.expected_at(2 * B)


def test_a_window_that_only_got_a_departure_waits_for_the_older_frames() -> None:
    """The departure can come before the node's last frames here: the group has not ended."""
    win = window()
    win.leave("n1", B, now_s=0.0)
    assert win.ended(now_s=1.0) is None
    assert win.ended(now_s=20 * B / 1000) == "no frame for 20 buckets"


def test_a_group_whose_every_node_departed_ends_once_the_older_buckets_closed() -> None:
    win = established()
    for node in ("n1", "n2", "n3"):
        win.leave(node, 2 * B, now_s=101.0)
    assert win.ended(now_s=101.0) is None  # bucket B may still get their frames
    for node in ("n1", "n2", "n3"):
        win.add(node, B, FRAME, {}, now_s=102.0)
    assert closed_ts(win.due(now_s=102.0)) == [B]
    assert win.ended(now_s=102.0) == "every node left the group"
