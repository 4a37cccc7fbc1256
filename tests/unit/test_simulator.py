"""The simulated cluster: realistic raw series, synchronised saves, labelled faults, replay."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from itertools import pairwise

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.ingest.remote_write import decode_write_request, is_stale_marker
from streams.ingest.series import Series
from streams.lab.simulator import (
    ALL_FAMILIES,
    DEFAULT_START_MS,
    ClusterConfig,
    ClusterSimulator,
    CpuContention,
    EccFault,
    GpuSlow,
    GroundTruth,
    LateScrape,
    NetworkCongestion,
    NodeSilent,
    NvlinkBusFault,
    PlannedRestart,
    RemoteWriteRejected,
    RemoteWriteUnavailable,
    RowRemapCreep,
    UncorrectableRemap,
    generate,
    ground_truth,
    post_remote_write,
    read_ground_truth,
    replay,
    write_ground_truth,
)
from streams.lab.simulator.run import REMOTE_WRITE_HEADERS, split_samples

S = DEFAULT_START_MS
I = 30_000  # noqa: E741 - the scrape interval, used in every time expression below
SMALL = {"job_nodes": 8, "spares": 2, "seed": 11}

Key = tuple[str, str, str | None, str | None]  # host, metric, operation, gpu


def by_key(series: Iterable[Series]) -> dict[Key, tuple[int, float]]:
    out: dict[Key, tuple[int, float]] = {}
    for s in series:
        host = s.labels["instance"].rsplit(":", 1)[0]
        key = (host, s.name, s.labels.get("operation"), s.labels.get("gpu"))
        assert key not in out, f"duplicate series {key}"
        out[key] = s.samples[0]
    return out


def rate(prev: dict[Key, tuple[int, float]], cur: dict[Key, tuple[int, float]], key: Key) -> float:
    (t0, v0), (t1, v1) = prev[key], cur[key]
    return (v1 - v0) / (t1 - t0) * 1000.0


def rounds(config: ClusterConfig, n: int, start_ms: int | None = None) -> list[dict]:
    start = config.start_ms if start_ms is None else start_ms
    return [by_key(s) for _, s in generate(config, start, start + n * I)]


def gpu_min(cur: dict, host: str, metric: str, gpus: int = 8) -> float:
    return min(cur[(host, metric, None, str(g))][1] for g in range(gpus))


INTR = "node_intr_total"
PROCS = "node_procs_running"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER = "DCGM_FI_DEV_POWER_USAGE"
XID = "DCGM_FI_DEV_XID_ERRORS"
WRITE_BYTES = "node_mountstats_nfs_write_bytes_total"
READ_BYTES = "node_mountstats_nfs_read_bytes_total"


# --- shape of a scrape ---------------------------------------------------------------------


def test_same_seed_gives_identical_series_and_another_seed_does_not() -> None:
    def run(seed: int) -> list[tuple[dict[str, str], list[tuple[int, float]]]]:
        config = ClusterConfig(**{**SMALL, "seed": seed})
        return [(s.labels, s.samples) for _, r in generate(config, S, S + 5 * I) for s in r]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_a_round_holds_every_series_of_all_63_nodes_with_real_exporter_labels() -> None:
    config = ClusterConfig()
    series = ClusterSimulator(config).scrape(S)
    assert len(series) == 63 * (14 + 4 * 8)
    assert len({tuple(sorted(s.labels.items())) for s in series}) == len(series)
    for s in series:
        labels = s.labels
        assert labels["cluster"] == "b200-a"
        host, port = labels["instance"].split(":")
        assert host in config.hosts
        if s.name.startswith("DCGM_"):
            assert (port, labels["job"], labels["Hostname"]) == ("9400", "dcgm", host)
            assert labels["modelName"] == "NVIDIA B200"
            assert labels["UUID"].startswith("GPU-") and labels["pci_bus_id"].startswith("0000")
            assert labels["gpu"] in {str(g) for g in range(8)}
        else:
            assert (port, labels["job"]) == ("9100", "node")
        if s.name.startswith("node_mountstats_nfs_"):
            assert {"export", "mountaddress", "protocol"} <= labels.keys()
        if "_operations_" in s.name:
            assert labels["operation"] in {"GETATTR", "READ", "WRITE"}
        assert list(labels) == sorted(labels), "labels are built in remote_write order"


def test_each_target_is_scraped_at_its_own_fixed_offset_inside_the_round() -> None:
    sim = ClusterSimulator(ClusterConfig(**SMALL))
    offsets: dict[str, list[int]] = {}
    for k in range(10):
        t = S + k * I
        for s in sim.scrape(t):
            ts = s.samples[0][0]
            assert t <= ts < t + I
            offsets.setdefault(s.labels["instance"], []).append(ts - t)
    spread = [max(v) - min(v) for v in offsets.values()]
    assert max(spread) <= 2 * 25, "only the few-ms jitter moves a target within its round"
    firsts = {v[0] // 1000 for v in offsets.values()}
    assert len(firsts) > len(offsets) // 2, "targets are spread over the interval"


# --- realistic values ----------------------------------------------------------------------


def test_training_nodes_show_300k_interrupts_busy_processes_and_full_gpus() -> None:
    config = ClusterConfig()
    sim = ClusterSimulator(config)
    assert all(start > S + 20 * I for start, _ in sim.plan.saves(sim.plan.epochs[0], S + 20 * I))
    data = rounds(config, 20)
    for prev, cur in pairwise(data):
        for host in config.job_hosts:
            assert 270_000 < rate(prev, cur, (host, INTR, None, None)) < 330_000
            assert 10 <= cur[(host, PROCS, None, None)][1] <= 20
            for g in range(8):
                assert cur[(host, UTIL, None, str(g))][1] >= 98
                assert 900 <= cur[(host, POWER, None, str(g))][1] <= 1000
                assert 55 <= cur[(host, "DCGM_FI_DEV_GPU_TEMP", None, str(g))][1] <= 70
                assert cur[(host, XID, None, str(g))][1] == 0


def test_spares_report_but_stay_idle() -> None:
    config = ClusterConfig()
    prev, cur = rounds(config, 2)
    for host in config.spare_hosts:
        assert 40_000 <= rate(prev, cur, (host, INTR, None, None)) <= 60_000
        assert cur[(host, PROCS, None, None)][1] in (1.0, 2.0)
        assert gpu_min(cur, host, UTIL) == 0
        for g in range(8):
            assert 140 <= cur[(host, POWER, None, str(g))][1] <= 205


def test_getattr_takes_a_few_ms_and_nodes_differ_persistently() -> None:
    config = ClusterConfig(**SMALL)
    data = rounds(config, 6)
    per_node = []
    for host in config.job_hosts:
        key_t = (
            host,
            "node_mountstats_nfs_operations_response_time_seconds_total",
            "GETATTR",
            None,
        )
        key_n = (host, "node_mountstats_nfs_operations_requests_total", "GETATTR", None)
        rtts = [rate(p, c, key_t) / rate(p, c, key_n) for p, c in pairwise(data)]
        assert all(0.001 < r < 0.01 for r in rtts)
        per_node.append(np.mean(rtts))
    assert np.std(per_node) > 1e-4


# --- checkpoint saves ----------------------------------------------------------------------


def _save_buckets(config: ClusterConfig) -> tuple[int, int]:
    """The first save's start and the round that it covers most."""
    sim = ClusterSimulator(config)
    start, end = sim.plan.saves(sim.plan.epochs[0], S + 10 * 3600_000)[0]
    first = S + (start - S) // I * I
    overlap = {b: min(end, b + I) - max(start, b) for b in (first, first + I)}
    return start, max(overlap, key=overlap.__getitem__)


def test_checkpoint_save_dips_every_job_node_in_the_same_bucket() -> None:
    config = ClusterConfig(checkpoint_interval_s=1200, seed=4)
    start, main = _save_buckets(config)
    assert S + 600_000 < start < S + 3 * 1200_000
    data = dict(zip(range(S, main + 2 * I, I), rounds(config, (main - S) // I + 2), strict=True))
    before, cur = data[main - 3 * I], data[main]
    for host in config.job_hosts:
        assert gpu_min(before, host, UTIL) >= 98
        assert gpu_min(cur, host, UTIL) < 80, host
    for host in config.spare_hosts:
        assert gpu_min(cur, host, UTIL) == 0
    prev = data[main - I]
    write_gbps = sum(rate(prev, cur, (h, WRITE_BYTES, None, None)) for h in config.hosts) / 1e9
    assert write_gbps > 20
    for host in config.job_hosts:
        queue = (host, "node_mountstats_nfs_operations_queue_time_seconds_total", "WRITE", None)
        count = (host, "node_mountstats_nfs_operations_requests_total", "WRITE", None)
        assert 1.0 < rate(prev, cur, queue) / rate(prev, cur, count) < 3.0  # report: 1.89 s
        pgpgout = (host, "node_vmstat_pgpgout", None, None)
        assert rate(prev, cur, pgpgout) > 10 * rate(data[main - 3 * I], data[main - 2 * I], pgpgout)


def test_checkpoint_cadence_follows_the_configured_median() -> None:
    sim = ClusterSimulator(ClusterConfig())
    saves = sim.plan.saves(sim.plan.epochs[0], S + 60 * 24 * 3600_000)
    intervals_h = np.diff([s for s, _ in saves]) / 3600_000
    durations_s = np.array([e - s for s, e in saves]) / 1000
    assert 2.0 < np.median(intervals_h) < 2.5
    assert durations_s.min() >= 18 and durations_s.max() <= 32


# --- NVLink + bus fault, job death, restart ------------------------------------------------

ONSET = S + 40 * I + 12_345
FAULT = NvlinkBusFault("gpu071", 3, ONSET, xid_sequence=(145, 79))


def _fault_config(**overrides: object) -> ClusterConfig:
    base: dict[str, object] = {"seed": 2, "faults": (FAULT,), "restart_load_s": 0.0}
    return ClusterConfig(**{**base, **overrides})  # type: ignore[arg-type]


def test_nvlink_fault_collapses_interrupts_and_processes_and_sets_the_xid_at_onset() -> None:
    config = _fault_config()
    data = rounds(config, 4, start_ms=S + 38 * I)  # rounds 38..41; onset is in round 40
    r38, r39, r40, r41 = data
    host = "gpu071"
    assert 270_000 < rate(r38, r39, (host, INTR, None, None)) < 330_000
    assert 70_000 <= rate(r39, r40, (host, INTR, None, None)) <= 100_000
    assert r39[(host, PROCS, None, None)][1] >= 10
    assert r40[(host, PROCS, None, None)][1] == 0
    assert r39[(host, XID, None, "3")][1] == 0
    assert r40[(host, XID, None, "3")][1] == 145
    assert r41[(host, XID, None, "3")][1] == 79
    assert all(r40[(host, XID, None, str(g))][1] == 0 for g in range(8) if g != 3)
    assert r40[(host, UTIL, None, "3")][1] == 0
    assert gpu_min(r40, host, UTIL) == 0 and r40[(host, UTIL, None, "0")][1] >= 98
    peers = [h for h in config.job_hosts if h != host]
    assert all(270_000 < rate(r39, r40, (h, INTR, None, None)) < 330_000 for h in peers)
    assert all(r40[(h, PROCS, None, None)][1] >= 10 for h in peers)


def test_nvlink_fault_ground_truth_row() -> None:
    rows = ground_truth(_fault_config())
    assert [r for r in rows if r.is_fault] == [
        GroundTruth("nvlink_bus_fault", "gpu071", 3, ONSET, xid=145, xid_ms=ONSET, end_ms=None)
    ]
    death = S + 41 * I
    assert GroundTruth("job_death", None, None, death, end_ms=death + 600_000) in rows
    assert GroundTruth("spare_joined", "gpu124", None, death + 600_000) in rows


def test_job_dies_one_bucket_after_the_xid_and_restarts_on_a_spare_after_the_delay() -> None:
    config = _fault_config()
    death, restart = S + 41 * I, S + 41 * I + 600_000
    data = dict(zip(range(S, restart + 3 * I, I), rounds(config, 41 + 20 + 3), strict=True))
    assert all(gpu_min(data[S + 40 * I], h, UTIL) >= 98 for h in config.job_hosts if h != "gpu071")
    for t in range(death, restart, I):
        prev, cur = data[t - I], data[t]
        for host in config.job_hosts:
            assert gpu_min(cur, host, UTIL) == 0
            assert cur[(host, PROCS, None, None)][1] <= 2
            for g in range(8):
                assert 140 <= cur[(host, POWER, None, str(g))][1] <= 205
            if host != "gpu071":
                assert 40_000 <= rate(prev, cur, (host, INTR, None, None)) <= 60_000
    prev, cur = data[restart], data[restart + I]
    members = ClusterSimulator(config).plan.members_at(restart)
    assert "gpu071" not in members and "gpu124" in members and len(members) == 60
    assert members.index("gpu124") == config.hosts.index("gpu071"), "the spare takes the rank"
    for host in members:
        assert 270_000 < rate(prev, cur, (host, INTR, None, None)) < 330_000
        assert gpu_min(cur, host, UTIL) >= 98
    assert gpu_min(cur, "gpu071", UTIL) == 0
    assert 70_000 <= rate(prev, cur, ("gpu071", INTR, None, None)) <= 100_000


def test_a_restart_loads_the_checkpoint_before_training() -> None:
    config = _fault_config(restart_load_s=1500.0)
    restart = S + 41 * I + 600_000
    prev, cur = rounds(config, 2, start_ms=restart + 5 * I)
    members = ClusterSimulator(config).plan.members_at(restart)
    read_gbps = sum(rate(prev, cur, (h, READ_BYTES, None, None)) for h in members) / 1e9
    assert read_gbps > 2
    assert all(max(cur[(h, UTIL, None, str(g))][1] for g in range(8)) < 50 for h in members)


def test_the_job_shrinks_when_no_spare_is_left() -> None:
    config = ClusterConfig(
        job_nodes=4, spares=0, restart_load_s=0.0, faults=(NvlinkBusFault("gpu065", 0, S + I),)
    )
    plan = ClusterSimulator(config).plan
    assert plan.members_at(S) == ("gpu064", "gpu065", "gpu066", "gpu067")
    assert plan.members_at(S + 2 * I) == ()
    assert plan.members_at(S + 2 * I + 600_000) == ("gpu064", "gpu066", "gpu067")


def test_a_fault_while_the_job_is_down_keeps_its_node_out_of_the_restart() -> None:
    second = NvlinkBusFault("gpu070", 1, ONSET + 5 * I, xid_sequence=(149, 79))
    config = _fault_config(faults=(FAULT, second))
    plan = ClusterSimulator(config).plan
    assert len(plan.epochs) == 2, "the second fault hit a dead job"
    members = plan.members_at(S + 41 * I + 600_000)
    assert {"gpu124", "gpu125"} <= set(members) and not {"gpu070", "gpu071"} & set(members)


# --- silence, stale markers, counters ------------------------------------------------------


def test_a_silent_node_emits_no_series_until_it_returns() -> None:
    config = ClusterConfig(**SMALL, faults=(NodeSilent("gpu066", S + 3 * I + 5, S + 7 * I),))
    for t, series in generate(config, S, S + 10 * I):
        hosts = {s.labels["instance"].split(":")[0] for s in series}
        assert ("gpu066" in hosts) == (not S + 3 * I <= t < S + 7 * I)


def test_stale_markers_are_sent_once_when_a_node_falls_silent_if_asked() -> None:
    silent = NodeSilent("gpu066", S + 3 * I, S + 7 * I)
    config = ClusterConfig(**SMALL, faults=(silent,), emit_stale_markers=True)
    stale = {
        t: [s for s in r if is_stale_marker(s.samples[0][1])]
        for t, r in generate(config, S, S + 8 * I)
    }
    assert [t for t, s in stale.items() if s] == [S + 3 * I]
    assert len(stale[S + 3 * I]) == 14 + 4 * 8
    assert {s.labels["instance"].split(":")[0] for s in stale[S + 3 * I]} == {"gpu066"}


def _counter_drops(config: ClusterConfig, n: int) -> set[tuple[str, int]]:
    """(host, round) where any counter went below its last reported value."""
    drops = set()
    last: dict[Key, float] = {}
    for k, cur in enumerate(rounds(config, n)):
        for key, (_, value) in cur.items():
            if key[1].endswith("_total") or key[1] == "node_vmstat_pgpgout":
                if value < last.get(key, 0.0):
                    drops.add((key[0], k))
                last[key] = value
    return drops


def test_counters_never_decrease_through_saves_faults_and_silence() -> None:
    faults = (
        NvlinkBusFault("gpu066", 2, S + 10 * I),
        NodeSilent("gpu067", S + 5 * I, S + 9 * I),
    )
    config = ClusterConfig(**SMALL, faults=faults, checkpoint_interval_s=300, restart_delay_s=60)
    assert _counter_drops(config, 60) == set()


def test_counters_restart_from_zero_exactly_once_after_a_reboot() -> None:
    faults = (NodeSilent("gpu067", S + 5 * I, S + 9 * I, reboot=True),)
    config = ClusterConfig(**SMALL, faults=faults)
    assert _counter_drops(config, 20) == {("gpu067", 9)}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gpus=st.integers(1, 8))
def test_any_seed_gives_finite_values_and_monotonic_counters(seed: int, gpus: int) -> None:
    config = ClusterConfig(
        job_nodes=3, spares=1, gpus_per_node=gpus, seed=seed, checkpoint_interval_s=120
    )
    previous: dict[Key, float] = {}
    for _, series in generate(config, S, S + 12 * I):
        for key, (_, value) in by_key(series).items():
            assert math.isfinite(value) and value >= 0
            if key[1].endswith("_total") or key[1] == "node_vmstat_pgpgout":
                assert value >= previous.get(key, 0.0)
                previous[key] = value


# --- running it ----------------------------------------------------------------------------


def test_generate_from_a_later_start_continues_the_same_cluster() -> None:
    config = ClusterConfig(**SMALL)
    full = [r for _, r in generate(config, S, S + 8 * I)]
    late = list(generate(config, S + 5 * I + 1, S + 8 * I))
    assert [t for t, _ in late] == [S + 6 * I, S + 7 * I]
    assert [by_key(r) for _, r in late] == [by_key(r) for r in full[6:]]


def test_scrape_refuses_rounds_off_the_grid_or_backwards() -> None:
    sim = ClusterSimulator(ClusterConfig(**SMALL))
    sim.scrape(S + I)
    with pytest.raises(ValueError, match="grid"):
        sim.scrape(S + I + 7)
    with pytest.raises(ValueError, match="forward"):
        sim.scrape(S)


def test_ground_truth_round_trips_through_json_lines(tmp_path) -> None:
    config = _fault_config(
        checkpoint_interval_s=600, faults=(FAULT, NodeSilent("gpu064", S, S + I))
    )
    rows = ground_truth(config, end_ms=S + 3600_000)
    assert {r.kind for r in rows} == {
        "nvlink_bus_fault",
        "node_silent",
        "job_death",
        "spare_joined",
        "checkpoint_save",
    }
    assert [r.onset_ms for r in rows] == sorted(r.onset_ms for r in rows)
    path = tmp_path / "truth.jsonl"
    assert write_ground_truth(path, rows) == len(rows)
    assert read_ground_truth(path) == rows


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"start_ms": S + 1}, "multiple of the scrape interval"),
        ({"job_nodes": 0}, "job_nodes"),
        ({"seed": -1}, "seed"),
        ({"gpus_per_node": 17}, "gpus_per_node"),
        ({"save_duration_s": (30.0, 20.0)}, "save_duration_s"),
        ({"checkpoint_interval_s": 50.0}, "checkpoint_interval_s"),
        ({"scrape_interval_s": 0.5}, "scrape_interval_s"),
        ({"scrape_jitter_ms": 10_000}, "scrape_jitter_ms"),
        ({"faults": (NodeSilent("gpu999", S),)}, "unknown node"),
        ({"faults": (NvlinkBusFault("gpu064", 8, S),)}, "gpu 8"),
        ({"faults": ("not a fault",)}, "not a fault spec"),
    ],
)
def test_config_rejects_what_cannot_be_simulated(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**overrides)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: NvlinkBusFault("gpu064", 0, S, xid_sequence=()), "xid_sequence"),
        (lambda: NvlinkBusFault("gpu064", 0, S, intr_per_s=150_000.0), "intr_per_s"),
        (lambda: NodeSilent("gpu064", S, S), "end_ms"),
        (lambda: NodeSilent("gpu064", S, reboot=True), "reboot"),
    ],
)
def test_fault_specs_reject_impossible_values(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def _all_counters_monotonic(config: ClusterConfig, n: int) -> set[tuple[str, int]]:
    """(host, round) where a counter of any family went below its value at an earlier time.

    Samples are compared in timestamp order: a late scrape delivers older samples after newer
    ones, which is out of order, not a counter reset.
    """
    samples: dict[tuple, list[tuple[int, float, int]]] = {}
    for k, (_, series) in enumerate(generate(config, S, S + n * I)):
        for s in series:
            if s.name.endswith("_total") or s.name == "node_vmstat_pgpgout":
                ts, value = s.samples[0]
                if not math.isnan(value):
                    samples.setdefault(tuple(sorted(s.labels.items())), []).append((ts, value, k))
    drops = set()
    for key, points in samples.items():
        points.sort()
        host = dict(key)["instance"].split(":")[0]
        drops |= {(host, k) for (_, v0, _), (_, v1, k) in pairwise(points) if v1 < v0}
    return drops


def test_every_family_keeps_counters_monotonic_through_faults_and_restarts() -> None:
    faults = (
        GpuSlow("gpu065", 1, S + 4 * I, S + 9 * I),
        CpuContention("gpu066", S + 5 * I, duration_s=120),
        NetworkCongestion("gpu067", S + 6 * I, duration_s=300),
        EccFault("gpu068", 2, S + 12 * I),
        NodeSilent("gpu069", S + 3 * I, S + 6 * I, reboot=True),
        LateScrape("gpu070", S + 8 * I, delay_s=40),
    )
    config = ClusterConfig(
        **SMALL,
        metric_families=ALL_FAMILIES,
        faults=faults,
        checkpoint_interval_s=300,
        restart_delay_s=60,
        restart_load_s=120,
        emit_stale_markers=True,
    )
    assert _all_counters_monotonic(config, 40) == {("gpu069", 6)}, "only the reboot resets"


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gpus=st.integers(1, 8), cpus=st.integers(1, 4))
def test_any_seed_gives_finite_values_in_every_family(seed: int, gpus: int, cpus: int) -> None:
    config = ClusterConfig(
        job_nodes=3,
        spares=1,
        gpus_per_node=gpus,
        cpus_per_node=cpus,
        ib_devices=2,
        seed=seed,
        checkpoint_interval_s=120,
        metric_families=ALL_FAMILIES,
    )
    for _, series in generate(config, S, S + 8 * I):
        for s in series:
            value = s.samples[0][1]
            assert math.isfinite(value) and value >= 0, s
            if s.name == "DCGM_FI_PROF_SM_ACTIVE":
                assert value <= 1.0


def test_the_trainer_reports_only_while_the_job_trains() -> None:
    config = ClusterConfig(
        **SMALL,
        metric_families={"trainer"},
        restart_load_s=300.0,
        faults=(NvlinkBusFault("gpu066", 0, S + 3 * I),),
    )
    restart = S + 4 * I + 600_000
    present = {
        t: {s.labels["instance"] for s in r if s.name == "trainer_iteration_time_seconds"}
        for t, r in generate(config, S, restart + 12 * I)
    }
    assert len(present[S + 2 * I]) == 8
    assert "gpu066:9500" not in present[S + 3 * I] and len(present[S + 3 * I]) == 7
    assert all(not present[t] for t in range(S + 4 * I, restart + 10 * I, I)), "down, loading"
    assert len(present[restart + 10 * I]) == 8 and "gpu072:9500" in present[restart + 10 * I]


def test_job_wide_and_xid_faults_shape_the_plan() -> None:
    creep = RowRemapCreep("gpu065", 0, S - 60 * 86_400_000, S + 20 * I)
    config = ClusterConfig(
        **SMALL,
        restart_load_s=0.0,
        restart_delay_s=60.0,
        faults=(
            PlannedRestart(S + 5 * I, delay_s=30.0),
            UncorrectableRemap("gpu067", 1, S + 40 * I),
            creep,
        ),
    )
    plan = ClusterSimulator(config).plan
    ends = [e.end_ms for e in plan.epochs]
    assert ends == [S + 6 * I, S + 21 * I, S + 41 * I, None]
    assert plan.epochs[1].start_ms == S + 6 * I + 30_000, "the planned restart's own delay"
    assert "gpu065" not in plan.members_at(S + 24 * I) and "gpu072" in plan.members_at(S + 24 * I)
    assert "gpu067" in plan.members_at(S + 44 * I), "XID 94 restarts with the node"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"metric_families": {"everything"}}, "metric_families"),
        ({"cpus_per_node": 0}, "cpus_per_node"),
        ({"ib_devices": 17}, "ib_devices"),
        ({"pipeline_stages": 0}, "pipeline_stages"),
        ({"first_save_s": -1.0}, "first_save_s"),
    ],
)
def test_config_rejects_impossible_families_and_sizes(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**overrides)


def test_first_save_s_places_the_first_save() -> None:
    sim = ClusterSimulator(ClusterConfig(**SMALL, first_save_s=95.0))
    start, _ = sim.plan.saves(sim.plan.epochs[0], S + 3600_000)[0]
    assert start == S + 95_000


def test_the_same_config_scrapes_the_same_rounds() -> None:
    """Seeded: two simulators of one config give identical rounds, so every evaluation and
    benchmark figure can be rerun (its speed is ``bench.ingest_bench``'s business: a timed
    assertion here is one a loaded CI machine fails)."""
    one, two = ClusterSimulator(ClusterConfig()), ClusterSimulator(ClusterConfig())
    for k in range(3):
        a, b = one.scrape(S + k * I), two.scrape(S + k * I)
        assert [(s.labels, s.samples) for s in a] == [(s.labels, s.samples) for s in b]


# --- remote_write --------------------------------------------------------------------------


class Receiver:
    """An in-process remote_write receiver that answers from a script, then 204."""

    def __init__(self, answers: Iterable[tuple[int, str]] = ()):
        self.answers = list(answers)
        self.bodies: list[bytes] = []
        self.series: list[Series] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        for name, value in REMOTE_WRITE_HEADERS.items():
            assert request.headers[name] == value
        body = request.read()
        self.bodies.append(body)
        status, text = self.answers.pop(0) if self.answers else (204, "")
        if status < 300:
            self.series.extend(decode_write_request(body))
        return httpx.Response(status, text=text)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def test_split_samples_caps_every_batch_and_cuts_long_series() -> None:
    long = Series({"__name__": "x"}, [(i, float(i)) for i in range(5)])
    short = [Series({"__name__": f"s{i}"}, [(0, 0.0)]) for i in range(4)]
    batches = list(split_samples([*short, long], 3))
    assert [sum(len(s.samples) for s in b) for b in batches] == [3, 3, 3]
    assert [p for b in batches for s in b if s.name == "x" for p in s.samples] == long.samples


async def test_a_round_is_posted_in_requests_of_at_most_2000_samples() -> None:
    receiver = Receiver()
    series = ClusterSimulator(ClusterConfig()).scrape(S)
    async with receiver.client() as client:
        sent = await post_remote_write("http://ingest/api/v1/write", series, client)
    assert sent == len(receiver.bodies) == 2
    assert [(s.labels, s.samples) for s in receiver.series] == [
        (s.labels, s.samples) for s in series
    ]


async def test_a_503_is_retried_with_the_same_bytes_and_nothing_is_dropped() -> None:
    receiver = Receiver([(503, "backlog full"), (500, "oops")])
    series = ClusterSimulator(ClusterConfig(**SMALL)).scrape(S)
    async with receiver.client() as client:
        sent = await post_remote_write("http://ingest/w", series, client, min_backoff_s=0.001)
    assert sent == 1
    assert receiver.bodies[0] == receiver.bodies[1] == receiver.bodies[2]
    assert len(receiver.series) == len(series)


async def test_a_4xx_raises_with_the_receivers_message() -> None:
    receiver = Receiver([(400, "bad label name\n")])
    series = ClusterSimulator(ClusterConfig(**SMALL)).scrape(S)
    async with receiver.client() as client:
        with pytest.raises(RemoteWriteRejected, match="400: bad label name") as caught:
            await post_remote_write("http://ingest/w", series, client)
    assert caught.value.status_code == 400 and len(receiver.bodies) == 1


async def test_network_errors_are_retried_until_max_attempts_then_raise() -> None:
    attempts = []

    def unreachable(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    series = ClusterSimulator(ClusterConfig(**SMALL)).scrape(S)
    async with httpx.AsyncClient(transport=httpx.MockTransport(unreachable)) as client:
        with pytest.raises(RemoteWriteUnavailable, match="after 3 attempts"):
            await post_remote_write(
                "http://ingest/w", series, client, min_backoff_s=0.001, max_attempts=3
            )
    assert len(attempts) == 3


async def test_replay_sends_every_round_as_fast_as_accepted() -> None:
    receiver = Receiver([(503, "busy")])
    config = ClusterConfig(**SMALL)
    async with receiver.client() as client:
        stats = await replay(
            "http://ingest/w", config, S, S + 4 * I, None, client=client, min_backoff_s=0.001
        )
    expected = [s for _, r in generate(config, S, S + 4 * I) for s in r]
    assert (stats.rounds, stats.samples) == (4, len(expected))
    assert [(s.labels, s.samples) for s in receiver.series] == [
        (s.labels, s.samples) for s in expected
    ]


async def test_replay_paces_rounds_at_the_requested_speed() -> None:
    receiver = Receiver()
    config = ClusterConfig(**SMALL)
    began = time.monotonic()
    async with receiver.client() as client:
        await replay("http://ingest/w", config, S, S + 3 * I, 300.0, client=client)
    assert time.monotonic() - began >= 3 * I / 1000 / 300 * 0.95
