"""Per-GPU health kept per node, so it follows a node from group to group.

XIDs and row remaps belong to the GPU, not to the job it runs: when a job dies
of an XID the scheduler drops its label, and the node's next frames (the ones
that carry the XID) land in another group (the fallback group, or a new job).
Keyed by group, that state restarted there and the XID looked like an old
gauge value. Here each node has one :class:`GpuHealthState` and a *home*: the
group whose buckets step it, which is the group of the node's latest frame with
per-GPU values (dcgm-exporter's series: where they go, the GPUs go). A frame's
per-GPU values are taken when it arrives, not from the group's closed bucket,
so a departure notice that empties the old group's bucket loses none of them;
the home's next closed bucket judges them, bucket by bucket. A node that stopped
reporting is still stepped by its home's buckets, so its alerts expire on time.

Alert labels: an alert keeps the ``group`` it fired in until it resolves (its
identity in Alertmanager); alerts fired after a move name the new group.

State lives in the home group's snapshot (``snapshot(group)``) and is handed
over in memory when the node shows up in another group of the same worker. On
restore the newest copy of a node wins (a group whose buckets stopped may keep
an older one). Limit: groups are spread over workers by the frames topic's key;
a node moving to a group of *another* worker starts afresh there (its gauge's
first value counts as known, as after any fresh start), and its old worker
keeps stepping the old copy until the alerts expire.

The map from PCI bus id to GPU index (dcgm-exporter's ``pci_bus_id`` label next
to ``gpu``) is learnt from the frames' ``pci_bus_id@<gpu>`` entries, so a
kernel-log XID (keyed by bus id) and the DCGM gauge change of the same XID (by
index) are one GPU's events: one incident, one alert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd
from detectors.features import split_per_gpu_key
from detectors.gpu_health import (
    GpuHealthParams,
    GpuHealthState,
    active_gpu_alerts,
    step_gpu_health,
)
from detectors.vocabulary import AlertChange
from detectors.xid.catalog import XidCatalog
from detectors.xid.events import XidEvent
from detectors.xid.kernel_log import normalize_pci_bus_id

PCI_KEY = "pci_bus_id"  # frame gpus entries "pci_bus_id@<gpu>" -> the GPU's bus id

# Every frame names its GPUs' bus ids again, and nodes of one make share them.
_normal_pci = lru_cache(maxsize=1 << 12)(normalize_pci_bus_id)


@dataclass
class _Node:
    state: GpuHealthState
    home: str  # the group whose buckets step this node
    seen_ts: int = -1  # newest bucket with a frame of the node (-1: none yet)
    pci: dict[str, str] = field(default_factory=dict)  # normalised bus id -> gpu index
    pending: dict[int, dict[str, float]] = field(default_factory=dict)  # bucket -> values
    stepped_ts: int = -1  # newest bucket whose values were judged


class NodeHealth:
    """Every node's per-GPU health, stepped with the buckets of the node's home group."""

    def __init__(self, catalog: XidCatalog, params: GpuHealthParams) -> None:
        self.catalog = catalog
        self.params = params
        self._nodes: dict[str, _Node] = {}
        self._homed: dict[str, set[str]] = {}  # group -> nodes whose home it is
        self._log_xids: dict[str, list[XidEvent]] = {}  # node -> XIDs not judged yet
        self._handed: set[str] = set()  # groups a node moved to (``take_handed``)

    def __len__(self) -> int:
        return len(self._nodes)

    def home(self, node: str) -> str | None:
        found = self._nodes.get(node)
        return None if found is None else found.home

    def add(
        self, group: str, node: str, ts: int, values: Mapping[str, float], gpus: Mapping[str, str]
    ) -> None:
        """Take a frame's per-GPU values (bucket ``ts``) and ``pci_bus_id@<gpu>`` entries."""
        # "@" marks a per-GPU key (features.per_gpu_key); a test per key, not a split
        per_gpu = {k: v for k, v in values.items() if "@" in k}
        for key, value in gpus.items():
            split = split_per_gpu_key(key)
            if split is not None and split[0] == PCI_KEY:
                pci = _normal_pci(value)
                if pci is not None:
                    self._node(node, group).pci[pci] = split[1]
        if not per_gpu:
            return
        entry = self._node(node, group)
        if ts >= entry.seen_ts:
            self._move(node, entry, group)
            entry.seen_ts = ts
        if ts > entry.stepped_ts:
            entry.pending.setdefault(ts, {}).update(per_gpu)

    def add_log_xid(self, group: str, event: XidEvent) -> None:
        """A kernel-log XID of ``event.node``: judged with the next bucket of the node's home
        (``group``, the shipper's, for a node not seen yet)."""
        if event.node is None:
            raise ValueError(f"a log XID needs its node: {event}")
        self._node(event.node, group)
        self._log_xids.setdefault(event.node, []).append(event)

    def step(
        self, group: str, bucket_ts: int, symptoms: Iterable[AlertChange] = ()
    ) -> tuple[list[AlertChange], list[AlertChange]]:
        """One closed bucket of ``group``: (alert transitions, firing alerts of its nodes).

        Every node homed in ``group`` is judged on its values of each bucket up to
        ``bucket_ts`` not judged yet, oldest first (none: expiry and log XIDs only).
        """
        symptoms = list(symptoms)
        changes: list[AlertChange] = []
        active: list[AlertChange] = []
        horizon = bucket_ts - self.params.escalation.memory_ms
        for node in sorted(self._homed.get(group, ())):
            entry = self._nodes[node]
            due = sorted(ts for ts in entry.pending if ts <= bucket_ts)
            steps = [(ts, {node: entry.pending.pop(ts)}) for ts in due] or [(bucket_ts, {})]
            logged = [self._locate(entry, e) for e in self._log_xids.pop(node, ())]
            for i, (ts, frames) in enumerate(steps):
                changes += step_gpu_health(
                    entry.state,
                    group,
                    ts,
                    frames,
                    self.params,
                    log_events=logged if i == len(steps) - 1 else (),
                    symptoms=symptoms,
                )
            if due:  # (a bucket closed without the node's values may still get them)
                entry.stepped_ts = max(entry.stepped_ts, due[-1])
            if entry.state.firing:
                active += active_gpu_alerts(entry.state)
            if not (entry.pending or entry.state.firing) and entry.seen_ts < horizon:
                self._forget(node)  # gone for longer than any XID rule looks back
        return changes, active

    def _locate(self, entry: _Node, event: XidEvent) -> XidEvent:
        """A log XID keyed by bus id → the GPU index DCGM uses, once the map is known."""
        pci = normalize_pci_bus_id(event.pci_bus_id or event.gpu or "")
        gpu = entry.pci.get(pci) if pci is not None else None
        return (
            event
            if gpu is None
            else event.with_origin(node=event.node or "", gpu=gpu, ts_ms=event.ts_ms or 0)
        )

    def _node(self, node: str, group: str) -> _Node:
        entry = self._nodes.get(node)
        if entry is None:
            entry = _Node(GpuHealthState.new(self.catalog, self.params), group)
            self._put(node, entry)
        return entry

    def _put(self, node: str, entry: _Node) -> None:
        self._forget(node)
        self._nodes[node] = entry
        self._homed.setdefault(entry.home, set()).add(node)

    def _move(self, node: str, entry: _Node, group: str) -> None:
        if entry.home != group:
            self._homed[entry.home].discard(node)
            entry.home = group
            self._homed.setdefault(group, set()).add(node)
            self._handed.add(group)

    def take_handed(self, group: str) -> bool:
        """Whether a node was handed to ``group`` from another group since the last call (the
        worker then writes the group's snapshot at its next bucket:
        ``streams.worker.checkpoints``)."""
        if group in self._handed:
            self._handed.discard(group)
            return True
        return False

    def _forget(self, node: str) -> None:
        old = self._nodes.pop(node, None)
        if old is not None:
            self._homed[old.home].discard(node)

    def forget_group(self, group: str) -> None:
        """Drop the nodes homed in ``group`` (it moved to another worker with its snapshot)."""
        self._handed.discard(group)
        for node in list(self._homed.pop(group, ())):
            self._nodes.pop(node, None)
            self._log_xids.pop(node, None)

    def end_group(self, ending: GroupEnd) -> list[AlertChange]:
        """A group ended: its nodes that went quiet with it resolve their alerts and are
        forgotten; ``ending.moved`` (they departed to another group) keep theirs, and their
        next frame with per-GPU values homes them where it lands."""
        group = ending.group
        self._handed.discard(group)
        changes: list[AlertChange] = []
        for node in sorted(self._homed.get(group, set()) - ending.moved):
            entry = self._nodes.pop(node)
            self._homed[group].discard(node)
            self._log_xids.pop(node, None)
            changes += map(ending.resolve, active_gpu_alerts(entry.state))
        return changes

    # --- the home group's snapshot ------------------------------------------------------------

    def snapshot(self, group: str) -> dict[str, Any]:
        """The nodes homed in ``group`` (JSON-safe), with their unjudged log XIDs."""
        return {
            node: {
                "state": e.state.to_dict(),
                "seen_ts": e.seen_ts,
                "pci": dict(sorted(e.pci.items())),
                "stepped_ts": e.stepped_ts,
                "pending": [[ts, vals] for ts, vals in sorted(e.pending.items())],
                "log_xids": [x.to_dict() for x in self._log_xids.get(node, ())],
            }
            for node, e in ((n, self._nodes[n]) for n in sorted(self._homed.get(group, ())))
        }

    def restore(self, group: str, nodes: Mapping[str, Any]) -> None:
        """Take the nodes of ``group``'s snapshot; a newer copy already held is kept."""
        for node, data in nodes.items():
            held = self._nodes.get(node)
            seen_ts = int(data.get("seen_ts", -1))
            if held is not None and held.seen_ts >= seen_ts:
                continue
            state = GpuHealthState.from_dict(data["state"], self.catalog, self.params)
            pci = {str(k): str(v) for k, v in data.get("pci", {}).items()}
            pending = {int(ts): {str(k): float(v) for k, v in vals.items()}
                       for ts, vals in data.get("pending", ())}  # fmt: skip
            stepped = int(data.get("stepped_ts", seen_ts))
            self._put(node, _Node(state, group, seen_ts, pci, pending, stepped))
            logged = [XidEvent.from_dict(x) for x in data.get("log_xids", ())]
            if logged:
                self._log_xids[node] = logged


class NodeGpuHealth:
    """Per-GPU health in the pipeline's family loop, over the worker's one :class:`NodeHealth`.

    The documented exception to a family's state being the group's: its state is the
    node's and follows the node across groups (handed over in memory when a node's
    frames move), so the group's runtime holds none (``None``) and the snapshot key
    ``nodes`` is the nodes homed in the group. It weighs peer scoring's alerts
    (``found.symptoms``) as the XID escalation's symptoms.
    """

    name = "nodes"

    def __init__(self, health: NodeHealth) -> None:
        self.health = health

    def new(self) -> None:
        return None

    def step(self, state: None, bucket: ClosedBucket, found: BucketEvidence) -> FamilyStep[None]:
        changes, active = self.health.step(bucket.group, bucket.ts, symptoms=found.symptoms)
        return FamilyStep(None, tuple(changes), tuple(active))

    def end(self, state: None, ending: GroupEnd) -> tuple[AlertChange, ...]:
        return tuple(self.health.end_group(ending))

    def save(self, group: str, state: None) -> dict[str, Any]:
        return {"nodes": self.health.snapshot(group)}

    def figures(self, state: None) -> None:
        return None  # its per-GPU figures are the bucket's changes (XIDs, remaps)

    def load(self, group: str, snap: Mapping[str, Any]) -> None:
        if snap.get("nodes") is not None:
            self.health.restore(group, snap["nodes"])
