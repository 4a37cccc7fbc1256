"""`peerwatch chaos`, short, sampled as the soak samples it: kill -9 of a worker
mid-stream and an Alertmanager outage.

Three simulated jobs (one fault each) stream through the real ingest, Kafka,
two workers and Alertmanager at 60x real time. A worker is SIGKILLed and
restarted while it scores; later Alertmanager is stopped for 15 s. Every
bucket the in-process pipeline scores must be scored live, with all its
frames, and every alert decided firing must reach Alertmanager's API (or have
resolved while it was away), with no duplicate episode there. The one bucket per
group in flight at the kill may be scored again by the next owner (at least once).

The same run is the soak's (``bench.soak``): its report's memory, lag and tally
figures must be there and consistent with what happened (no timing assertions).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import soak
from streams.lab.chaos.faults import parse_faults
from streams.lab.chaos.run import ChaosPlan


@pytest.mark.long
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
    result = await soak(plan, tmp_path, kafka_bootstrap, every_s=2.0)
    print(result.render())
    report = result.chaos
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

    # the soak's figures of the same run
    by_name = {m.name: m for m in result.memory}
    assert set(by_name) == {"driver", "ingest", "w1", "w2", "alertmanager"}
    assert by_name["ingest"].pids == 1  # the kill shows as a second pid: one worker's
    assert sorted(by_name[w].pids for w in ("w1", "w2")) == [1, 2]
    for m in result.memory:
        assert 0 < m.start_mib <= m.max_mib and m.end_mib <= m.max_mib
        assert m.growth_mib is not None and m.lived_s > 0
    lag = result.lag
    assert lag.samples >= 15 and lag.unanswered < lag.samples
    assert lag.max is not None and lag.max > 0 and lag.end is not None and lag.end <= lag.max
    assert report.faults == [str(f) for f in plan.faults]
    assert result.samples_per_s > 0
    assert "frames lag" in result.render() and result.to_dict()["chaos"]["faults"]
