"""Detector state survives `kill -9` of the worker (Faust changelog tables).

The worker learns the group (membership, the group's usual medians, open
alerts), fires a critical alert for the faulty node, and is killed with
SIGKILL. A new worker with the same app id restores the table from Kafka and
carries on: the open alert is neither lost nor fired again, and no healthy
node pages while the restarted worker finds its feet (no re-warm-up storm).
On both table stores: memory (the restart replays the changelog) and RocksDB (the
restart reopens its files and reads the changelog from where they end).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.lab.simulator import replay
from tests.integration.harness import (
    Deployment,
    alerts_in_alertmanager,
    read_alert_records,
    wait_for,
)
from tests.integration.test_end_to_end import BUCKET_MS, VICTIM, scenario


@pytest.mark.long
@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
async def test_a_killed_worker_keeps_its_state_and_open_alerts(
    kafka_bootstrap: str, alertmanager_url: str, tmp_path: Path, store: str
) -> None:
    deployment = Deployment.new(kafka_bootstrap, alertmanager_url, tmp_path)
    deployment.env["PEERWATCH_STORE"] = store
    config, xid_bucket = scenario(deployment.job, fault_after_min=30)
    crash_at = xid_bucket + 4 * BUCKET_MS
    end_ms = crash_at + 12 * BUCKET_MS  # the job is dead by then; it restarts 10 min later
    with deployment.ingest():
        worker = deployment.worker().start()
        try:
            first = await replay(deployment.write_url, config, end_ms=crash_at)

            async def caught_up() -> bool:
                return await deployment.buckets_scored() >= first.rounds - 1

            await wait_for(caught_up, 90, "the first worker to score up to the crash")
            await wait_for(deployment.acked_frames_committed, 30, "the acked frames' commits")
            worker.kill()  # SIGKILL: no shutdown, no final commit

            worker = deployment.worker().start()
            await replay(deployment.write_url, config, start_ms=crash_at, end_ms=end_ms)

            async def restarted_caught_up() -> bool:
                return await deployment.buckets_scored() >= (end_ms - crash_at) // BUCKET_MS - 1

            await wait_for(restarted_caught_up, 90, "the restarted worker to catch up")
            await wait_for(deployment.acked_frames_committed, 30, "the acked frames' commits")
        finally:
            worker.stop()
        records = await read_alert_records(kafka_bootstrap, deployment.alerts_topic)
        alerts = await alerts_in_alertmanager(alertmanager_url, deployment.job)

    firing = [
        (r["labels"]["alertname"], r["labels"].get("node"))
        for r in records
        if r["status"] == "firing"
    ]
    # one Collapse for the victim, fired once, before the crash; nothing for healthy nodes
    assert firing.count(("PeerwatchNodeCollapse", VICTIM)) == 1, firing
    assert {node for _, node in firing} <= {VICTIM, None}, firing
    assert not [
        r
        for r in records
        if r["status"] == "resolved" and r["labels"]["alertname"] == "PeerwatchNodeCollapse"
    ], records
    # Alertmanager still has it (the restarted worker keeps re-sending what its table says fires)
    assert any(a["labels"].get("node") == VICTIM for a in alerts), alerts
    # and the table was where the store setting put it
    on_disk = list(tmp_path.glob("worker/**/group-state-*.db"))
    assert bool(on_disk) == store.startswith("rocksdb"), on_disk
