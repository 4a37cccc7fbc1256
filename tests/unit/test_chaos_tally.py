"""streams.lab.chaos: the fault schedule syntax and the counting of lost and doubled work."""

from __future__ import annotations

import logging

import pytest

from streams.lab.chaos.faults import Fault, parse_faults
from streams.lab.chaos.tally import Samples as SampleCounts
from streams.lab.chaos.tally import decision_times, identity, scored_buckets, tally
from streams.telemetry.logs import log_formatter

B = 30_000
COLLAPSE = {"alertname": "PeerwatchNodeCollapse", "group": "g", "node": "n1", "source": "peerwatch"}


# a worker's log: the collapse fired in bucket 1 and resolved in bucket 2, 10 s later
DECISIONS_LOG = (
    "[2026-12-01 08:00:10,000] [1] [INFO] alert_firing alertname=PeerwatchNodeCollapse "
    "group=g node=n1 bucket=30000 score=1\n"
    "[2026-12-01 08:00:20,000] [1] [INFO] alert_resolved alertname=PeerwatchNodeCollapse "
    "group=g node=n1 bucket=60000 score=1\n"
)


def record(status: str, bucket: int, starts: str = "2026-12-01T08:00:00.000Z") -> dict:
    return {"status": status, "labels": COLLAPSE, "bucket_ts": bucket, "starts_at": starts}


def run(**overrides: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "faults": [],
        "samples": SampleCounts(),
        "expected_buckets": {("g", 0): 3, ("g", B): 3},
        "scored": [("w1", "g", 0, 3), ("w1", "g", B, 3)],
        "expected_changes": [("firing", identity(COLLAPSE), B)],
        "decided": [record("firing", B)],
        "am_seen": {identity(COLLAPSE): {1796112000000}},
        "am_final": {identity(COLLAPSE)},
    }
    args.update(overrides)
    return tally(**args)  # type: ignore[arg-type]


def test_parse_faults_sorts_by_start_and_keeps_durations() -> None:
    assert parse_faults("am-outage@40:300, kill-worker@20") == (
        Fault("kill-worker", 20.0),
        Fault("am-outage", 40.0, 300.0),
    )


@pytest.mark.parametrize("text", ["kill-worker", "reboot@3", "am-outage@10", "kill-worker@-1"])
def test_parse_faults_rejects_what_it_cannot_run(text: str) -> None:
    with pytest.raises(ValueError):
        parse_faults(text)


def test_a_clean_run_is_ok() -> None:
    report = run()
    assert report.ok
    assert (report.buckets_once, report.firing_delivered, report.frames_scored) == (2, 1, 6)


def test_a_bucket_scored_twice_and_one_never_are_counted() -> None:
    report = run(scored=[("w1", "g", 0, 3), ("w2", "g", 0, 3)])
    assert (report.buckets_twice, report.buckets_never, report.buckets_by_two_workers) == (1, 1, 1)
    assert not report.ok


def test_a_bucket_scored_with_fewer_nodes_is_short() -> None:
    report = run(scored=[("w1", "g", 0, 3), ("w1", "g", B, 2)])
    assert report.buckets_short == 1


def test_an_alert_alertmanager_never_showed_is_lost() -> None:
    report = run(am_seen={}, am_final=set())
    assert (report.firing_lost, report.missing_at_end) == (1, 1)


def test_an_alert_decided_twice_is_a_duplicate_decision() -> None:
    report = run(decided=[record("firing", B), record("firing", B)])
    assert report.alerts_decided_twice == 1


def test_a_second_episode_alertmanager_shows_without_a_decision_is_a_duplicate() -> None:
    report = run(am_seen={identity(COLLAPSE): {1796112000000, 1796112030000}})
    assert report.am_duplicates == 1


def test_an_alert_that_fired_and_resolved_inside_an_outage_is_not_lost() -> None:
    times = decision_times([DECISIONS_LOG])
    fired = times[("firing", "PeerwatchNodeCollapse", "g", "n1", B)]
    report = run(
        decided=[record("firing", B), record("resolved", 2 * B)],
        am_seen={},
        am_final=set(),
        decision_times=times,
        am_unreachable=[(fired - 5.0, fired + 5.0)],
    )
    assert (report.firing_lost, report.firing_resolved_unreachable) == (0, 1)


def test_bucket_lines_are_read_from_a_worker_log() -> None:
    text = "[x] [1] [INFO] bucket_scored group=job-a bucket=30000 nodes=7 expected=8\nother"
    assert scored_buckets("w1", text) == [("w1", "job-a", 30000, 7)]


def test_an_alert_shown_again_after_its_resolve_landed_is_resurrected() -> None:
    """A worker that lost the group kept re-sending it as firing (stale state)."""
    times = decision_times([DECISIONS_LOG])
    resolved = times[("resolved", "PeerwatchNodeCollapse", "g", "n1", 2 * B)]
    polls = [resolved - 5] + [resolved + k for k in range(1, 6)]
    decided = [record("firing", B), record("resolved", 2 * B)]
    common = {"decided": decided, "am_final": set(), "decision_times": times}
    back = run(**common, am_polls=(polls, {identity(COLLAPSE): {0, 3, 4}}))
    gone = run(**common, am_polls=(polls, {identity(COLLAPSE): {0}}))
    flicker = run(**common, am_polls=(polls, {identity(COLLAPSE): {0, 1, 3}}))  # one poll
    assert (back.am_resurrected, gone.am_resurrected, flicker.am_resurrected) == (1, 0, 0)


def test_an_alert_resolved_before_it_could_leave_the_outbox_is_not_lost() -> None:
    """A warning superseded a moment later (the critical XID): only its resolve goes out."""
    log = DECISIONS_LOG.replace("08:00:20,000", "08:00:10,200")  # resolved 0.2 s later
    report = run(
        decided=[record("firing", B), record("resolved", 2 * B)],
        am_seen={},
        am_final=set(),
        decision_times=decision_times([log]),
    )
    assert (report.firing_lost, report.firing_resolved_unreachable) == (0, 1)
    # the same alert resolved 10 s later, with Alertmanager reachable, is lost
    assert (
        run(
            decided=[record("firing", B), record("resolved", 2 * B)],
            am_seen={},
            am_final=set(),
            decision_times=decision_times([DECISIONS_LOG]),
        ).firing_lost
        == 1
    )


def test_decision_times_read_the_workers_own_log_format() -> None:
    """The worker's text format lost Faust's brackets: the tally read no decision time
    and counted every alert that fired and resolved during an outage as lost."""
    formatter = log_formatter("text")
    lines = []
    decisions = ((1796112010.0, "firing", 30000), (1796112020.0, "resolved", 60000))
    for created, status, bucket in decisions:
        rec = logging.LogRecord(
            "peerwatch.worker", logging.INFO, __file__, 1,
            f"alert_{status} alertname=PeerwatchNodeCollapse group=g node=n1 bucket={bucket} "
            "score=1", None, None,
        )  # fmt: skip
        rec.created, rec.msecs = created, (created % 1) * 1000  # msecs: the record's own, not now's
        lines.append(formatter.format(rec))
    times = decision_times(["\n".join(lines)])
    fired = times[("firing", "PeerwatchNodeCollapse", "g", "n1", 30000)]
    resolved = times[("resolved", "PeerwatchNodeCollapse", "g", "n1", 60000)]
    assert resolved - fired == pytest.approx(10.0)
