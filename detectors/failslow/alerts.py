"""Fail-slow alerts: one job's per-bucket verdicts in, alert transitions out.

Two families, both ``warning`` (a slow job is degraded, not down):

* ``PeerwatchFailSlow`` — one per culprit node (``node`` set) while a confirmed
  slowdown is localised to it. Labels: ``class`` (compute / network / cpu) and
  ``gpu`` when the culprit is a GPU. ``action``: the mitigation stage
  (``S1_OBSERVE`` … ``S4_RESTART_WITHOUT_NODE``); ``reason``: the slowdown's
  magnitude, the culprit's confidence and evidence, the advice and its loss/cost.
* ``PeerwatchJobSlow`` — the group itself (``node`` None, never names a node)
  while the job is confirmed slow and no node alert covers it: every peer
  equally affected (``class`` "cluster-wide") or nothing to compare
  (``class`` "unknown").

Lifecycle (the ideas of :mod:`detectors.alerts`, keyed by (alertname, node)):

* A node alert fires in the bucket its node is first blamed — the change
  detector's own confirmation (a >= 10 % shift sustained 3 buckets) is the
  persistence, so no further streak is asked for. Once fired, its identity
  (class, GPU: the labels Alertmanager keys on) stays as it fired; later
  buckets refresh its reason, and its signals when the same culprit is seen
  with more confidence.
* It resolves after ``resolve_after`` consecutive buckets without that node
  blamed (default 10 = 5 min, the SLO's incident merge gap, so intermittent
  congestion is one alert as it is one incident); any blamed bucket in between
  restarts the count. A bucket where the job is slow but could not be
  localised (no throughput or metrics: *unknown*) freezes the count.
* The advised stage never goes down while the alert fires; when it climbs the
  alert with the old ``action`` resolves and one with the new ``action`` fires
  (same start): ``action`` is a label Alertmanager keys on, so a scheduler
  watching ``peerwatch.alerts`` or an Alertmanager route sees each escalation once.
* The job alert fires when the job is slow, its nodes were compared, nobody is
  blamed and no node alert is firing; it resolves ``resolve_after`` buckets
  after the slowdown ends, or at once when a node alert fires (the slowdown
  has a culprit now). Unknown buckets freeze it too.

State is a frozen :class:`FailSlowAlertState` (JSON-safe ``to_dict`` /
``from_dict``); :func:`step_failslow_alerts` is pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from detectors.checks import Checked, integer, rule
from detectors.errors import RulesError
from detectors.failslow.localise import Culprit, Localisation
from detectors.failslow.mitigation import STAGES, Stage
from detectors.failslow.monitor import FailSlowVerdict
from detectors.families import FAIL_SLOW, JOB_SLOW
from detectors.features import DEFAULT_BUCKET_MS
from detectors.lifecycle import Firing, clear, observe, resolved
from detectors.state_codec import SORTED_KEYS, JsonState
from detectors.vocabulary import AlertChange, Signal

__all__ = [
    "FAIL_SLOW",
    "JOB_SLOW",
    "STAGE_ACTIONS",
    "FailSlowAlertParams",
    "FailSlowAlertState",
    "FailSlowAlertStep",
    "step_failslow_alerts",
]

# The ``action`` of an alert at each stage: a scheduler keys on these.
STAGE_ACTIONS: Mapping[Stage, str] = {
    "S1": "S1_OBSERVE",
    "S2": "S2_REBALANCE",
    "S3": "S3_ISOLATE",
    "S4": "S4_RESTART_WITHOUT_NODE",
}


@dataclass(frozen=True)
class FailSlowAlertParams(Checked):
    """``resolve_after``: buckets without evidence before a firing alert resolves.
    ``bucket_ms``: bucket length (turns bucket indices into timestamps)."""

    resolve_after: int = integer(10)
    bucket_ms: int = integer(DEFAULT_BUCKET_MS)


def _fail_slow_firing(name: str, firing: Mapping[str, Firing]) -> None:
    for key, f in firing.items():
        if f.change.alertname not in (FAIL_SLOW, JOB_SLOW):
            raise RulesError(f"{name}[{key!r}]: not a fail-slow alert: {f.change.alertname!r}")
        if f.change.action not in STAGE_ACTIONS.values():
            known = ", ".join(STAGE_ACTIONS.values())
            raise RulesError(
                f"{name}[{key!r}]: unknown stage action {f.change.action!r}; known: {known}"
            )


@dataclass(frozen=True)
class FailSlowAlertState(JsonState):
    """The firing alerts of one job, keyed by node ("" for the job alert)."""

    firing: Mapping[str, Firing] = field(
        default_factory=dict, metadata=SORTED_KEYS | rule(_fail_slow_firing)
    )

    def active(self) -> tuple[AlertChange, ...]:
        """Every firing alert (node alerts by node, then the job alert)."""
        return tuple(self.firing[k].change for k in sorted(self.firing, key=lambda k: (not k, k)))


@dataclass(frozen=True)
class FailSlowAlertStep:
    state: FailSlowAlertState
    changes: tuple[AlertChange, ...]
    active: tuple[AlertChange, ...]


def step_failslow_alerts(
    state: FailSlowAlertState,
    verdict: FailSlowVerdict,
    *,
    group: str,
    bucket_ts: int,
    params: FailSlowAlertParams | None = None,
) -> FailSlowAlertStep:
    """Advance the job's fail-slow alerts by one bucket (``bucket_ts``: its start, ms)."""
    params = params or FailSlowAlertParams()
    firing = dict(state.firing)
    changes: list[AlertChange] = []
    slow = verdict.slow
    loc = verdict.localisation
    unknown = slow and loc is None  # slow, but nothing to judge the nodes on this bucket
    culprits = _strongest_per_node(loc.culprits) if slow and loc is not None else {}
    stage = verdict.advice.stage if slow else "S1"
    onset_ts = _onset_ts(verdict, bucket_ts, params)

    for node, culprit in culprits.items():
        current = firing.get(node)
        text = _node_reason(verdict, culprit, onset_ts)
        if current is None:
            change = _node_change(group, bucket_ts, onset_ts, culprit, stage, text)
            firing[node], fired = observe(None, change, bucket_ts)
            changes.extend(fired)
            continue
        firing[node], escalated = _refresh(current, stage, text, bucket_ts, culprit)
        changes.extend(escalated)

    for node in [n for n in firing if n and n not in culprits]:
        if unknown:
            continue
        kept, resolve = clear(
            firing[node],
            bucket_ts,
            resolve_after=params.resolve_after,
            why="not blamed for {n} buckets",
        )
        _settle(firing, node, kept, resolve, changes)

    changes.extend(_step_job_alert(firing, verdict, group, bucket_ts, onset_ts, stage, params))
    new = FailSlowAlertState(firing)
    active = tuple(replace(c, bucket_ts=bucket_ts) for c in new.active())
    return FailSlowAlertStep(new, tuple(changes), active)


# -- the job alert -----------------------------------------------------------------------------


def _step_job_alert(
    firing: dict[str, Firing],
    verdict: FailSlowVerdict,
    group: str,
    bucket_ts: int,
    onset_ts: int,
    stage: Stage,
    params: FailSlowAlertParams,
) -> list[AlertChange]:
    current = firing.get("")
    nodes = sorted(n for n in firing if n)
    loc = verdict.localisation
    if nodes:
        if current is None:
            return []
        del firing[""]
        culprit_named = f"culprit named: {FAIL_SLOW} on {', '.join(nodes)}"
        return [resolved(current.change, bucket_ts, culprit_named)]
    if verdict.slow and loc is None:
        return []  # unknown: neither fire nor count towards resolving
    if verdict.slow:
        text = _job_reason(verdict, onset_ts)
        if current is None:
            change = _job_change(group, bucket_ts, onset_ts, verdict, loc, stage, text)
            firing[""], fired = observe(None, change, bucket_ts)
            return fired
        firing[""], escalated = _refresh(current, stage, text, bucket_ts, None)
        return escalated
    if current is None:
        return []
    kept, resolve = clear(
        current, bucket_ts, resolve_after=params.resolve_after, why="job not slow for {n} buckets"
    )
    out: list[AlertChange] = []
    _settle(firing, "", kept, resolve, out)
    return out


def _settle(
    firing: dict[str, Firing],
    key: str,
    kept: Firing | None,
    change: AlertChange | None,
    changes: list[AlertChange],
) -> None:
    """Store what :func:`clear` left of an alert and send its resolve, if any."""
    if kept is None:
        del firing[key]
    else:
        firing[key] = kept
    if change is not None:
        changes.append(change)


# -- building and refreshing alerts ------------------------------------------------------------


def _strongest_per_node(culprits: tuple[Culprit, ...]) -> dict[str, Culprit]:
    """A node blamed twice (e.g. network and compute) keeps its most confident culprit."""
    out: dict[str, Culprit] = {}
    for c in culprits:  # strongest first
        out.setdefault(c.node, c)
    return out


def _onset_ts(verdict: FailSlowVerdict, bucket_ts: int, params: FailSlowAlertParams) -> int:
    since = verdict.change.since_bucket
    return bucket_ts if since is None else min(since * params.bucket_ms, bucket_ts)


def _node_change(
    group: str, bucket_ts: int, onset_ts: int, culprit: Culprit, stage: Stage, reason: str
) -> AlertChange:
    labels: dict[str, str] = {"class": culprit.klass}
    if culprit.gpu is not None:
        labels["gpu"] = culprit.gpu
    return AlertChange(
        alertname=FAIL_SLOW,
        node=culprit.node,
        group=group,
        status="firing",
        severity="warning",
        score=culprit.confidence,
        signals=culprit.evidence,
        reason=reason,
        bucket_ts=bucket_ts,
        starts_bucket_ts=bucket_ts,
        evidence_since_ts=onset_ts,
        action=STAGE_ACTIONS[stage],
        labels=tuple(sorted(labels.items())),
    )


def _job_change(
    group: str,
    bucket_ts: int,
    onset_ts: int,
    verdict: FailSlowVerdict,
    loc: Localisation | None,
    stage: Stage,
    reason: str,
) -> AlertChange:
    klass = loc.klass if loc is not None else "unknown"
    return AlertChange(
        alertname=JOB_SLOW,
        node=None,
        group=group,
        status="firing",
        severity="warning",
        score=verdict.change.magnitude,
        signals=loc.evidence if loc is not None else (),
        reason=reason,
        bucket_ts=bucket_ts,
        starts_bucket_ts=bucket_ts,
        evidence_since_ts=onset_ts,
        action=STAGE_ACTIONS[stage],
        labels=(("class", klass),),
    )


def _refresh(
    current: Firing, stage: Stage, reason: str, bucket_ts: int, culprit: Culprit | None
) -> tuple[Firing, list[AlertChange]]:
    """Evidence again this bucket: new reason, stronger signals; a higher stage resolves the
    alert with the old action and fires one with the new (``action`` is a label). The stage
    is never withdrawn while the alert fires."""
    change = replace(current.change, reason=reason, bucket_ts=bucket_ts)
    if (
        culprit is not None
        and culprit.confidence > change.score
        and dict(change.labels).get("class") == culprit.klass
        and dict(change.labels).get("gpu") == culprit.gpu
    ):
        change = replace(change, score=culprit.confidence, signals=culprit.evidence)
    held = _stage(current.change)
    top = stage if STAGES.index(stage) > STAGES.index(held) else held
    proposed = replace(change, action=STAGE_ACTIONS[top])
    return observe(current, proposed, bucket_ts, superseded=f"escalated to {STAGE_ACTIONS[stage]}")


def _stage(change: AlertChange) -> Stage:
    """The stage an alert's ``action`` names."""
    return next(s for s, action in STAGE_ACTIONS.items() if action == change.action)


def _slowdown_text(verdict: FailSlowVerdict, onset_ts: int) -> str:
    since = datetime.fromtimestamp(onset_ts / 1000.0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    magnitude = verdict.change.magnitude
    if magnitude > 0:
        return f"job throughput -{magnitude * 100:.1f} % vs its level before {since}"
    return f"job slow since {since}"


def _node_reason(verdict: FailSlowVerdict, culprit: Culprit, onset_ts: int) -> str:
    where = f" gpu{culprit.gpu}" if culprit.gpu is not None else ""
    evidence = ", ".join(_evidence_text(s) for s in culprit.evidence) or "no detail"
    return (
        f"{_slowdown_text(verdict, onset_ts)}; culprit {culprit.node}{where} ({culprit.klass}, "
        f"confidence {culprit.confidence:.2f}): {evidence}; advice {verdict.advice.reason}"
    )


def _job_reason(verdict: FailSlowVerdict, onset_ts: int) -> str:
    loc = verdict.localisation
    where = loc.reason if loc is not None else "no node metrics to compare"
    return (
        f"{_slowdown_text(verdict, onset_ts)}; no node to blame: {where}; "
        f"advice {verdict.advice.reason}"
    )


def _evidence_text(signal: Signal) -> str:
    where = f" gpu{signal.gpu}" if signal.gpu is not None else ""
    if signal.feature == "clock_event_reasons":
        return f"clock_event_reasons{where}=0x{int(signal.value):x}"
    z = f" z={signal.z:+.1f}" if math.isfinite(signal.z) else ""
    return f"{signal.feature}{where}{z} ({signal.value:.4g} vs peers {signal.median:.4g})"
