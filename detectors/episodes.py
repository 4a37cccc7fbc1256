"""Alert transitions in, paging episodes out; and the windows an episode is matched to an event in.

Shared by the lab's evaluator (``streams.lab.evaluation``) and the service's
backtest (``streams.backtest``), so both count a page, a detection and a false
alert the same way. Whatever produced the alerts — :class:`Pipeline` changes
(``AlertChange``), the ``peerwatch.alerts`` topic (dicts), or a future detector
with its own labels — they are read as :class:`AlertEvent` (one firing or
resolved transition) and grouped per (alertname, node) into
:class:`AlertEpisode` (one page):

* a ``firing`` while the key's episode is open is a re-send of the active alert
  (or a duplicate) and adds nothing;
* a ``resolved`` closes the open episode (one without an open episode is ignored);
* a ``firing`` within ``merge_ms`` of the episode's resolution re-opens it (a
  flap is one page, not two); later, it starts a new episode.

The GPU of an alert is its ``gpu`` label, else the first signal that names one
(as :func:`streams.sinks.payloads.alert_labels` does); its class is its ``class``
label when it has one (the family's default is applied by the scorer); its
severity (``critical`` pages on-call, ``warning`` does not) is kept per firing.

Windows (:class:`ScoringWindows`; ``L`` lookback, ``T`` tolerance, ``A``
aftermath, in buckets of ``B`` ms, ``b(t)`` the bucket holding ``t``):
:func:`fault_window` ``[b(onset) - L·B, b(anchor) + T·B]`` is where a firing on
the event's node detects it (``anchor``: the XID, else the end);
:func:`explained_window` ``[b(onset) - L·B, b(end) + A·B]`` is where a firing on
that node is its consequence, not a false alert. The module docstring of
``streams.lab.evaluation.scoring`` says how the evaluator uses them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from detectors.checks import Checked, check_fields, integer, one_of, rule

__all__ = [
    "DAY_MS",
    "GROUP_NODES",
    "AlertEpisode",
    "AlertEvent",
    "Firing",
    "ScoringWindows",
    "alert_episodes",
    "bucket_of",
    "explained_window",
    "fault_window",
    "to_alert_event",
]

DAY_MS = 86_400_000
GROUP_NODES = 60  # the reference group size for "per group-day" (the source's job)

Status = Literal["firing", "resolved"]
_STATUS_ORDER = {"resolved": 0, "firing": 1}  # in one bucket, a resolution comes first
_EpisodeKey = tuple[str, str | None, str | None]  # alertname, node, group (group-level only)


@dataclass(frozen=True)
class AlertEvent:
    """One alert transition. ``node`` None: a group-level alert. ``bucket_ts``: ms, bucket start."""

    alertname: str
    node: str | None
    status: Status = field(metadata=rule(one_of(*get_args(Status))))
    bucket_ts: int
    gpu: str | None = None
    fault_class: str | None = None
    severity: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_change(cls, change: Any) -> AlertEvent:
        """From an :class:`detectors.alerts.AlertChange` (or anything with its attributes).

        Its ``labels`` (a mapping or ``(name, value)`` pairs, as ``AlertChange.labels``)
        may carry ``gpu`` and ``class``.
        """
        labels = dict(getattr(change, "labels", None) or ())
        signals = getattr(change, "signals", ()) or ()
        gpu = labels.get("gpu") or next((s.gpu for s in signals if getattr(s, "gpu", None)), None)
        return cls(
            alertname=str(change.alertname),
            node=None if change.node is None else str(change.node),
            status=change.status,
            bucket_ts=int(change.bucket_ts),
            gpu=None if gpu is None else str(gpu),
            fault_class=labels.get("class"),
            severity=getattr(change, "severity", None),
            group=getattr(change, "group", None),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertEvent:
        """From ``AlertChange.to_dict()`` or a record with a ``labels`` mapping."""
        labels: Mapping[str, Any] = data.get("labels") or {}
        signals = data.get("signals") or ()
        gpu = labels.get("gpu") or next(
            (s.get("gpu") for s in signals if isinstance(s, Mapping) and s.get("gpu")), None
        )
        node = data.get("node", labels.get("node"))
        cls_label = labels.get("class", data.get("class"))
        return cls(
            alertname=str(data.get("alertname", labels.get("alertname"))),
            node=None if node is None else str(node),
            status=data["status"],
            bucket_ts=int(data["bucket_ts"]),
            gpu=None if gpu is None else str(gpu),
            fault_class=None if cls_label is None else str(cls_label),
            severity=data.get("severity", labels.get("severity")),
            group=data.get("group", labels.get("group")),
        )


def to_alert_event(alert: Any) -> AlertEvent:
    """An :class:`AlertEvent`, a mapping, or an ``AlertChange``-like object → AlertEvent."""
    if isinstance(alert, AlertEvent):
        return alert
    if isinstance(alert, Mapping):
        return AlertEvent.from_dict(alert)
    return AlertEvent.from_change(alert)


@dataclass(frozen=True)
class Firing:
    """One page (or re-page) of an alert: when, and what it claimed."""

    ts: int
    gpu: str | None
    fault_class: str | None
    severity: str | None = None


@dataclass(frozen=True)
class AlertEpisode:
    """One alert from its first firing to its last resolution, flaps merged.

    ``firings``: the first firing, then every re-fire merged into it, in time
    order. ``resolved_ts``: the last resolution (None: still firing at the end).
    """

    alertname: str
    node: str | None
    firings: tuple[Firing, ...]
    resolved_ts: int | None

    @property
    def fired_ts(self) -> int:
        return self.firings[0].ts

    @property
    def critical(self) -> bool:
        """Some firing of it paged as critical (a warning that escalated counts)."""
        return any(f.severity == "critical" for f in self.firings)


def alert_episodes(events: Iterable[AlertEvent], merge_ms: int) -> list[AlertEpisode]:
    """Group transitions into episodes (see the module docstring), ordered by first firing."""
    if merge_ms < 0:
        raise ValueError(f"merge_ms must be >= 0, got {merge_ms}")
    ordered = sorted(events, key=lambda e: (e.bucket_ts, _STATUS_ORDER[e.status]))
    # per key: [firings, resolved_ts, open]
    building: dict[_EpisodeKey, list[tuple[list[Firing], int | None, bool]]] = {}
    for e in ordered:
        key = (e.alertname, e.node, e.group if e.node is None else None)
        episodes = building.setdefault(key, [])
        last = episodes[-1] if episodes else None
        if e.status == "resolved":
            if last is not None and last[2]:
                episodes[-1] = (last[0], e.bucket_ts, False)
            continue
        firing = Firing(e.bucket_ts, e.gpu, e.fault_class, e.severity)
        if last is not None and last[2]:
            continue  # a re-send of the active alert
        if last is not None and last[1] is not None and e.bucket_ts - last[1] <= merge_ms:
            last[0].append(firing)
            episodes[-1] = (last[0], last[1], True)
            continue
        episodes.append(([firing], None, True))
    out = [
        AlertEpisode(name, node, tuple(firings), None if is_open else resolved)
        for (name, node, _group), episodes in building.items()
        for firings, resolved, is_open in episodes
    ]
    return sorted(out, key=lambda ep: (ep.fired_ts, ep.alertname, ep.node or ""))


def bucket_of(t_ms: int, bucket_ms: int) -> int:
    """Start of the bucket holding ``t_ms`` (the frame builder's alignment)."""
    return t_ms - t_ms % bucket_ms


@dataclass(frozen=True)
class ScoringWindows(Checked):
    """Window sizes in buckets; see the module docstring for what each bounds."""

    lookback_buckets: int = integer(0, minimum=0)
    tolerance_buckets: int = integer(2, minimum=0)
    aftermath_buckets: int = integer(5, minimum=0)
    refire_merge_buckets: int = integer(10, minimum=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tolerance_buckets > self.aftermath_buckets:
            raise ValueError(
                "tolerance_buckets must be <= aftermath_buckets: a late detection must also "
                "be explained, not counted as a false alert"
            )


def fault_window(
    onset_ms: int, anchor_ms: int, w: ScoringWindows, bucket_ms: int
) -> tuple[int, int]:
    """``[b(onset) - L·B, b(anchor) + T·B]``: where a firing on the node detects the event."""
    start = bucket_of(onset_ms, bucket_ms) - w.lookback_buckets * bucket_ms
    return start, bucket_of(anchor_ms, bucket_ms) + w.tolerance_buckets * bucket_ms


def explained_window(
    onset_ms: int, end_ms: int, w: ScoringWindows, bucket_ms: int
) -> tuple[int, int]:
    """``[b(onset) - L·B, b(end) + A·B]``: where a firing on the node is the event's consequence."""
    start = bucket_of(onset_ms, bucket_ms) - w.lookback_buckets * bucket_ms
    return start, bucket_of(end_ms, bucket_ms) + w.aftermath_buckets * bucket_ms
