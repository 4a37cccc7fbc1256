"""detectors.advisors.checkpoint_family: what counts as a fail-stop, stale buckets, the
snapshot key."""

from __future__ import annotations

import json

from detectors.advisors.checkpoint_family import CheckpointAdvisors, CheckpointState, fail_stop
from detectors.advisors.checkpoint_interval import CheckpointIntervalParams
from detectors.advisors.checkpoint_io import CheckpointIoParams
from detectors.families import NODE_DEVIATION, XID_ALERT
from detectors.family import BucketEvidence, ClosedBucket
from detectors.phase import Phase
from detectors.vocabulary import AlertChange

FAMILY = CheckpointAdvisors(CheckpointIoParams(), CheckpointIntervalParams(), 30_000)


def xid(node: str, action: str | None, alertname: str = XID_ALERT) -> AlertChange:
    return AlertChange(
        alertname, node, "job", "firing", "critical", 94.0, (), "XID 94", 0, 0, 0, action=action
    )


def test_an_xid_that_restarts_the_job_on_a_job_node_is_a_fail_stop() -> None:
    job = {"n1", "n2"}
    assert fail_stop([xid("n1", "RESTART_APP")], job)
    assert fail_stop([xid("n2", "RESTART_BM")], job)
    assert not fail_stop([xid("n1", "IGNORE")], job)  # logged, the job runs on
    assert not fail_stop([xid("spare", "RESTART_APP")], job)  # not the job's
    assert not fail_stop([xid("n1", "RESTART_APP", NODE_DEVIATION)], job)
    assert not fail_stop([xid("n1", None)], job)


def bucket(ts: int, util: float = 99.0) -> ClosedBucket:
    frames = {n: {"gpu_util": util} for n in ("n1", "n2")}
    return ClosedBucket("job", ts, frames, {}, frozenset(frames))


def test_a_stale_or_unphased_bucket_changes_nothing() -> None:
    found = BucketEvidence(phase=Phase("training", 1, False, 0.0, 0.0, 99.0))
    state = FAMILY.step(FAMILY.new(), bucket(60_000), found).state
    assert state.last_ts == 60_000 and state.interval.up_s == 30.0
    assert FAMILY.step(state, bucket(30_000), found).state == state  # a redelivery
    assert FAMILY.step(state, bucket(90_000), BucketEvidence()).state == state  # no phase


def test_the_xid_and_the_death_after_it_are_one_failure() -> None:
    running = BucketEvidence(phase=Phase("training", 1, False, 0.0, 0.0, 99.0))
    dying = BucketEvidence(
        phase=Phase("training", 2, False, 0.0, 0.0, 99.0), changes=(xid("n1", "RESTART_APP"),)
    )
    dead = BucketEvidence(phase=Phase("idle", 1, False, 0.0, 0.0, 0.0))
    state = FAMILY.new()
    for ts, found in ((0, running), (30_000, dying), (60_000, dead), (90_000, dead)):
        state = FAMILY.step(state, bucket(ts), found).state
    assert state.interval.failures == 1


def test_snapshot_key_round_trips_and_is_absent_before_the_first_bucket() -> None:
    assert FAMILY.save("job", None) == {}
    found = BucketEvidence(phase=Phase("save", 1, True, 40e9, 0.0, 20.0))
    state = FAMILY.step(FAMILY.new(), bucket(0, 20.0), found).state
    snap = json.loads(json.dumps(FAMILY.save("job", state)))
    assert set(snap) == {"checkpoint"}
    back = FAMILY.load("job", snap)
    assert isinstance(back, CheckpointState) and back == state
