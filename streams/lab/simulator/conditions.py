"""Labelled conditions that look unusual but must not page a node.

- ``HotGpu``: one GPU runs hotter, at full speed (temperature alone never
  convicts a GPU);
- ``TwoPopulations``: the report's fleet -- 12 nodes stage ~9 GB of checkpoint
  and write ~2 GB per save, 48 stage ~48 GB and write ~26 GB: persistent
  per-node differences in page-outs, NFS writes and /dev/shm during saves;
- ``LateScrape``: one round of a node's samples arrives late (a slow remote
  write queue), or the scrape itself started late and its samples land in the
  next bucket;
- ``PlannedRestart``: the job is stopped and restarted on purpose, so a
  restart load (25-33 min of GPU util < 50 % and heavy NFS reads) follows.

Their ground-truth kinds are in ``faults.BENIGN_KINDS`` (the planned restart
is a cluster event), so ``GroundTruth.is_fault`` is False for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from streams.lab.simulator.faults import (
    HOT_GPU,
    LATE_SCRAPE,
    PLANNED_RESTART,
    TWO_POPULATIONS,
    GpuFault,
    GroundTruth,
    JobFault,
    NodeFault,
    check_window,
)
from streams.lab.simulator.state import RoundState
from streams.lab.simulator.traits import NodeTraits, ShapesTraits

if TYPE_CHECKING:
    from streams.lab.simulator.config import ClusterConfig


@dataclass(frozen=True)
class HotGpu(GpuFault):
    """GPU ``gpu`` runs ``rise_c`` hotter than its peers (its HBM too) but not slower."""

    kind: ClassVar[str] = HOT_GPU

    node: str
    gpu: int
    onset_ms: int
    end_ms: int | None = None
    rise_c: float = 15.0

    def __post_init__(self) -> None:
        check_window(self, self.onset_ms, self.end_ms)
        if not 0.0 < self.rise_c <= 40.0:
            raise ValueError(f"{self.kind}: rise_c must be within (0, 40]")

    def apply_to(self, state: RoundState, node: int) -> None:
        if state.active(self.onset_ms, self.end_ms):
            state.gpu_temp_target_c[node, self.gpu] += self.rise_c
            state.mem_temp_offset_c[node, self.gpu] += 0.2 * self.rise_c

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, self.node, self.gpu, self.onset_ms, end_ms=self.end_ms)


@dataclass(frozen=True)
class TwoPopulations(JobFault, ShapesTraits):
    """``n_small`` job nodes stage and write little; all others the large share (report: 12/48).

    The small nodes are ``nodes`` when given, else ``n_small`` job hosts drawn
    from ``seed``; they also page out less between saves. ``onset_ms``: since
    when (the condition is persistent; 0 means since before the simulation).
    """

    kind: ClassVar[str] = TWO_POPULATIONS

    n_small: int = 12
    nodes: tuple[str, ...] | None = None
    seed: int = 0
    onset_ms: int = 0
    pgpgout_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.nodes is not None:
            object.__setattr__(self, "nodes", tuple(self.nodes))
            object.__setattr__(self, "n_small", len(self.nodes))
        if self.n_small < 0 or self.pgpgout_ratio <= 0:
            raise ValueError(f"{self.kind}: need n_small >= 0 and pgpgout_ratio > 0")

    def check(self, hosts: Sequence[str], gpus_per_node: int) -> None:
        unknown = [h for h in self.nodes or () if h not in hosts]
        if unknown:
            raise ValueError(f"{self.kind}: unknown node(s) {unknown}")
        if self.n_small > len(hosts):
            raise ValueError(f"{self.kind}: n_small exceeds the {len(hosts)} hosts")

    def small_hosts(self, config: ClusterConfig) -> tuple[str, ...]:
        """The hosts that stage little, in host order."""
        if self.nodes is not None:
            return tuple(h for h in config.hosts if h in self.nodes)
        job = config.job_hosts
        pick = np.random.default_rng((self.seed, 0x2B0B)).permutation(len(job))[: self.n_small]
        return tuple(job[i] for i in sorted(pick.tolist()))

    def shape_traits(self, traits: NodeTraits, config: ClusterConfig) -> None:
        small = np.isin(np.array(config.hosts), np.array(self.small_hosts(config), dtype=object))
        traits.set_heavy(~small, config)
        traits.pgpgout_train = np.where(
            small, traits.pgpgout_train * self.pgpgout_ratio, traits.pgpgout_train
        )

    def apply_to_job(self, state: RoundState) -> None:
        """Nothing per round: the populations are persistent traits."""

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, None, None, self.onset_ms)


@dataclass(frozen=True)
class LateScrape(NodeFault):
    """The node's samples of the round holding ``at_ms`` come ``delay_s`` late.

    Delivery late (default): the samples keep their scrape timestamps (Prometheus
    stamps a sample at the scrape's start) and are delivered with the round
    ``ceil(delay_s / interval)`` rounds later -- after their bucket may have
    closed. ``moves_timestamp``: the scrape itself started ``delay_s`` late
    (a stalled scrape loop), so its samples carry the later time and may land in
    the next bucket (kept before that target's next regular scrape).
    """

    kind: ClassVar[str] = LATE_SCRAPE

    node: str
    at_ms: int
    delay_s: float = 45.0
    moves_timestamp: bool = False

    def __post_init__(self) -> None:
        if self.delay_s <= 0:
            raise ValueError(f"{self.kind}: delay_s must be > 0")

    @property
    def onset_ms(self) -> int:  # type: ignore[override]
        return self.at_ms

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.reached(self.at_ms) or state.rounds_since(self.at_ms) != 0:
            return
        delay_ms = int(self.delay_s * 1000)
        if self.moves_timestamp:
            state.ts_shift_ms[node] = delay_ms
        else:
            state.delay_rounds[node] = -(-delay_ms // state.interval_ms)

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind, self.node, None, self.at_ms, end_ms=self.at_ms + int(self.delay_s * 1000)
        )


@dataclass(frozen=True)
class PlannedRestart(JobFault):
    """The job is stopped on purpose at ``at_ms`` and restarts ``delay_s`` later, then loads.

    The job ends a bucket after ``at_ms`` (like a fault's job death, but nothing
    broke and no node is excluded); the restart loads the checkpoint for the
    config's ``restart_load_s`` (report: 25-33 min).
    """

    kind: ClassVar[str] = PLANNED_RESTART

    at_ms: int
    delay_s: float = 60.0

    def __post_init__(self) -> None:
        if self.delay_s < 0:
            raise ValueError(f"{self.kind}: delay_s must be >= 0")

    @property
    def onset_ms(self) -> int:  # type: ignore[override]
        return self.at_ms

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.at_ms

    @property
    def restart_delay_s(self) -> float | None:
        return self.delay_s

    def apply_to_job(self, state: RoundState) -> None:
        """Nothing per round: the plan stops and restarts the job."""

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, None, None, self.at_ms)
