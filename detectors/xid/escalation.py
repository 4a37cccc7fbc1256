"""XID events in time order per (node, gpu) → :class:`XidDecision`, escalating repeats.

The decision is the catalog action, escalated when the fault repeats, with
the report's retry backoff (10 → 20 → 40 min) for RESTART_APP.

Escalation works on *incidents*: one fault logs a burst (145, 149, 79 and 45
within seconds; several lines of 13; the log line and the gauge change for the
same XID), and a burst must not count as a repeat. Events on one GPU closer
than ``incident_gap_ms`` to the incident's last actionable event belong to it;
the incident's action is the most disruptive one seen so far (never lowered),
and repeats are counted between incidents. Within ``window_ms`` (24 h):

* an XID whose entry has ``repeat_action`` and that already appeared in an
  earlier incident gets that action (79: RESTART_BM, then CONTACT_SUPPORT);
* a reset-class XID (RESET_GPU, RESTART_VM, RESTART_BM) after an earlier
  reset-class incident gets ``repeated_reset_action`` (CONTACT_SUPPORT): the
  reset did not fix the GPU, so stop retrying on it and use a spare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from detectors.checks import Checked, checked, each, int_rule, integer, rule
from detectors.state_codec import JsonState, pairs
from detectors.xid.actions import RESET_CLASS, SEVERITY_RANK, Severity, action_rank, action_rule
from detectors.xid.catalog import XidCatalog, XidEntry
from detectors.xid.events import XidEvent

__all__ = ["EscalationParams", "XidDecision", "XidEscalator"]

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@dataclass(frozen=True)
class EscalationParams(Checked):
    """Windows and backoff of :class:`XidEscalator` (times in ms).

    ``window_ms`` (24 h): how far back a repeat counts. ``incident_gap_ms``
    (5 min): events on one GPU closer than this to the incident's last
    actionable event are the same incident — one fault logs a burst within
    seconds, while a retried job fails again only after the retry delay
    (>= 10 min) plus the checkpoint load (~31 min median in the report).
    ``retry_backoff_ms`` (10, 20, 40 min): the report's proposed delay before
    the 1st, 2nd, 3rd… consecutive RESTART_APP retry (the last value repeats).
    ``retry_streak_gap_ms`` (2 h): a RESTART_APP incident that starts within
    this of the previous one continues the streak (40-min delay + ~31-min load
    + a short run fits); a longer gap means the job trained in between.
    ``repeated_reset_action``: the action for a reset-class XID after an
    earlier reset-class incident within the window. ``max_xids_per_gpu``
    bounds how many distinct codes one GPU's state remembers.
    """

    window_ms: int = integer(24 * HOUR_MS)
    incident_gap_ms: int = integer(5 * MINUTE_MS)
    retry_backoff_ms: tuple[int, ...] = checked(
        (10 * MINUTE_MS, 20 * MINUTE_MS, 40 * MINUTE_MS), each(int_rule(), non_empty=True)
    )
    retry_streak_gap_ms: int = integer(2 * HOUR_MS)
    repeated_reset_action: str = checked("CONTACT_SUPPORT", action_rule)
    max_xids_per_gpu: int = integer(32)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.incident_gap_ms >= self.window_ms:
            raise ValueError("incident_gap_ms must be shorter than window_ms")

    @property
    def memory_ms(self) -> int:
        """How long a quiet GPU's state can still change a decision."""
        return max(self.window_ms, self.retry_streak_gap_ms, self.incident_gap_ms)


_ACTION = rule(action_rule)


@dataclass(frozen=True)
class XidDecision(JsonState):
    """What to do about one XID on one GPU, given what this GPU did before.

    ``action`` is the GPU's current incident action (never lower than an
    earlier event of the same incident); ``catalog_action`` what the catalog
    says for this XID alone. ``escalated``: the action was raised by a repeat
    rule. ``changed``: this event raised the GPU's action or severity (send it to the
    scheduler); False for events absorbed by an incident already at that
    action or higher, and for IGNORE. ``retry_after_ms``: for RESTART_APP, the
    backoff before the retry. ``incident_ts_ms``: when the incident began.
    """

    node: str
    gpu: str
    xid: int
    name: str
    severity: Severity
    action: str = field(metadata=_ACTION)
    escalated: bool
    reason: str
    ts_ms: int
    catalog_action: str = field(metadata=_ACTION)
    incident_ts_ms: int
    changed: bool
    retry_after_ms: int | None = None
    substatus: str | None = None
    text: str = ""


@dataclass
class _GpuHistory(JsonState):
    """One GPU's escalation memory (persisted as is, one entry per GPU)."""

    node: str
    gpu: str
    incident_start_ms: int
    incident_last_ms: int
    action: str = field(default="IGNORE", metadata=_ACTION)
    severity: Severity = "info"
    escalated: bool = False
    cause_xid: int = 0
    reset: bool = False  # a reset-class XID belongs to the current incident
    xids: list[int] = field(default_factory=list)  # codes in the current incident
    retry_counted: bool = False
    retry_after_ms: int | None = None
    reset_before_ms: int | None = None  # start of the latest earlier reset-class incident
    # xid → start of an earlier incident
    seen_before: dict[int, int] = field(default_factory=dict, metadata=pairs(int, int))
    retry_streak: int = 0
    last_retry_ms: int | None = None  # start of the latest RESTART_APP incident


@dataclass(frozen=True)
class _EscalatorState(JsonState):
    """What an :class:`XidEscalator` persists: every GPU's history, in (node, gpu) order."""

    gpus: tuple[_GpuHistory, ...] = ()

    VERSION = ("version", 1)
    LABEL = "XID escalation state"


class XidEscalator:
    """XID events → :class:`XidDecision`, escalating repeats per (node, gpu).

    Feed events in time order per GPU (a late event joins the open incident).
    The catalog is configuration, not state: pass the same one to
    :meth:`from_dict`.
    """

    def __init__(self, catalog: XidCatalog, params: EscalationParams | None = None) -> None:
        self.catalog = catalog
        self.params = params or EscalationParams()
        self._gpus: dict[tuple[str, str], _GpuHistory] = {}

    def __len__(self) -> int:
        return len(self._gpus)

    def decide(self, event: XidEvent) -> XidDecision:
        """The decision for ``event``; it must carry ``node``, ``gpu`` and ``ts_ms``."""
        if event.node is None or event.gpu is None or event.ts_ms is None:
            raise ValueError(
                f"XID {event.xid} event needs node, gpu and ts_ms (XidEvent.with_origin): {event}"
            )
        p = self.params
        ts = event.ts_ms
        entry = self.catalog.lookup(event.xid, event.substatus)
        key = (event.node, event.gpu)
        hist = self._gpus.get(key)
        if hist is None or ts - hist.incident_last_ms > p.incident_gap_ms:
            hist = self._open_incident(key, hist, ts)
            self._gpus[key] = hist

        action, severity, escalated, reason = self._candidate(entry, event, hist, ts)
        if entry.action in RESET_CLASS:
            hist.reset = True
        if event.xid not in hist.xids and len(hist.xids) < p.max_xids_per_gpu:
            hist.xids.append(event.xid)
        if action != "IGNORE":  # a stream of ignorable XIDs must not keep an incident open
            hist.incident_last_ms = max(hist.incident_last_ms, ts)

        raised = action_rank(action) > action_rank(hist.action)
        if raised:
            hist.action, hist.escalated, hist.cause_xid = action, escalated, event.xid
        # A more severe XID in the same incident (145 then 79) must reach on-call
        # even when the action stays: the alert's severity changes.
        severity_raised = (
            SEVERITY_RANK[severity] > SEVERITY_RANK[hist.severity] and action != "IGNORE"
        )
        if severity_raised:
            hist.severity = severity
        if raised and hist.action == "RESTART_APP" and not hist.retry_counted:
            self._step_retry(hist)
        elif action_rank(hist.action) > action_rank("RESTART_APP"):
            hist.retry_streak, hist.last_retry_ms, hist.retry_after_ms = 0, None, None

        if not raised and not severity_raised:
            reason = f"{_describe(entry, self.catalog)}; " + (
                "no action"
                if hist.action == "IGNORE"
                else f"incident since {hist.incident_start_ms} ms already at {hist.action} "
                f"(XID {hist.cause_xid})"
            )
        elif hist.action == "RESTART_APP" and hist.retry_after_ms is not None:
            reason += (
                f"; retry in {_duration(hist.retry_after_ms)} "
                f"(consecutive RESTART_APP #{hist.retry_streak})"
            )
        return XidDecision(
            node=event.node,
            gpu=event.gpu,
            xid=event.xid,
            name=entry.name,
            severity=hist.severity,
            action=hist.action,
            escalated=hist.escalated,
            reason=reason,
            ts_ms=ts,
            catalog_action=entry.action,
            incident_ts_ms=hist.incident_start_ms,
            changed=raised or severity_raised,
            retry_after_ms=hist.retry_after_ms if hist.action == "RESTART_APP" else None,
            substatus=entry.substatus,
            text=entry.text,
        )

    def _open_incident(self, key: tuple[str, str], old: _GpuHistory | None, ts: int) -> _GpuHistory:
        p = self.params
        new = _GpuHistory(*key, incident_start_ms=ts, incident_last_ms=ts)
        if old is None:
            return new
        new.reset_before_ms = old.incident_start_ms if old.reset else old.reset_before_ms
        seen = dict(old.seen_before)
        for xid in old.xids:
            seen[xid] = old.incident_start_ms
        recent = sorted(((t, x) for x, t in seen.items() if ts - t <= p.window_ms), reverse=True)[
            : p.max_xids_per_gpu
        ]
        new.seen_before = {x: t for t, x in recent}
        if new.reset_before_ms is not None and ts - new.reset_before_ms > p.window_ms:
            new.reset_before_ms = None
        if old.last_retry_ms is not None and ts - old.last_retry_ms <= p.retry_streak_gap_ms:
            new.retry_streak, new.last_retry_ms = old.retry_streak, old.last_retry_ms
        return new

    def _candidate(
        self, entry: XidEntry, event: XidEvent, hist: _GpuHistory, ts: int
    ) -> tuple[str, Severity, bool, str]:
        p = self.params
        action, severity = entry.action, entry.severity
        reason = _describe(entry, self.catalog)
        before = hist.seen_before.get(event.xid)
        to = entry.repeat_action
        if to is not None and before is not None and _escalates(to, action, ts - before, p):
            why = (
                f"XID {event.xid} again {_duration(ts - before)} after the incident at {before} ms"
            )
            return to, "critical", True, f"{reason}; {why} → {to}"
        prev, to = hist.reset_before_ms, p.repeated_reset_action
        if (
            entry.action in RESET_CLASS
            and prev is not None
            and _escalates(to, action, ts - prev, p)
        ):
            why = (
                f"second reset-class incident within {_duration(p.window_ms)} "
                f"(previous at {prev} ms, {_duration(ts - prev)} earlier): the reset "
                "did not fix the GPU"
            )
            return to, "critical", True, f"{reason}; {why} → {to}"
        return action, severity, False, reason

    def _step_retry(self, hist: _GpuHistory) -> None:
        backoff = self.params.retry_backoff_ms
        hist.retry_streak += 1
        hist.last_retry_ms = hist.incident_start_ms
        hist.retry_counted = True
        hist.retry_after_ms = backoff[min(hist.retry_streak, len(backoff)) - 1]

    def prune(self, now_ms: int) -> int:
        """Forget GPUs quiet for longer than any rule looks back; return how many."""
        horizon = now_ms - self.params.memory_ms
        stale = [k for k, h in self._gpus.items() if h.incident_last_ms < horizon]
        for key in stale:
            del self._gpus[key]
        return len(stale)

    def decide_all(self, events: Iterable[XidEvent]) -> list[XidDecision]:
        """:meth:`decide` for each event in order."""
        return [self.decide(e) for e in events]

    def to_dict(self) -> dict[str, Any]:
        return _EscalatorState(tuple(h for _, h in sorted(self._gpus.items()))).to_dict()

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        catalog: XidCatalog,
        params: EscalationParams | None = None,
    ) -> XidEscalator:
        esc = cls(catalog, params)
        esc._gpus = {(h.node, h.gpu): h for h in _EscalatorState.from_dict(data).gpus}
        return esc


def _describe(entry: XidEntry, catalog: XidCatalog) -> str:
    sub = f" [{entry.substatus}]" if entry.substatus else ""
    if not entry.known:
        return (
            f"XID {entry.xid} is not in the {catalog.profile!r} catalog: "
            f"{entry.action} (default for unknown XIDs)"
        )
    return (
        f"XID {entry.xid}{sub} ({entry.name}): {entry.action} per the {catalog.profile!r} catalog"
    )


def _escalates(to: str, action: str, ago_ms: int, p: EscalationParams) -> bool:
    """The earlier incident (``ago_ms`` back) is within the window and ``to`` is stronger."""
    return ago_ms <= p.window_ms and action_rank(to) > action_rank(action)


def _duration(ms: int) -> str:
    if ms >= HOUR_MS:
        return f"{ms / HOUR_MS:.1f} h"
    if ms >= MINUTE_MS:
        return f"{ms / MINUTE_MS:.0f} min"
    return f"{ms / 1000:.0f} s"
