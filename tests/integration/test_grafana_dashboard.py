"""The shipped dashboard against a real Prometheus: every panel's query returns data.

simulator → `peerwatch ingest` → Apache Kafka → `peerwatch worker` (→ Alertmanager),
and Debian's ``prometheus`` scraping the worker's and the ingest's ``/metrics``
every second. The simulated job (16 nodes and 2 spares, every metric family,
checkpoint saves) loses one GPU to uncorrectable row remaps and XID 94, so the
XID, remap and firing-alert panels have something to show. Each query of
``deploy/grafana/peerwatch.json``, with the variables set to the job and the
victim, must return at least one series through ``/api/v1/query``; the
``group`` and ``node`` variables' own queries must offer the job and the victim.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from streams.lab.launchers import Prometheus
from streams.lab.simulator import ALL_FAMILIES, ClusterConfig, replay
from streams.lab.simulator.remap import UncorrectableRemap
from tests import grafana_dashboard as gd
from tests.integration.harness import Deployment, prometheus_running, wait_for

BUCKET_MS = 30_000
VICTIM = "gpu070"
SCRAPE_S = 1
RATE_INTERVAL = "1m"  # Grafana's $__rate_interval: at least 4 scrapes (here 60)


@pytest.fixture
def deployment(kafka_bootstrap: str, alertmanager_url: str, tmp_path: Path) -> Deployment:
    return Deployment.new(kafka_bootstrap, alertmanager_url, tmp_path)


@pytest.fixture
def prometheus(tmp_path: Path, deployment: Deployment) -> Iterator[Prometheus]:
    targets = [f"127.0.0.1:{deployment.metrics_port}", f"127.0.0.1:{deployment.ingest_port}"]
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
        "scrape_configs": [{"job_name": "peerwatch", "static_configs": [{"targets": targets}]}],
    }
    with prometheus_running(tmp_path, config) as server:
        yield server


def scenario(job: str) -> tuple[ClusterConfig, int]:
    """Nine minutes of training with saves every 4 min; the remap and XID 94 at 9 min (the
    fail-slow baseline needs 5 min of healthy buckets)."""
    now_ms = int(time.time() * 1000)
    start = (now_ms - 3600_000) // BUCKET_MS * BUCKET_MS
    onset = start + 9 * 60_000 + 7_000
    config = ClusterConfig(
        seed=5,
        job_name=job,
        job_nodes=16,
        spares=2,
        start_ms=start,
        checkpoint_interval_s=240.0,
        metric_families=ALL_FAMILIES,
        faults=(UncorrectableRemap(node=VICTIM, gpu=1, onset_ms=onset),),
    )
    return config, onset // BUCKET_MS * BUCKET_MS + 4 * BUCKET_MS


async def instant(client: httpx.AsyncClient, url: str, query: str) -> list[dict]:
    reply = await client.get(f"{url}/api/v1/query", params={"query": query})
    assert reply.status_code == 200, f"{query}: {reply.text}"
    return reply.json()["data"]["result"]


def test_every_panel_query_parses_as_promql(tmp_path: Path) -> None:
    """Prometheus' own parser (``promtool check rules``) reads every query, as one
    recording rule each: a typo shows here in a second, with the panel's name."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool (Debian prometheus) is not installed")
    values = {"group": "job-a", "node": "gpu070", "__rate_interval": RATE_INTERVAL}
    for where, expr in gd.queries(gd.load()):
        rules = tmp_path / "rules.yml"
        rule = {"record": "dashboard:query", "expr": gd.substitute(expr, values)}
        rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [rule]}]}))
        done = subprocess.run(
            [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, f"{where}: {done.stdout}{done.stderr}"


@pytest.mark.long
async def test_every_panel_query_returns_data(
    deployment: Deployment, prometheus: Prometheus
) -> None:
    dashboard = gd.load()
    values = {"group": deployment.job, "node": VICTIM, "__rate_interval": RATE_INTERVAL}
    queries = {where: gd.substitute(expr, values) for where, expr in gd.queries(dashboard)}
    config, end_ms = scenario(deployment.job)
    with deployment.ingest(), deployment.worker():
        stats = await replay(deployment.write_url, config, end_ms=end_ms)

        async def every_bucket_scored() -> bool:
            return await deployment.buckets_scored() >= stats.rounds

        await wait_for(every_bucket_scored, 90, "the worker to score the last bucket")
        empty: dict[str, str] = dict(queries)
        async with httpx.AsyncClient(timeout=10.0) as client:

            async def all_answered() -> bool:
                # a counter that appeared a moment ago needs two scrapes before rate() answers
                for where, query in list(empty.items()):
                    if await instant(client, prometheus.url, query):
                        del empty[where]
                return not empty

            try:
                await wait_for(all_answered, 30, "every panel query to return data")
            except pytest.fail.Exception:
                pytest.fail(f"no data for: {empty}", pytrace=False)

            offered = {}
            for name in ("group", "node"):
                selector, label = gd.label_values(gd.variable(dashboard, name)["definition"])
                reply = await client.get(
                    f"{prometheus.url}/api/v1/label/{label}/values",
                    params={"match[]": gd.substitute(selector, values)},
                )
                offered[name] = reply.json()["data"]
    assert deployment.job in offered["group"]
    # the job's nodes (spares carry no job label, so they are in no group)
    assert VICTIM in offered["node"] and len(offered["node"]) == 16, offered["node"]
