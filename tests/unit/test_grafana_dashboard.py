"""deploy/grafana/peerwatch.json: a Grafana dashboard whose queries name peerwatch's metrics.

(That every query returns data from a real Prometheus scraping a worker is
tests/integration/test_grafana_dashboard.py.)
"""

from __future__ import annotations

import re

import pytest

from streams.settings import Settings
from streams.telemetry.metrics import IngestMetrics, WorkerMetrics
from tests import grafana_dashboard as gd

DASHBOARD = gd.load()
METRIC_NAME = re.compile(r"\b(peerwatch_[a-z0-9_]+)")


def exported_names() -> set[str]:
    """Every sample name peerwatch's processes export (``_total``, ``_bucket``, ... included)."""
    names: set[str] = set()
    for registry in (WorkerMetrics().registry, IngestMetrics().registry):
        for family in registry.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
            if family.type in ("counter", "histogram"):  # no samples before a first .labels()
                names.update({f"{family.name}_total", f"{family.name}_bucket"})
    return names


def test_the_annotations_land_on_this_dashboard_by_default() -> None:
    """The Grafana sink's default dashboardUID is this dashboard's uid, and the built-in
    annotation query (the dashboard's own annotations) is on."""
    assert Settings().grafana_dashboard_uid == DASHBOARD["uid"]
    (builtin,) = [a for a in DASHBOARD["annotations"]["list"] if a.get("builtIn")]
    assert builtin["enable"] and builtin["target"]["type"] == "dashboard"


def test_an_empty_dashboard_uid_annotates_organisation_wide() -> None:
    assert Settings(grafana_dashboard_uid="").grafana_dashboard_uid is None


def test_a_current_schema_with_a_prometheus_datasource_variable() -> None:
    assert DASHBOARD["schemaVersion"] >= 41  # Grafana 12 and later
    datasource = gd.variable(DASHBOARD, "datasource")
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for panel in gd.panels(DASHBOARD):
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.parametrize("name", ["group", "node"])
def test_group_and_node_variables_are_label_values_queries(name: str) -> None:
    found = gd.variable(DASHBOARD, name)
    _, label = gd.label_values(found["definition"])
    assert label == name and found["query"]["query"] == found["definition"]
    assert found["includeAll"] and found["allValue"] == ".*"


@pytest.mark.parametrize(("where", "expr"), list(gd.queries(DASHBOARD)))
def test_every_query_names_metrics_peerwatch_exports(where: str, expr: str) -> None:
    """A renamed metric breaks this test, not an SRE's dashboard."""
    names = set(METRIC_NAME.findall(expr))
    assert names, f"{where}: no peerwatch metric in {expr!r}"
    assert names <= exported_names(), f"{where}: {sorted(names - exported_names())}"


def test_panels_have_unique_ids_and_fit_the_grid_without_overlap() -> None:
    ids = [p["id"] for p in DASHBOARD["panels"]] + [
        p["id"] for r in DASHBOARD["panels"] for p in r.get("panels", ())
    ]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in DASHBOARD["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + i, pos["y"] + j) for i in range(pos["w"]) for j in range(pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_the_issue_asks_for_these_views() -> None:
    """Per-node score heatmap per group, firing alerts, XIDs and remaps, fail-slow
    throughput and SLO, composition and phase, ingest and worker health."""
    exprs = " ".join(e for _, e in gd.queries(DASHBOARD))
    (heatmap,) = [p for p in gd.panels(DASHBOARD) if p["type"] == "heatmap"]
    assert heatmap["repeat"] == "group" and "peerwatch_node_score" in heatmap["targets"][0]["expr"]
    for metric in (
        "peerwatch_alert_firing",
        "peerwatch_node_xid_alerts_total",
        "peerwatch_node_remapped_rows",
        "peerwatch_job_throughput_baseline",
        "peerwatch_job_below_slo_seconds_total",
        "peerwatch_group_nodes",
        "peerwatch_group_phase",
        "peerwatch_worker_ready",
        "peerwatch_ingest_requests_total",
    ):
        assert metric in exprs, metric
