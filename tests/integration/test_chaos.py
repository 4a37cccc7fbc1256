"""`peerwatch chaos`, short: kill -9 of a worker mid-stream and an Alertmanager outage.

Three simulated jobs (one fault each) stream through the real ingest, Kafka,
two workers and Alertmanager at 60x real time. A worker is SIGKILLed and
restarted while it scores; later Alertmanager is stopped for 15 s. Every
bucket the in-process pipeline scores must be scored live, with all its
frames, and every alert decided firing must reach Alertmanager's API (or have
resolved while it was away), with no duplicate episode there. The one bucket per
group in flight at the kill may be scored again by the next owner (at least once).
"""

from __future__ import annotations

from pathlib import Path

from streams.lab.chaos.faults import parse_faults
from streams.lab.chaos.run import ChaosPlan, run_chaos


async def test_a_worker_kill_and_an_alertmanager_outage_lose_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    plan = ChaosPlan(
        groups=3,
        nodes=12,
        rounds=90,
        rounds_per_s=2.0,
        faults=parse_faults("kill-worker@15,am-outage@25:15"),
        resend_s=10.0,
    )
    report = await run_chaos(plan, tmp_path, kafka_bootstrap)
    print(report.render())
    assert report.buckets_expected == 3 * 90
    assert (report.buckets_never, report.buckets_short) == (0, 0), report.details
    # At least once: the bucket a worker had scored but not yet written to its table
    # when killed is scored again by the partition's next owner -- one per group at most.
    rescored = [group for group, _bucket, _workers in report.details["twice"]]
    assert len(rescored) == len(set(rescored)), report.details
    assert report.firing_decided >= 3
    assert report.firing_lost == 0, report.details
    assert report.am_duplicates == 0
    assert (report.stale_at_end, report.missing_at_end) == (0, 0), report.details
