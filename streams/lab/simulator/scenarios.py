"""The scenario library: named, seeded, labelled runs of the simulated cluster.

A ``Scenario`` turns a seed into a ``ClusterConfig`` (every optional metric
family on) whose faults' onsets, nodes, GPUs and magnitudes, the checkpoint
cadence, the restart-load length and the noise levels are drawn from that
seed within realistic ranges (DESIGN.md section 7). Its ground truth comes
from the config (``ground_truth``); row-remap creep, which spans weeks, also
has a fast path (``remap_tracks``: the faulty GPU's counters at 1 h).

Budget. The default suite (``default_suite()``, ``DEFAULT_SEEDS`` seeds each)
is ~3,300 scrape rounds per seed (~27 simulated hours; a 128-node job counts
double), ~10,000 rounds for three seeds (``suite_rounds()``). Generating one
seed of it takes ~40 s here (~5 ms per 63-host round with every family on);
what the in-process pipeline spends per round comes on top. ``fault-mix``
(3 simulated days) is not in it.

The ``real-fleet`` suite (``--tag real-fleet``) is ~2.8 group-days per seed
(the 2-day quiet fleet and 15.5 h of single-condition and XID runs); on a free
core one group-day costs ~190 s of generation and scoring (~370 s with an HA
pair), so one seed takes ~7 min on 2 cores, the quiet fleet being the longest
run (22-27 min on the shared 2 cores at load ~8). 11 seeds cover the 30
group-days issue 8 asks for. The ``fleet-week*`` acceptance weeks run by name
only.

Seeds. Tune on ``TUNING_SEEDS``, report on ``REPORTING_SEEDS``; they are
disjoint so thresholds are never fitted to the reported runs.

Tags: ``fail-stop`` (an abrupt failure: the job dies), ``fail-slow`` (the job
runs slower, no XID), ``precursor`` (evidence before the failure: remaps),
``must-not-page`` (no node should be paged: saves, restart loads, job-wide
slowdowns, a hot GPU, two populations, jitter and late scrapes), ``real-fleet``
(the shapes real fleets send, ``real_fleet``; opt-in: not in the default
suite, evaluated with the settings a new user would set). Job-wide
slowdowns are both ``fail-slow`` and ``must-not-page``: the slowdown is real,
but it has no culprit node.

Fault mix (``FAULT_MIX``): this cluster's measured share for NVLink (29.4 %);
the remaining 70.6 % split in Minder's proportions (in-host HW 55.8 % of which
ECC 38.9 %, in-host SW 28.0 %, network 6.0 %, other 10.3 %) over the faults
the simulator has -- see the table's notes for each mapping.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from streams.ingest.series import Series
from streams.lab.simulator import checkpoint_weeks, real_fleet
from streams.lab.simulator.calibration import Calibration
from streams.lab.simulator.conditions import HotGpu, LateScrape, PlannedRestart, TwoPopulations
from streams.lab.simulator.config import ALL_FAMILIES, DEFAULT_START_MS, ClusterConfig
from streams.lab.simulator.failslow import (
    CompoundCongestionThermal,
    CpuContention,
    FabricCongestion,
    GpuSlow,
    NetworkCongestion,
    PowerCap,
)
from streams.lab.simulator.faults import (
    EccFault,
    Fault,
    GroundTruth,
    NodeSilent,
    NvlinkBusFault,
)
from streams.lab.simulator.remap import (
    WEEK_MS,
    RemapSeries,
    RowRemapCreep,
    UncorrectableRemap,
    remap_series,
)
from streams.lab.simulator.run import generate, ground_truth
from streams.lab.simulator.traits import shaped_traits
from streams.settings import Settings

__all__ = [
    "CHECKPOINT_CADENCES_H",
    "DEFAULT_SEEDS",
    "FAULT_MIX",
    "REPORTING_SEEDS",
    "SCENARIOS",
    "TAGS",
    "TUNING_SEEDS",
    "MixEntry",
    "Scenario",
    "default_suite",
    "get_scenario",
    "scenario_names",
    "scenarios",
    "settings_for_layout",
    "suite_rounds",
]

FAIL_STOP, FAIL_SLOW, MUST_NOT_PAGE, PRECURSOR, REAL_FLEET = (
    "fail-stop",
    "fail-slow",
    "must-not-page",
    "precursor",
    "real-fleet",
)
TAGS = frozenset({FAIL_STOP, FAIL_SLOW, MUST_NOT_PAGE, PRECURSOR, REAL_FLEET})
JOB_SIZES = frozenset({16, 60, 128})
SPARES = 3

# 20 each: the real-fleet suite needs 11 seeds for 30 group-days
TUNING_SEEDS: tuple[int, ...] = tuple(range(1000, 1020))
REPORTING_SEEDS: tuple[int, ...] = tuple(range(2000, 2020))
DEFAULT_SEEDS = 3  # seeds per scenario in the default suite (the first of a seed set)

# report: median save interval 2.23 h at 4 K sequence length, 3.32 h at 32 K, 1.36 h at 100 K
CHECKPOINT_CADENCES_H = (2.23, 3.32, 1.36)

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Scenario:
    """A named, seeded, labelled run: ``config_for(seed)`` is the cluster and its faults.

    ``duration_s`` is the simulated length from ``config.start_ms``;
    ``job_nodes`` the job's size (16, 60 or 128; 3 spares beside it unless the
    build says otherwise); ``tags`` from ``TAGS``; ``default``: part of the
    default evaluation suite. ``group_labels``: the worker's ``group_labels``
    it is evaluated with; None: what a new user would set for the seed's
    layout (``settings_for_layout``).
    """

    name: str
    description: str
    tags: frozenset[str]
    job_nodes: int
    duration_s: float
    build: Callable[[np.random.Generator, ClusterConfig], ClusterConfig]
    default: bool = True
    group_labels: tuple[str, ...] | None = ("train_job",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", frozenset(self.tags))
        if not self.tags or not self.tags <= TAGS:
            raise ValueError(f"{self.name}: tags must be a non-empty subset of {sorted(TAGS)}")
        if self.job_nodes not in JOB_SIZES:
            raise ValueError(f"{self.name}: job_nodes must be one of {sorted(JOB_SIZES)}")
        if self.duration_s <= 0 or self.duration_s % 30:
            raise ValueError(f"{self.name}: duration_s must be a positive multiple of 30 s")

    @property
    def duration_ms(self) -> int:
        return int(self.duration_s * 1000)

    @property
    def rounds_per_seed(self) -> int:
        """Scrape rounds of one run, weighted by cluster size (a 63-host round = 1)."""
        return round(self.duration_s / 30 * (self.job_nodes + SPARES) / 63)

    def config_for(self, seed: int) -> ClusterConfig:
        """The cluster, its faults and noise for ``seed`` (deterministic)."""
        if seed < 0:
            raise ValueError("seed must be >= 0")
        rng = np.random.default_rng((seed, zlib.crc32(self.name.encode())))
        return self.build(rng, _base_config(rng, seed, self.job_nodes))

    def settings_for(self, seed: int) -> Settings:
        """The worker settings this run is evaluated with."""
        if self.group_labels is None:
            return settings_for_layout(self.config_for(seed))
        return Settings(group_labels=list(self.group_labels))

    def end_ms(self, seed: int) -> int:
        return self.config_for(seed).start_ms + self.duration_ms

    def rounds(self, seed: int) -> Iterator[tuple[int, list[Series]]]:
        """Every scrape round of the run, as ``generate`` yields them."""
        config = self.config_for(seed)
        return generate(config, config.start_ms, config.start_ms + self.duration_ms)

    def ground_truth(self, seed: int) -> list[GroundTruth]:
        """Faults and cluster events of the run (saves up to its end)."""
        config = self.config_for(seed)
        return ground_truth(config, config.start_ms + self.duration_ms)

    def remap_tracks(self, seed: int, step_s: float = 3600.0) -> list[RemapSeries]:
        """The fast path: each row-remap creep's GPU counters every ``step_s`` over the weeks."""
        config = self.config_for(seed)
        creeps = [f for f in config.faults if isinstance(f, RowRemapCreep)]
        if not creeps:
            return []
        traits = shaped_traits(config)  # the GPU's own old remaps, as the full simulator adds them
        return [
            remap_series(
                fault,
                step_s,
                end_ms=config.start_ms + self.duration_ms,
                base_rows=int(traits.remap_correctable[config.hosts.index(fault.node), fault.gpu]),
            )
            for fault in creeps
        ]


def settings_for_layout(config: ClusterConfig) -> Settings:
    """Default settings (group by ``cluster``), or ``[job label, cluster]`` when there is one,
    with its role label as ``role_labels`` (what an operator would configure)."""
    if config.job_label is None:
        return Settings()
    roles = [config.role_label] if config.role_label else []
    return Settings(group_labels=[config.job_label, "cluster"], role_labels=roles)


# --- building blocks ---------------------------------------------------------------------------


def _noisy_calibration(rng: np.random.Generator) -> Calibration:
    """Noise levels scaled per seed by 0.8-1.4 (per-scrape noise, not the levels)."""
    cal = Calibration()
    fields = (
        "intr_noise",
        "nfs_noise",
        "gpu_power_noise_w",
        "gpu_temp_noise_c",
        "sm_active_noise",
        "sm_clock_noise_mhz",
        "cpu_noise",
        "context_switches_noise",
        "ib_noise",
        "ib_xmit_wait_sigma",
        "iteration_noise",
    )
    scale = rng.uniform(0.8, 1.4, size=len(fields))
    return replace(cal, **{f: getattr(cal, f) * s for f, s in zip(fields, scale, strict=True)})


def _base_config(rng: np.random.Generator, seed: int, job_nodes: int) -> ClusterConfig:
    cadence_s = float(rng.choice(CHECKPOINT_CADENCES_H)) * 3600.0
    return ClusterConfig(
        seed=seed,
        job_nodes=job_nodes,
        spares=SPARES,
        start_ms=DEFAULT_START_MS,
        metric_families=ALL_FAMILIES,
        scrape_jitter_ms=int(rng.integers(10, 60)),
        checkpoint_interval_s=cadence_s,
        first_save_s=float(rng.uniform(0.05, 1.0)) * cadence_s,  # opens anywhere in the cycle
        restart_load_s=float(rng.uniform(25, 33)) * 60.0,  # report: 25-33 min
        calibration=_noisy_calibration(rng),
    )


def _at(rng: np.random.Generator, base: ClusterConfig, lo_min: float, hi_min: float) -> int:
    """A time ``lo_min``-``hi_min`` minutes into the run, anywhere inside its bucket."""
    return base.start_ms + int(rng.uniform(lo_min, hi_min) * MINUTE_MS)


def _node(rng: np.random.Generator, base: ClusterConfig, avoid: Iterable[str] = ()) -> str:
    hosts = [h for h in base.job_hosts if h not in set(avoid)]
    return hosts[int(rng.integers(len(hosts)))]


def _gpu(rng: np.random.Generator, base: ClusterConfig) -> int:
    return int(rng.integers(base.gpus_per_node))


def _with(base: ClusterConfig, *faults: Fault, **overrides: object) -> ClusterConfig:
    return replace(base, faults=(*base.faults, *faults), **overrides)  # type: ignore[arg-type]


# --- fault makers (also used by the fault mix) -------------------------------------------------


def _nvlink(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    first = int(rng.choice((145, 149)))
    return NvlinkBusFault(
        node,
        _gpu(rng, base),
        at,
        xid_sequence=(first, 79),
        intr_per_s=float(rng.uniform(72_000, 98_000)),
    )


def _ecc(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    return EccFault(
        node,
        _gpu(rng, base),
        at,
        getattr_factor=float(rng.uniform(5, 15)),
        pgpgout_factor=float(rng.uniform(5, 20)),
    )


def _uncorrectable(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    return UncorrectableRemap(node, _gpu(rng, base), at, rows=int(rng.integers(1, 4)))


def _creep(rng: np.random.Generator, base: ClusterConfig, gone: int, node: str) -> Fault:
    creep_weeks = rng.uniform(6.5, 7.5)  # report: ~7 weeks of creep, then one week of surge
    return RowRemapCreep(
        node,
        _gpu(rng, base),
        onset_ms=gone - WEEK_MS - int(creep_weeks * WEEK_MS),
        gone_ms=gone,
        creep_rows=int(rng.integers(25, 51)),  # > 200 rows in the last week
        total_rows=254,
        seed=int(rng.integers(2**31)),
    )


def _host_down(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    return NodeSilent(node, at, stops_job=True)


def _exporter_down(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    return NodeSilent(node, at, at + int(rng.uniform(10, 30) * MINUTE_MS), targets=("dcgm",))


def _gpu_slow(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    end = at + int(rng.uniform(15, 30) * MINUTE_MS)
    return GpuSlow(node, _gpu(rng, base), at, end, slowdown=float(rng.uniform(0.15, 0.25)))


def _cpu_contention(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    # GREYHOUND: 6 of 392 single-node trials, mean 10 min, +11.79 %
    return CpuContention(
        node,
        at,
        duration_s=float(rng.uniform(6, 14)) * 60.0,
        slowdown=float(rng.uniform(0.10, 0.14)),
    )


def _congestion(rng: np.random.Generator, base: ClusterConfig, at: int, node: str) -> Fault:
    # GREYHOUND: 42 of 107 4-node trials, mean 24 min, +15.45 %
    return NetworkCongestion(
        node,
        at,
        duration_s=float(rng.uniform(15, 35)) * 60.0,
        slowdown=float(rng.uniform(0.12, 0.20)),
        wait_factor=float(rng.uniform(15, 50)),
        seed=int(rng.integers(2**31)),
    )


FaultMaker = Callable[[np.random.Generator, ClusterConfig, int, str], Fault]


def _single(
    maker: FaultMaker, lo_min: float, hi_min: float
) -> Callable[[np.random.Generator, ClusterConfig], ClusterConfig]:
    def build(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
        at = _at(rng, base, lo_min, hi_min)
        return _with(base, maker(rng, base, at, _node(rng, base)))

    return build


# --- scenarios with more than one part ---------------------------------------------------------


def _row_remap_creep(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    gone = _at(rng, base, 20, 35)
    return _with(base, _creep(rng, base, gone, _node(rng, base)))


def _congestion_thermal(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    fault = CompoundCongestionThermal(
        _node(rng, base),
        _at(rng, base, 20, 35),
        duration_s=float(rng.uniform(20, 35)) * 60.0,
        throughput=float(rng.uniform(0.08, 0.15)),  # GREYHOUND: down to 10 % of normal
        network_share=float(rng.uniform(0.3, 0.5)),
        temp_rise_c=float(rng.uniform(15, 25)),
    )
    return _with(base, fault)


def _fabric(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    fault = FabricCongestion(
        _at(rng, base, 20, 40),
        duration_s=float(rng.uniform(10, 30)) * 60.0,
        slowdown=float(rng.uniform(0.10, 0.30)),
        wait_factor=float(rng.uniform(6, 20)),
    )
    return _with(base, fault)


def _power_cap(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    fault = PowerCap(
        _at(rng, base, 20, 40),
        duration_s=float(rng.uniform(10, 30)) * 60.0,
        slowdown=float(rng.uniform(0.10, 0.25)),
        cap_w=float(rng.uniform(600, 800)),
    )
    return _with(base, fault)


def _hot_gpu(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    at = _at(rng, base, 15, 30)
    fault = HotGpu(_node(rng, base), _gpu(rng, base), at, rise_c=float(rng.uniform(12, 18)))
    return _with(base, fault)


def _checkpoint_saves(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    cadence_h = CHECKPOINT_CADENCES_H[int(rng.integers(len(CHECKPOINT_CADENCES_H)))]
    first_s = float(rng.uniform(10, 40)) * 60.0
    return _with(base, checkpoint_interval_s=cadence_h * 3600.0, first_save_s=first_s)


def _restart_load(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    restart = PlannedRestart(_at(rng, base, 10, 20), delay_s=float(rng.uniform(60, 300)))
    return _with(base, restart)


def _two_populations(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    populations = TwoPopulations(n_small=12, seed=int(rng.integers(2**31)), onset_ms=base.start_ms)
    first_s = float(rng.uniform(10, 30)) * 60.0
    return _with(base, populations, checkpoint_interval_s=1.36 * 3600.0, first_save_s=first_s)


def _late_scrape(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    late = (
        LateScrape(_node(rng, base), _at(rng, base, 10, 25), delay_s=float(rng.uniform(45, 120))),
        LateScrape(_node(rng, base), _at(rng, base, 30, 45), delay_s=float(rng.uniform(31, 40))),
        LateScrape(
            _node(rng, base),
            _at(rng, base, 50, 65),
            delay_s=float(rng.uniform(8, 25)),
            moves_timestamp=True,
        ),
    )
    return _with(base, *late, scrape_jitter_ms=int(rng.integers(100, 1000)))


# --- the fault mix ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MixEntry:
    """One line of the fault mix: what to inject, its weight (%) and where that comes from."""

    name: str
    weight: float
    make: FaultMaker
    note: str


_REST = 0.706  # what the NVLink share (29.4 %) leaves for Minder's categories

FAULT_MIX: tuple[MixEntry, ...] = (
    MixEntry("nvlink_bus_fault", 29.4, _nvlink, "this cluster: NVLink errors are 29.4 %"),
    MixEntry("ecc_error", 38.9 * _REST * 0.65, _ecc,
             "Minder in-host HW, ECC 38.9 %: contained ECC, XID 94 (65 % of ECC)"),
    MixEntry("uncorrectable_remap", 38.9 * _REST * 0.25, _uncorrectable,
             "Minder ECC 38.9 %: uncorrectable remaps then XID 94 (25 % of ECC)"),
    MixEntry("row_remap_creep", 38.9 * _REST * 0.10, _creep,
             "Minder ECC 38.9 %: correctable creep until the GPU is lost (10 % of ECC)"),
    MixEntry("gpu_slow", 16.9 * _REST * 0.5, _gpu_slow,
             "Minder in-host HW other than ECC 16.9 %: a degraded GPU (half)"),
    MixEntry("host_down", (16.9 * 0.5 + 10.3) * _REST, _host_down,
             "Minder in-host HW other than ECC (half) + other 10.3 %: the host is lost"),
    MixEntry("cpu_contention", 28.0 * _REST * 0.6, _cpu_contention,
             "Minder in-host SW 28.0 %: a runaway process (60 %)"),
    MixEntry("exporter_down", 28.0 * _REST * 0.4, _exporter_down,
             "Minder in-host SW 28.0 %: the monitoring agent dies (40 %); no app-crash fault here"),
    MixEntry("network_congestion", 6.0 * _REST, _congestion, "Minder network 6.0 %"),
)  # fmt: skip

_MIX_EXCLUDES = {"nvlink_bus_fault", "row_remap_creep", "host_down"}  # faults that remove a node
_MIX_MTBF_H = 12.0  # compressed from the cluster's 56.2 h so a 3-day run holds ~6 faults


def _fault_mix(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    duration_ms = _FAULT_MIX_DAYS * 24 * HOUR_MS
    count = max(1, round(duration_ms / HOUR_MS / _MIX_MTBF_H))
    weights = np.array([e.weight for e in FAULT_MIX])
    slot = duration_ms // count
    faults: list[Fault] = []
    lost: list[str] = []
    for k in range(count):
        entry = FAULT_MIX[int(rng.choice(len(FAULT_MIX), p=weights / weights.sum()))]
        at = base.start_ms + k * slot + int(rng.uniform(0.2, 0.6) * slot)
        node = _node(rng, base, avoid=lost)
        faults.append(entry.make(rng, base, at, node))
        if entry.name in _MIX_EXCLUDES:
            lost.append(node)
    return _with(base, *faults)


_FAULT_MIX_DAYS = 3


# --- the registry ----------------------------------------------------------------------------

_H = 3600.0


def _registry() -> dict[str, Scenario]:
    # Fail-stop runs: ~20-35 min of training, the fault, the job's death a bucket later,
    # ~10 min until the restart, a 25-33 min load, then training again: 1.5 h.
    # Fail-slow and must-not-page runs: 20-40 min of training first, 1.25 h in all.
    s = [
        Scenario("nvlink-bus-fault",
                 "NVLink error then the GPU falls off the bus (XID 145/149 -> 79): interrupts "
                 "collapse, procs running -> 0; the job dies a bucket later, restarts ~10 min "
                 "later on a spare and loads its checkpoint.",
                 frozenset({FAIL_STOP}), 60, 1.5 * _H, _single(_nvlink, 20, 35)),
        Scenario("nvlink-bus-fault-16", "The NVLink + bus fault in a 16-node job.",
                 frozenset({FAIL_STOP}), 16, 1.5 * _H, _single(_nvlink, 20, 35)),
        Scenario("ecc-xid94",
                 "Contained ECC error (XID 94): NFS GETATTR response time and pgpgout spike "
                 "in the XID's bucket; the job dies a bucket later and restarts on the same "
                 "nodes (XID 94 is RESTART_APP).",
                 frozenset({FAIL_STOP}), 60, 1.5 * _H, _single(_ecc, 20, 35)),
        Scenario("uncorrectable-remap",
                 "Uncorrectable remapped rows rise (remap pending) and XID 94 follows in the "
                 "same bucket; the job dies a bucket later.",
                 frozenset({FAIL_STOP, PRECURSOR}), 60, 1.5 * _H, _single(_uncorrectable, 20, 35)),
        Scenario("row-remap-creep",
                 "Correctable remapped rows creep for ~7 weeks, then > 200 rows in one week to "
                 "254, no XID; the GPU vanishes 20-35 min into the run and the job dies. The "
                 "weeks are in remap_tracks(seed) (1-h fast path); the run holds the end.",
                 frozenset({PRECURSOR, FAIL_STOP}), 60, 1.5 * _H, _row_remap_creep),
        Scenario("host-down",
                 "A host goes down: all its exporters fall silent, its ranks die, the job dies "
                 "a bucket later and restarts on a spare.",
                 frozenset({FAIL_STOP}), 60, 1.5 * _H, _single(_host_down, 20, 35)),
        Scenario("exporter-down",
                 "dcgm-exporter on one node stops answering for 10-30 min while node_exporter "
                 "and the job carry on (a monitoring outage, to be flagged at once).",
                 frozenset({FAIL_STOP}), 60, 1.25 * _H, _single(_exporter_down, 20, 40)),
        Scenario("gpu-slow",
                 "One GPU 15-25 % slow (clock down, HW slowdown bit) for 15-30 min: every "
                 "node's iteration time rises, the slow GPU stays busy while its peers wait.",
                 frozenset({FAIL_SLOW}), 60, 1.25 * _H, _single(_gpu_slow, 20, 40)),
        Scenario("gpu-slow-16", "One slow GPU in a 16-node job.",
                 frozenset({FAIL_SLOW}), 16, 1.25 * _H, _single(_gpu_slow, 20, 40)),
        Scenario("cpu-contention",
                 "CPU contention on one node for 6-14 min (GREYHOUND mean 10 min): its CPUs "
                 "busy, run queue and load up, the job +10-14 %.",
                 frozenset({FAIL_SLOW}), 60, 1.25 * _H, _single(_cpu_contention, 20, 40)),
        Scenario("network-congestion",
                 "Intermittent congestion on one node's links for 15-35 min (GREYHOUND mean "
                 "24 min, +15 %): its InfiniBand transmit wait out of line while congested.",
                 frozenset({FAIL_SLOW}), 60, 1.25 * _H, _single(_congestion, 20, 35)),
        Scenario("congestion-thermal",
                 "Congestion on one node plus thermal throttling of its GPUs in a 128-node "
                 "job: throughput down to 8-15 % of normal for 20-35 min.",
                 frozenset({FAIL_SLOW}), 128, 1.25 * _H, _congestion_thermal),
        Scenario("fabric-congestion",
                 "Fabric-wide congestion: every node's transmit wait rises together, the job "
                 "+10-30 % for 10-30 min; no node is to blame.",
                 frozenset({FAIL_SLOW, MUST_NOT_PAGE}), 60, 1.25 * _H, _fabric),
        Scenario("power-cap",
                 "Every GPU power-capped together (SW power cap bit, clocks down), the job "
                 "+10-25 % for 10-30 min; no node is to blame.",
                 frozenset({FAIL_SLOW, MUST_NOT_PAGE}), 60, 1.25 * _H, _power_cap),
        Scenario("hot-gpu", "One GPU runs 12-18 C hotter at full speed: must not be blamed.",
                 frozenset({MUST_NOT_PAGE}), 60, 1.25 * _H, _hot_gpu),
        Scenario("checkpoint-saves",
                 "Three hours of training with synchronised checkpoint saves (cadence 1.36, "
                 "2.23 or 3.32 h by seed, the first 10-40 min in; 18-32 s GPU dips on every "
                 "node).",
                 frozenset({MUST_NOT_PAGE}), 60, 3 * _H, _checkpoint_saves),
        Scenario("restart-load",
                 "A planned restart 10-20 min in: the job stops, restarts 1-5 min later and "
                 "loads its checkpoint for 25-33 min (GPU util < 50 %, heavy NFS reads).",
                 frozenset({MUST_NOT_PAGE}), 60, 1.25 * _H, _restart_load),
        Scenario("two-populations",
                 "The report's fleet: 12 nodes stage ~9 GB and write ~2 GB per save, 48 stage "
                 "~48 GB and write ~26 GB; saves every ~1.36 h, the first 10-30 min in.",
                 frozenset({MUST_NOT_PAGE}), 60, 2.5 * _H, _two_populations),
        Scenario("late-scrape",
                 "Exporter jitter of 0.1-1 s and three late scrapes: two delivered 31-120 s late "
                 "(after their bucket), one whose samples land in the next bucket.",
                 frozenset({MUST_NOT_PAGE}), 60, 1.25 * _H, _late_scrape),
        Scenario("fault-mix",
                 "Three days with ~6 faults drawn from FAULT_MIX (NVLink 29.4 %, then Minder's "
                 "HW / SW / network / other shares); not in the default suite.",
                 frozenset({FAIL_STOP, FAIL_SLOW, PRECURSOR}), 60, _FAULT_MIX_DAYS * 24 * _H,
                 _fault_mix, default=False),
        Scenario("checkpoint-weeks",
                 "Three weeks of saves every ~2.23 h and ECC fail-stops at a mean 56.2 h of "
                 "running time, each a restart and a load: the checkpoint advisors' ground "
                 "truth (fast path: checkpoint_weeks.bucket_frames); run by name only.",
                 frozenset({FAIL_STOP}), 16, checkpoint_weeks.WEEKS * 7 * 24 * _H,
                 checkpoint_weeks.checkpoint_weeks, default=False),
        *_real_fleet(),
    ]  # fmt: skip
    return {sc.name: sc for sc in s}


def _real_fleet() -> list[Scenario]:
    """The ``real-fleet`` scenarios (``real_fleet``): opt-in, run with the layout's settings."""
    quiet = {MUST_NOT_PAGE, REAL_FLEET}
    stop = {FAIL_STOP, REAL_FLEET}

    def sc(name: str, text: str, tags: set[str], hours: float, build) -> Scenario:
        return Scenario(name, text, frozenset(tags), 60, hours * _H, build, False, None)

    return [  # the quiet fleet first: the longest run starts at once
        sc("fleet-quiet", f"{real_fleet.QUIET_FLEET_DAYS} days of healthy training in every shape "
           "drawn together (HA aside), a planned restart about twice a day.",
           quiet, real_fleet.QUIET_FLEET_DAYS * 24, real_fleet.quiet_fleet),
        sc("fleet-idle-spares", "0-5 idle spares beside the 60-node job, grouped by cluster.",
           quiet, 2, real_fleet.idle_spares),
        sc("fleet-scrape-timing", "Scrape offsets hashed over the whole 30 s interval per target, "
           "100-500 ms of jitter: samples land either side of bucket boundaries.",
           quiet, 2, real_fleet.scrape_timing),
        sc("fleet-checkpoint-cadence", "Saves every 20 min to 4 h, the first in the first minute "
           "or anywhere in the cycle.", quiet, 3, real_fleet.checkpoint_cadence),
        sc("fleet-restart-load", "A planned restart 5-15 min in, a 5-60 min load, the first save "
           "right after it or an interval later.", quiet, 2, real_fleet.restart_load),
        sc("fleet-ha-pair", "An HA Prometheus pair: every series twice, prometheus_replica "
           "replica-a / replica-b, each at its own offsets.", quiet, 1.5, real_fleet.ha_pair),
        sc("fleet-label-layout", "Job label on every series, only on dcgm-exporter's, or none "
           "(train_job / hpc_job, a pipeline_stage role label or not), 3 spares.",
           quiet, 2, real_fleet.label_layout),
        sc("fleet-xid", "An NVLink + bus or ECC XID fail-stop under every shape drawn together "
           "(spares, spread offsets, cadence, load, HA, layout).",
           stop, 1.5, real_fleet.fleet_xid),
        sc("fleet-xid-vanishing-label", "The same with the job label (every series or dcgm only) "
           "gone from the XID's scrape on.", stop, 1.5, real_fleet.fleet_xid_vanishing_label),
        *(
            Scenario(f"fleet-week-{v}" if v != "default" else "fleet-week",
                     f"Issue 8's acceptance world ({v}): a week of 60 + 3 spares, spread offsets, "
                     "saves from the first minute, three XID fail-stops; run by name only.",
                     frozenset({FAIL_STOP}), 60, real_fleet.WEEK_DAYS * 24 * _H,
                     real_fleet.fleet_week(v), False, None)
            for v in real_fleet.WEEK_VARIANTS
        ),
    ]  # fmt: skip


SCENARIOS: Mapping[str, Scenario] = MappingProxyType(_registry())


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; ValueError listing the known names otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def scenarios(tag: str | None = None, *, include_long: bool = False) -> tuple[Scenario, ...]:
    """Scenarios in registry order, optionally with ``tag``; the long ones only if asked.

    The ``real-fleet`` scenarios are not in the default suite: ``tag="real-fleet"``
    (or ``include_long``) selects them.
    """
    if tag is not None and tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r}; known: {', '.join(sorted(TAGS))}")
    return tuple(
        sc
        for sc in SCENARIOS.values()
        if (include_long or sc.default or tag == REAL_FLEET) and (tag is None or tag in sc.tags)
    )


def scenario_names(tag: str | None = None, *, include_long: bool = False) -> tuple[str, ...]:
    return tuple(sc.name for sc in scenarios(tag, include_long=include_long))


def default_suite() -> tuple[Scenario, ...]:
    """The scenarios ``peerwatch evaluate`` runs by default."""
    return scenarios()


def suite_rounds(suite: Iterable[Scenario] | None = None, seeds: int = DEFAULT_SEEDS) -> int:
    """Scrape rounds (63-host equivalents) that ``seeds`` seeds of ``suite`` generate."""
    chosen = default_suite() if suite is None else tuple(suite)
    return seeds * sum(sc.rounds_per_seed for sc in chosen)
