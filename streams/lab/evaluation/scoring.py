"""Score one run's alerts against its ground truth. Pure: no I/O, no clock.

Inputs: the run's ground-truth rows (node faults and cluster events, as
:func:`streams.lab.simulator.run.ground_truth` lists them), its alert
transitions (see :mod:`detectors.episodes`), the job's node list and the
run's ``[start_ms, end_ms)``. Output: a :class:`RunScore`.

Time. Every time is reduced to the start of the 30-s bucket holding it,
``b(t) = t - t % bucket_ms`` (as the frame builder does). An alert's time is
the bucket of its *firing* transition — when it paged — not the bucket its
evidence began.

Which rows. A row with ``GroundTruth.is_fault`` False (job death, restart load,
checkpoint save, spare joined) or whose kind's expectation is
``must_not_page`` (hot GPU, fabric congestion, power cap) is a *must-not-page
event*; every other row is a *fault* and must name a node. Rows outside the run
(onset at or after ``end_ms``, or ended before ``start_ms``) are not scored.

Windows (``L`` = lookback, ``T`` = tolerance, ``A`` = aftermath, in buckets of
``B`` ms; ``end`` = the row's ``end_ms``, or the run's ``end_ms`` when it has none)::

    fault window     [b(onset) - L·B,  b(xid_ms) + T·B]   fault with an XID
                     [b(onset) - L·B,  b(end) + T·B]      fault without one
    explained        [b(onset) - L·B,  b(end) + A·B]      any fault, on its node
    event window     [b(onset),        b(end) + A·B]        must-not-page event
                     [b(onset),        b(onset) + A·B]      a spare joining (an instant)

* An alert *matches* a fault when it is node-level, names the fault's node and
  one of its firings falls in the fault window. The GPU is not needed to match:
  it is scored on its own.
* ``detected``: some alert matches. ``first_alert_ts``: the earliest matching firing.
* ``buckets_to_xid`` = (first_alert_ts − b(xid_ms)) / B, negative = before the
  XID; ``at_or_before_xid``: it is <= 0.
* ``detect_buckets`` = (first_alert_ts − b(onset)) / B, ``detect_s`` the same in
  seconds (for every detected fault; the summary reports it for the faults
  without an XID). ``lead_s`` = b(xid_ms, else end) − first_alert_ts in seconds:
  for row-remap creep, how long before the GPU disappeared.
* ``culprit_node_correct``: detected, and no *false* node alert on another node
  first fired in [fault window start, first_alert_ts] — a peer paged first, or
  in the same bucket, means the culprit was not named (ties count against).
* ``gpu_correct`` (faults with a GPU; None otherwise): among matching firings,
  the earliest bucket in which any names a GPU names only the fault's GPU.
  No GPU named at all is wrong.
* ``alert_class``/``class_correct``: likewise, the earliest bucket in which a
  matching firing claims a class (its ``class`` label, else
  :data:`~streams.lab.evaluation.taxonomy.FAMILY_CLASSES`) must claim only classes
  the fault kind accepts. No class claimed is wrong.
* A *false node alert* is a node-level episode whose first firing is in no
  explained window of a fault on the same node. Episodes are counted per
  (alertname, node), with flaps merged (``refire_merge_buckets``), and re-sent
  active alerts count nothing. Must-not-page events explain nothing.
* A must-not-page event is *blamed* on the nodes of false node alerts first
  fired in its window (for an event with a node, e.g. a spare joining or a hot
  GPU, only that node's). ``group_alerted``: a group-level alert (node None)
  fired in its window. Group-level alerts are never false node alerts.

Defaults: ``lookback_buckets=0`` because in a simulation nothing of a fault
exists before its onset, so an earlier alert on that node is chance and
crediting it would reward noise (raise it for real data, where labelled onsets
are uncertain). ``tolerance_buckets=2``: an alert up to a minute after the XID
(or the end) still counts as a late detection. ``aftermath_buckets=5``: soft
evidence needs 3 buckets to fire, so an alert up to 2.5 min after a fault or
event ends is still its consequence. ``refire_merge_buckets=10``: a re-fire
within 5 min of the resolution is the same page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detectors.episodes import (
    DAY_MS,
    AlertEpisode,
    Firing,
    ScoringWindows,
    alert_episodes,
    bucket_of,
    explained_window,
    fault_window,
    to_alert_event,
)
from detectors.features import DEFAULT_BUCKET_MS
from detectors.state_codec import JsonRecord
from streams.lab.evaluation.taxonomy import (
    FAMILY_CLASSES,
    FAULT_EXPECTATIONS,
    Category,
    FaultExpectation,
    expectation_for,
)
from streams.lab.simulator.faults import SPARE_JOINED, GroundTruth

__all__ = [
    "DAY_MS",
    "EventOutcome",
    "FaultOutcome",
    "RunScore",
    "ScoringWindows",
    "bucket_of",
    "score_run",
]


@dataclass(frozen=True)
class FaultOutcome(JsonRecord):
    """How the alerts did on one fault (see the module docstring for each figure)."""

    kind: str
    category: Category
    node: str
    gpu: int | None
    onset_ms: int
    xid: int | None
    xid_ms: int | None
    end_ms: int | None
    slowdown: float | None
    window_start_ts: int
    deadline_ts: int
    detected: bool
    first_alert_ts: int | None
    first_alertname: str | None
    buckets_to_xid: int | None
    detect_buckets: int | None
    detect_s: float | None
    lead_s: float | None
    culprit_node_correct: bool
    gpu_named: str | None
    gpu_correct: bool | None
    alert_class: str | None
    class_correct: bool

    # The report's row: the windows left out, the derived at_or_before_xid beside its inputs.
    KEY_ORDER = (
        "kind",
        "category",
        "node",
        "gpu",
        "onset_ms",
        "xid",
        "xid_ms",
        "end_ms",
        "slowdown",
        "detected",
        "first_alert_ts",
        "first_alertname",
        "buckets_to_xid",
        "at_or_before_xid",
        "detect_buckets",
        "detect_s",
        "lead_s",
        "culprit_node_correct",
        "gpu_named",
        "gpu_correct",
        "alert_class",
        "class_correct",
    )

    @property
    def at_or_before_xid(self) -> bool | None:
        """None for a fault without an XID; False when missed."""
        if self.xid_ms is None:
            return None
        return self.buckets_to_xid is not None and self.buckets_to_xid <= 0

    @property
    def xid_localised_fail_stop(self) -> bool:
        return self.category == "fail_stop" and self.xid_ms is not None


@dataclass(frozen=True)
class EventOutcome(JsonRecord):
    """A must-not-page event: was a node blamed for it, did a group-level alert fire."""

    kind: str
    node: str | None
    onset_ms: int
    end_ms: int | None
    window_end_ts: int
    blamed_nodes: tuple[str, ...]
    group_alerted: bool

    KEY_ORDER = ("kind", "node", "onset_ms", "end_ms", "blamed_nodes", "group_alerted")

    @property
    def blamed(self) -> bool:
        return bool(self.blamed_nodes)


@dataclass(frozen=True)
class RunScore:
    """One run scored: per fault, per must-not-page event, and the alert counts.

    ``false_alerts``: node-level episodes explained by no fault.
    ``group_alerts``: group-level episodes (node None), counted apart.
    ``node_alerts``: every node-level episode. ``nodes``: size of the job's node
    list; ``duration_ms``: ``end_ms - start_ms``. ``must_not_page``: the run
    belongs to a must-not-page scenario (its false alerts count towards that
    target); by default, when it holds no fault to page for.
    """

    faults: tuple[FaultOutcome, ...]
    events: tuple[EventOutcome, ...]
    false_alerts: tuple[AlertEpisode, ...]
    group_alerts: tuple[AlertEpisode, ...]
    node_alerts: int
    nodes: int
    start_ms: int
    end_ms: int
    bucket_ms: int
    must_not_page: bool

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms

    @property
    def node_days(self) -> float:
        return self.nodes * self.duration_ms / DAY_MS


@dataclass(frozen=True)
class _Fault:
    truth: GroundTruth
    node: str
    expectation: FaultExpectation


def score_run(
    truth: Iterable[GroundTruth],
    alerts: Iterable[Any],
    *,
    nodes: Sequence[str],
    start_ms: int,
    end_ms: int,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    windows: ScoringWindows | None = None,
    expectations: Mapping[str, FaultExpectation] = FAULT_EXPECTATIONS,
    family_classes: Mapping[str, str | None] = FAMILY_CLASSES,
    must_not_page: bool | None = None,
) -> RunScore:
    """Score one run.

    ``truth``: GroundTruth rows (faults and cluster events, any order).
    ``alerts``: ``AlertChange`` objects, ``AlertEvent`` or dicts (see
    :func:`detectors.episodes.to_alert_event`), any order, re-sends allowed.
    ``nodes``: the job's node list (its length sets the node-days).
    ``[start_ms, end_ms)``: the scored span of the run.
    ``must_not_page``: whether the run is a must-not-page scenario (None: it
    is when it holds no fault; say True for e.g. a restart-load scenario whose
    restart needs a fail-stop to happen).
    """
    if bucket_ms <= 0:
        raise ValueError(f"bucket_ms must be > 0, got {bucket_ms}")
    if end_ms <= start_ms:
        raise ValueError(f"end_ms ({end_ms}) must be after start_ms ({start_ms})")
    if not nodes or len(set(nodes)) != len(nodes):
        raise ValueError("nodes must be a non-empty list of distinct node names")
    w = windows if windows is not None else ScoringWindows()

    fault_rows: list[_Fault] = []
    event_rows: list[GroundTruth] = []
    for t in sorted(truth, key=_row_order):
        if not _in_run(t, start_ms, end_ms):
            continue
        fault = _as_fault(t, expectations)
        if fault is None:
            event_rows.append(t)
        else:
            fault_rows.append(fault)

    events = [to_alert_event(a) for a in alerts]
    episodes = alert_episodes(events, w.refire_merge_buckets * bucket_ms)
    node_episodes = [ep for ep in episodes if ep.node is not None]
    group_episodes = [ep for ep in episodes if ep.node is None]

    explained: dict[str, list[tuple[int, int]]] = {}
    for f in fault_rows:
        window = explained_window(f.truth.onset_ms, _end(f.truth, end_ms), w, bucket_ms)
        explained.setdefault(f.node, []).append(window)
    false_alerts = [
        ep
        for ep in node_episodes
        if not any(a <= ep.fired_ts <= b for a, b in explained.get(ep.node or "", ()))
    ]

    faults = tuple(
        _score_fault(f, node_episodes, false_alerts, family_classes, w, bucket_ms, end_ms)
        for f in fault_rows
    )
    scored_events = tuple(
        _score_event(e, false_alerts, group_episodes, w, bucket_ms, end_ms) for e in event_rows
    )
    return RunScore(
        faults=faults,
        events=scored_events,
        false_alerts=tuple(false_alerts),
        group_alerts=tuple(group_episodes),
        node_alerts=len(node_episodes),
        nodes=len(nodes),
        start_ms=start_ms,
        end_ms=end_ms,
        bucket_ms=bucket_ms,
        must_not_page=not faults if must_not_page is None else must_not_page,
    )


def _row_order(t: GroundTruth) -> tuple[int, str, str]:
    return (t.onset_ms, t.kind, t.node or "")


def _in_run(t: GroundTruth, start_ms: int, end_ms: int) -> bool:
    return t.onset_ms < end_ms and (t.end_ms is None or t.end_ms >= start_ms)


def _as_fault(t: GroundTruth, expectations: Mapping[str, FaultExpectation]) -> _Fault | None:
    """The row as a fault to page for; None for a must-not-page event."""
    if not t.is_fault:
        return None
    expectation = expectation_for(t.kind, expectations)
    if not expectation.page:
        return None
    if t.node is None:
        raise ValueError(f"fault {t.kind!r} at {t.onset_ms} names no node")
    return _Fault(t, t.node, expectation)


def _end(t: GroundTruth, run_end_ms: int) -> int:
    return t.end_ms if t.end_ms is not None else run_end_ms


def _score_fault(
    fault: _Fault,
    node_episodes: Sequence[AlertEpisode],
    false_alerts: Sequence[AlertEpisode],
    family_classes: Mapping[str, str | None],
    w: ScoringWindows,
    bucket_ms: int,
    run_end_ms: int,
) -> FaultOutcome:
    f, node, expectation = fault.truth, fault.node, fault.expectation
    onset_b = bucket_of(f.onset_ms, bucket_ms)
    anchor = f.xid_ms if f.xid_ms is not None else _end(f, run_end_ms)
    start, deadline = fault_window(f.onset_ms, anchor, w, bucket_ms)

    matches: list[tuple[Firing, str]] = sorted(
        (
            (firing, ep.alertname)
            for ep in node_episodes
            if ep.node == node
            for firing in ep.firings
            if start <= firing.ts <= deadline
        ),
        key=lambda m: (m[0].ts, m[1]),
    )
    first = matches[0] if matches else None
    first_ts = first[0].ts if first else None

    buckets_to_xid = detect_buckets = None
    detect_s = lead_s = None
    culprit = False
    if first_ts is not None:
        if f.xid_ms is not None:
            buckets_to_xid = (first_ts - bucket_of(f.xid_ms, bucket_ms)) // bucket_ms
        detect_buckets = (first_ts - onset_b) // bucket_ms
        detect_s = detect_buckets * bucket_ms / 1000.0
        reference = f.xid_ms if f.xid_ms is not None else f.end_ms
        if reference is not None:
            lead_s = (bucket_of(reference, bucket_ms) - first_ts) / 1000.0
        culprit = not any(
            ep.node != node and start <= ep.fired_ts <= first_ts for ep in false_alerts
        )

    gpu_named, gpu_correct = None, None
    if f.gpu is not None:
        named = _earliest_claims([(m.ts, m.gpu) for m, _ in matches])
        gpu_named = ",".join(sorted(named)) or None
        gpu_correct = bool(named) and named == {str(f.gpu)}

    claims = [(m.ts, m.fault_class or family_classes.get(name)) for m, name in matches]
    classes = _earliest_claims(claims)
    return FaultOutcome(
        kind=f.kind,
        category=expectation.category,
        node=node,
        gpu=f.gpu,
        onset_ms=f.onset_ms,
        xid=f.xid,
        xid_ms=f.xid_ms,
        end_ms=f.end_ms,
        slowdown=getattr(f, "slowdown", None),  # GroundTruth.slowdown: +0.2 = 20 % slower
        window_start_ts=start,
        deadline_ts=deadline,
        detected=first is not None,
        first_alert_ts=first_ts,
        first_alertname=first[1] if first else None,
        buckets_to_xid=buckets_to_xid,
        detect_buckets=detect_buckets,
        detect_s=detect_s,
        lead_s=lead_s,
        culprit_node_correct=culprit,
        gpu_named=gpu_named,
        gpu_correct=gpu_correct,
        alert_class=",".join(sorted(classes)) or None,
        class_correct=bool(classes) and classes <= set(expectation.classes),
    )


def _earliest_claims(claims: Iterable[tuple[int, str | None]]) -> set[str]:
    """The values claimed in the earliest bucket that claims any (empty: none ever)."""
    by_ts: dict[int, set[str]] = {}
    for ts, value in claims:
        if value is not None:
            by_ts.setdefault(ts, set()).add(str(value))
    return by_ts[min(by_ts)] if by_ts else set()


def _score_event(
    e: GroundTruth,
    false_alerts: Sequence[AlertEpisode],
    group_episodes: Sequence[AlertEpisode],
    w: ScoringWindows,
    bucket_ms: int,
    run_end_ms: int,
) -> EventOutcome:
    start = bucket_of(e.onset_ms, bucket_ms)
    end = e.onset_ms if e.kind == SPARE_JOINED else _end(e, run_end_ms)
    stop = bucket_of(end, bucket_ms) + w.aftermath_buckets * bucket_ms
    blamed = sorted(
        {
            ep.node
            for ep in false_alerts
            if ep.node is not None
            and (e.node is None or ep.node == e.node)
            and start <= ep.fired_ts <= stop
        }
    )
    group_alerted = any(
        start <= firing.ts <= stop for ep in group_episodes for firing in ep.firings
    )
    return EventOutcome(
        kind=e.kind,
        node=e.node,
        onset_ms=e.onset_ms,
        end_ms=e.end_ms,
        window_end_ts=stop,
        blamed_nodes=tuple(blamed),
        group_alerted=group_alerted,
    )
