"""False pages by severity per group-day: critical pages, node warnings, group alerts."""

from __future__ import annotations

import pytest

from detectors.alerts import GROUP_DEGRADED, NODE_COLLAPSE, NODE_DEVIATION, AlertChange
from detectors.episodes import AlertEvent, alert_episodes
from streams.lab.evaluation.aggregate import summarize
from streams.lab.evaluation.report import build_report, render_text
from streams.lab.evaluation.scoring import score_run
from streams.lab.simulator.faults import GroundTruth

B = 30_000
DAY = 86_400_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(60)]


def page(node, bucket, name, severity, status="firing"):
    return AlertEvent(name, node, status, T0 + bucket * B, severity=severity)


def quiet_day(alerts, days=1.0):
    return score_run([], alerts, nodes=NODES, start_ms=T0, end_ms=T0 + int(days * DAY), bucket_ms=B)


def test_false_pages_split_into_critical_node_warnings_and_group_alerts() -> None:
    run = quiet_day(
        [
            page("n01", 10, NODE_COLLAPSE, "critical"),
            page("n02", 20, NODE_COLLAPSE, "critical"),
            page("n03", 30, NODE_DEVIATION, "warning"),
            page(None, 40, GROUP_DEGRADED, "warning"),
            page(None, 900, GROUP_DEGRADED, "warning", "resolved"),
            page(None, 2000, GROUP_DEGRADED, "warning"),
        ],
        days=2.0,
    )
    s = summarize([run])
    assert s.group_days == pytest.approx(2.0)
    assert (s.false_critical, s.false_node_warnings, s.must_not_page_group_alerts) == (2, 1, 2)
    assert s.false_critical_per_group_day == pytest.approx(1.0)
    assert s.false_node_warnings_per_group_day == pytest.approx(0.5)
    assert s.must_not_page_group_alerts_per_group_day == pytest.approx(1.0)


def test_a_warning_that_escalates_to_critical_counts_as_a_critical_page() -> None:
    (episode,) = alert_episodes(
        [
            page("n01", 10, "PeerwatchXid", "warning"),
            page("n01", 11, "PeerwatchXid", "critical", "resolved"),
            page("n01", 12, "PeerwatchXid", "critical"),
        ],
        merge_ms=10 * B,
    )
    assert episode.critical


def test_group_alerts_in_a_run_with_a_fault_are_no_false_pages() -> None:
    truth = [GroundTruth("nvlink_bus_fault", "n05", 1, T0 + 100 * B, 145, T0 + 100 * B)]
    run = score_run(
        truth,
        [page("n05", 100, NODE_COLLAPSE, "critical"), page(None, 101, GROUP_DEGRADED, "warning")],
        nodes=NODES,
        start_ms=T0,
        end_ms=T0 + DAY,
        bucket_ms=B,
    )
    s = summarize([run])
    assert (s.false_critical, s.false_node_warnings, s.must_not_page_group_alerts) == (0, 0, 0)
    assert s.must_not_page_group_alerts_per_group_day is None


def test_severity_is_read_from_alert_changes_and_their_dicts() -> None:
    change = AlertChange(NODE_COLLAPSE, "n01", "g", "firing", "critical", 9.0, (), "r", T0, T0, T0)
    assert AlertEvent.from_change(change).severity == "critical"
    assert AlertEvent.from_dict(change.to_dict()).severity == "critical"


def test_the_report_shows_group_days_and_each_page_rate() -> None:
    run = quiet_day([page("n01", 10, NODE_COLLAPSE, "critical")])
    report = build_report(
        {"fleet-idle-spares": [run]}, scenario_runtimes_s={"fleet-idle-spares": 123.0}
    )
    text = render_text(report)
    assert "crit/grp-day" in text and "warn/grp-day" in text and "s/grp-day" in text
    (row,) = [line for line in text.splitlines() if line.strip().startswith("fleet-idle-spares ")]
    assert row.split()[-1] == "123" and "1.00" in row


def test_two_groups_group_alerts_are_two_pages_and_a_nodes_alert_is_one() -> None:
    episodes = alert_episodes(
        [
            AlertEvent(GROUP_DEGRADED, None, "firing", T0, severity="warning", group="job"),
            AlertEvent(GROUP_DEGRADED, None, "firing", T0 + B, severity="warning", group="spares"),
            AlertEvent(NODE_COLLAPSE, "n01", "firing", T0, severity="critical", group="job"),
            AlertEvent(NODE_COLLAPSE, "n01", "firing", T0 + B, severity="critical", group="spares"),
        ],
        merge_ms=10 * B,
    )
    assert sorted((ep.alertname, ep.node) for ep in episodes) == [
        (GROUP_DEGRADED, None),
        (GROUP_DEGRADED, None),
        (NODE_COLLAPSE, "n01"),
    ]


def test_details_list_every_false_page_with_its_level_and_severity() -> None:
    run = quiet_day(
        [page("n01", 10, NODE_COLLAPSE, "critical"), page(None, 40, GROUP_DEGRADED, "warning")]
    )
    (block,) = build_report({"fleet-quiet": [run]}).to_dict(details=True)["scenarios"]
    pages = [(p["level"], p["alertname"], p["node"], p["critical"]) for p in block["false_pages"]]
    assert pages == [("node", NODE_COLLAPSE, "n01", True), ("group", GROUP_DEGRADED, None, False)]
