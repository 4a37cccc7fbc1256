"""bench.e2e_latency's accounting, on a made-up run: the split adds up to onset ->
Alertmanager, the closing sample is the first acknowledged one past the bucket and the
grace, and only a faulty job's alerts from its fault's bucket on are traced."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.e2e_latency import (
    BUCKET_MS,
    INGEST_GRACE_S,
    Job,
    Observed,
    SimClock,
    closing_sample,
    timelines,
)
from streams.lab.simulator import ClusterConfig, NvlinkBusFault

BUCKET = 1_800_000_000_000 // BUCKET_MS * BUCKET_MS  # a bucket start, ms
ONSET = BUCKET + 7_000


def _log_line(seconds: float, message: str) -> str:
    at = datetime.fromtimestamp(seconds, UTC).isoformat()
    return json.dumps(
        {"level": "INFO", "logger": "peerwatch.worker", "message": message, "time": at}
    )


def _alert(group: str, alertname: str, node: str | None, updated_s: float) -> dict:
    labels = {"alertname": alertname, "group": group, "source": "peerwatch"}
    if node is not None:
        labels["node"] = node
    return {"labels": labels, "updatedAt": datetime.fromtimestamp(updated_s, UTC).isoformat()}


def test_the_split_adds_up_and_traces_only_the_faulty_jobs_alerts(tmp_path: Path) -> None:
    config = ClusterConfig(
        job_name="job-a",
        job_nodes=12,
        start_ms=BUCKET - 10 * BUCKET_MS,
        faults=(NvlinkBusFault(node="gpu070", gpu=3, onset_ms=ONSET),),
    )
    jobs = [Job(config, "gpu070", ONSET)]
    end_s = (BUCKET + BUCKET_MS) / 1000
    closes_at = BUCKET + BUCKET_MS + int(INGEST_GRACE_S * 1000)
    seen = Observed()
    # acknowledged in this order: too early, the closing one (its sample 2 s past), a later one
    seen.requests = [
        ([closes_at - 500], end_s + 16.0),
        ([closes_at - 100, closes_at + 2_000], end_s + 18.5),
        ([closes_at + 4_000], end_s + 19.5),
    ]
    seen.frames = {("job-a", BUCKET): [end_s + 18.7, end_s + 18.8]}
    seen.alerts = {
        "1": _alert("job-a", "PeerwatchNodeCollapse", "gpu070", end_s + 19.4),
        "2": _alert("job-a", "PeerwatchOld", "gpu070", end_s + 19.4),  # an older bucket's
    }
    log = tmp_path / "worker.log"
    log.write_text(
        "\n".join(
            [
                "not json: Faust's banner",
                _log_line(end_s + 19.0, f"bucket_scored group=job-a bucket={BUCKET} nodes=12"),
                _log_line(
                    end_s + 19.1,
                    "alert_firing alertname=PeerwatchNodeCollapse group=job-a node=gpu070 "
                    f"bucket={BUCKET} score=145.00 reason=XID 145",
                ),
                _log_line(
                    end_s + 19.1,
                    "alert_firing alertname=PeerwatchOld group=job-a node=gpu070 "
                    f"bucket={BUCKET - BUCKET_MS} score=3.00 reason=old",
                ),
            ]
        )
        + "\n"
    )

    assert closing_sample(seen, closes_at) == (closes_at + 2_000, end_s + 18.5)
    (line,) = timelines(jobs, seen, SimClock(0, 0.0, 1.0), log)
    assert line.alert == "PeerwatchNodeCollapse gpu070"
    assert line.bucket_s == pytest.approx(23.0)
    assert line.grace_s == pytest.approx(INGEST_GRACE_S + 2.0)
    assert line.remote_write_s == pytest.approx(1.5)
    assert line.processing_s == pytest.approx(0.9)
    assert line.ingest_s + line.worker_s + line.sink_s == pytest.approx(line.processing_s)
    assert line.total_s == pytest.approx(end_s + 19.4 - ONSET / 1000)
    assert line.floor_s == pytest.approx(23.0 + INGEST_GRACE_S)
