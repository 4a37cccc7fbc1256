"""Scale-out without loss (issue 9, part 6): workers share the frames topic's partitions.

Six simulated jobs (one fault each) stream over eight partitions to two workers;
a third worker joins mid-stream and later the busiest one leaves (two
rebalances while streaming). Every bucket is scored by exactly one worker,
none is lost or scored twice, both first workers took part, and Alertmanager
shows every decided alert once, with no alert brought back after its resolve
by a worker that no longer owns its group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.lab.chaos.faults import parse_faults
from streams.lab.chaos.run import ChaosPlan, run_chaos


@pytest.mark.long
async def test_a_worker_joining_and_one_leaving_lose_and_double_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    plan = ChaosPlan(
        groups=6,
        nodes=8,
        rounds=84,  # 42 s of streaming: 10 s after the leave
        rounds_per_s=2.0,
        faults=parse_faults("worker-join@15,worker-leave@32"),
        resend_s=5.0,
        partitions=8,
    )
    report = await run_chaos(plan, tmp_path, kafka_bootstrap)
    print(report.render())
    assert report.buckets_expected == 6 * 84
    assert report.buckets_once == report.buckets_expected, report.details
    assert report.buckets_by_two_workers == 0
    assert report.buckets_short == 0, report.details
    assert report.workers.get("w1", 0) > 0 and report.workers.get("w2", 0) > 0, report.workers
    assert report.workers.get("w3", 0) > 0, report.workers  # the joiner took groups over
    assert report.alerts_decided_twice == 0
    assert report.firing_decided >= 6
    assert report.firing_lost == 0, report.details
    assert (report.am_duplicates, report.am_resurrected) == (0, 0)
    assert (report.stale_at_end, report.missing_at_end) == (0, 0), report.details
