"""A seeded synthetic GPU cluster with labelled faults, emitting raw Prometheus series.

>>> from streams.lab.simulator import ClusterConfig, ClusterSimulator
>>> sim = ClusterSimulator(ClusterConfig(job_nodes=4, spares=1, seed=7))
>>> series = sim.scrape(sim.config.start_ms)
>>> len(series)  # 5 nodes x (14 node_exporter + 4 x 8 dcgm) series
230
>>> sim = ClusterSimulator(ClusterConfig(job_nodes=4, spares=1, metric_families=ALL_FAMILIES))
>>> len(sim.scrape(sim.config.start_ms))  # + CPU, memory, InfiniBand, GPU perf, remaps, trainer
783

The scenario library (``scenarios``) builds seeded, labelled configs from
these parts; ``remap_series`` is the fast path for weeks of row-remap creep.
``fleet`` holds the shapes real fleets send (job labels on some exporters only,
spread scrape offsets, HA replica pairs, vanishing job labels, role labels) and
``real_fleet`` the randomised scenarios built on them.
"""

from streams.lab.simulator.calibration import Calibration
from streams.lab.simulator.cluster import ClusterSimulator
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
    BENIGN_KINDS,
    CLUSTER_EVENT_KINDS,
    EccFault,
    Fault,
    GroundTruth,
    JobFault,
    NodeFault,
    NodeSilent,
    NvlinkBusFault,
)
from streams.lab.simulator.remap import (
    RemapSeries,
    RowRemapCreep,
    UncorrectableRemap,
    remap_series,
)
from streams.lab.simulator.run import (
    RemoteWriteFailed,
    RemoteWriteRejected,
    RemoteWriteUnavailable,
    ReplayStats,
    generate,
    ground_truth,
    post_remote_write,
    read_ground_truth,
    replay,
    write_ground_truth,
)
from streams.lab.simulator.state import RoundState
from streams.lab.simulator.timeline import JobEpoch, JobPlan, plan_job

__all__ = [
    "ALL_FAMILIES",
    "BENIGN_KINDS",
    "CLUSTER_EVENT_KINDS",
    "DEFAULT_START_MS",
    "Calibration",
    "ClusterConfig",
    "ClusterSimulator",
    "CompoundCongestionThermal",
    "CpuContention",
    "EccFault",
    "FabricCongestion",
    "Fault",
    "GpuSlow",
    "GroundTruth",
    "HotGpu",
    "JobEpoch",
    "JobFault",
    "JobPlan",
    "LateScrape",
    "NetworkCongestion",
    "NodeFault",
    "NodeSilent",
    "NvlinkBusFault",
    "PlannedRestart",
    "PowerCap",
    "RemapSeries",
    "RemoteWriteFailed",
    "RemoteWriteRejected",
    "RemoteWriteUnavailable",
    "ReplayStats",
    "RoundState",
    "RowRemapCreep",
    "TwoPopulations",
    "UncorrectableRemap",
    "generate",
    "ground_truth",
    "plan_job",
    "post_remote_write",
    "read_ground_truth",
    "remap_series",
    "replay",
    "write_ground_truth",
]
