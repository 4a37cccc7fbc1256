"""The spine, end to end on real parts.

simulator → HTTP remote_write → `peerwatch ingest` → Apache Kafka → `peerwatch
worker` (Faust) → Alertmanager and the ``peerwatch.alerts`` topic. A 60-node
job (plus 3 spares) runs through several checkpoint saves, then one node gets
an NVLink + bus fault. Alertmanager's own API must show a critical alert for
exactly that node, starting no later than the bucket that holds the XID, and
nothing for the 59 healthy nodes; the alerts topic must carry the same alerts
that the in-process pipeline decides for the same samples.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streams.lab.simulator import ClusterConfig, NvlinkBusFault, generate, replay
from streams.settings import Settings
from streams.worker.offline import run_offline
from tests.integration.harness import (
    Deployment,
    alerts_in_alertmanager,
    at_least,
    epoch_ms,
    read_alert_records,
    wait_for,
)

BUCKET_MS = 30_000
VICTIM = "gpu084"


def scenario(job: str, fault_after_min: int = 40) -> tuple[ClusterConfig, int]:
    """Saves every ~10 min and the fault ``fault_after_min`` simulated minutes in."""
    now_ms = int(time.time() * 1000)
    start = (now_ms - 2 * 3600_000) // BUCKET_MS * BUCKET_MS
    onset = start + fault_after_min * 60_000 + 7_000
    config = ClusterConfig(
        seed=11,
        job_name=job,
        start_ms=start,
        checkpoint_interval_s=600.0,
        faults=(NvlinkBusFault(node=VICTIM, gpu=3, onset_ms=onset),),
    )
    return config, onset // BUCKET_MS * BUCKET_MS


@pytest.mark.long
async def test_only_the_faulty_node_alerts_at_or_before_its_xid(
    kafka_bootstrap: str, alertmanager_url: str, tmp_path: Path
) -> None:
    deployment = Deployment.new(kafka_bootstrap, alertmanager_url, tmp_path)
    config, xid_bucket = scenario(deployment.job, fault_after_min=30)  # after 3 saves
    end_ms = xid_bucket + 3 * BUCKET_MS
    # what the in-process pipeline decides for the same samples: the live path must too
    offline = run_offline(generate(config, end_ms=end_ms), Settings(group_labels=["train_job"]))
    expected = [(c.status, c.alertname, c.node, c.bucket_ts) for c in offline.changes]
    last_status = {(alertname, node): status for status, alertname, node, _ in expected}
    firing_at_end = {key for key, status in last_status.items() if status == "firing"}

    async def alertmanager_alerts() -> list[dict]:
        return await alerts_in_alertmanager(alertmanager_url, deployment.job)

    def holds_firing(alerts: list[dict]) -> bool:
        return {(a["labels"]["alertname"], a["labels"].get("node")) for a in alerts} >= (
            firing_at_end
        )

    with deployment.ingest(), deployment.worker():
        stats = await replay(deployment.write_url, config, end_ms=end_ms)
        assert stats.rounds == (end_ms - config.start_ms) // BUCKET_MS

        async def victim_alerted() -> list[dict]:
            alerts = await alerts_in_alertmanager(alertmanager_url, deployment.job)
            return [a for a in alerts if a["labels"].get("node") == VICTIM]

        await wait_for(victim_alerted, 90, f"an Alertmanager alert for {VICTIM}")

        async def every_bucket_scored() -> bool:
            return await deployment.buckets_scored() >= stats.rounds

        await wait_for(every_bucket_scored, 60, "the worker to score the last bucket")

        async def lag_drained() -> bool:
            lag = await deployment.worker_samples("peerwatch_worker_consumer_lag")
            return bool(lag) and sum(lag) <= 2

        # every frame was read: the lag of the partitions it read falls to (nearly) nothing.
        # The gauge is sampled every LAG_EVERY_S, so the first value seen may predate the
        # last bucket; a later sample must show it drained.
        await wait_for(lag_drained, 30, "the worker's consumer lag to fall to 2 frames or fewer")
        # the sinks post asynchronously: wait for every alert change on the topic and for
        # Alertmanager to hold what is still firing
        topic_records = await wait_for(
            lambda: read_alert_records(kafka_bootstrap, deployment.alerts_topic),
            30,
            "the alerts topic's records",
            until=at_least(len(expected)),
        )
        alerts = await wait_for(
            alertmanager_alerts, 30, "Alertmanager's alerts", until=holds_firing
        )

    # Exactly the faulty node, critical, starting no later than the XID's bucket
    # (a group-level event, without a node, may accompany the job's death).
    assert {a["labels"]["node"] for a in alerts if "node" in a["labels"]} == {VICTIM}, alerts
    collapse = [a for a in alerts if a["labels"]["alertname"] == "PeerwatchNodeCollapse"]
    assert collapse and collapse[0]["labels"]["severity"] == "critical"
    assert epoch_ms(collapse[0]["startsAt"]) <= xid_bucket
    assert "intr_rate" in collapse[0]["annotations"]["signals"]
    assert collapse[0]["annotations"]["runbook_url"] == "docs/runbooks/PeerwatchNodeCollapse.md"

    # The live path decided what the in-process pipeline decides for the same samples.
    live = [
        (r["status"], r["labels"]["alertname"], r["labels"].get("node"), r["bucket_ts"])
        for r in topic_records
    ]
    assert live == expected
