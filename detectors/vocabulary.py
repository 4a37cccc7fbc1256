"""The words every alert module shares: a signal, a severity, an alert change and its identity,
and the advice an advisor gives.

Below every detector family (nothing here imports another detectors module but the
state codec, itself a leaf), so an alert module names a :class:`Signal` or builds an
:class:`AlertChange` without importing the fusion maths or another family's lifecycle.
Their dicts (the alert records on Kafka, the sinks' payloads, snapshots) come from
:mod:`detectors.state_codec`; each class says only where its format is not a field dump.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from detectors.state_codec import NAN_AS_NULL, JsonState, as_object, is_nan, omit

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


# A learned part of a signal is written only when known (older records lack the keys).
_LEARNED = NAN_AS_NULL | omit(is_nan)


@dataclass(frozen=True)
class Signal(JsonState):
    """One contributing feature of a verdict: its z, the node's value, the peer median, the GPU.

    ``z``, ``value`` and ``median`` are always the raw peer comparison (what an
    SRE can check on a dashboard). Where the node's learned usual z is known
    (:mod:`detectors.baseline`), ``usual`` is it and ``residual`` the change
    from it in the node's own spreads — what soft evidence was fused on; both
    are NaN otherwise. ``share``: for an unusual combination, the feature's
    share of the model's distance (0-1; NaN otherwise).
    """

    feature: str
    z: float = field(metadata=NAN_AS_NULL)
    value: float = field(metadata=NAN_AS_NULL)
    median: float = field(metadata=NAN_AS_NULL)
    gpu: str | None = None
    residual: float = field(default=math.nan, metadata=_LEARNED)
    usual: float = field(default=math.nan, metadata=_LEARNED)
    share: float = field(default=math.nan, metadata=_LEARNED)

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


@dataclass(frozen=True)
class AlertChange(JsonState):
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
    score: float = field(metadata=NAN_AS_NULL)
    signals: tuple[Signal, ...]
    reason: str
    bucket_ts: int
    starts_bucket_ts: int
    evidence_since_ts: int
    # Recovery action (XID / row-remap alerts), extra identifying labels (e.g.
    # gpu, xid), and the lead over the XID that followed (precursor alerts).
    action: str | None = None
    labels: tuple[tuple[str, str], ...] = field(default=(), metadata=as_object(str))
    lead_s: float | None = None
    # Context that may change while the alert fires (e.g. the group's training
    # phase): annotations, never labels, so the alert's identity stays put.
    annotations: tuple[tuple[str, str], ...] = field(default=(), metadata=as_object(str))

    # The record's order since the optional parts were added (consumers see the same bytes).
    KEY_ORDER = (
        "action",
        "labels",
        "lead_s",
        "annotations",
        "alertname",
        "node",
        "group",
        "status",
        "severity",
        "score",
        "signals",
        "reason",
        "bucket_ts",
        "starts_bucket_ts",
        "evidence_since_ts",
    )

    @property
    def key(self) -> AlertKey:
        """(alertname, node): one lifecycle per key."""
        return (self.alertname, self.node)

    @property
    def identity(self) -> Identity:
        """The parts of the alert's Alertmanager labels a detector sets (with ``group``)."""
        return (self.alertname, self.node, self.labels, self.action, self.severity)


Figure = float | int | str | None


def _json_figure(x: Figure) -> Figure:
    return json_float(x) if isinstance(x, float) else x


@dataclass(frozen=True)
class Advice(JsonState):
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
    figures: tuple[tuple[str, Figure], ...] = field(
        default=(), metadata=as_object(Figure, _json_figure)
    )
    action: str | None = None
