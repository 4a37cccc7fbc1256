"""One firing alert's lifecycle, shared by every alert family.

A family turns its evidence into a *proposed* :class:`AlertChange` each bucket
and hands it here; what goes to the sinks follows from a few transitions:

* :func:`confirm` — evidence for ``streak`` buckets in a row of an alert not firing:
  it fires once the streak reaches the family's count (a blip shorter is forgotten).
* :func:`observe` — evidence this bucket. No alert yet: it fires at once. The
  same identity (severity and action, the labels a route keys on) as the
  firing one: the detail is refreshed, the labels, group and start it fired
  with are held, nothing is sent (an escalation of detail never re-fires). A
  new identity: the old alert resolves and the proposed one fires.
* :func:`clear` — no evidence this bucket: the clear streak grows and the
  alert resolves once it reaches the family's count; any evidence restarts it.
* :func:`expire` — the hold: resolves once ``hold`` buckets have passed since
  the last evidence, counted by time (a bucket the family did not run counts).
* :func:`resolved` — at once, e.g. its node left the group or the group ended.
* :func:`keep_identity` — a firing alert keeps the labels it fired with until it
  resolves (Alertmanager tells alerts apart by them), for a family whose labels are
  chosen after its evidence (peer scoring's class label).
* A bucket with nothing to judge calls none of them: the alert stays as it is.

GPU health (XID, row remap: :mod:`detectors.gpu_health`), fail-slow
(:mod:`detectors.failslow.alerts`) and peer scoring (:mod:`detectors.alerts`, which
keeps its pending streak and strongest observation per key in its own state) run on it.

Pure: every function returns a new :class:`Firing`; nothing here is mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from detectors.state_codec import JsonState, key
from detectors.vocabulary import AlertChange, AlertKey, Labels

__all__ = ["Firing", "clear", "confirm", "expire", "keep_identity", "observe", "resolved"]


@dataclass(frozen=True)
class Firing(JsonState):
    """A firing alert: the change as it stands (what is re-sent while active), the
    consecutive buckets without evidence, and the bucket of its last evidence."""

    change: AlertChange
    last_evidence_ts: int = field(metadata=key("last"))
    clear_streak: int = field(default=0, metadata=key("clear"))

    @classmethod
    def filled(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A snapshot from before ``last`` was kept: the evidence was last seen when the
        change was last sent."""
        change = data.get("change")
        if data.get("last") is not None or not isinstance(change, Mapping):
            return data
        return {**data, "last": change.get("bucket_ts")}


def resolved(change: AlertChange, bucket_ts: int, why: str | None = None) -> AlertChange:
    """``change`` resolved in ``bucket_ts``; ``why`` (if given) leads its reason."""
    reason = change.reason if why is None else f"{why}; was: {change.reason}"
    return replace(change, status="resolved", bucket_ts=bucket_ts, reason=reason)


def observe(
    current: Firing | None,
    proposed: AlertChange,
    bucket_ts: int,
    *,
    superseded: str | None = None,
) -> tuple[Firing, list[AlertChange]]:
    """Evidence in ``bucket_ts``: fire, refresh, or resolve-and-fire on a new identity.

    ``superseded``: the reason given to the old alert when a new identity replaces it
    (None keeps its reason as it was)."""
    if current is None:
        return Firing(proposed, bucket_ts), [proposed]
    held = current.change
    if (held.severity, held.action) == (proposed.severity, proposed.action):
        kept = replace(
            proposed, labels=held.labels, group=held.group, starts_bucket_ts=held.starts_bucket_ts
        )
        return Firing(kept, bucket_ts), []
    return Firing(proposed, bucket_ts), [resolved(held, bucket_ts, superseded), proposed]


def confirm(
    streak: int, needed: int, proposed: AlertChange, bucket_ts: int
) -> tuple[Firing | None, list[AlertChange]]:
    """Evidence for ``streak`` buckets in a row of an alert not firing yet: it fires (as
    :func:`observe` fires a new alert) once ``streak`` reaches ``needed``; before that
    nothing is sent."""
    if streak < needed:
        return None, []
    return observe(None, proposed, bucket_ts)


def clear(
    current: Firing, bucket_ts: int, *, resolve_after: int, why: str
) -> tuple[Firing | None, AlertChange | None]:
    """No evidence in ``bucket_ts``: resolved once ``resolve_after`` such buckets ran in a row.

    ``why`` may name ``{n}``, the buckets without evidence."""
    n = current.clear_streak + 1
    if n >= resolve_after:
        return None, resolved(current.change, bucket_ts, why.format(n=n))
    return replace(current, clear_streak=n), None


def expire(
    current: Firing, bucket_ts: int, *, hold: int, bucket_ms: int
) -> tuple[Firing | None, AlertChange | None]:
    """Resolved once ``hold`` buckets have passed since the last evidence."""
    n = (bucket_ts - current.last_evidence_ts) // bucket_ms
    if n >= hold:
        return None, resolved(current.change, bucket_ts, f"no new evidence for {n} buckets")
    return current, None


def keep_identity(
    fired: Mapping[AlertKey, Labels],
    changes: Iterable[AlertChange],
    active: Iterable[AlertChange],
) -> tuple[dict[AlertKey, Labels], list[AlertChange], list[AlertChange]]:
    """Give every firing alert the labels it fired with, until it resolves.

    ``fired``: labels per (alertname, node) of the alerts firing before this
    bucket. Returns the new ``fired`` (the alerts still firing), and ``changes``
    and ``active`` with their labels held.
    """
    held = dict(fired)
    out_changes: list[AlertChange] = []
    for change in changes:
        key = (change.alertname, change.node)
        labels = held.get(key)
        if labels is not None and labels != change.labels:
            change = replace(change, labels=labels)
        if change.status == "resolved":
            held.pop(key, None)
        else:
            held[key] = change.labels
        out_changes.append(change)
    out_active = []
    for alert in active:
        key = (alert.alertname, alert.node)
        labels = held.setdefault(key, alert.labels)  # firing before the labels were kept
        out_active.append(alert if labels == alert.labels else replace(alert, labels=labels))
    live = {(a.alertname, a.node) for a in out_active}
    return {k: v for k, v in held.items() if k in live}, out_changes, out_active
