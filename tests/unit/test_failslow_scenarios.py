"""Fail-slow scenarios of issue 3 on a synthetic synchronous job: culprit, class, timing.

The synthetic job encodes the physics the localiser relies on (and that the
simulator is asked to reproduce):

* every GPU of a healthy job is ~90 % SM-active at its max clock; per-bucket
  noise on every figure, static per-node offsets on host and link figures
  (link counters log-normally spread ±20 % across nodes), SW power cap set on
  a random 30 % of GPUs (common and harmless);
* at throughput fraction q (the slowest dependency sets the pace) every GPU
  that waits is SM-active 0.9·q and draws proportionally less power; a
  compute-slow GPU stays busy (0.9) — if throttled its clock also drops by q;
* CPU contention: the node's CPU busy 85–100 % and run queue ×2.5–4, its GPUs
  wait like everyone else's; link congestion: the node's transmit wait and
  congestion marks ×f, retransmits up; fabric congestion: every node's ×10;
  power cap: every clock −15 %; a hot GPU: +20 °C and nothing else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from detectors.failslow.localise import (
    HW_SLOWDOWN,
    HW_THERMAL,
    SW_POWER_CAP,
    SW_THERMAL,
    Klass,
    NodeMetrics,
    combine_buckets,
    localise,
)
from detectors.failslow.monitor import (
    FailSlowParams,
    FailSlowState,
    FailSlowVerdict,
    step_failslow,
)

GPUS = 8


@dataclass
class Arrays:
    """One bucket of the job as arrays (nodes x GPUs, or nodes), before faults apply."""

    busy: np.ndarray  # what a GPU's SM activity is when it never waits
    sm: np.ndarray
    clock: np.ndarray
    power: np.ndarray
    temp: np.ndarray
    reasons: np.ndarray
    cpu: np.ndarray
    run_queue: np.ndarray
    xmit_wait: np.ndarray
    retrans: np.ndarray
    congestion: np.ndarray
    tx_bytes: np.ndarray


Fault = Callable[[Arrays, np.random.Generator], None]


@dataclass
class Job:
    """A synthetic synchronous job: nodes, static per-node traits, optional pipeline stages."""

    seed: int
    n_nodes: int = 60
    stages: int = 1
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        n = self.n_nodes
        self.nodes = [f"gpu{64 + i:03d}" for i in range(n)]
        self.roles = {node: f"stage{i % self.stages}" for i, node in enumerate(self.nodes)}
        self.stage_busy = np.array([0.90 - 0.2 * (i % self.stages) for i in range(n)])
        self.cpu = 0.30 + 0.03 * self.rng.standard_normal(n)
        self.run_queue = 18.0 + 2.0 * self.rng.standard_normal(n)
        self.xmit_wait = 2e4 * np.exp(0.2 * self.rng.standard_normal(n))
        self.congestion = 50.0 * np.exp(0.2 * self.rng.standard_normal(n))
        self.tx = 2e10 * (1.0 + 0.01 * self.rng.standard_normal(n))
        self.temp = 62.0 + 3.0 * self.rng.standard_normal((n, GPUS))
        self.power_cap = self.rng.random((n, GPUS)) < 0.3

    def bucket(self, q: float, faults: tuple[Fault, ...] = ()) -> dict[str, NodeMetrics]:
        rng, n = self.rng, self.n_nodes
        busy = self.stage_busy[:, None] + 0.01 * rng.standard_normal((n, GPUS))
        a = Arrays(
            busy=busy,
            sm=busy * q,
            clock=1_980.0 + 5.0 * rng.standard_normal((n, GPUS)),
            power=250.0 + 700.0 * q + 15.0 * rng.standard_normal((n, GPUS)),
            temp=self.temp - 25.0 * (1.0 - q) + rng.standard_normal((n, GPUS)),
            reasons=np.where(self.power_cap, SW_POWER_CAP, 0).astype(np.int64),
            cpu=self.cpu + 0.02 * rng.standard_normal(n),
            run_queue=rng.poisson(np.maximum(self.run_queue, 1.0)).astype(float),
            xmit_wait=self.xmit_wait * np.exp(0.1 * rng.standard_normal(n)),
            retrans=rng.poisson(0.2, n).astype(float),
            congestion=self.congestion * np.exp(0.1 * rng.standard_normal(n)),
            tx_bytes=self.tx * q * (1.0 + 0.005 * rng.standard_normal(n)),
        )
        for fault in faults:
            fault(a, rng)
        return {
            node: NodeMetrics(
                sm_active=tuple(a.sm[i]),
                sm_clock_mhz=tuple(a.clock[i]),
                power_w=tuple(a.power[i]),
                temp_c=tuple(a.temp[i]),
                clock_event_reasons=tuple(int(r) for r in a.reasons[i]),
                cpu_busy=float(a.cpu[i]),
                run_queue=float(a.run_queue[i]),
                link_xmit_wait=float(a.xmit_wait[i]),
                link_retransmits=float(a.retrans[i]),
                link_congestion=float(a.congestion[i]),
                link_tx_bytes=float(a.tx_bytes[i]),
            )
            for i, node in enumerate(self.nodes)
        }


# -- faults ----------------------------------------------------------------------------------


def slow_gpu(node: int, gpu: int, slowdown: float, throttled: bool) -> Fault:
    """A GPU ``slowdown`` slower: it stays busy while everyone waits; throttled → lower clock."""

    def apply(a: Arrays, rng: np.random.Generator) -> None:
        a.sm[node, gpu] = a.busy[node, gpu]
        a.power[node, gpu] = 950.0 + 15.0 * rng.standard_normal()
        if throttled:
            a.clock[node, gpu] /= 1.0 + slowdown
            a.reasons[node, gpu] |= HW_SLOWDOWN

    return apply


def thermal_throttle(node: int, gpu: int) -> Fault:
    """Clock halved by thermal slowdown, 25 °C hotter; it still waits on the network mostly."""

    def apply(a: Arrays, rng: np.random.Generator) -> None:
        a.clock[node, gpu] *= 0.5
        a.temp[node, gpu] += 25.0
        a.reasons[node, gpu] |= SW_THERMAL | HW_THERMAL
        a.sm[node, gpu] = min(1.0, 2.0 * a.sm[node, gpu])

    return apply


def cpu_contention(node: int) -> Fault:
    def apply(a: Arrays, rng: np.random.Generator) -> None:
        a.cpu[node] = rng.uniform(0.85, 1.0)
        a.run_queue[node] *= rng.uniform(2.5, 4.0)

    return apply


def link_congestion(node: int, factor: float) -> Fault:
    def apply(a: Arrays, rng: np.random.Generator) -> None:
        a.xmit_wait[node] *= factor
        a.congestion[node] *= factor
        a.retrans[node] += rng.poisson(5)
        a.tx_bytes[node] *= 0.9

    return apply


def fabric_congestion(a: Arrays, rng: np.random.Generator) -> None:
    spread = 10.0 * np.exp(0.15 * rng.standard_normal(len(a.xmit_wait)))
    a.xmit_wait *= spread
    a.congestion *= spread


def power_cap(a: Arrays, rng: np.random.Generator) -> None:
    a.clock *= 0.85
    a.reasons |= SW_POWER_CAP


def hot_gpu(node: int, gpu: int) -> Fault:
    def apply(a: Arrays, rng: np.random.Generator) -> None:
        a.temp[node, gpu] += 20.0

    return apply


# -- scenario table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    klass: Klass
    blamed: frozenset[tuple[str, str | None, str]]  # (node, gpu, class)
    job_slow: bool = True


@dataclass(frozen=True)
class Case:
    job: Job
    q: float
    faults: tuple[Fault, ...]
    expected: Expected
    roles: dict[str, str] | None = None


def make_case(name: str, seed: int) -> Case:
    """Scenario ``name`` with random culprit placement and magnitude from ``seed``."""
    n_nodes = 128 if name == "congestion+thermal-128" else 60
    job = Job(seed, n_nodes=n_nodes, stages=2 if name == "pipeline-compute" else 1)
    pick = np.random.default_rng(10_000 + seed)
    node = int(pick.integers(n_nodes))
    gpu = int(pick.integers(GPUS))
    other = (node + 1 + int(pick.integers(n_nodes - 1))) % n_nodes
    culprit, other_culprit = job.nodes[node], job.nodes[other]
    blamed: frozenset[tuple[str, str | None, str]]
    faults: tuple[Fault, ...]
    if name in ("gpu-20pct", "gpu-10pct", "pipeline-compute"):
        slowdown = pick.uniform(0.18, 0.25) if name != "gpu-10pct" else pick.uniform(0.11, 0.15)
        throttled = bool(pick.random() < 0.5)
        blamed = frozenset({(culprit, str(gpu), "compute")})
        roles = job.roles if name == "pipeline-compute" else None
        faults = (slow_gpu(node, gpu, slowdown, throttled),)
        return Case(job, 1.0 / (1.0 + slowdown), faults, Expected("compute", blamed), roles)
    if name == "cpu-contention":
        blamed = frozenset({(culprit, None, "cpu")})
        return Case(job, 0.85, (cpu_contention(node),), Expected("cpu", blamed))
    if name == "link-congestion":
        factor = pick.uniform(4.0, 20.0)
        blamed = frozenset({(culprit, None, "network")})
        return Case(job, 1 / 1.15, (link_congestion(node, factor),), Expected("network", blamed))
    if name == "congestion+thermal-128":
        blamed = frozenset({(culprit, None, "network"), (other_culprit, str(gpu), "compute")})
        faults = (link_congestion(node, 30.0), thermal_throttle(other, gpu))
        return Case(job, 0.10, faults, Expected("network", blamed))
    if name == "fabric-congestion":
        return Case(job, 0.7, (fabric_congestion,), Expected("cluster-wide", frozenset()))
    if name == "power-cap":
        return Case(job, 0.85, (power_cap,), Expected("cluster-wide", frozenset()))
    if name == "hot-not-slow":
        return Case(job, 1.0, (hot_gpu(node, gpu),), Expected("none", frozenset(), job_slow=False))
    if name == "hot-during-fabric-congestion":
        faults = (fabric_congestion, hot_gpu(node, gpu))
        return Case(job, 0.7, faults, Expected("cluster-wide", frozenset()))
    raise ValueError(name)


SCENARIOS = [
    "gpu-20pct",
    "gpu-10pct",
    "pipeline-compute",
    "cpu-contention",
    "link-congestion",
    "congestion+thermal-128",
    "fabric-congestion",
    "power-cap",
    "hot-not-slow",
    "hot-during-fabric-congestion",
]


def judged_right(case: Case, metrics: dict[str, NodeMetrics]) -> bool:
    loc = localise(metrics, roles=case.roles, job_slow=case.expected.job_slow)
    blamed = frozenset((c.node, c.gpu, c.klass) for c in loc.culprits)
    if blamed != case.expected.blamed:
        return False
    if case.expected.blamed and len({c.klass for c in loc.culprits}) > 1:
        return loc.klass in {c.klass for c in loc.culprits}  # mixed: top culprit's class
    return loc.klass == case.expected.klass


@pytest.mark.parametrize("name", SCENARIOS)
def test_class_and_culprit_right_in_95_percent_of_100_seeds_from_one_bucket(name: str) -> None:
    """One bucket of metrics: culprit set (node, GPU, class) and overall class exactly right."""
    right = 0
    for seed in range(100):
        case = make_case(name, seed)
        right += judged_right(case, case.job.bucket(case.q, case.faults))
    assert right >= 95, f"{name}: {right}/100"


@pytest.mark.parametrize("name", ["gpu-10pct", "link-congestion", "congestion+thermal-128"])
def test_three_bucket_window_is_at_least_as_accurate(name: str) -> None:
    """The confirmation window (3 buckets, per-feature median) on the hardest cases."""
    right = 0
    for seed in range(100):
        case = make_case(name, seed)
        window = [case.job.bucket(case.q, case.faults) for _ in range(3)]
        right += judged_right(case, combine_buckets(window))
    assert right >= 95, f"{name}: {right}/100"


def test_pipeline_roles_are_needed_to_compare_like_with_like() -> None:
    """Two stages with different SM activity: with roles the slow GPU is found in all seeds."""
    with_roles = sum(
        judged_right(c, c.job.bucket(c.q, c.faults))
        for c in (make_case("pipeline-compute", s) for s in range(20))
    )
    assert with_roles == 20


def test_hot_gpu_is_named_but_not_blamed() -> None:
    case = make_case("hot-not-slow", 3)
    loc = localise(case.job.bucket(case.q, case.faults), job_slow=False)
    assert loc.culprits == () and loc.klass == "none" and loc.confidence == 0.0
    assert "hot but not slow" in loc.reason


def test_mixed_case_reports_both_culprits_with_their_evidence() -> None:
    """Congestion on one node, thermal throttling on another GPU, throughput 10 %: both named."""
    case = make_case("congestion+thermal-128", 0)
    loc = localise(case.job.bucket(case.q, case.faults))
    by_class = {c.klass: c for c in loc.culprits}
    assert set(by_class) == {"network", "compute"}
    assert {s.feature for s in by_class["network"].evidence} >= {"link_xmit_wait"}
    compute = {s.feature for s in by_class["compute"].evidence}
    assert {"sm_clock_mhz", "clock_event_reasons"} <= compute
    assert all(0.5 <= c.confidence <= 1.0 for c in loc.culprits)
    json.dumps(loc.to_dict(), allow_nan=False)


# -- end to end through the monitor ----------------------------------------------------------

ONSET = 40
PARAMS = FailSlowParams()


@dataclass
class Run:
    verdicts: list[FailSlowVerdict] = field(default_factory=list)
    state: FailSlowState = field(default_factory=FailSlowState)


def run_job(
    case: Case,
    seed: int,
    *,
    buckets: int = ONSET + 8,
    onset: int = ONSET,
    fault_buckets: Callable[[int], bool] | None = None,
    dips: tuple[int, ...] = (),
    noise: float = 0.01,
) -> Run:
    """Job throughput (1 % noise) with the case's q from ``onset``; node metrics from onset − 6."""
    rng = np.random.default_rng(50_000 + seed)
    n_gpus = case.job.n_nodes * GPUS
    active = fault_buckets or (lambda b: b >= onset)
    run = Run()
    window: list[dict[str, NodeMetrics]] = []
    for b in range(buckets):
        q = case.q if active(b) else 1.0
        faults = case.faults if active(b) else ()
        if b in dips:  # a checkpoint save stalls everyone equally
            q *= 0.3
        throughput = 50_000.0 * q * math.exp(noise * rng.standard_normal())
        if b >= onset - 6:
            window = [*window, case.job.bucket(q, faults)][-3:]
        run.state, verdict = step_failslow(
            run.state,
            PARAMS,
            bucket=b,
            throughput=throughput,
            n_gpus=n_gpus,
            metrics=window,
            roles=case.roles,
        )
        run.verdicts.append(verdict)
    return run


def named_in_time(case: Case, run: Run) -> bool:
    """Confirmed and the right culprit(s) named by the third slow bucket (90 s)."""
    v = run.verdicts[ONSET + 2]
    if not v.slow or v.localisation is None:
        return False
    blamed = frozenset((c.node, c.gpu, c.klass) for c in v.localisation.culprits)
    return blamed == case.expected.blamed and (
        bool(blamed) or v.localisation.klass == case.expected.klass
    )


@pytest.mark.long
def test_gpu_20pct_slow_in_60_node_job_named_within_90_s_in_99_percent_of_100_seeds() -> None:
    right = sum(
        named_in_time(make_case("gpu-20pct", s), run_job(make_case("gpu-20pct", s), s))
        for s in range(100)
    )
    assert right >= 99


@pytest.mark.parametrize(
    "name", ["cpu-contention", "link-congestion", "congestion+thermal-128", "fabric-congestion"]
)
def test_other_scenarios_named_within_90_s(name: str) -> None:
    right = sum(
        named_in_time(make_case(name, s), run_job(make_case(name, s), s)) for s in range(20)
    )
    assert right >= 19, f"{name}: {right}/20"


def test_cpu_contention_for_10_min_is_one_incident_with_cpu_class_and_s2_advice() -> None:
    """~10 min of CPU contention on one node: one incident, class cpu, rebalancing advised."""
    case = make_case("cpu-contention", 1)
    run = run_job(case, 1, buckets=ONSET + 30, fault_buckets=lambda b: ONSET <= b < ONSET + 20)
    incidents = run.state.slo.incidents
    assert len(incidents) == 1
    (incident,) = incidents
    assert incident.start_bucket == ONSET and incident.end_bucket is not None
    assert ONSET + 20 <= incident.end_bucket <= ONSET + 23
    assert incident.klass == "cpu"
    assert incident.culprits == tuple((node, gpu) for node, gpu, _ in case.expected.blamed)
    assert incident.stage == "S2"


def test_intermittent_link_congestion_over_24_min_is_one_incident() -> None:
    """Congestion 4 min on / 2 min off for ~24 min: the gaps merge into one network incident."""
    case = make_case("link-congestion", 2)
    on = lambda b: ONSET <= b < ONSET + 48 and (b - ONSET) % 12 < 8  # noqa: E731
    run = run_job(case, 2, buckets=ONSET + 60, fault_buckets=on)
    incidents = run.state.slo.incidents
    assert len(incidents) == 1
    assert incidents[0].klass == "network"
    assert run.state.slo.incident_count == 1


def test_checkpoint_dips_blame_no_node_and_open_no_incident() -> None:
    """Checkpoint saves (one bucket at 30 % throughput, every node equally) never localise."""
    case = make_case("hot-not-slow", 4)  # a hot GPU that is not slow, too
    healthy = Case(case.job, 1.0, case.faults, case.expected)
    run = run_job(healthy, 4, buckets=ONSET + 8, fault_buckets=lambda b: True, dips=(20, 41, 42))
    assert not any(v.slow for v in run.verdicts)
    assert all(v.localisation is None for v in run.verdicts)
    assert run.state.slo.incidents == ()


def test_fabric_congestion_is_cluster_wide_with_moved_links_and_stays_at_s1() -> None:
    case = make_case("fabric-congestion", 5)
    run = run_job(case, 5, buckets=ONSET + 20)
    slow = [v for v in run.verdicts if v.slow]
    assert slow and all(v.localisation is not None for v in slow)
    assert all(v.localisation.culprits == () for v in slow if v.localisation)
    assert all(v.localisation.klass == "cluster-wide" for v in slow if v.localisation)
    moved = {s.feature for s in slow[0].localisation.evidence} if slow[0].localisation else set()
    assert {"link_xmit_wait", "link_congestion"} <= moved
    assert {v.advice.stage for v in slow} == {"S1"}


def test_monitor_state_round_trips_through_json_mid_incident() -> None:
    case = make_case("gpu-20pct", 7)
    run = run_job(case, 7)
    text = json.dumps(run.state.to_dict(), allow_nan=False)
    again = FailSlowState.from_dict(json.loads(text))
    assert again.to_dict() == run.state.to_dict()
    assert again.slo.incidents[-1].klass == "compute"
