"""HA Prometheus pairs: one elected replica per cluster, failover after a timeout."""

from __future__ import annotations

import pytest

from streams.catalog import DEFAULT_FEATURES
from streams.frames import Frame
from streams.ingest.builder import FrameBuilder
from streams.ingest.ha import HaTracker
from streams.ingest.series import Series

B = 30_000
T0 = 1_700_000_010_000 // B * B


def _round(
    k: int, replica: str | None, offset_ms: int, cluster: str = "c", node: str = "n1"
) -> list[Series]:
    """Round k of one node as one Prometheus replica scraped it: two idle CPUs, each
    idle 1 s per s (cpu_idle_cores 2.0), and a GPU temperature."""
    extra = {} if replica is None else {"prometheus_replica": replica}
    ts = T0 + k * B + offset_ms
    out = [
        Series(
            {
                "__name__": "node_cpu_seconds_total",
                "instance": f"{node}:9100",
                "cluster": cluster,
                "cpu": str(cpu),
                "mode": "idle",
                **extra,
            },
            [(ts, 1_000.0 + k * 30.0)],
        )
        for cpu in range(2)
    ]
    out.append(
        Series(
            {
                "__name__": "DCGM_FI_DEV_GPU_TEMP",
                "instance": f"{node}:9400",
                "cluster": cluster,
                "gpu": "0",
                **extra,
            },
            [(ts + 1_000, 60.0 + k)],
        )
    )
    return out


def _frames(rounds: list[list[Series]], **kwargs: object) -> tuple[list[Frame], dict]:
    b = FrameBuilder(DEFAULT_FEATURES, grace_ms=0, **kwargs)  # type: ignore[arg-type]
    dropped: dict[str, int] = {}
    frames: list[Frame] = []
    for batch in rounds:
        for reason, n in b.add(batch).dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
        frames += b.close_due_by_watermark()
    return frames + b.flush_all(), dropped


def _values(frames: list[Frame]) -> list[tuple[str, int, dict[str, float]]]:
    return [(f.group, f.ts, {k: round(v, 6) for k, v in f.values.items()}) for f in frames]


def test_an_ha_pair_gives_the_frames_of_one_replica() -> None:
    """Today's builder doubled sums: cpu_idle_cores 2.0 -> 4.0."""
    single, _ = _frames([_round(k, None, 3_000) for k in range(6)])
    pair, dropped = _frames([_round(k, "a", 3_000) + _round(k, "b", 11_000) for k in range(6)])
    assert {f.values["cpu_idle_cores"] for f in single if "cpu_idle_cores" in f.values} == {2.0}
    assert _values(pair) == _values(single)
    assert dropped == {"ha_replica": 6 * 3}


def test_replicas_are_elected_per_cluster() -> None:
    rounds = [
        _round(k, "a", 3_000, cluster="c1", node="n1")
        + _round(k, "b", 5_000, cluster="c2", node="n2")
        for k in range(3)
    ]
    frames, dropped = _frames(rounds)
    assert dropped == {}
    assert {f.group for f in frames} == {"c1", "c2"}


def test_failover_to_the_other_replica_when_the_elected_one_stops() -> None:
    """Replica a stops after round 4; b is elected once a has been silent for the timeout
    (60 s): the bucket in between is missing, and the values carry on."""
    rounds = [(_round(k, "a", 3_000) if k <= 4 else []) + _round(k, "b", 11_000) for k in range(12)]
    frames, dropped = _frames(rounds, ha_failover_ms=60_000)
    got = {f.ts: f.values for f in frames}
    assert sorted(got) == [T0 + k * B for k in range(12) if k != 5]
    assert got[T0 + 11 * B]["gpu_temp_c"] == 71.0
    assert got[T0 + 11 * B]["cpu_idle_cores"] == pytest.approx(2.0)
    assert dropped == {"ha_replica": 6 * 3}


def test_identical_series_without_a_replica_label_drop_as_duplicates() -> None:
    _, dropped = _frames([_round(k, None, 3_000) + _round(k, None, 3_000) for k in range(2)])
    assert dropped == {"duplicate": 6}


def test_tracker_elects_the_first_replica_and_fails_over_after_the_timeout() -> None:
    ha = HaTracker(failover_ms=60_000)
    assert ha.accepts("c", "a", 0)
    assert not ha.accepts("c", "b", 1_000)
    assert ha.accepts("c", "a", 30_000)
    assert not ha.accepts("c", "b", 90_000)  # a was last seen 60 s ago: not yet
    assert ha.accepts("c", "b", 90_001)
    assert ha.elected("c") == "b"
    assert not ha.accepts("c", "a", 100_000)
    assert ha.failovers == 1
    ha.forget_before(90_001)
    assert ha.elected("c") == "b"
    ha.forget_before(90_002)
    assert ha.elected("c") is None


def test_tracker_rejects_a_non_positive_timeout() -> None:
    with pytest.raises(ValueError, match="failover_ms"):
        HaTracker(0)
