"""streams.lab.evaluation.report: documented JSON keys, PASS / MISS / N/A, the rendered tables."""

from __future__ import annotations

import dataclasses
import json

import pytest

from detectors.alerts import NODE_COLLAPSE, NODE_DEVIATION
from detectors.episodes import AlertEvent
from streams.lab.evaluation.aggregate import Summary, summarize
from streams.lab.evaluation.report import (
    BLOCK_KEYS,
    REPORT_KEYS,
    SCHEMA,
    TARGET_KEYS,
    TARGETS,
    build_report,
    check_targets,
    render_markdown,
    render_text,
)
from streams.lab.evaluation.scoring import score_run
from streams.lab.simulator.faults import CHECKPOINT_SAVE, GroundTruth

B = 30_000
DAY = 86_400_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(60)]
TARGET_NAMES = [t.key for t in TARGETS]


def at(bucket: int) -> int:
    return T0 + bucket * B


def run(truth, alerts):
    return score_run(truth, alerts, nodes=NODES, start_ms=T0, end_ms=T0 + DAY, bucket_ms=B)


def nvlink_run(alert_offset: int | None):
    truth = [GroundTruth("nvlink_bus_fault", "n01", 0, at(1000), 145, at(1000))]
    alerts = []
    if alert_offset is not None:
        alerts.append(AlertEvent(NODE_COLLAPSE, "n01", "firing", at(1000 + alert_offset)))
    return run(truth, alerts)


def quiet_run(false_alerts: int):
    save = GroundTruth(CHECKPOINT_SAVE, None, None, at(300), end_ms=at(300) + 25_000)
    alerts = [
        AlertEvent(NODE_DEVIATION, f"n{i:02d}", "firing", at(2000)) for i in range(false_alerts)
    ]
    return run([save], alerts)


@pytest.fixture
def report():
    return build_report(
        {
            "nvlink_bus": [nvlink_run(0), nvlink_run(-0), nvlink_run(None)],
            "checkpoint": [quiet_run(0)],
        },
        runtime_s=42.0,
        meta={"seeds": [1, 2, 3]},
    )


def test_report_json_has_the_documented_keys(report):
    data = report.to_dict()
    assert tuple(data) == REPORT_KEYS
    assert data["schema"] == SCHEMA and data["meta"] == {"seeds": [1, 2, 3]}
    summary_keys = [f.name for f in dataclasses.fields(Summary)]
    for block in (data["overall"], *data["scenarios"]):
        assert tuple(block) == BLOCK_KEYS
        assert list(block["summary"]) == summary_keys
        for target in block["targets"]:
            assert tuple(target) == TARGET_KEYS
    assert [b["name"] for b in data["scenarios"]] == ["nvlink_bus", "checkpoint"]
    assert [t["key"] for t in data["overall"]["targets"]] == [*TARGET_NAMES, "suite_runtime_s"]
    assert [t["key"] for t in data["scenarios"][0]["targets"]] == TARGET_NAMES
    json.dumps(data, allow_nan=False)  # strict JSON


def test_report_details_list_every_fault_and_event(report):
    data = report.to_dict(details=True)
    nvlink = data["scenarios"][0]
    assert [f["run"] for f in nvlink["faults"]] == [0, 1, 2]
    assert [f["detected"] for f in nvlink["faults"]] == [True, True, False]
    assert data["scenarios"][1]["events"][0]["kind"] == CHECKPOINT_SAVE
    json.dumps(data, allow_nan=False)


def test_the_missed_targets_are_named_by_block(report):
    """What ``peerwatch evaluate`` lists on stderr before it exits 1."""
    missed = report.missed()
    assert "overall: XID fail-stop alerted at/before the XID bucket" in missed
    assert "nvlink_bus: XID fail-stop alerted at/before the XID bucket" in missed
    assert not any(m.startswith("checkpoint:") and "XID" in m for m in missed)  # N/A there
    assert all(m.split(": ", 1)[0] in {"overall", "nvlink_bus", "checkpoint"} for m in missed)
    passing = build_report({"checkpoint": [quiet_run(0)]}, runtime_s=1.0)
    assert passing.missed() == []


def test_report_flags_follow_the_figures(report):
    overall = {t.key: t for t in report.overall.targets}
    assert overall["fail_stop_at_or_before_xid"].value == pytest.approx(2 / 3)
    assert overall["fail_stop_at_or_before_xid"].status == "MISS"
    assert overall["fail_stop_at_or_before_xid"].detail == "2/3"
    assert overall["false_node_alerts_per_group_day"].status == "PASS"  # the quiet run: 0
    assert overall["suite_runtime_s"].status == "PASS"
    assert overall["remap_creep_lead_h"].status == "N/A"  # no creep in these runs
    checkpoint = {t.key: t.status for t in report.scenarios[1].targets}
    assert checkpoint["fail_stop_at_or_before_xid"] == "N/A"


BASE = summarize([])


@pytest.mark.parametrize(
    ("key", "fields", "status"),
    [
        ("fail_stop_at_or_before_xid", {}, "N/A"),
        ("fail_stop_at_or_before_xid", {"xid_faults": 6, "at_or_before_xid": 1.0}, "PASS"),
        ("fail_stop_at_or_before_xid", {"xid_faults": 6, "at_or_before_xid": 5 / 6}, "MISS"),
        ("remap_creep_lead_h", {"remap_creep_faults": 2, "remap_creep_min_lead_h": 72.0}, "PASS"),
        ("remap_creep_lead_h", {"remap_creep_faults": 2, "remap_creep_min_lead_h": 71.9}, "MISS"),
        ("remap_creep_lead_h", {"remap_creep_faults": 2, "remap_creep_min_lead_h": None}, "MISS"),
        ("fail_slow_culprit_3_buckets", {"fail_slow_faults": 100, "fail_slow_culprit_3": 0.99},
         "PASS"),
        ("fail_slow_culprit_3_buckets", {"fail_slow_faults": 100, "fail_slow_culprit_3": 0.98},
         "MISS"),
        ("fail_slow_class", {"fail_slow_faults": 20, "fail_slow_class_accuracy": 0.95}, "PASS"),
        ("fail_slow_class", {"fail_slow_faults": 20, "fail_slow_class_accuracy": 0.9}, "MISS"),
        ("false_node_alerts_per_group_day",
         {"must_not_page_runs": 3, "must_not_page_false_per_group_day": 0.1}, "PASS"),
        ("false_node_alerts_per_group_day",
         {"must_not_page_runs": 3, "must_not_page_false_per_group_day": 0.11}, "MISS"),
        ("false_node_alerts_per_group_day", {"must_not_page_runs": 0}, "N/A"),
    ],
)  # fmt: skip
def test_target_status(key, fields, status):
    checks = {c.key: c for c in check_targets(dataclasses.replace(BASE, **fields))}
    assert checks[key].status == status


@pytest.mark.parametrize(("runtime_s", "status"), [(299.9, "PASS"), (300.0, "MISS")])
def test_runtime_target_is_strictly_under_five_minutes(runtime_s, status):
    (check,) = [c for c in check_targets(BASE, runtime_s) if c.key == "suite_runtime_s"]
    assert check.status == status and check.threshold == 300.0


def test_no_runtime_no_runtime_target():
    assert "suite_runtime_s" not in {c.key for c in check_targets(BASE)}


def test_text_table_prints_each_figure_next_to_its_target(report):
    text = render_text(report)
    for check in report.overall.targets:
        line = next(line for line in text.splitlines() if check.label in line)
        assert check.status in line
    assert "= 100 %" in text and "66.7 % (2/3)" in text
    assert "nvlink_bus" in text and "checkpoint" in text and "overall" in text


def test_markdown_table_for_the_readme(report):
    md = render_markdown(report)
    assert md.startswith("| target | figure | goal | status |")
    assert "| MISS |" in md and "| PASS |" in md
