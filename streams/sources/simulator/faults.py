"""Labelled faults for the simulated cluster, and the ground-truth rows they leave.

A fault is a frozen dataclass that knows three things:

- how it changes a node's values in a round (``apply`` edits a ``RoundState``),
- what it does to the training job (``stops_job_at_ms``: the job dies one
  bucket later; ``excludes_node``: the restart runs without the node),
- the ground-truth row an evaluator scores detections against.

The job consequences are carried out by ``timeline.plan_job``, so a new fault
(ECC / XID 94 that restarts the job without excluding the node, row-remap
creep, fail-slow, ...) is a new class here and nothing else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from streams.sources.simulator.state import RoundState

# Ground-truth kinds of events that are not a node's fault: cluster-wide
# behaviour that detectors must *not* blame on a node.
JOB_DEATH = "job_death"
RESTART_LOAD = "restart_load"
CHECKPOINT_SAVE = "checkpoint_save"
SPARE_JOINED = "spare_joined"
CLUSTER_EVENT_KINDS = frozenset({JOB_DEATH, RESTART_LOAD, CHECKPOINT_SAVE, SPARE_JOINED})


@dataclass(frozen=True)
class GroundTruth:
    """One labelled event: a node fault, or a cluster event (``kind`` in CLUSTER_EVENT_KINDS).

    ``onset_ms`` is when it starts; ``xid``/``xid_ms`` the first XID it logs
    (None when it logs none); ``end_ms`` when it is over (None: not within the
    simulation). ``node`` is None for job-wide events; ``gpu`` is None unless
    one GPU is at fault.
    """

    kind: str
    node: str | None
    gpu: int | None
    onset_ms: int
    xid: int | None = None
    xid_ms: int | None = None
    end_ms: int | None = None

    @property
    def is_fault(self) -> bool:
        """True for a node fault a detector should find; False for cluster events."""
        return self.kind not in CLUSTER_EVENT_KINDS


class Fault(ABC):
    """Base of the fault specs. Subclasses are frozen dataclasses with ``node`` and ``onset_ms``."""

    kind: ClassVar[str]
    excludes_node: ClassVar[bool] = False  # the job restarts without this node
    node: str
    onset_ms: int

    @property
    def stops_job_at_ms(self) -> int | None:
        """When the fault kills the job (it dies one bucket later); None: it does not."""
        return None

    def check(self, hosts: Sequence[str], gpus_per_node: int) -> None:
        """Raise ValueError when the fault does not fit the cluster."""
        if self.node not in hosts:
            raise ValueError(f"{self.kind}: unknown node {self.node!r}")

    @abstractmethod
    def apply(self, state: RoundState, node: int) -> None:
        """Change node ``node``'s values in ``state`` (a no-op before onset)."""

    @abstractmethod
    def ground_truth(self) -> GroundTruth:
        """The row an evaluator scores against."""


@dataclass(frozen=True)
class NvlinkBusFault(Fault):
    """An NVLink error followed by the GPU falling off the bus (report: XID 145/149 then 79).

    Abrupt at onset, all in the onset's bucket: the node's interrupt rate
    collapses from ~300 K/s to ``intr_limits`` (70-100 K/s), its training
    processes die (``node_procs_running`` -> 0), the GPU's utilisation and
    power drop, and the GPU's ``DCGM_FI_DEV_XID_ERRORS`` gauge shows the first
    XID of ``xid_sequence``, then the next one each following scrape. Peers
    stay flat until the job dies a bucket later; the node is excluded at the
    restart (a spare takes its place). The fault has no end: the node needs repair.
    """

    kind: ClassVar[str] = "nvlink_bus_fault"
    excludes_node: ClassVar[bool] = True

    node: str
    gpu: int
    onset_ms: int
    xid_sequence: tuple[int, ...] = (145, 79)
    intr_per_s: float = 85_000.0
    intr_noise: float = 0.04
    intr_limits: tuple[float, float] = (70_000.0, 100_000.0)

    def __post_init__(self) -> None:
        if not self.xid_sequence or any(x <= 0 for x in self.xid_sequence):
            raise ValueError(f"{self.kind}: xid_sequence must hold positive XIDs")
        lo, hi = self.intr_limits
        if not 0 < lo <= self.intr_per_s <= hi:
            raise ValueError(
                f"{self.kind}: need 0 < intr_limits[0] <= intr_per_s <= intr_limits[1]"
            )
        if self.intr_noise < 0:
            raise ValueError(f"{self.kind}: intr_noise must be >= 0")

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.onset_ms

    def check(self, hosts: Sequence[str], gpus_per_node: int) -> None:
        super().check(hosts, gpus_per_node)
        if not 0 <= self.gpu < gpus_per_node:
            raise ValueError(f"{self.kind}: gpu {self.gpu} outside 0..{gpus_per_node - 1}")

    def apply(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        step = min(state.rounds_since(self.onset_ms), len(self.xid_sequence) - 1)
        state.xid[node, self.gpu] = self.xid_sequence[step]
        noisy = self.intr_per_s * (1.0 + self.intr_noise * state.rng.standard_normal())
        state.intr_per_s[node] = min(max(noisy, self.intr_limits[0]), self.intr_limits[1])
        state.procs_running[node] = 0.0
        state.gpu_util[node, self.gpu] = 0.0
        state.gpu_power_w[node, self.gpu] = state.idle_gpu_power_w[node, self.gpu]
        state.gpu_temp_target_c[node, self.gpu] = state.idle_gpu_temp_c[node, self.gpu]

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind,
            self.node,
            self.gpu,
            self.onset_ms,
            xid=self.xid_sequence[0],
            xid_ms=self.onset_ms,
        )


@dataclass(frozen=True)
class NodeSilent(Fault):
    """The node emits no series from ``onset_ms`` until ``end_ms`` (None: for good).

    The node keeps doing whatever it did (its counters keep counting) unless
    ``reboot`` is set: then it comes back with kernel counters restarted from
    zero, an explicit counter reset. It does not stop the job by itself.
    """

    kind: ClassVar[str] = "node_silent"

    node: str
    onset_ms: int
    end_ms: int | None = None
    reboot: bool = False

    def __post_init__(self) -> None:
        if self.end_ms is not None and self.end_ms <= self.onset_ms:
            raise ValueError(f"{self.kind}: end_ms must be after onset_ms")
        if self.reboot and self.end_ms is None:
            raise ValueError(f"{self.kind}: a reboot needs an end_ms to come back at")

    def apply(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        if self.end_ms is None or not state.reached(self.end_ms):
            state.silent[node] = True
        elif self.reboot and state.crossed(self.end_ms):
            state.reboot[node] = True

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, self.node, None, self.onset_ms, end_ms=self.end_ms)
