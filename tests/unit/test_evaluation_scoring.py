"""streams.lab.evaluation.scoring / aggregate: hand-built alerts against hand-built ground truth."""

from __future__ import annotations

import pytest

from detectors.alerts import (
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    AlertChange,
)
from detectors.episodes import AlertEvent, alert_episodes
from detectors.fusion import Signal
from streams.lab.evaluation.aggregate import percentile, summarize
from streams.lab.evaluation.scoring import ScoringWindows, score_run
from streams.lab.simulator.faults import CHECKPOINT_SAVE, SPARE_JOINED, GroundTruth

B = 30_000
HOUR = 3_600_000
DAY = 86_400_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % B  # bucket-aligned start
NODES = [f"n{i:02d}" for i in range(60)]


def at(bucket: int) -> int:
    return T0 + bucket * B


def fire(node, bucket, name=NODE_COLLAPSE, gpu=None, cls=None):
    return AlertEvent(name, node, "firing", at(bucket), gpu=gpu, fault_class=cls)


def resolve(node, bucket, name=NODE_COLLAPSE):
    return AlertEvent(name, node, "resolved", at(bucket))


def nvlink(node, gpu, onset_bucket, xid_bucket=None):
    xid_bucket = onset_bucket if xid_bucket is None else xid_bucket
    return GroundTruth("nvlink_bus_fault", node, gpu, at(onset_bucket), 145, at(xid_bucket))


def slow(node, onset_bucket, end_bucket, kind="gpu_slow", gpu=None):
    return GroundTruth(kind, node, gpu, at(onset_bucket), end_ms=at(end_bucket))


def score(truth, alerts, *, days=1.0, **kw):
    return score_run(
        truth, alerts, nodes=NODES, start_ms=T0, end_ms=T0 + int(days * DAY), bucket_ms=B, **kw
    )


# --- the headline: known figures from a hand-built day --------------------------------------


def headline_run():
    """3 XID faults (1 bucket early, at the XID, missed) + 2 false alerts; 60 nodes x 1 day."""
    truth = [
        nvlink("n01", 3, onset_bucket=100, xid_bucket=110),
        nvlink("n02", 5, onset_bucket=2000),
        nvlink("n03", 0, onset_bucket=2500),
    ]
    alerts = [
        fire("n01", 109, gpu="3", cls="interconnect"),
        fire("n02", 2000, gpu="5"),
        fire("n10", 500, NODE_DEVIATION),
        fire("n11", 2800, NODE_DEVIATION),
    ]
    return score(truth, alerts)


def test_headline_run_gives_the_known_figures():
    s = summarize([headline_run()])
    assert (s.faults, s.detected, s.recall) == (3, 2, pytest.approx(2 / 3))
    assert s.at_or_before_xid_of_detected == 1.0
    assert s.at_or_before_xid == pytest.approx(2 / 3)  # the missed one counts against
    assert s.false_node_alerts == 2
    assert s.node_days == pytest.approx(60.0)
    assert s.false_per_node_day == pytest.approx(2 / 60)
    assert s.false_per_group_day == pytest.approx(2.0)
    assert s.false_per_group_week == pytest.approx(14.0)
    assert s.culprit_accuracy == pytest.approx(2 / 3)
    assert s.gpu_accuracy == pytest.approx(2 / 3)
    assert s.class_accuracy == pytest.approx(1 / 3)  # only n01's alert claims a class
    assert s.buckets_to_xid_p50 == 0.0 and s.buckets_to_xid_max == 0.0


def test_headline_run_per_fault_outcomes():
    early, at_xid, missed = headline_run().faults
    assert (early.node, early.buckets_to_xid, early.at_or_before_xid) == ("n01", -1, True)
    assert early.detect_buckets == 9 and early.lead_s == 30.0
    assert (at_xid.buckets_to_xid, at_xid.at_or_before_xid) == (0, True)
    assert not missed.detected and missed.at_or_before_xid is False
    assert missed.buckets_to_xid is None and not missed.culprit_node_correct


# --- windows ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset", "lookback", "detected", "to_xid", "false_alerts"),
    [
        (-1, 0, False, None, 1),  # before the onset bucket: chance, and a false alert
        (-1, 1, True, -1, 0),  # ... unless a lookback is allowed
        (0, 0, True, 0, 0),  # the XID's own bucket
        (2, 0, True, 2, 0),  # late, within the tolerance of 2 buckets
        (3, 0, False, None, 0),  # too late to count, but the dead node explains it
    ],
)
def test_fault_window_around_the_xid(offset, lookback, detected, to_xid, false_alerts):
    run = score(
        [nvlink("n01", 0, 1000)],
        [fire("n01", 1000 + offset)],
        windows=ScoringWindows(lookback_buckets=lookback),
    )
    (f,) = run.faults
    assert f.detected is detected
    assert f.buckets_to_xid == to_xid
    assert len(run.false_alerts) == false_alerts


@pytest.mark.parametrize(
    ("alert_bucket", "detected", "false_alerts"),
    [
        (1003, True, 0),  # during the fault
        (1042, True, 0),  # after its end, within the tolerance (2)
        (1044, False, 0),  # too late to detect, within the aftermath (5): not false
        (1046, False, 1),  # past the aftermath: a false alert
    ],
)
def test_fault_without_xid_window_runs_to_its_end(alert_bucket, detected, false_alerts):
    run = score([slow("n05", 1000, 1040)], [fire("n05", alert_bucket, NODE_DEVIATION)])
    assert run.faults[0].detected is detected
    assert len(run.false_alerts) == false_alerts


def test_detect_time_from_onset_for_a_fault_without_xid():
    (f,) = score([slow("n05", 1000, 1040)], [fire("n05", 1003, NODE_DEVIATION)]).faults
    assert (f.detect_buckets, f.detect_s, f.buckets_to_xid) == (3, 90.0, None)
    assert f.at_or_before_xid is None


@pytest.mark.parametrize(("alert_bucket", "within"), [(1003, 1.0), (1004, 0.0)])
def test_fail_slow_culprit_within_three_buckets(alert_bucket, within):
    run = score([slow("n05", 1000, 1040)], [fire("n05", alert_bucket, NODE_DEVIATION)])
    s = summarize([run])
    assert s.fail_slow_culprit_3 == within
    assert s.detect_s_p50 == (alert_bucket - 1000) * 30.0


def test_onset_inside_a_bucket_counts_from_that_bucket():
    truth = [GroundTruth("gpu_slow", "n05", None, at(1000) + 17_000, end_ms=at(1040))]
    (f,) = score(truth, [fire("n05", 1000, NODE_DEVIATION)]).faults
    assert f.detected and f.detect_buckets == 0


# --- culprit, GPU, class ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer_bucket", "culprit"),
    [
        (None, True),
        (999, True),  # a false alert before the fault window does not take the blame
        (1002, False),  # a healthy peer paged first
        (1003, False),  # ... or in the same bucket: the culprit was not named alone
        (1004, True),  # after the culprit: a false alert, but the culprit was named first
    ],
)
def test_culprit_needs_no_healthy_peer_paged_first(peer_bucket, culprit):
    alerts = [fire("n05", 1003, NODE_DEVIATION)]
    if peer_bucket is not None:
        alerts.append(fire("n06", peer_bucket, NODE_DEVIATION))
    (f,) = score([slow("n05", 1000, 1040)], alerts).faults
    assert f.detected and f.culprit_node_correct is culprit


def test_concurrent_fault_on_another_node_does_not_steal_the_culprit():
    truth = [slow("n05", 1000, 1040), slow("n06", 1000, 1040, kind="cpu_contention")]
    alerts = [fire("n06", 1002, NODE_DEVIATION), fire("n05", 1003, NODE_DEVIATION)]
    run = score(truth, alerts)
    assert all(f.culprit_node_correct for f in run.faults)
    assert run.false_alerts == ()


@pytest.mark.parametrize(
    ("gpu_label", "named", "correct"),
    [("3", "3", True), ("5", "5", False), (None, None, False)],
)
def test_right_node_wrong_gpu(gpu_label, named, correct):
    (f,) = score([nvlink("n01", 3, 1000)], [fire("n01", 1000, gpu=gpu_label)]).faults
    assert f.detected and f.culprit_node_correct
    assert (f.gpu_named, f.gpu_correct) == (named, correct)


def test_gpu_is_judged_on_the_earliest_bucket_that_names_one():
    alerts = [fire("n01", 1000), fire("n01", 1001, NODE_SILENT, gpu="3")]
    (f,) = score([nvlink("n01", 3, 1000)], alerts).faults
    assert f.gpu_correct is True and f.first_alertname == NODE_COLLAPSE


def test_fault_without_gpu_has_no_gpu_verdict():
    (f,) = score([slow("n05", 1000, 1040)], [fire("n05", 1003, NODE_DEVIATION, gpu="2")]).faults
    assert f.gpu_correct is None and f.gpu_named is None


@pytest.mark.parametrize(
    ("truth", "alerts", "alert_class", "correct"),
    [
        # a family that names its class by construction
        (GroundTruth("node_silent", "n07", None, at(1000)), [fire("n07", 1002, NODE_SILENT)],
         "host", True),
        # collapse says nothing about what broke: no class, not right
        (nvlink("n01", 0, 1000), [fire("n01", 1000)], None, False),
        (nvlink("n01", 0, 1000), [fire("n01", 1000, cls="interconnect")], "interconnect", True),
        (nvlink("n01", 0, 1000), [fire("n01", 1000, cls="memory")], "memory", False),
        # the compound accepts either of its causes
        (slow("n05", 1000, 1040, kind="congestion_thermal"),
         [fire("n05", 1003, NODE_DEVIATION, cls="compute")], "compute", True),
        (slow("n05", 1000, 1040, kind="cpu_contention"),
         [fire("n05", 1003, NODE_DEVIATION, cls="compute")], "compute", False),
        # two classes claimed in the first classifying bucket: not right
        (nvlink("n01", 0, 1000),
         [fire("n01", 1000, cls="interconnect"), fire("n01", 1000, NODE_SILENT)],
         "host,interconnect", False),
        # an unclassified first alert, then a classified one: the class is the first claimed
        (nvlink("n01", 0, 1000),
         [fire("n01", 1000), fire("n01", 1001, NODE_DEVIATION, cls="interconnect")],
         "interconnect", True),
    ],
)  # fmt: skip
def test_fault_class(truth, alerts, alert_class, correct):
    (f,) = score([truth], alerts).faults
    assert (f.alert_class, f.class_correct) == (alert_class, correct)


# --- false alerts, episodes, group-level events -------------------------------------------------


@pytest.mark.parametrize(
    ("refire_bucket", "false_alerts"),
    [(108, 1), (114, 1), (115, 2)],  # resolved at 104; merge window 10 buckets
)
def test_resolved_then_refired_counts_once_within_the_merge_window(refire_bucket, false_alerts):
    alerts = [
        fire("n10", 100, NODE_DEVIATION),
        resolve("n10", 104, NODE_DEVIATION),
        fire("n10", refire_bucket, NODE_DEVIATION),
        resolve("n10", refire_bucket + 4, NODE_DEVIATION),
    ]
    assert len(score([], alerts).false_alerts) == false_alerts


def test_resent_active_alerts_count_once():
    alerts = [fire("n10", b, NODE_DEVIATION) for b in (100, 101, 102, 103)]
    run = score([], alerts)
    assert len(run.false_alerts) == 1 and run.node_alerts == 1


def test_refired_alert_on_a_fault_counts_one_detection_from_its_first_firing():
    alerts = [fire("n05", 1003, NODE_DEVIATION), resolve("n05", 1010, NODE_DEVIATION),
              fire("n05", 1012, NODE_DEVIATION)]  # fmt: skip
    run = score([slow("n05", 1000, 1040)], alerts)
    assert run.faults[0].first_alert_ts == at(1003)
    assert run.node_alerts == 1 and run.false_alerts == ()


def test_episodes_are_per_alertname_and_node():
    events = [fire("n10", 100, NODE_DEVIATION), fire("n10", 100), fire("n11", 100)]
    assert len(alert_episodes(events, merge_ms=10 * B)) == 3


def test_group_alert_during_checkpoint_is_not_a_false_node_alert():
    save = GroundTruth(CHECKPOINT_SAVE, None, None, at(300), end_ms=at(300) + 25_000)
    run = score([save], [fire(None, 301, GROUP_DEGRADED)])
    assert run.false_alerts == ()
    assert len(run.group_alerts) == 1
    (event,) = run.events
    assert event.group_alerted and not event.blamed
    s = summarize([run])
    assert (s.events, s.events_blamed, s.events_not_blamed_rate, s.group_alerts) == (1, 0, 1.0, 1)


@pytest.mark.parametrize(
    ("alert_bucket", "blamed"),
    [(299, ()), (300, ("n07",)), (305, ("n07",)), (306, ())],  # save in bucket 300, aftermath 5
)
def test_node_alert_during_checkpoint_blames_the_node(alert_bucket, blamed):
    save = GroundTruth(CHECKPOINT_SAVE, None, None, at(300), end_ms=at(300) + 25_000)
    run = score([save], [fire("n07", alert_bucket, NODE_DEVIATION)])
    assert len(run.false_alerts) == 1  # false either way
    assert run.events[0].blamed_nodes == blamed


def test_event_with_a_node_blames_only_that_node():
    joined = GroundTruth(SPARE_JOINED, "n59", None, at(500))
    run = score([joined], [fire("n20", 501, NODE_DEVIATION)])
    assert not run.events[0].blamed
    run = score([joined], [fire("n59", 501, NODE_DEVIATION)])
    assert run.events[0].blamed_nodes == ("n59",)


def test_hot_gpu_must_not_page_its_node():
    hot = GroundTruth("hot_gpu", "n08", 2, at(100), end_ms=at(400))
    run = score([hot], [fire("n08", 200, NODE_DEVIATION)])
    assert run.faults == () and run.must_not_page
    assert len(run.false_alerts) == 1 and run.events[0].blamed_nodes == ("n08",)


def test_must_not_page_rate_counts_only_must_not_page_runs():
    quiet = score([], [fire("n10", 100, NODE_DEVIATION)])
    faulty = headline_run()
    s = summarize([quiet, faulty])
    assert quiet.must_not_page and not faulty.must_not_page
    assert s.must_not_page_runs == 1 and s.must_not_page_false_node_alerts == 1
    assert s.must_not_page_false_per_group_day == pytest.approx(1.0)
    assert s.false_per_group_day == pytest.approx(3 / 2)  # 3 false alerts over 2 group-days


def test_must_not_page_can_be_declared_for_a_run_with_a_fault():
    run = score([nvlink("n01", 0, 1000)], [fire("n01", 1000)], must_not_page=True)
    assert summarize([run]).must_not_page_runs == 1


# --- row-remap creep ----------------------------------------------------------------------------


@pytest.mark.parametrize(("warn_h_before", "warned"), [(80, 1), (71, 0)])
def test_remap_creep_lead_before_the_gpu_disappears(warn_h_before, warned):
    gone = T0 + 200 * HOUR
    creep = GroundTruth("row_remap_creep", "n04", 2, T0, end_ms=gone)
    alert = AlertEvent(NODE_DEVIATION, "n04", "firing", gone - warn_h_before * HOUR, gpu="2")
    run = score([creep], [alert], days=10)
    assert run.faults[0].lead_s == warn_h_before * 3600.0
    s = summarize([run])
    assert s.remap_creep_min_lead_h == pytest.approx(warn_h_before)
    assert s.remap_creep_warned_72h == warned


def test_missed_remap_creep_has_no_lead():
    creep = GroundTruth("row_remap_creep", "n04", 2, T0, end_ms=T0 + 200 * HOUR)
    s = summarize([score([creep], [], days=10)])
    assert s.remap_creep_faults == 1 and s.remap_creep_min_lead_h is None


# --- inputs -------------------------------------------------------------------------------------


def test_alert_changes_are_read_directly():
    change = AlertChange(
        alertname=NODE_COLLAPSE,
        node="n01",
        group="g",
        status="firing",
        severity="critical",
        score=12.0,
        signals=(Signal("procs_running", -40.0, 0.0, 12.0), Signal("gpu_util", -9, 0, 99, "3")),
        reason="collapse",
        bucket_ts=at(1000),
        starts_bucket_ts=at(1000),
        evidence_since_ts=at(1000),
    )
    (f,) = score([nvlink("n01", 3, 1000)], [change]).faults
    assert f.detected and f.gpu_correct
    (g,) = score([nvlink("n01", 3, 1000)], [change.to_dict()]).faults
    assert g == f


def test_unknown_fault_kind_is_an_error():
    with pytest.raises(ValueError, match="no expectation for fault kind 'gremlins'"):
        score([GroundTruth("gremlins", "n01", None, at(10))], [])


def test_fault_without_a_node_is_an_error():
    with pytest.raises(ValueError, match="names no node"):
        score([GroundTruth("gpu_slow", None, None, at(10))], [])


def test_rows_outside_the_run_are_not_scored():
    truth = [nvlink("n01", 0, 4000), slow("n02", -100, -50)]  # after the day / over before it
    assert score(truth, []).faults == ()


@pytest.mark.parametrize(
    "kwargs",
    [{"lookback_buckets": -1}, {"tolerance_buckets": 1.5}, {"tolerance_buckets": 6}],
)
def test_windows_are_validated(kwargs):
    with pytest.raises(ValueError):
        ScoringWindows(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nodes": []}, "nodes"),
        ({"nodes": ["a", "a"]}, "nodes"),
        ({"end_ms": T0}, "end_ms"),
        ({"bucket_ms": 0}, "bucket_ms"),
    ],
)
def test_run_arguments_are_validated(kwargs, match):
    args = {"nodes": NODES, "start_ms": T0, "end_ms": T0 + DAY, "bucket_ms": B, **kwargs}
    with pytest.raises(ValueError, match=match):
        score_run([], [], **args)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([], 50, None), ([10.0], 99, 10.0), ([10.0, 20.0, 30.0, 40.0], 50, 30.0),
     ([10.0, 20.0, 30.0, 40.0], 90, 40.0)],
)  # fmt: skip
def test_percentile_is_an_observed_value(values, q, expected):
    assert percentile(values, q) == expected


def test_empty_summary_has_no_rates():
    s = summarize([])
    assert s.runs == 0 and s.recall is None and s.false_per_group_day is None


@pytest.mark.parametrize(("slowdown", "counted"), [(None, 1), (0.10, 1), (0.2, 1), (0.05, 0)])
def test_fail_slow_target_counts_slowdowns_of_ten_percent_or_more(slowdown, counted):
    truth = GroundTruth("gpu_slow", "n05", 1, at(1000), end_ms=at(1040), slowdown=slowdown)
    run = score([truth], [fire("n05", 1003, NODE_DEVIATION, gpu="1", cls="compute")])
    s = summarize([run])
    assert s.fail_slow_faults == counted
    assert s.recall == 1.0 and s.class_accuracy == 1.0  # counted overall either way


def test_alert_change_labels_give_gpu_and_class():
    change = AlertChange(
        alertname="PeerwatchXid",
        node="n01",
        group="g",
        status="firing",
        severity="critical",
        score=1.0,
        signals=(),
        reason="xid 145",
        bucket_ts=at(1000),
        starts_bucket_ts=at(1000),
        evidence_since_ts=at(1000),
        labels=(("class", "interconnect"), ("gpu", "3")),
    )
    event = AlertEvent.from_change(change)
    assert (event.gpu, event.fault_class) == ("3", "interconnect")
    assert AlertEvent.from_dict(change.to_dict()) == event
    (f,) = score([nvlink("n01", 3, 1000)], [change]).faults
    assert f.gpu_correct and f.class_correct


@pytest.mark.parametrize(("kind", "blamed"), [("two_populations", True), (SPARE_JOINED, False)])
def test_event_without_end_lasts_the_run_unless_it_is_an_instant(kind, blamed):
    event = GroundTruth(kind, "n08", None, at(100))
    run = score([event], [fire("n08", 2000, NODE_DEVIATION)])
    assert run.events[0].blamed is blamed
