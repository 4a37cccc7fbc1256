"""Figures over many scored runs (seeds, scenarios): rates, counts, percentiles.

Every rate is a fraction in [0, 1] over *all* the faults it is about, missed
ones included (a missed fault is neither at-or-before its XID nor culprit-right
nor class-right), and None when there is nothing to count. Where the figure
"of the detected ones" is wanted too it has its own key.

* ``recall``: detected / faults.
* ``at_or_before_xid``: XID-localised fail-stop faults (category ``fail_stop``
  with an XID) alerted at or before the XID's bucket / all of them;
  ``at_or_before_xid_of_detected``: / the detected ones.
* ``culprit_accuracy``, ``class_accuracy``: over all faults; ``gpu_accuracy``
  over the faults that name a GPU.
* ``fail_slow_culprit_3``: fail-slow faults whose culprit was named within
  ``culprit_buckets`` (3) buckets of onset / all fail-slow faults of at least
  ``min_slowdown`` (10 %; a fault without a labelled slowdown counts);
  ``fail_slow_class_accuracy`` likewise for the class. Milder fail-slow faults
  still count in recall, culprit and class accuracy overall.
* ``remap_creep_min_lead_h``: the smallest warning lead (hours before the GPU
  disappeared) over row-remap creep faults; None when one was missed (a missed
  creep has no lead), ``remap_creep_warned_72h`` counts leads >= 72 h.
* Detection-time percentiles (``detect_s_p50/p90/p99/max``) over the detected
  faults *without* an XID, from onset; ``buckets_to_xid_p50/max`` over the
  detected XID faults. Percentiles use numpy's ``method="higher"``: an actual
  observed value, the worse neighbour, never an interpolation.
* False node alerts: ``false_node_alerts`` episodes over ``node_days``;
  ``per_node_day``, ``per_group_day`` = per node-day × 60 (a 60-node group,
  whatever the job's size), ``per_group_week`` = per group-day × 7. The same
  over the must-not-page runs only (runs without a fault) as
  ``must_not_page_false_per_group_day`` — the figure the target is about.
* False pages by severity, per group-day (``group_days`` = node-days / 60):
  ``false_critical`` — false node alerts that paged critical, plus critical
  group-level alerts in must-not-page runs; ``false_node_warnings`` — false
  node alerts that stayed warnings; ``must_not_page_group_alerts`` — every
  group-level alert in a must-not-page run (per that runs' group-days). Each
  with its ``_per_group_day`` rate.
* Must-not-page events: ``events``, ``events_blamed`` (a node was blamed),
  ``events_not_blamed_rate``; ``group_alerts`` (group-level episodes) and
  ``events_group_alerted``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from detectors.episodes import GROUP_NODES
from detectors.state_codec import JsonRecord
from streams.lab.evaluation.scoring import FaultOutcome, RunScore

__all__ = ["GROUP_NODES", "Summary", "percentile", "summarize"]

REMAP_LEAD_TARGET_H = 72.0


@dataclass(frozen=True)
class Summary(JsonRecord):
    """Figures over a set of runs; keys of :meth:`to_dict` are stable (see the module doc)."""

    runs: int
    faults: int
    detected: int
    recall: float | None
    xid_faults: int
    at_or_before_xid_count: int
    at_or_before_xid: float | None
    at_or_before_xid_of_detected: float | None
    culprit_correct: int
    culprit_accuracy: float | None
    gpu_faults: int
    gpu_correct: int
    gpu_accuracy: float | None
    class_correct: int
    class_accuracy: float | None
    fail_slow_faults: int
    fail_slow_culprit_3_count: int
    fail_slow_culprit_3: float | None
    fail_slow_class_correct: int
    fail_slow_class_accuracy: float | None
    remap_creep_faults: int
    remap_creep_warned_72h: int
    remap_creep_min_lead_h: float | None
    detect_s_p50: float | None
    detect_s_p90: float | None
    detect_s_p99: float | None
    detect_s_max: float | None
    buckets_to_xid_p50: float | None
    buckets_to_xid_max: float | None
    node_alerts: int
    false_node_alerts: int
    node_days: float
    false_per_node_day: float | None
    false_per_group_day: float | None
    false_per_group_week: float | None
    must_not_page_runs: int
    must_not_page_false_node_alerts: int
    must_not_page_node_days: float
    must_not_page_false_per_group_day: float | None
    group_days: float
    false_critical: int
    false_critical_per_group_day: float | None
    false_node_warnings: int
    false_node_warnings_per_group_day: float | None
    must_not_page_group_alerts: int
    must_not_page_group_alerts_per_group_day: float | None
    events: int
    events_blamed: int
    events_not_blamed_rate: float | None
    events_group_alerted: int
    group_alerts: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile as an observed value (``method="higher"``); None when empty."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="higher"))


def _rate(num: int, den: int | float) -> float | None:
    return num / den if den else None


def summarize(
    runs: Iterable[RunScore], *, culprit_buckets: int = 3, min_slowdown: float = 0.10
) -> Summary:
    """Aggregate scored runs (any mix of scenarios and seeds)."""
    runs = list(runs)
    faults: list[FaultOutcome] = [f for r in runs for f in r.faults]
    detected = [f for f in faults if f.detected]
    xid = [f for f in faults if f.xid_localised_fail_stop]
    xid_ok = sum(bool(f.at_or_before_xid) for f in xid)
    xid_detected = sum(f.detected for f in xid)
    gpu = [f for f in faults if f.gpu is not None]
    slow = [
        f
        for f in faults
        if f.category == "fail_slow" and (f.slowdown is None or f.slowdown >= min_slowdown)
    ]
    slow_in_time = sum(
        f.culprit_node_correct
        and f.detect_buckets is not None
        and f.detect_buckets <= culprit_buckets
        for f in slow
    )
    creep = [f for f in faults if f.category == "remap_creep"]
    leads_h = [f.lead_s / 3600.0 for f in creep if f.lead_s is not None]
    min_lead = min(leads_h) if leads_h and len(leads_h) == len(creep) else None  # a miss: None
    detect_s = [f.detect_s for f in detected if f.xid_ms is None and f.detect_s is not None]
    to_xid = [float(f.buckets_to_xid) for f in detected if f.buckets_to_xid is not None]

    false_n = sum(len(r.false_alerts) for r in runs)
    node_days = sum(r.node_days for r in runs)
    per_node_day = _rate(false_n, node_days)
    quiet = [r for r in runs if r.must_not_page]
    quiet_false = sum(len(r.false_alerts) for r in quiet)
    quiet_days = sum(r.node_days for r in quiet)
    quiet_rate = _rate(quiet_false, quiet_days)
    events = [e for r in runs for e in r.events]
    blamed = sum(e.blamed for e in events)
    false_eps = [ep for r in runs for ep in r.false_alerts]
    quiet_groups = [ep for r in quiet for ep in r.group_alerts]
    critical = sum(ep.critical for ep in false_eps) + sum(ep.critical for ep in quiet_groups)
    warnings = sum(not ep.critical for ep in false_eps)
    group_days = node_days / GROUP_NODES
    quiet_group_days = quiet_days / GROUP_NODES
    return Summary(
        runs=len(runs),
        faults=len(faults),
        detected=len(detected),
        recall=_rate(len(detected), len(faults)),
        xid_faults=len(xid),
        at_or_before_xid_count=xid_ok,
        at_or_before_xid=_rate(xid_ok, len(xid)),
        at_or_before_xid_of_detected=_rate(xid_ok, xid_detected),
        culprit_correct=sum(f.culprit_node_correct for f in faults),
        culprit_accuracy=_rate(sum(f.culprit_node_correct for f in faults), len(faults)),
        gpu_faults=len(gpu),
        gpu_correct=sum(bool(f.gpu_correct) for f in gpu),
        gpu_accuracy=_rate(sum(bool(f.gpu_correct) for f in gpu), len(gpu)),
        class_correct=sum(f.class_correct for f in faults),
        class_accuracy=_rate(sum(f.class_correct for f in faults), len(faults)),
        fail_slow_faults=len(slow),
        fail_slow_culprit_3_count=slow_in_time,
        fail_slow_culprit_3=_rate(slow_in_time, len(slow)),
        fail_slow_class_correct=sum(f.class_correct for f in slow),
        fail_slow_class_accuracy=_rate(sum(f.class_correct for f in slow), len(slow)),
        remap_creep_faults=len(creep),
        remap_creep_warned_72h=sum(h >= REMAP_LEAD_TARGET_H for h in leads_h),
        remap_creep_min_lead_h=min_lead,
        detect_s_p50=percentile(detect_s, 50),
        detect_s_p90=percentile(detect_s, 90),
        detect_s_p99=percentile(detect_s, 99),
        detect_s_max=max(detect_s, default=None),
        buckets_to_xid_p50=percentile(to_xid, 50),
        buckets_to_xid_max=max(to_xid, default=None),
        node_alerts=sum(r.node_alerts for r in runs),
        false_node_alerts=false_n,
        node_days=node_days,
        false_per_node_day=per_node_day,
        false_per_group_day=None if per_node_day is None else per_node_day * GROUP_NODES,
        false_per_group_week=None if per_node_day is None else per_node_day * GROUP_NODES * 7,
        must_not_page_runs=len(quiet),
        must_not_page_false_node_alerts=quiet_false,
        must_not_page_node_days=quiet_days,
        must_not_page_false_per_group_day=None if quiet_rate is None else quiet_rate * GROUP_NODES,
        group_days=group_days,
        false_critical=critical,
        false_critical_per_group_day=_rate(critical, group_days),
        false_node_warnings=warnings,
        false_node_warnings_per_group_day=_rate(warnings, group_days),
        must_not_page_group_alerts=len(quiet_groups),
        must_not_page_group_alerts_per_group_day=_rate(len(quiet_groups), quiet_group_days),
        events=len(events),
        events_blamed=blamed,
        events_not_blamed_rate=_rate(len(events) - blamed, len(events)),
        events_group_alerted=sum(e.group_alerted for e in events),
        group_alerts=sum(len(r.group_alerts) for r in runs),
    )
