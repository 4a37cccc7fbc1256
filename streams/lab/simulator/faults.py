"""Labelled faults for the simulated cluster, and the ground-truth rows they leave.

A fault is a frozen dataclass that knows three things:

- how it changes a node's values in a round (``apply`` edits a ``RoundState``),
- what it does to the training job (``stops_job_at_ms``: the job dies one
  bucket later; ``excludes_node``: the restart runs without the node;
  ``restart_delay_s``: how long until it restarts, when not the config's),
- the ground-truth row an evaluator scores detections against.

The job consequences are carried out by ``timeline.plan_job``, so a new fault
is a new class and nothing else. This module holds the base, the ground-truth
row and the fail-stop faults whose signature is one abrupt bucket (NVLink +
bus, ECC / XID 94) or silence; row remapping is in ``remap``, the fail-slow
faults in ``failslow``, and conditions that must *not* page in ``conditions``.

Kinds are stable strings (the evaluator's tables key on them). A fault with
``node = None`` is job-wide (every member at once); its row has no node.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from streams.lab.simulator.state import GETATTR, TARGETS, TRAINER

if TYPE_CHECKING:
    from streams.lab.simulator.state import RoundState

# Ground-truth kinds of events that are not a node's fault: cluster-wide
# behaviour that detectors must *not* blame on a node.
JOB_DEATH = "job_death"
RESTART_LOAD = "restart_load"
CHECKPOINT_SAVE = "checkpoint_save"
SPARE_JOINED = "spare_joined"
PLANNED_RESTART = "planned_restart"
CLUSTER_EVENT_KINDS = frozenset(
    {JOB_DEATH, RESTART_LOAD, CHECKPOINT_SAVE, SPARE_JOINED, PLANNED_RESTART}
)
# Labelled conditions that look unusual but are no node fault: a hot GPU that is
# not slow, job-wide slowdowns with no culprit, a fleet of two populations, a
# late scrape. They must not page a node (a group-level event is fine).
HOT_GPU = "hot_gpu"
FABRIC_CONGESTION = "fabric_congestion"
POWER_CAP = "power_cap"
TWO_POPULATIONS = "two_populations"
LATE_SCRAPE = "late_scrape"
BENIGN_KINDS = frozenset({HOT_GPU, FABRIC_CONGESTION, POWER_CAP, TWO_POPULATIONS, LATE_SCRAPE})


@dataclass(frozen=True)
class GroundTruth:
    """One labelled event: a node fault, or an event that must not page a node.

    ``onset_ms`` is when it starts; ``xid``/``xid_ms`` the first XID it logs
    (None when it logs none); ``end_ms`` when it is over (None: not within the
    simulation) -- for a row-remap creep, when the GPU disappears. ``node`` is
    None for job-wide events; ``gpu`` is None unless one GPU is at fault.
    ``slowdown`` is how much longer the job's iterations take while a fail-slow
    fault (or a job-wide slowdown) lasts: 0.2 = +20 % (None: not a slowdown).
    """

    kind: str
    node: str | None
    gpu: int | None
    onset_ms: int
    xid: int | None = None
    xid_ms: int | None = None
    end_ms: int | None = None
    slowdown: float | None = None

    @property
    def is_fault(self) -> bool:
        """True for a node fault a detector should find; False for what must not page."""
        return self.kind not in CLUSTER_EVENT_KINDS and self.kind not in BENIGN_KINDS

    @property
    def must_not_page(self) -> bool:
        return not self.is_fault


class Fault(ABC):
    """Base of the fault specs: frozen dataclasses with ``node`` (None: job-wide), ``onset_ms``."""

    kind: ClassVar[str]
    node: str | None
    onset_ms: int

    @property
    def excludes_node(self) -> bool:
        """The job restarts without this node."""
        return False

    @property
    def stops_job_at_ms(self) -> int | None:
        """When the fault kills the job (it dies one bucket later); None: it does not."""
        return None

    @property
    def restart_delay_s(self) -> float | None:
        """Seconds from the job's death to its restart; None: the config's ``restart_delay_s``."""
        return None

    def check(self, hosts: Sequence[str], gpus_per_node: int) -> None:
        """Raise ValueError when the fault does not fit the cluster."""
        if self.node is not None and self.node not in hosts:
            raise ValueError(f"{self.kind}: unknown node {self.node!r}")

    @abstractmethod
    def apply(self, state: RoundState, node: int | None) -> None:
        """Change the values in ``state`` (node ``node``'s; every member's when None)."""

    @abstractmethod
    def ground_truth(self) -> GroundTruth:
        """The row an evaluator scores against."""


class NodeFault(Fault):
    """A fault on one node: ``apply_to`` gets the node's index."""

    node: str

    def apply(self, state: RoundState, node: int | None) -> None:
        if node is None:
            raise ValueError(f"{self.kind}: a node fault needs its node's index")
        self.apply_to(state, node)

    @abstractmethod
    def apply_to(self, state: RoundState, node: int) -> None:
        """Change node ``node``'s values in ``state`` (a no-op outside the fault's time)."""


class JobFault(Fault):
    """A job-wide fault (``node`` is None): ``apply_to_job`` changes every member at once."""

    node: None = None

    def apply(self, state: RoundState, node: int | None) -> None:
        self.apply_to_job(state)

    @abstractmethod
    def apply_to_job(self, state: RoundState) -> None:
        """Change the members' values in ``state`` (a no-op outside the fault's time)."""


def check_gpu(fault: Fault, gpu: int, gpus_per_node: int) -> None:
    if not 0 <= gpu < gpus_per_node:
        raise ValueError(f"{fault.kind}: gpu {gpu} outside 0..{gpus_per_node - 1}")


class GpuFault(NodeFault):
    """A fault on one GPU (``gpu``) of one node: ``check`` bounds the GPU's index too."""

    gpu: int

    def check(self, hosts: Sequence[str], gpus_per_node: int) -> None:
        super().check(hosts, gpus_per_node)
        check_gpu(self, self.gpu, gpus_per_node)


def check_window(fault: Fault, onset_ms: int, end_ms: int | None) -> None:
    if end_ms is not None and end_ms <= onset_ms:
        raise ValueError(f"{fault.kind}: end_ms must be after onset_ms")


@dataclass(frozen=True)
class NvlinkBusFault(GpuFault):
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
    def excludes_node(self) -> bool:
        return True

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.onset_ms

    def apply_to(self, state: RoundState, node: int) -> None:
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
        state.sm_active[node, self.gpu] = 0.0
        state.target_silent[node, TRAINER] = True  # the trainer's processes are gone

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
class NodeSilent(NodeFault):
    """The node emits no series from ``onset_ms`` until ``end_ms`` (None: for good).

    ``targets`` None silences every exporter of the node (the host, or its
    network, is down); a tuple of target names (``"node"``, ``"dcgm"``,
    ``"trainer"``) silences only those -- e.g. ``("dcgm",)`` is a dcgm-exporter
    outage while node_exporter still answers. The node keeps doing whatever it
    did (its counters keep counting) unless ``reboot`` is set: then it comes
    back with kernel counters restarted from zero, an explicit counter reset.
    It does not stop the job unless ``stops_job`` (the host crashed: its ranks
    die, the job dies a bucket later and restarts without the node).
    """

    kind: ClassVar[str] = "node_silent"

    node: str
    onset_ms: int
    end_ms: int | None = None
    reboot: bool = False
    targets: tuple[str, ...] | None = None
    stops_job: bool = False

    def __post_init__(self) -> None:
        check_window(self, self.onset_ms, self.end_ms)
        if self.reboot and self.end_ms is None:
            raise ValueError(f"{self.kind}: a reboot needs an end_ms to come back at")
        if self.targets is not None:
            object.__setattr__(self, "targets", tuple(self.targets))
            unknown = [t for t in self.targets if t not in TARGETS]
            if unknown or not self.targets:
                raise ValueError(f"{self.kind}: targets must be a non-empty subset of {TARGETS}")
            if self.reboot or self.stops_job:
                raise ValueError(
                    f"{self.kind}: an exporter outage neither reboots nor stops the job"
                )

    @property
    def excludes_node(self) -> bool:
        return self.stops_job

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.onset_ms if self.stops_job else None

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        if self.end_ms is None or not state.reached(self.end_ms):
            if self.targets is None:
                state.silent[node] = True
            else:
                for target in self.targets:
                    state.target_silent[node, TARGETS.index(target)] = True
        elif self.reboot and state.crossed(self.end_ms):
            state.reboot[node] = True

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, self.node, None, self.onset_ms, end_ms=self.end_ms)


@dataclass(frozen=True)
class EccFault(GpuFault):
    """A contained ECC error (XID 94 on ``gpu``): the job dies a bucket later, the node stays.

    Report: at the XID the node's NFS GETATTR response time and
    ``node_vmstat_pgpgout`` spike (the crashing ranks flush and dump) while
    everything else still looks like training. Both spike in the XID's bucket
    only -- by ``getattr_factor`` and ``pgpgout_factor`` -- and the job dies a
    bucket later on every node. XID 94 is RESTART_APP in both catalogs: the
    restart keeps the node (no spare).
    """

    kind: ClassVar[str] = "ecc_error"

    node: str
    gpu: int
    onset_ms: int
    xid: int = 94
    getattr_factor: float = 8.0
    pgpgout_factor: float = 10.0

    def __post_init__(self) -> None:
        if self.xid <= 0:
            raise ValueError(f"{self.kind}: xid must be positive")
        if self.getattr_factor < 1.0 or self.pgpgout_factor < 1.0:
            raise ValueError(f"{self.kind}: getattr_factor and pgpgout_factor must be >= 1")

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.onset_ms

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        state.xid[node, self.gpu] = self.xid
        if state.rounds_since(self.onset_ms) == 0 and state.member[node]:
            state.nfs_response_s[node, GETATTR] *= self.getattr_factor
            state.nfs_requests_per_s[node, GETATTR] *= 1.5
            state.pgpgout_per_s[node] *= self.pgpgout_factor

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind, self.node, self.gpu, self.onset_ms, xid=self.xid, xid_ms=self.onset_ms
        )
