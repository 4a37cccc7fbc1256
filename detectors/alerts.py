"""Alert lifecycle per (alertname, node): inactive → pending → firing → resolved.

Each bucket, every alert key gets an :class:`Observation`: the evidence is
``present``, ``absent`` or ``unknown`` (no data to judge: the node is silent, or
too few peers reported). Unknown freezes the alert where it is — a collapsed
node that then stops reporting stays firing rather than drifting toward
"resolved", and a pending soft streak neither grows nor resets.

* inactive + present → pending (streak 1); firing once the streak reaches the
  family's count: 1 for a hard signature (fires in the same bucket),
  ``persistence`` for soft deviation and group degradation, ``silent_buckets``
  for silence.
* pending + absent → inactive. A blip shorter than the count is forgotten and
  never produces a transition.
* firing + absent for ``resolve_after`` consecutive buckets → resolved (then
  inactive). Any present bucket in between restarts that count (hysteresis).
* While pending or firing the alert keeps its strongest observation (score,
  signals, reason), the bucket its evidence began and the bucket it first fired.

Firing, resolving and retiring are :mod:`detectors.lifecycle`'s transitions
(``confirm``, ``clear``, ``resolved``), as for every alert family; the pending
streak and the strongest observation are this family's, kept in :class:`AlertState`
(the persisted form the worker's changelog table holds).

One alert per (node, family), however many features contribute, so a failing
node produces at most one alert per family, not a storm. Group degradation is
keyed with ``node=None``: it never names a node.

Alertmanager identifies an alert by its whole label set, so the labels an
alert fired with are its identity until it resolves: :func:`keep_identity`
(:mod:`detectors.lifecycle`) holds them (a class label chosen from the leading signal,
say, must not move when a stronger signal takes the lead). The worst GPU is detail,
never a label.

Everything here is a pure function of (states, observations); states are frozen
dataclasses with ``to_dict``/``from_dict`` round-tripping to JSON-safe dicts.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from detectors.checks import Checked, integer, rule
from detectors.families import (
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    REGISTRY,
    AlertFamily,
)
from detectors.lifecycle import Firing, clear, confirm, keep_identity, resolved
from detectors.state_codec import NAN_AS_NULL, JsonState
from detectors.vocabulary import AlertChange, AlertKey, Signal, Status

__all__ = [
    "FAMILIES",
    "GROUP_DEGRADED",
    "NODE_COLLAPSE",
    "NODE_DEVIATION",
    "NODE_SILENT",
    "AlertChange",
    "AlertFamily",
    "AlertKey",
    "AlertParams",
    "AlertState",
    "AlertStep",
    "Observation",
    "active_alerts",
    "keep_identity",
    "step_alerts",
]

Evidence = Literal["present", "absent", "unknown"]
Phase = Literal["pending", "firing"]

# The families this lifecycle runs (peer scoring); the others have their own evidence.
FAMILIES: Mapping[str, AlertFamily] = {
    name: REGISTRY[name] for name in (NODE_COLLAPSE, NODE_SILENT, NODE_DEVIATION, GROUP_DEGRADED)
}


@dataclass(frozen=True)
class AlertParams(Checked):
    """Bucket counts of the lifecycle.

    ``persistence``: consecutive buckets of soft evidence before firing (3 x
    30 s: a checkpoint save of 18-32 s can put a node out of phase with its
    peers for one bucket, rarely two; three keeps noise well under 0.1 false
    alerts per group-day). ``silent_buckets``: consecutive buckets without a
    frame before a node is silent (one late scrape is not). ``resolve_after``:
    consecutive buckets without evidence before a firing alert resolves.
    """

    persistence: int = integer(3)
    silent_buckets: int = integer(2)
    resolve_after: int = integer(4)

    def buckets_to_fire(self, alertname: str) -> int:
        fire = _family(alertname).fire
        if fire == "at_once":
            return 1
        if fire == "silent_buckets":
            return self.silent_buckets
        return self.persistence


@dataclass(frozen=True)
class Observation:
    """One bucket's evidence for one alert key."""

    evidence: Evidence
    score: float = 0.0
    signals: tuple[Signal, ...] = ()
    reason: str = ""


ABSENT = Observation("absent")


def _known_alertname(name: str, alertname: str) -> None:
    _family(alertname)  # a restored alert of a family since removed is refused, named


@dataclass(frozen=True)
class AlertState(JsonState):
    """A pending or firing alert (inactive alerts are simply not stored).

    ``streak``: consecutive buckets with evidence (pending) or since the
    evidence began (firing). ``clear_streak``: consecutive buckets without
    evidence while firing. ``evidence_since_ts``: bucket the evidence streak
    began. ``starts_bucket_ts``: bucket it first fired (None while pending).
    ``score``/``signals``/``reason``: the strongest observation so far.
    """

    alertname: str = field(metadata=rule(_known_alertname))
    node: str | None
    phase: Phase
    streak: int
    clear_streak: int
    evidence_since_ts: int
    starts_bucket_ts: int | None
    score: float = field(metadata=NAN_AS_NULL)
    signals: tuple[Signal, ...] = ()
    reason: str = ""

    @property
    def key(self) -> AlertKey:
        return (self.alertname, self.node)


@dataclass(frozen=True)
class AlertStep:
    """Outcome of one bucket: the new states, the transitions, the firing alerts."""

    alerts: Mapping[AlertKey, AlertState]
    changes: tuple[AlertChange, ...]
    active: tuple[AlertChange, ...]


def step_alerts(
    alerts: Mapping[AlertKey, AlertState],
    observations: Mapping[AlertKey, Observation],
    *,
    group: str,
    bucket_ts: int,
    params: AlertParams,
    members: Collection[str] | None = None,
) -> AlertStep:
    """Advance every alert by one bucket; ``alerts`` is not modified.

    A key without an observation is ``absent``. With ``members`` given, node
    alerts of nodes outside it are retired: a firing one resolves at once
    (reason "node left the group"), a pending one is dropped.
    """
    new: dict[AlertKey, AlertState] = {}
    changes: list[AlertChange] = []
    for key in sorted(set(alerts) | set(observations), key=_sort_key):
        name, node = key
        family = _family(name)
        if family.node_level != (node is not None):
            raise ValueError(f"{name} is {'node' if family.node_level else 'group'}-level: {key}")
        prev = alerts.get(key)
        if node is not None and members is not None and node not in members:
            if prev is not None and prev.phase == "firing":
                changes.append(resolved(_firing(prev, group, bucket_ts), bucket_ts, _LEFT))
            continue
        state, change = _advance(prev, key, observations.get(key, ABSENT), group, bucket_ts, params)
        if state is not None:
            new[key] = state
        if change is not None:
            changes.append(change)
    return AlertStep(
        alerts=new,
        changes=tuple(changes),
        active=active_alerts(new.values(), group=group, bucket_ts=bucket_ts),
    )


def active_alerts(
    alerts: Iterable[AlertState], *, group: str, bucket_ts: int
) -> tuple[AlertChange, ...]:
    """The firing alerts as ``status="firing"`` changes (what the shell re-sends)."""
    firing = sorted((a for a in alerts if a.phase == "firing"), key=lambda a: _sort_key(a.key))
    return tuple(_change(a, group, "firing", bucket_ts, a.reason) for a in firing)


def _advance(
    prev: AlertState | None,
    key: AlertKey,
    obs: Observation,
    group: str,
    bucket_ts: int,
    params: AlertParams,
) -> tuple[AlertState | None, AlertChange | None]:
    if obs.evidence == "unknown":
        return prev, None
    if obs.evidence == "absent":
        if prev is None or prev.phase == "pending":
            return None, None
        current = Firing(_firing(prev, group, bucket_ts), bucket_ts, prev.clear_streak)
        kept, gone = clear(current, bucket_ts, resolve_after=params.resolve_after, why=_QUIET)
        return (
            (None, gone) if kept is None else (replace(prev, clear_streak=kept.clear_streak), None)
        )
    if obs.evidence != "present":
        raise ValueError(f"unknown evidence {obs.evidence!r}")

    if prev is None:
        state = AlertState(
            alertname=key[0],
            node=key[1],
            phase="pending",
            streak=1,
            clear_streak=0,
            evidence_since_ts=bucket_ts,
            starts_bucket_ts=None,
            score=obs.score,
            signals=obs.signals,
            reason=obs.reason,
        )
    else:
        state = replace(prev, streak=prev.streak + 1, clear_streak=0)
        if obs.score > prev.score or not math.isfinite(prev.score):
            state = replace(state, score=obs.score, signals=obs.signals, reason=obs.reason)
    if state.phase == "pending":
        proposed = _change(state, group, "firing", bucket_ts, state.reason)
        _, fired = confirm(state.streak, params.buckets_to_fire(key[0]), proposed, bucket_ts)
        if fired:
            return replace(state, phase="firing", starts_bucket_ts=bucket_ts), fired[0]
    return state, None


_LEFT = "node left the group"
_QUIET = "no evidence for {n} buckets"


def _firing(state: AlertState, group: str, bucket_ts: int) -> AlertChange:
    """A firing alert's change as the lifecycle holds it."""
    return _change(state, group, "firing", bucket_ts, state.reason)


def _change(
    state: AlertState, group: str, status: Status, bucket_ts: int, reason: str
) -> AlertChange:
    starts = state.starts_bucket_ts
    return AlertChange(
        alertname=state.alertname,
        node=state.node,
        group=group,
        status=status,
        severity=_family(state.alertname).severity,
        score=state.score,
        signals=state.signals,
        reason=reason,
        bucket_ts=bucket_ts,
        starts_bucket_ts=bucket_ts if starts is None else starts,
        evidence_since_ts=state.evidence_since_ts,
    )


def _family(alertname: str) -> AlertFamily:
    try:
        return FAMILIES[alertname]
    except KeyError:
        raise ValueError(f"unknown alertname {alertname!r}; known: {sorted(FAMILIES)}") from None


def _sort_key(key: AlertKey) -> tuple[str, str]:
    return (key[0], key[1] or "")
