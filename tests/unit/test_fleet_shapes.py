"""The simulator's real-fleet shapes: label layouts, spread offsets, HA pairs, vanishing labels."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest

from streams.lab.simulator import (
    DEFAULT_START_MS,
    ClusterConfig,
    ClusterSimulator,
    EccFault,
    NvlinkBusFault,
    PlannedRestart,
    generate,
)
from streams.lab.simulator.fleet import hashed_offset_ms

S = DEFAULT_START_MS
I = 30_000  # noqa: E741 - the scrape interval
SMALL = {"job_nodes": 8, "spares": 2, "seed": 5}
XID_AT = S + 10 * I + 7_000


def instance_host(labels: dict[str, str]) -> str:
    return labels["instance"].rsplit(":", 1)[0]


def test_spread_offsets_cover_the_whole_interval_and_jitter_crosses_bucket_boundaries() -> None:
    config = ClusterConfig(seed=3, scrape_offsets="spread", scrape_jitter_ms=500)
    sim = ClusterSimulator(config)
    offsets = sim._offset_ms[:, :2].ravel()  # node_exporter and dcgm of 63 nodes
    counts, _ = np.histogram(offsets, bins=10, range=(0, I))
    assert counts.min() > 0, f"every tenth of the interval holds offsets: {counts}"
    assert offsets.min() < 1_500 and offsets.max() > I - 1_500
    outside = 0
    deviations: list[int] = []
    for k in range(20):
        t = S + k * I
        for s in sim.scrape(t):
            ts = s.samples[0][0]
            assert ts > t, "never stamped before its round (it shows the round's state)"
            outside += ts >= t + I
            host = instance_host(s.labels)
            target = 0 if s.labels["job"] == "node" else 1
            deviations.append(ts - t - int(sim._offset_ms[config.hosts.index(host), target]))
    assert outside > 0, "samples land a few hundred ms past their round's bucket"
    assert min(deviations) >= -500 and max(deviations) <= 500
    assert max(deviations) - min(deviations) > 800, "jitter spans about +-500 ms"


def test_spread_offsets_are_a_hash_of_the_target_and_replica() -> None:
    a = hashed_offset_ms(1, "replica-a", "gpu064:9100", I)
    assert a == hashed_offset_ms(1, "replica-a", "gpu064:9100", I)
    assert 0 <= a < I
    others = {
        hashed_offset_ms(1, r, t, I)
        for r in ("replica-a", "replica-b")
        for t in ("gpu064:9100", "gpu064:9400")
    }
    assert len(others) == 4


def test_inside_offsets_keep_every_sample_in_its_round_as_before() -> None:
    sim = ClusterSimulator(ClusterConfig(**SMALL, scrape_jitter_ms=400))
    for k in range(5):
        t = S + k * I
        assert all(t <= s.samples[0][0] < t + I for s in sim.scrape(t))


def test_ha_replica_series_are_identical_except_the_replica_label() -> None:
    config = ClusterConfig(**SMALL, replicas=("replica-a", "replica-b"), scrape_offsets="spread")
    single = ClusterSimulator(ClusterConfig(**SMALL, scrape_offsets="spread")).scrape(S)
    series = ClusterSimulator(config).scrape(S)
    assert len(series) == 2 * len(single)
    by_rest: dict[tuple, list[str]] = defaultdict(list)
    for s in series:
        rest = tuple(sorted((k, v) for k, v in s.labels.items() if k != "prometheus_replica"))
        by_rest[rest].append(s.labels["prometheus_replica"])
    assert all(sorted(v) == ["replica-a", "replica-b"] for v in by_rest.values())
    assert {tuple(sorted(s.labels.items())) for s in single} == set(by_rest)


def test_ha_replicas_scrape_at_their_own_times_and_their_counters_agree_with_them() -> None:
    config = ClusterConfig(**SMALL, replicas=("replica-a", "replica-b"))
    samples: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for _, series in generate(config, end_ms=S + 20 * I):
        for s in series:
            if s.name == "node_intr_total" and instance_host(s.labels) == "gpu064":
                samples[(s.labels["prometheus_replica"], s.name)].append(s.samples[0])
    a, b = samples[("replica-a", "node_intr_total")], samples[("replica-b", "node_intr_total")]
    assert len(a) == len(b) == 20
    assert all(ta != tb for (ta, _), (tb, _) in zip(a, b, strict=True))
    for track in (a, b):
        assert all(v1 >= v0 for (_, v0), (_, v1) in itertools.pairwise(track))
    # same counter read at different times: the difference is the rate times the time apart
    rate = (a[-1][1] - a[0][1]) / (a[-1][0] - a[0][0])
    for (ta, va), (tb, vb) in zip(a[1:], b[1:], strict=True):
        assert abs((vb - va) - rate * (tb - ta)) < 0.1 * rate * I


def test_gpu_only_layout_puts_the_job_label_on_dcgm_series_only() -> None:
    config = ClusterConfig(
        **SMALL, job_label="hpc_job", job_label_on="dcgm", metric_families={"trainer"}
    )
    series = ClusterSimulator(config).scrape(S)
    carried = Counter(
        (s.labels["job"], "hpc_job" in s.labels)
        for s in series
        if instance_host(s.labels) in config.job_hosts
    )
    assert carried[("dcgm", True)] > 0 and carried[("dcgm", False)] == 0
    assert carried[("node", True)] == 0 and carried[("trainer", True)] == 0
    assert not any(
        "hpc_job" in s.labels for s in series if instance_host(s.labels) in config.spare_hosts
    )


def test_no_job_label_layout_carries_none() -> None:
    series = ClusterSimulator(ClusterConfig(**SMALL, job_label=None)).scrape(S)
    assert not any("train_job" in s.labels for s in series)
    assert ClusterConfig(**SMALL, job_label=None).job_label_layout == "none"


def test_role_labels_name_each_job_nodes_pipeline_stage_by_rank() -> None:
    config = ClusterConfig(**SMALL, role_label="pipeline_stage", pipeline_stages=4)
    series = ClusterSimulator(config).scrape(S)
    roles = {instance_host(s.labels): s.labels.get("pipeline_stage") for s in series}
    assert [roles[h] for h in config.job_hosts] == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert all(roles[h] is None for h in config.spare_hosts)
    assert all(("pipeline_stage" in s.labels) == ("train_job" in s.labels) for s in series)


@pytest.mark.parametrize("layout", ["all", "dcgm"])
@pytest.mark.parametrize("fault", ["nvlink", "ecc"])
def test_the_vanishing_job_label_is_absent_exactly_from_the_xid_scrape_on(
    layout: str, fault: str
) -> None:
    host = "gpu066"
    faults = (NvlinkBusFault(host, 2, XID_AT) if fault == "nvlink" else EccFault(host, 2, XID_AT),)
    config = ClusterConfig(
        **SMALL,
        job_label_on=layout,
        job_label_vanishes_at_xid=True,
        restart_delay_s=120.0,
        restart_load_s=60.0,
        faults=faults,
    )
    xid_round = S + (XID_AT - S) // I * I
    restart = ClusterSimulator(config).plan.epochs[1].start_ms
    seen_xid_at = None
    for t, series in generate(config, end_ms=restart + 3 * I):
        labelled = {instance_host(s.labels) for s in series if "train_job" in s.labels}
        xids = [
            s.samples[0][1]
            for s in series
            if s.name == "DCGM_FI_DEV_XID_ERRORS" and instance_host(s.labels) == host
        ]
        if seen_xid_at is None and any(x > 0 for x in xids):
            seen_xid_at = t
        if t < xid_round:
            assert labelled == set(config.job_hosts), t
        elif t < restart:
            assert labelled == set(), f"the dying job's label is gone at {t - S}"
        else:
            members = {config.hosts[i] for i in ClusterSimulator(config).plan.epochs[1].members}
            assert labelled == members, "the restarted job carries its label again"
    assert seen_xid_at == xid_round, (
        "the label vanishes in the very scrape that first shows the XID"
    )


def test_without_the_knob_the_label_stays_until_the_restart() -> None:
    config = ClusterConfig(**SMALL, faults=(NvlinkBusFault("gpu066", 2, XID_AT),))
    for _t, series in generate(config, start_ms=S + 10 * I, end_ms=S + 12 * I):
        assert {instance_host(s.labels) for s in series if "train_job" in s.labels} == set(
            config.job_hosts
        )


def test_the_first_save_after_a_restart_can_come_right_after_the_load() -> None:
    config = ClusterConfig(
        **SMALL,
        restart_load_s=300.0,
        restart_first_save_s=20.0,
        faults=(PlannedRestart(S + 5 * I, delay_s=60.0),),
    )
    sim = ClusterSimulator(config)
    epoch = sim.plan.epochs[1]
    start, _ = sim.plan.saves(epoch, epoch.train_ms + 3600_000)[0]
    assert start == epoch.train_ms + 20_000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"job_label_on": "node"}, "job_label_on"),
        ({"scrape_offsets": "random"}, "scrape_offsets"),
        ({"scrape_jitter_ms": 1500}, "scrape_jitter_ms"),
        ({"job_label": None, "role_label": "pipeline_stage"}, "role_label"),
        ({"job_label": None, "job_label_vanishes_at_xid": True}, "vanishes"),
        ({"replicas": ("a", "a")}, "replicas"),
        ({"replicas": ("a", "b"), "replica_label": ""}, "replica_label"),
        ({"restart_first_save_s": -1.0}, "restart_first_save_s"),
    ],
)
def test_config_rejects_impossible_fleet_shapes(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**SMALL, **overrides)
