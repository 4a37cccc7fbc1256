"""`peerwatch backtest` against the real Debian VictoriaMetrics and Prometheus.

An hour of a simulated 16 + 1 node job with an NVLink + bus fault at minute 40
(XID 145/149 then 79) is loaded into each -- VictoriaMetrics through
``/api/v1/import`` (JSON lines), Prometheus as TSDB blocks made by ``promtool tsdb
create-blocks-from openmetrics`` -- and backtested by the command an operator runs;
report.json must show the fault's node alerted at or before its XID (and, with the job's
failure after it as --job-events, the retry advisor excluding the node). Then the
errors an operator meets: an unreachable server, a selector that matches nothing,
an empty range.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.lab.launchers import VictoriaMetrics, free_port
from streams.lab.simulator import ClusterConfig, NvlinkBusFault, generate, ground_truth
from tests.integration.conftest import start_or_fail
from tests.integration.harness import backfilled_prometheus

MINUTE = 60_000
START_MS = 1_759_276_800_000  # 2025-10-01T00:00:00Z: history, older than any retention default
END_MS = START_MS + 60 * MINUTE
FAULT_NODE = "gpu071"
CLUSTER = "b200-a"
GROUPING = {"PEERWATCH_GROUP_LABELS": '["train_job"]'}  # the simulated job's label


@dataclass(frozen=True)
class History:
    series: list[tuple[dict[str, str], list[int], list[float]]]  # whole series, time-ordered
    events: Path  # the known XIDs, as an operator would list them
    xid_ms: int


def simulated_history(
    configs: Sequence[ClusterConfig],
    faulty: ClusterConfig,
    fault_node: str,
    end_ms: int,
    events_dir: Path,
    keep: Callable[[str], bool] = lambda name: True,
) -> History:
    """The clusters' whole series (finite samples, metrics ``keep`` takes) as a TSDB would
    hold them, and the faulty cluster's one XID (on ``fault_node``) as an operator's
    known-events file."""
    whole: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[int], list[float]]] = {}
    for config in configs:
        for _, series in generate(config, config.start_ms, end_ms):
            for s in series:
                if not keep(s.labels["__name__"]):
                    continue
                key = tuple(sorted(s.labels.items()))
                entry = whole.setdefault(key, (dict(s.labels), [], []))
                for ts, value in s.samples:
                    if math.isfinite(value):
                        entry[1].append(ts)
                        entry[2].append(value)
    [xid] = [row for row in ground_truth(faulty, end_ms) if row.xid is not None]
    assert xid.node == fault_node and xid.xid_ms is not None
    events = events_dir / "xids.jsonl"
    events.write_text(json.dumps({"ts_ms": xid.xid_ms, "node": xid.node, "kind": f"xid{xid.xid}"}))
    return History(list(whole.values()), events, xid.xid_ms)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    config = ClusterConfig(
        seed=3,
        job_nodes=16,
        spares=1,
        start_ms=START_MS,
        faults=(NvlinkBusFault(FAULT_NODE, gpu=3, onset_ms=START_MS + 40 * MINUTE),),
    )
    return simulated_history(
        [config], config, FAULT_NODE, END_MS, tmp_path_factory.mktemp("events")
    )


@pytest.fixture(scope="module")
def victoria_metrics(tmp_path_factory: pytest.TempPathFactory, history: History) -> Iterator[str]:
    """A VictoriaMetrics holding the history, imported as JSON lines."""
    server = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    start_or_fail(server)  # type: ignore[arg-type]
    try:
        lines = "".join(
            json.dumps({"metric": labels, "values": values, "timestamps": stamps}) + "\n"
            for labels, stamps, values in history.series
        )
        response = httpx.post(f"{server.url}/api/v1/import", content=lines.encode(), timeout=60)
        assert response.status_code == 204, response.text
        httpx.get(f"{server.url}/internal/force_flush", timeout=30).raise_for_status()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, history: History) -> Iterator[str]:
    """A Prometheus whose TSDB holds the history as backfilled blocks."""
    workdir = tmp_path_factory.mktemp("prometheus-backfill")
    with backfilled_prometheus(
        workdir, history.series, {"global": {"scrape_interval": "30s"}}
    ) as url:
        yield url


def _backtest(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    """``peerwatch backtest ARGS --out OUT`` as an operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "streams", "backtest", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **GROUPING},
    )


def _range() -> list[str]:
    return ["--start", str(START_MS / 1000), "--end", "2025-10-01T01:00:00Z"]


def _found_the_fault(report: dict[str, Any], history: History) -> dict[str, Any]:
    lead = report["lead_time"]
    assert lead["events"] == 1 and lead["found"] == 1, lead
    (row,) = lead["rows"]
    assert row["node"] == FAULT_NODE and row["ts_ms"] == history.xid_ms
    assert row["found"] and row["at_or_before"], row
    assert row["first_alert_node"] == FAULT_NODE
    return row


def test_backtest_from_victoriametrics_alerts_the_nvlink_node_by_its_xid(
    victoria_metrics: str, history: History, tmp_path: Path
) -> None:
    job = {labels["train_job"] for labels, _, _ in history.series if "train_job" in labels}.pop()
    nodes = sorted({labels["instance"].split(":")[0] for labels, _, _ in history.series
                    if labels.get("train_job") == job})  # fmt: skip
    failed_ms = history.xid_ms + 5 * MINUTE  # the job died after its XID
    jobs = tmp_path / "jobs.jsonl"
    attempt = {"job_id": "s1", "name": "llm", "attempt": 1, "nodes": nodes, "group": job}
    jobs.write_text("".join(
        json.dumps({**attempt, "state": state, "ts": ts}) + "\n"
        for state, ts in (("running", START_MS), ("failed", failed_ms))
    ))  # fmt: skip
    done = _backtest(
        "--source", "victoriametrics", "--url", victoria_metrics,
        "--selector", f'{{cluster="{CLUSTER}"}}', *_range(),
        "--events", str(history.events), "--chunk-hours", "0.25",  # four chunks
        "--job-events", str(jobs), out=tmp_path / "out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    tmp_path = tmp_path / "out"
    report = json.loads((tmp_path / "report.json").read_text())
    _found_the_fault(report, history)
    assert report["run"]["job_events"] == 2  # the retry advisor saw the XID alert first
    steps = [(a["kind"], a["node"], a["bucket_ts"], a["figures"]["delay_s"])
             for a in report["advice"]["items"] if a["advisor"] == "retry"]  # fmt: skip
    assert steps == [("exclude_nodes", FAULT_NODE, failed_ms, 600.0)]
    assert report["buckets"] >= 115  # an hour of 30-s buckets, the job's restart aside
    assert report["run"]["series"] == len(history.series)
    assert report["run"]["selector"] == f'{{cluster="{CLUSTER}"}}'
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and FAULT_NODE in page
    assert "known events found 1/1" in done.stderr


def test_backtest_from_prometheus_alerts_the_nvlink_node_by_its_xid(
    prometheus: str, history: History, tmp_path: Path
) -> None:
    done = _backtest(
        "--source", "prometheus", "--url", prometheus, "--selector", f'{{cluster="{CLUSTER}"}}',
        *_range(), "--events", str(history.events), out=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    _found_the_fault(report, history)
    assert report["run"]["source"] == "Prometheus"


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The ``Error: ...`` line of a backtest that failed as the CLI fails (exit 1)."""
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    return line


def test_backtest_of_an_unreachable_server_is_a_one_line_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = _backtest("--source", "victoriametrics", "--url", url, *_range(), out=tmp_path)
    line = one_line_error(done)
    assert f"SourceUnreachable: VictoriaMetrics at {url} is unreachable" in line


def test_backtest_of_a_selector_matching_nothing_is_a_one_line_error(
    victoria_metrics: str, tmp_path: Path
) -> None:
    done = _backtest(
        "--source", "victoriametrics", "--url", victoria_metrics,
        "--selector", '{cluster="no-such-cluster"}', *_range(), out=tmp_path,
    )  # fmt: skip
    assert "NoSeries: VictoriaMetrics: no series matches the selector" in one_line_error(done)
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize(
    ("start", "end", "says"),
    [
        ("2025-10-01T01:00:00Z", "2025-10-01T00:00:00Z", "BadRange: the range is empty"),
        ("2025-10-01T00:00:00Z", "2025-10-01T00:00:00Z", "BadRange: the range is empty"),
        ("yesterday", "now", "BadRange: 'yesterday' is not a time"),
    ],
)
def test_backtest_of_an_empty_or_unreadable_range_is_a_one_line_error(
    tmp_path: Path, start: str, end: str, says: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # the range is refused before any request
    done = _backtest(
        "--source", "prometheus", "--url", url, "--start", start, "--end", end, out=tmp_path
    )
    assert says in one_line_error(done)
