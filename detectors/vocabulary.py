"""The words every alert module shares: a signal, a severity, an alert change and its identity,
and the advice an advisor gives.

Below every detector family (nothing here imports another detectors module), so
an alert module names a :class:`Signal` or builds an :class:`AlertChange`
without importing the fusion maths or another family's lifecycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "SEVERITIES",
    "Advice",
    "AlertChange",
    "AlertKey",
    "AlertSeverity",
    "Identity",
    "Labels",
    "Severity",
    "Signal",
    "Status",
    "json_float",
]

# How bad: ``info`` exists in the XID catalog only (an event worth a log line);
# an alert is ``warning`` or ``critical`` (:data:`AlertSeverity`).
Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")  # least severe first
AlertSeverity = Literal["critical", "warning"]
Status = Literal["firing", "resolved"]
AlertKey = tuple[str, str | None]  # (alertname, node); node None = the group itself
Labels = tuple[tuple[str, str], ...]
# What Alertmanager tells two alerts apart by, beyond group: a change of any part is a new alert.
Identity = tuple[str, str | None, Labels, str | None, AlertSeverity]

# A signal names the node's usual z when the residual is this far (in sigmas) from the raw z.
_SHOW_USUAL_FROM = 0.5


def json_float(x: float) -> float | None:
    """A float for JSON: non-finite becomes None."""
    return float(x) if math.isfinite(x) else None


def _from_json_float(x: Any) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class Signal:
    """One contributing feature of a verdict: its z, the node's value, the peer median, the GPU.

    ``z``, ``value`` and ``median`` are always the raw peer comparison (what an
    SRE can check on a dashboard). Where the node's learned usual z is known
    (:mod:`detectors.baseline`), ``usual`` is it and ``residual`` the change
    from it in the node's own spreads — what soft evidence was fused on; both
    are NaN otherwise. ``share``: for an unusual combination, the feature's
    share of the model's distance (0-1; NaN otherwise).
    """

    feature: str
    z: float
    value: float
    median: float
    gpu: str | None = None
    residual: float = math.nan
    usual: float = math.nan
    share: float = math.nan

    @property
    def differs_from_usual(self) -> bool:
        """The residual says something the raw z does not (the node's usual is not ~0)."""
        return math.isfinite(self.usual) and abs(self.residual - self.z) >= _SHOW_USUAL_FROM

    def describe(self) -> str:
        """``gpu_util z=-5.2``, or ``… z=-5.2 vs its usual -1.0`` where the usual matters."""
        text = f"{self.feature} z={self.z:+.1f}"
        if self.differs_from_usual:
            text += f" vs its usual {self.usual:+.1f}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (non-finite floats become None; the learned parts only when known)."""
        out: dict[str, Any] = {
            "feature": self.feature,
            "z": json_float(self.z),
            "value": json_float(self.value),
            "median": json_float(self.median),
            "gpu": self.gpu,
        }
        for key in ("residual", "usual", "share"):
            x = getattr(self, key)
            if math.isfinite(x):
                out[key] = float(x)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signal:
        gpu = data.get("gpu")
        return cls(
            feature=str(data["feature"]),
            z=_from_json_float(data["z"]),
            value=_from_json_float(data["value"]),
            median=_from_json_float(data["median"]),
            gpu=None if gpu is None else str(gpu),
            residual=_from_json_float(data.get("residual")),
            usual=_from_json_float(data.get("usual")),
            share=_from_json_float(data.get("share")),
        )


@dataclass(frozen=True)
class AlertChange:
    """A transition to send (``status`` firing or resolved), or an active alert to re-send.

    ``node`` is None for group-level alerts. ``bucket_ts``: the bucket of the
    transition (for an active alert: the bucket just scored).
    ``starts_bucket_ts``: the bucket the alert first fired.
    ``evidence_since_ts``: the bucket its evidence began (lead-time reckoning).
    """

    alertname: str
    node: str | None
    group: str
    status: Status
    severity: AlertSeverity
    score: float
    signals: tuple[Signal, ...]
    reason: str
    bucket_ts: int
    starts_bucket_ts: int
    evidence_since_ts: int
    # Recovery action (XID / row-remap alerts), extra identifying labels (e.g.
    # gpu, xid), and the lead over the XID that followed (precursor alerts).
    action: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    lead_s: float | None = None
    # Context that may change while the alert fires (e.g. the group's training
    # phase): annotations, never labels, so the alert's identity stays put.
    annotations: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> AlertKey:
        """(alertname, node): one lifecycle per key."""
        return (self.alertname, self.node)

    @property
    def identity(self) -> Identity:
        """The parts of the alert's Alertmanager labels a detector sets (with ``group``)."""
        return (self.alertname, self.node, self.labels, self.action, self.severity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "labels": dict(self.labels),
            "lead_s": self.lead_s,
            "annotations": dict(self.annotations),
            "alertname": self.alertname,
            "node": self.node,
            "group": self.group,
            "status": self.status,
            "severity": self.severity,
            "score": self.score if math.isfinite(self.score) else None,
            "signals": [s.to_dict() for s in self.signals],
            "reason": self.reason,
            "bucket_ts": self.bucket_ts,
            "starts_bucket_ts": self.starts_bucket_ts,
            "evidence_since_ts": self.evidence_since_ts,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AlertChange:
        return cls(
            alertname=d["alertname"],
            node=d["node"],
            group=d["group"],
            status=d["status"],
            severity=d["severity"],
            score=math.nan if d["score"] is None else float(d["score"]),
            signals=tuple(Signal.from_dict(s) for s in d["signals"]),
            reason=d["reason"],
            bucket_ts=int(d["bucket_ts"]),
            starts_bucket_ts=int(d["starts_bucket_ts"]),
            evidence_since_ts=int(d["evidence_since_ts"]),
            action=d.get("action"),
            labels=tuple(sorted((d.get("labels") or {}).items())),
            lead_s=d.get("lead_s"),
            annotations=tuple(sorted((d.get("annotations") or {}).items())),
        )


Figure = float | int | str | None


@dataclass(frozen=True)
class Advice:
    """A recommendation, not an alert: what an operator or a scheduler could do next.

    Advisors (checkpoint I/O and interval, retries, the node-health ledger) say
    it; it is never paged. ``advisor`` names who says it, ``kind`` what it
    advises (e.g. ``lengthen_interval``, ``exclude_node``); ``summary`` is one
    sentence with the figures, ``figures`` the numbers behind it (JSON-safe),
    ``action`` a machine-readable next step for a scheduler where there is one.
    ``node`` is None for advice about the group or job as a whole; ``nodes``
    names every node it concerns (e.g. the nodes to exclude).
    """

    advisor: str
    kind: str
    group: str
    bucket_ts: int
    summary: str
    node: str | None = None
    nodes: tuple[str, ...] = ()
    figures: tuple[tuple[str, Figure], ...] = ()
    action: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "advisor": self.advisor,
            "kind": self.kind,
            "group": self.group,
            "bucket_ts": self.bucket_ts,
            "summary": self.summary,
            "node": self.node,
            "nodes": list(self.nodes),
            "figures": {k: json_float(v) if isinstance(v, float) else v for k, v in self.figures},
            "action": self.action,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Advice:
        figures = d.get("figures") or {}
        return cls(
            advisor=str(d["advisor"]),
            kind=str(d["kind"]),
            group=str(d["group"]),
            bucket_ts=int(d["bucket_ts"]),
            summary=str(d["summary"]),
            node=None if d.get("node") is None else str(d["node"]),
            nodes=tuple(str(n) for n in d.get("nodes") or ()),
            figures=tuple(sorted(figures.items())),
            action=None if d.get("action") is None else str(d["action"]),
        )
