"""The soak, short: a minute of streaming with three faults; the report's memory, lag and
tally figures are there and consistent with what happened (no timing assertions)."""

from __future__ import annotations

from pathlib import Path

from bench.soak import soak, sprinkled_faults
from streams.lab.chaos.run import ChaosPlan


async def test_a_short_soak_reports_memory_lag_and_the_chaos_tally(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    faults = sprinkled_faults(60.0, 3, broker=False)
    assert [f.kind for f in faults] == ["kill-worker", "am-stall", "kill-ingest"]
    plan = ChaosPlan(
        groups=2, nodes=8, rounds=120, rounds_per_s=2.0, faults=faults, resend_s=10.0,
        ingest_wal=True,
    )  # fmt: skip
    result = await soak(plan, tmp_path, kafka_bootstrap, every_s=2.0)
    print(result.render())
    by_name = {m.name: m for m in result.memory}
    assert set(by_name) == {"driver", "ingest", "w1", "w2", "alertmanager"}
    # the kills show as a second pid: the ingest's, and one of the workers'
    assert by_name["ingest"].pids == 2
    assert sorted(by_name[w].pids for w in ("w1", "w2")) == [1, 2]
    for m in result.memory:
        assert 0 < m.start_mib <= m.max_mib and m.end_mib <= m.max_mib
        assert m.growth_mib is not None and m.lived_s > 0
    lag = result.lag
    assert lag.samples >= 20 and lag.unanswered < lag.samples
    assert lag.max is not None and lag.max > 0 and lag.end is not None and lag.end <= lag.max
    assert result.chaos.faults == [str(f) for f in faults]
    assert result.chaos.buckets_expected == 2 * 120
    assert result.samples_per_s > 0
    assert "frames lag" in result.render() and result.to_dict()["chaos"]["faults"]
