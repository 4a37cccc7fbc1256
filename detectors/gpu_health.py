"""Per-GPU health: XID changes and row-remap trends, judged per GPU, not against peers.

Input: one bucket's frames with per-GPU keys (``xid_last@3``,
``remap_correctable@3``, … — see ``detectors.features.per_gpu_key``). Output:
alert changes for two families, one alert per (node, GPU):

* ``PeerwatchXid`` — a new XID on a GPU (the DCGM gauge changed, or a kernel
  log line arrived), with the catalog's recovery action, escalated when
  repeated; fires at once and resolves after ``xid_hold_buckets`` without a
  new XID on that GPU. When the node already had a symptom alert firing, the
  XID alert names it and its lead time.
* ``PeerwatchRowRemap`` — a standing row-remap finding: accelerating creep of
  correctable rows (warning, days ahead), uncorrectable rows rising, a pending
  remap or ROW_REMAP_FAILURE (critical); resolves after ``resolve_after``
  buckets without a finding.

When an alert's identity changes (severity or action escalates), the old one is
resolved and the new one fired, since Alertmanager identifies an alert by its
labels (``action`` is one, for routing): :mod:`detectors.lifecycle` keeps both
families' firing alerts. State is explicit and JSON-safe (``to_dict``/``from_dict``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from detectors.checks import Checked, integer, part
from detectors.families import REMAP_ALERT, XID_ALERT
from detectors.features import DEFAULT_BUCKET_MS, per_gpu_key, split_per_gpu_key
from detectors.lifecycle import Firing, expire, observe
from detectors.remap import RemapParams, RemapTracker, RemapVerdict
from detectors.vocabulary import AlertChange, Signal
from detectors.xid.catalog import XidCatalog
from detectors.xid.escalation import EscalationParams, XidDecision, XidEscalator
from detectors.xid.events import XidEvent
from detectors.xid.gauge import XidGaugeParams, XidGaugeTracker

# Which part of the machine an XID points at (the ``class`` label on its
# alert, for routing and for scoring the fault class). Unknown codes claim none.
XID_CLASSES: dict[int, str] = {
    **dict.fromkeys((74, 79, 144, 145, 146, 147, 148, 149, 150), "interconnect"),
    **dict.fromkeys((48, 63, 64, 92, 94, 95, 140), "memory"),
    **dict.fromkeys((13, 31, 43, 45, 119, 120, 143), "compute"),
}

_REMAP_FIELDS = ("remap_correctable", "remap_uncorrectable", "remap_failure", "remap_pending")
_REMAP_KEYS = frozenset(_REMAP_FIELDS)


@dataclass(frozen=True)
class GpuHealthParams(Checked):
    bucket_ms: int = integer(DEFAULT_BUCKET_MS)
    xid_hold_buckets: int = integer(60)  # an XID alert stays up 30 min unless another XID comes
    resolve_after: int = integer(4)
    gauge: XidGaugeParams = part(XidGaugeParams)
    escalation: EscalationParams = part(EscalationParams)
    remap: RemapParams = part(RemapParams)


@dataclass
class GpuHealthState:
    gauge: XidGaugeTracker
    escalator: XidEscalator
    remap: dict[str, RemapTracker] = field(default_factory=dict)  # "node/gpu"
    firing: dict[str, Firing] = field(default_factory=dict)  # "alertname/node/gpu"

    @classmethod
    def new(cls, catalog: XidCatalog, params: GpuHealthParams) -> GpuHealthState:
        return cls(XidGaugeTracker(params.gauge), XidEscalator(catalog, params.escalation))

    def to_dict(self) -> dict[str, Any]:
        return {
            "gauge": self.gauge.to_dict(),
            "escalator": self.escalator.to_dict(),
            "remap": {k: t.to_dict() for k, t in self.remap.items()},
            "firing": {k: f.to_dict() for k, f in self.firing.items()},
        }

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], catalog: XidCatalog, params: GpuHealthParams
    ) -> GpuHealthState:
        return cls(
            XidGaugeTracker.from_dict(d["gauge"], params.gauge),
            XidEscalator.from_dict(d["escalator"], catalog, params.escalation),
            {k: RemapTracker.from_dict(v, params.remap) for k, v in d.get("remap", {}).items()},
            {k: Firing.from_dict(v) for k, v in d.get("firing", {}).items()},
        )


@dataclass(frozen=True)
class _GpuKeys:
    """One GPU's frame keys of the inputs judged here (a remap key may be absent: ``get``)."""

    gpu: str
    xid: str | None  # its ``xid_last`` key, if the frame has one
    remap: tuple[str, str, str, str] | None  # its _REMAP_FIELDS keys; None: no remap value


@lru_cache(maxsize=256)
def _health_layout(keys: tuple[str, ...]) -> tuple[_GpuKeys, ...]:
    """The GPUs (in GPU order) with an XID or row-remap key among a frame's ``keys``.

    Every node's frame has the same keys bucket after bucket: they are split once per
    key set, not once per node and bucket (the per-GPU health step's main cost)."""
    by_gpu: dict[str, set[str]] = {}
    for key in keys:
        split = split_per_gpu_key(key)
        if split is not None:
            by_gpu.setdefault(split[1], set()).add(split[0])
    out = []
    for gpu, features in sorted(by_gpu.items()):
        xid = per_gpu_key("xid_last", gpu) if "xid_last" in features else None
        remap = None
        if not _REMAP_KEYS.isdisjoint(features):
            c, u, f, p = (per_gpu_key(feature, gpu) for feature in _REMAP_FIELDS)
            remap = (c, u, f, p)
        if xid is not None or remap is not None:
            out.append(_GpuKeys(gpu, xid, remap))
    return tuple(out)


def step_gpu_health(
    state: GpuHealthState,
    group: str,
    bucket_ts: int,
    frames: Mapping[str, Mapping[str, float]],
    params: GpuHealthParams,
    *,
    log_events: Iterable[XidEvent] = (),
    symptoms: Iterable[AlertChange] = (),
) -> list[AlertChange]:
    """Advance every GPU of the group by one bucket; return the alert transitions.

    ``log_events``: XIDs from kernel log lines for this bucket (node and gpu set).
    ``symptoms``: the group's firing symptom alerts, to link an XID to its precursor.
    """
    changes: list[AlertChange] = []
    seen: set[str] = set()
    events: list[XidEvent] = list(log_events)
    for node in sorted(frames):
        values = frames[node]
        for keys in _health_layout(tuple(values)):
            xid = None if keys.xid is None else values[keys.xid]
            if xid is not None:
                event = state.gauge.observe(node, keys.gpu, bucket_ts, xid)
                if event is not None:
                    events.append(event)
            if keys.remap is not None:
                gpu = keys.gpu
                key = f"{node}/{gpu}"
                tracker = state.remap.get(key)
                if tracker is None:
                    tracker = state.remap[key] = RemapTracker(params.remap)
                c, u, f, p = keys.remap
                verdict = tracker.observe(
                    bucket_ts, values.get(c), values.get(u), values.get(f), values.get(p)
                )
                if verdict is not None:
                    change = _remap_change(verdict, group, node, gpu, bucket_ts)
                    changes.extend(_fire(state, change, bucket_ts))
                    seen.add(_key(change))
    # (most nodes, most buckets: no XID, nothing firing; the rest is skipped, not run empty)
    if events:
        precursors = _earliest_symptom_per_node(symptoms)
        for event in sorted(
            events, key=lambda e: (e.ts_ms or bucket_ts, e.node or "", e.gpu or "")
        ):
            decision = state.escalator.decide(event)
            if decision.action == "IGNORE" or not decision.changed:
                continue
            change = _xid_change(decision, group, bucket_ts, precursors.get(decision.node))
            changes.extend(_fire(state, change, bucket_ts))
            seen.add(_key(change))
    if state.firing:
        changes.extend(_expire(state, bucket_ts, seen, params))
    return _without_stillborn(changes) if changes else changes


def _without_stillborn(changes: list[AlertChange]) -> list[AlertChange]:
    """Drop an alert fired and superseded in the same bucket (two XIDs of one incident, the
    second escalating the action or severity): it never lived, so neither its firing nor its
    resolve is sent — sent together, the outbox would deliver the resolve only."""
    born = {
        c.identity for c in changes if c.status == "firing" and c.starts_bucket_ts == c.bucket_ts
    }
    dead = {c.identity for c in changes if c.status == "resolved" and c.identity in born}
    return [c for c in changes if c.identity not in dead]


def active_gpu_alerts(state: GpuHealthState) -> list[AlertChange]:
    return [f.change for f in state.firing.values()]


# --- alert bookkeeping --------------------------------------------------------------------------


def _key(change: AlertChange) -> str:
    return f"{change.alertname}/{change.node}/{dict(change.labels).get('gpu', '')}"


def _fire(state: GpuHealthState, change: AlertChange, bucket_ts: int) -> list[AlertChange]:
    """Severity and action are labels (action for routing): a change of either is a new alert
    to Alertmanager, so the old one resolves; the same finding with fresher numbers (a
    creep's slope, say) keeps the labels it fired with and sends nothing."""
    key = _key(change)
    state.firing[key], out = observe(state.firing.get(key), change, bucket_ts)
    return out


def _expire(
    state: GpuHealthState, bucket_ts: int, seen: set[str], params: GpuHealthParams
) -> list[AlertChange]:
    out = []
    for key, firing in list(state.firing.items()):
        if key in seen:
            continue
        xid = firing.change.alertname == XID_ALERT
        hold = params.xid_hold_buckets if xid else params.resolve_after
        _, change = expire(firing, bucket_ts, hold=hold, bucket_ms=params.bucket_ms)
        if change is not None:
            del state.firing[key]
            out.append(change)
    return out


# --- building the alerts ----------------------------------------------------------------------


def _earliest_symptom_per_node(symptoms: Iterable[AlertChange]) -> dict[str, AlertChange]:
    out: dict[str, AlertChange] = {}
    for alert in symptoms:
        if alert.node is None or alert.alertname in (XID_ALERT, REMAP_ALERT):
            continue
        best = out.get(alert.node)
        if best is None or alert.evidence_since_ts < best.evidence_since_ts:
            out[alert.node] = alert
    return out


def _xid_change(
    decision: XidDecision, group: str, bucket_ts: int, precursor: AlertChange | None
) -> AlertChange:
    event_ts = decision.ts_ms if decision.ts_ms is not None else bucket_ts
    reason = f"XID {decision.xid} ({decision.name}) on GPU {decision.gpu}: {decision.reason}"
    lead_s = None
    if precursor is not None:
        lead_s = max(0.0, (event_ts - precursor.evidence_since_ts) / 1000.0)
        reason += (
            f"; precursor {precursor.alertname} since bucket {precursor.evidence_since_ts}"
            f" ({lead_s:.0f} s before the XID)"
        )
    labels = {"gpu": str(decision.gpu)}
    if decision.xid in XID_CLASSES:
        labels["class"] = XID_CLASSES[decision.xid]
    return AlertChange(
        alertname=XID_ALERT,
        node=decision.node,
        group=group,
        status="firing",
        severity="critical" if decision.severity == "critical" else "warning",
        score=float(decision.xid),
        signals=(Signal("xid", math.nan, float(decision.xid), math.nan, decision.gpu),),
        reason=reason,
        bucket_ts=bucket_ts,
        starts_bucket_ts=bucket_ts,
        evidence_since_ts=bucket_ts,
        action=decision.action,
        labels=tuple(sorted(labels.items())),
        lead_s=lead_s,
    )


def _remap_change(
    verdict: RemapVerdict, group: str, node: str, gpu: str, bucket_ts: int
) -> AlertChange:
    signals = (
        Signal("remap_correctable", math.nan, float(verdict.correctable or 0), math.nan, gpu),
        Signal("remap_uncorrectable", math.nan, float(verdict.uncorrectable or 0), math.nan, gpu),
    )
    return AlertChange(
        alertname=REMAP_ALERT,
        node=node,
        group=group,
        status="firing",
        severity=verdict.severity,
        score=float(verdict.recent_slope_per_day or 0.0),
        signals=signals,
        reason=f"{verdict.kind}: {verdict.reason}",
        bucket_ts=bucket_ts,
        starts_bucket_ts=bucket_ts,
        evidence_since_ts=bucket_ts,
        action=verdict.action,
        labels=(("class", "memory"), ("gpu", gpu)),
    )
