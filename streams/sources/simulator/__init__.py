"""A seeded synthetic GPU cluster with labelled faults, emitting raw Prometheus series.

>>> from streams.sources.simulator import ClusterConfig, ClusterSimulator
>>> sim = ClusterSimulator(ClusterConfig(job_nodes=4, spares=1, seed=7))
>>> series = sim.scrape(sim.config.start_ms)
>>> len(series)  # 5 nodes x (14 node_exporter + 4 x 8 dcgm) series
230
"""

from streams.sources.simulator.calibration import Calibration
from streams.sources.simulator.cluster import DEFAULT_START_MS, ClusterConfig, ClusterSimulator
from streams.sources.simulator.faults import (
    CLUSTER_EVENT_KINDS,
    Fault,
    GroundTruth,
    NodeSilent,
    NvlinkBusFault,
)
from streams.sources.simulator.run import (
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
from streams.sources.simulator.state import RoundState
from streams.sources.simulator.timeline import JobEpoch, JobPlan, plan_job

__all__ = [
    "CLUSTER_EVENT_KINDS",
    "DEFAULT_START_MS",
    "Calibration",
    "ClusterConfig",
    "ClusterSimulator",
    "Fault",
    "GroundTruth",
    "JobEpoch",
    "JobPlan",
    "NodeSilent",
    "NvlinkBusFault",
    "RemoteWriteFailed",
    "RemoteWriteRejected",
    "RemoteWriteUnavailable",
    "ReplayStats",
    "RoundState",
    "generate",
    "ground_truth",
    "plan_job",
    "post_remote_write",
    "read_ground_truth",
    "replay",
    "write_ground_truth",
]
