"""The node-health ledger: a rolling per-node record of alerts, XIDs and exclusions.

Report 000 found exclusions concentrated (the top 3 of 63 nodes took over half
of them over 224 sessions) and operators comparing nodes' XID counts by hand.
The ledger keeps, per node and within ``window_s``, the times of its alerts,
its XIDs by code and its exclusions (a node in a job's previous attempt and not
in the next: what the scheduler did), and says so once when:

* ``exclusions_concentrated``: the ``top_k`` nodes hold more than
  ``concentration_share`` of the group's exclusions (from ``min_exclusions`` on);
* ``chronic_node``: a node was excluded ``chronic_exclusions`` times, or raised
  ``chronic_alerts`` alerts and XIDs (application-class XIDs not counted);
* ``xid_above_peers``: an application-class XID (13, 31, 43, 45: usually the
  job's fault) recurs on a node ``peer_ratio`` times above its peers' mean count
  (floored at ``peer_floor``, from ``min_app_xids`` on): then it is the node's;
* ``returned_after_xid``: a node is placed in a job within ``return_window_s``
  of an XID whose action is at least ``return_min_action`` (a reboot, support).

A flag is advised when it rises; it rises again only after it has cleared
(window, or :func:`reset_counts`). Functions update the state in place;
:class:`NodeLedger` runs :func:`step_ledger` as a detector family.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from detectors.advisors.jobs import JobEvent
from detectors.checks import Checked, checked, each, int_rule, integer, real
from detectors.families import XID_ALERT
from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd, GroupFamily
from detectors.state_codec import JsonState
from detectors.vocabulary import Advice, AlertChange, Figure
from detectors.xid.actions import action_rank, action_rule, is_action

__all__ = [
    "ADVISOR",
    "LedgerFigures",
    "LedgerParams",
    "LedgerState",
    "NodeLedger",
    "NodeRecord",
    "concentration",
    "observe_job",
    "reset_counts",
    "step_ledger",
    "xid_counts",
]

ADVISOR = "ledger"
MAX_ENTRIES = 10_000  # per node and kind (and jobs per group): far above a window's worth


@dataclass(frozen=True)
class LedgerParams(Checked):
    window_s: float = real(14 * 86_400.0, above=0)
    top_k: int = integer(3)
    concentration_share: float = real(0.5, above=0, below=1)
    min_exclusions: int = integer(10)
    chronic_exclusions: int = integer(3)
    chronic_alerts: int = integer(10)
    app_xids: tuple[int, ...] = checked((13, 31, 43, 45), each(int_rule(why="an XID")))
    peer_ratio: float = real(5.0, at_least=1)
    peer_floor: float = real(0.5, above=0)
    min_app_xids: int = integer(3)
    return_window_s: float = real(3600.0, above=0)
    return_min_action: str = checked("RESTART_VM", action_rule)


@dataclass
class NodeRecord(JsonState):
    alerts: list[int] = field(default_factory=list)  # firing times (ms), XIDs excluded
    xids: dict[int, list[int]] = field(default_factory=dict)  # code -> times
    exclusions: list[int] = field(default_factory=list)
    serious_xid: tuple[int, int, str] | None = None  # (ts, xid, action) of its last serious XID
    flags: list[str] = field(default_factory=list)  # raised and not cleared

    def empty(self) -> bool:
        return not (self.alerts or self.exclusions or any(self.xids.values()))


@dataclass
class LedgerState(JsonState):
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    attempts: dict[str, list[str]] = field(default_factory=dict)  # job name -> last nodes
    concentrated: bool = False
    now: int = 0
    peers: int = 0  # nodes in the group's last bucket: records are kept for nodes with entries

    def group_size(self) -> int:
        return max(self.peers, len(self.nodes))


def _record(state: LedgerState, node: str) -> NodeRecord:
    rec = state.nodes.get(node)
    if rec is None:
        rec = state.nodes[node] = NodeRecord()
    return rec


def _push(times: list[int], ts: int) -> None:
    times.append(ts)
    del times[:-MAX_ENTRIES]


def step_ledger(
    state: LedgerState,
    params: LedgerParams,
    group: str,
    ts: int,
    nodes: Collection[str],
    changes: Iterable[AlertChange],
) -> list[Advice]:
    """One scored bucket: its nodes (each one a peer) and its alert changes; flags that rose."""
    state.peers = len(nodes)
    for change in changes:
        if change.status != "firing" or change.node is None:
            continue
        rec = _record(state, change.node)
        if change.alertname == XID_ALERT:
            xid = round(change.score)  # an XID alert's score is its XID (gpu_health)
            _push(rec.xids.setdefault(xid, []), change.bucket_ts)
            action = change.action or ""
            if is_action(action) and action_rank(action) >= action_rank(params.return_min_action):
                rec.serious_xid = (change.bucket_ts, xid, action)
        else:
            _push(rec.alerts, change.bucket_ts)
    return _review(state, params, group, ts)


class NodeLedger(GroupFamily[LedgerState]):
    """The ledger as a detector family: last in the pipeline, fed every change of the bucket.
    It raises no alerts, so a group's end resolves nothing."""

    name = ADVISOR
    state_type = LedgerState

    def __init__(self, params: LedgerParams) -> None:
        self.params = params

    def step(
        self, state: LedgerState, bucket: ClosedBucket, found: BucketEvidence
    ) -> FamilyStep[LedgerState]:
        advice = step_ledger(
            state, self.params, bucket.group, bucket.ts, bucket.frames.keys(), found.changes
        )
        return FamilyStep(state, advice=tuple(advice))

    def end(self, state: LedgerState, ending: GroupEnd) -> tuple[AlertChange, ...]:
        return ()

    def save(self, group: str, state: LedgerState | None) -> dict[str, Any]:
        # no key until it has a state: snapshots of groups it never saw stay as they were
        return {} if state is None else super().save(group, state)

    def figures(self, state: LedgerState) -> LedgerFigures:
        share, _ = concentration(state, self.params)
        exclusions = {n: len(r.exclusions) for n, r in state.nodes.items() if r.exclusions}
        return LedgerFigures(share, xid_counts(state), exclusions)


@dataclass(frozen=True)
class LedgerFigures:
    """The ledger's figures for /metrics: the top nodes' share of the window's exclusions
    (None without any), XID counts per node and code, exclusions per node."""

    concentration: float | None
    xids: dict[str, dict[int, int]]
    exclusions: dict[str, int]


def observe_job(state: LedgerState, params: LedgerParams, event: JobEvent) -> list[Advice]:
    """A job event: a new attempt's nodes give the exclusions since its last one, and any node
    placed back too soon after a serious XID."""
    if event.state in ("completed", "cancelled"):
        state.attempts.pop(event.name, None)
        return []
    if event.state != "running":
        return []
    out = []
    before = state.attempts.get(event.name)
    for node in sorted(set(before or ()) - set(event.nodes)):
        _push(_record(state, node).exclusions, event.ts)
    state.attempts.pop(event.name, None)  # re-inserted last: the dict is oldest first
    state.attempts[event.name] = sorted(event.nodes)
    while len(state.attempts) > MAX_ENTRIES:  # jobs that never said they ended
        del state.attempts[next(iter(state.attempts))]
    for node in sorted(event.nodes):
        rec = state.nodes.get(node)
        if rec is None or rec.serious_xid is None:
            continue
        at, xid, action = rec.serious_xid
        if 0 <= event.ts - at <= params.return_window_s * 1000:
            rec.serious_xid = None  # said once per XID
            minutes = (event.ts - at) / 60_000
            out.append(
                _advice(
                    "returned_after_xid",
                    event.peer_group,
                    event.ts,
                    f"{node} was placed in {event.name} {minutes:.0f} min after XID {xid} "
                    f"({action}): check it was repaired",
                    node,
                    {"job": event.name, "xid": xid, "xid_action": action, "minutes": minutes},
                    "HOLD_NODE",
                )
            )
    return out + _review(state, params, event.peer_group, event.ts)


def reset_counts(state: LedgerState, node: str, xid: int | None = None) -> None:
    """Forget ``node``'s XID counts (one code, or all with its alerts and exclusions): it was
    repaired."""
    rec = state.nodes.get(node)
    if rec is None:
        return
    if xid is not None:
        rec.xids.pop(xid, None)
        return
    rec.alerts, rec.xids, rec.exclusions, rec.serious_xid = [], {}, [], None


def xid_counts(state: LedgerState) -> dict[str, dict[int, int]]:
    """node -> XID code -> times in the window (nodes with any only)."""
    return {
        node: {code: len(ts) for code, ts in sorted(rec.xids.items()) if ts}
        for node, rec in sorted(state.nodes.items())
        if any(rec.xids.values())
    }


def concentration(state: LedgerState, params: LedgerParams) -> tuple[float | None, list[str]]:
    """The top-k nodes' share of the window's exclusions (None without any) and those nodes."""
    counts = sorted(
        ((len(r.exclusions), n) for n, r in state.nodes.items() if r.exclusions),
        key=lambda cn: (-cn[0], cn[1]),
    )
    total = sum(c for c, _ in counts)
    if not total:
        return None, []
    top = counts[: params.top_k]
    return sum(c for c, _ in top) / total, [n for _, n in top]


def _prune(state: LedgerState, params: LedgerParams, now: int) -> None:
    horizon = now - params.window_s * 1000
    for node, rec in list(state.nodes.items()):
        rec.alerts = [t for t in rec.alerts if t > horizon]
        rec.exclusions = [t for t in rec.exclusions if t > horizon]
        kept = {c: [t for t in ts if t > horizon] for c, ts in rec.xids.items()}
        rec.xids = {c: ts for c, ts in kept.items() if ts}
        if rec.serious_xid is not None and rec.serious_xid[0] <= horizon:
            rec.serious_xid = None
        if rec.empty() and rec.serious_xid is None and not rec.flags:
            del state.nodes[node]


def _review(state: LedgerState, params: LedgerParams, group: str, ts: int) -> list[Advice]:
    state.now = max(state.now, ts)
    _prune(state, params, state.now)
    out = []
    share, top = concentration(state, params)
    total = sum(len(r.exclusions) for r in state.nodes.values())
    concentrated = (
        share is not None and total >= params.min_exclusions and share > params.concentration_share
    )
    if concentrated and not state.concentrated:
        out.append(
            _advice(
                "exclusions_concentrated",
                group,
                ts,
                f"the top {len(top)} of {state.group_size()} nodes ({', '.join(top)}) took "
                f"{share:.0%} of {total} exclusions: diagnose them rather than rotate them out",
                None,
                {
                    "share": share,
                    "exclusions": total,
                    "nodes": state.group_size(),
                    "top_k": len(top),
                },
                None,
                nodes=tuple(top),
            )
        )
    state.concentrated = concentrated
    peers = state.group_size()
    totals = {c: sum(len(r.xids.get(c, ())) for r in state.nodes.values()) for c in params.app_xids}
    for node, rec in sorted(state.nodes.items()):
        flags: dict[str, Advice] = {}
        excluded = len(rec.exclusions)
        # application-class XIDs are the job's unless far above the peers (below)
        node_xids = sum(len(ts) for code, ts in rec.xids.items() if code not in params.app_xids)
        alerts = len(rec.alerts) + node_xids
        if excluded >= params.chronic_exclusions or alerts >= params.chronic_alerts:
            flags["chronic"] = _advice(
                "chronic_node",
                group,
                ts,
                f"{node}: {excluded} exclusions and {alerts} alerts/XIDs in the last "
                f"{params.window_s / 86400:g} days: take it out for diagnosis",
                node,
                {"exclusions": excluded, "alerts": alerts},
                "DRAIN_AND_DIAGNOSE",
            )
        for code in params.app_xids:
            mine = len(rec.xids.get(code, ()))
            if mine < params.min_app_xids or peers < 2:
                continue
            peer_mean = (totals[code] - mine) / (peers - 1)
            if mine > params.peer_ratio * max(peer_mean, params.peer_floor):
                flags[f"xid{code}"] = _advice(
                    "xid_above_peers",
                    group,
                    ts,
                    f"{node}: XID {code} {mine} times against a peer mean of {peer_mean:.2f} "
                    "(an application-class XID this far above its peers is the node's): "
                    "run diagnostics",
                    node,
                    {"xid": code, "count": mine, "peer_mean": peer_mean, "peers": peers - 1},
                    "RUN_DIAGNOSTICS",
                )
        out.extend(advice for flag, advice in flags.items() if flag not in rec.flags)
        rec.flags = sorted(flags)
    return out


def _advice(
    kind: str,
    group: str,
    ts: int,
    summary: str,
    node: str | None,
    figures: dict[str, Figure],
    action: str | None,
    nodes: tuple[str, ...] | None = None,
) -> Advice:
    return Advice(
        advisor=ADVISOR,
        kind=kind,
        group=group,
        bucket_ts=ts,
        summary=summary,
        node=node,
        nodes=nodes if nodes is not None else ((node,) if node else ()),
        figures=tuple(sorted(figures.items())),
        action=action,
    )
