"""`peerwatch backtest` of a fleet, against the real Debian VictoriaMetrics and Prometheus
(issue 25): more series than VictoriaMetrics lists in one ``/api/v1/series`` call
(``-search.maxSeries``, 30,000), a request still refused for a server limit, and a
Prometheus that does not store the group label (its external labels).

The history: ten minutes of five simulated clusters of 62 job nodes and a spare each
(``gpu_perf``, ``infiniband`` and ``trainer`` series on: 30,230 series the catalog
reads, as the issue's 30,225 of 5 x 63 nodes), one of
them with an NVLink + bus fault (XID 145/149, then 79) on one node at minute 5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.catalog import features_for
from streams.deploy_config import catalog_metric_names
from streams.lab.launchers import VictoriaMetrics
from streams.lab.simulator import ClusterConfig, NvlinkBusFault
from streams.settings import Settings
from tests.integration.conftest import start_or_fail
from tests.integration.harness import backfilled_prometheus
from tests.integration.test_backtest import History, one_line_error, simulated_history

MINUTE = 60_000
START_MS = 1_759_276_800_000  # 2025-10-01T00:00:00Z
END_MS = START_MS + 10 * MINUTE
CLUSTERS = 5
FAULTY = 2  # the cluster with the fault
FAULT_NODE = "c2n007"
SERIES_LIMIT = 30_000  # VictoriaMetrics' -search.maxSeries default (victoria-metrics -help)

ParsedSeries = tuple[dict[str, str], list[int], list[float]]


def _cluster(k: int) -> ClusterConfig:
    faults = (NvlinkBusFault(FAULT_NODE, gpu=3, onset_ms=START_MS + 5 * MINUTE),)
    return ClusterConfig(
        seed=10 + k,
        cluster=f"b200-{k}",
        job_name=f"pretrain-{k}",
        job_nodes=62,
        spares=1,
        host_prefix=f"c{k}n",
        first_host_number=1,
        start_ms=START_MS,
        metric_families=frozenset({"gpu_perf", "infiniband", "trainer"}),
        faults=faults if k == FAULTY else (),
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> History:
    read = set(catalog_metric_names(features_for(Settings())))
    return simulated_history(
        [_cluster(k) for k in range(CLUSTERS)],
        _cluster(FAULTY),
        FAULT_NODE,
        END_MS,
        tmp_path_factory.mktemp("events"),
        keep=read.__contains__,
    )


def _import(url: str, series: list[ParsedSeries]) -> None:
    """``series`` into a VictoriaMetrics through ``/api/v1/import`` (JSON lines)."""
    lines = "".join(
        json.dumps({"metric": labels, "values": values, "timestamps": stamps}) + "\n"
        for labels, stamps, values in series
    )
    response = httpx.post(f"{url}/api/v1/import", content=lines.encode(), timeout=120)
    assert response.status_code == 204, response.text
    httpx.get(f"{url}/internal/force_flush", timeout=60).raise_for_status()


@pytest.fixture(scope="module")
def victoria_metrics(tmp_path_factory: pytest.TempPathFactory, fleet: History) -> Iterator[str]:
    """A VictoriaMetrics (its default limits) holding the whole fleet."""
    server = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    start_or_fail(server)  # type: ignore[arg-type]
    try:
        _import(server.url, fleet.series)
        yield server.url
    finally:
        server.stop()


def _backtest(
    *args: str, out: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "backtest", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


RANGE = ["--start", str(START_MS / 1000), "--end", "2025-10-01T00:10:00Z"]


def _found_the_fault(report: dict[str, Any], fleet: History) -> None:
    lead = report["lead_time"]
    assert lead["events"] == 1 and lead["found"] == 1, lead
    (row,) = lead["rows"]
    assert row["node"] == FAULT_NODE and row["ts_ms"] == fleet.xid_ms
    assert row["found"] and row["at_or_before"], row


def test_a_fleet_past_the_servers_series_limit_is_read_group_by_group(
    victoria_metrics: str, fleet: History, tmp_path: Path
) -> None:
    assert len(fleet.series) > SERIES_LIMIT
    names = sorted(catalog_metric_names(features_for(Settings())))
    whole = {"match[]": '{__name__=~"' + "|".join(names) + '"}', "start": "1759276800"}
    refused = httpx.get(f"{victoria_metrics}/api/v1/series", params={**whole, "limit": "1"})
    assert refused.status_code == 422, refused.text  # what the backtest used to ask first
    assert "exceeds 30000" in refused.text

    started = time.monotonic()
    done = _backtest(
        "--source", "victoriametrics", "--url", victoria_metrics, *RANGE,
        "--group-label", "train_job", "--group-label", "cluster",
        "--events", str(fleet.events), "--chunk-hours", "0.1",  # two chunks
        out=tmp_path,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    _found_the_fault(report, fleet)
    run = report["run"]
    assert run["series"] == len(fleet.series)
    # a job per cluster, then each cluster's spare (no train_job): ten requests a chunk
    assert run["requests"] == 2 * CLUSTERS
    assert run["split"][:2] == ['train_job="pretrain-0"', 'train_job="pretrain-1"']
    assert run["split"][-1] == 'train_job="",cluster="b200-4"'
    assert report["buckets"] >= 2 * CLUSTERS * 19  # the jobs' and the spares' groups
    print(
        f"\n{len(fleet.series)} series, {run['samples']} samples, {run['requests']} requests a "
        f"chunk: backtest {took:.1f} s, {run['seconds']:.1f} s of it reading and scoring"
    )


def test_a_request_still_over_a_server_limit_says_why_and_which_flag(
    tmp_path: Path, fleet: History
) -> None:
    """One metric of one cluster (62 x 8 GPUs) is more than -search.maxExportSeries=100."""
    server = VictoriaMetrics(tmp_path / "victoria-metrics", flags=["-search.maxExportSeries=100"])
    start_or_fail(server)  # type: ignore[arg-type]
    try:
        _import(server.url, [s for s in fleet.series if s[0]["cluster"] == f"b200-{FAULTY}"])
        done = _backtest(
            "--source", "victoriametrics", "--url", server.url, *RANGE, out=tmp_path / "out"
        )  # fmt: skip
    finally:
        server.stop()
    line = one_line_error(done)
    print(f"\n{line}")
    assert line.startswith(
        f"Error: SourceLimited: VictoriaMetrics at {server.url} answered HTTP 400 to "
        "/api/v1/export: "
    )
    # the server's whole reason, its cause and its advice included, then the flag
    assert "the number of matching timeseries exceeds 100; either narrow down the search or " \
           "increase -search.max* command-line flag values at vmselect" in line  # fmt: skip
    assert line.endswith("-- raise the server's -search.maxExportSeries or narrow --selector")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, fleet: History) -> Iterator[str]:
    """A Prometheus holding the faulty cluster's history as backfilled blocks, without its
    cluster and job labels: an external label is added on the way out, never stored."""
    workdir = tmp_path_factory.mktemp("prometheus-backfill")
    stored = [
        ({k: v for k, v in labels.items() if k not in ("cluster", "train_job")}, stamps, values)
        for labels, stamps, values in fleet.series
        if labels["cluster"] == f"b200-{FAULTY}"
    ]
    config = {"global": {"scrape_interval": "30s", "external_labels": {"cluster": "b200-2"}}}
    with backfilled_prometheus(workdir, stored, config) as url:
        yield url


def test_a_prometheus_without_the_group_label_fails_with_the_drops_then_scores_with_it(
    prometheus: str, fleet: History, tmp_path: Path
) -> None:
    args = ["--source", "prometheus", "--url", prometheus, *RANGE, "--events", str(fleet.events)]
    line = one_line_error(_backtest(*args, out=tmp_path / "without"))
    print(f"\n{line}")
    assert line.startswith("Error: NothingScored: no bucket was scored: ")
    assert "; dropped: no_group " in line
    assert "no series carried a group label (group_labels=[cluster]); the series carry " in line
    assert "--extra-label cluster=<your cluster>" in line
    assert not (tmp_path / "without" / "report.json").exists()

    done = _backtest(*args, "--extra-label", "cluster=b200-2", out=tmp_path / "with")
    assert done.returncode == 0, done.stderr[-3000:]
    print(done.stderr.strip().splitlines()[-1])
    report = json.loads((tmp_path / "with" / "report.json").read_text())
    _found_the_fault(report, fleet)
    assert report["run"]["extra_labels"] == {"cluster": "b200-2"}
    # no group label stored: one range query per catalog metric, never all at once
    assert report["run"]["requests"] == len({s[0]["__name__"] for s in fleet.series})
