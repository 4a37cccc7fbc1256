"""One bucket's fused verdicts and group shifts → an alert observation per (family, node)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from detectors.alerts import (
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    AlertKey,
    AlertState,
    Observation,
)
from detectors.fusion import FusedBucket, Signal
from detectors.group_shift import GroupShift
from detectors.population import Composition

__all__ = ["observations"]


def observations(
    fused: FusedBucket,
    shifts: Sequence[GroupShift],
    alerts: Mapping[AlertKey, AlertState],
    unjudgeable: Callable[[Signal], bool],
    members: Sequence[str],
    max_signals: int,
    gaps: Mapping[str, Sequence[str]],
    composition: Composition,
    excused: Collection[str] = frozenset(),
    on_hold: Collection[str] = frozenset(),
) -> dict[AlertKey, Observation]:
    unknown = Observation("unknown")
    absent = Observation("absent")

    def clear(key: AlertKey) -> Observation:
        # No evidence on the features judged this bucket. An open alert whose own
        # evidence cannot be judged now is not cleared by that: unknown, frozen.
        prev = alerts.get(key)
        if prev is not None and any(unjudgeable(s) for s in prev.signals):
            return unknown
        return absent

    obs: dict[AlertKey, Observation] = {}
    open_nodes = {node for (_, node) in alerts if node is not None}
    for node in members:
        v = fused.verdicts[node]
        if v.status == "ok" and node not in open_nodes and node not in gaps:
            continue  # nothing present and nothing open: every observation would be a no-op
        if node in on_hold:  # maybe no longer a member: no evidence either way
            for alertname in (NODE_SILENT, NODE_COLLAPSE, NODE_DEVIATION):
                obs[(alertname, node)] = unknown
            continue
        if v.silent:
            silent = (
                unknown if fused.silence_is_group else Observation("present", 1.0, (), v.reason)
            )
            obs[(NODE_SILENT, node)] = silent
            obs[(NODE_COLLAPSE, node)] = unknown
            obs[(NODE_DEVIATION, node)] = unknown
            continue
        gap = gaps.get(node)
        obs[(NODE_SILENT, node)] = (
            Observation(
                "present",
                1.0,
                (),
                f"exporter gap: {len(gap)} features its peers report are missing "
                f"({', '.join(gap[:4])}{', …' if len(gap) > 4 else ''})",
            )
            if gap
            else absent
        )
        if not v.collapse_checked:
            obs[(NODE_COLLAPSE, node)] = unknown
        elif v.collapsed:
            obs[(NODE_COLLAPSE, node)] = Observation(
                "present", v.collapse_strength, v.signals, v.reason
            )
        else:
            obs[(NODE_COLLAPSE, node)] = clear((NODE_COLLAPSE, node))
        if not v.scored:
            obs[(NODE_DEVIATION, node)] = unknown
        elif v.deviating:
            obs[(NODE_DEVIATION, node)] = Observation("present", v.score, v.signals, v.reason)
        else:
            obs[(NODE_DEVIATION, node)] = clear((NODE_DEVIATION, node))
    obs[(GROUP_DEGRADED, None)] = _group_observation(
        fused, shifts, max_signals, composition, excused
    )
    return obs


def _group_observation(
    fused: FusedBucket,
    shifts: Sequence[GroupShift],
    max_signals: int,
    composition: Composition,
    excused: Collection[str] = frozenset(),
) -> Observation:
    """PeerwatchGroupDegraded's evidence: shifted medians first (largest change), then events.

    The score is the share of the group involved: 1 for a shift of the median
    (at least half the group moved), the deviating fraction for an event.
    ``excused``: features a save or load moves; their shifts and events are the
    phase's, no evidence (and no evidence clears an open alert: absent).
    """
    shifts = [s for s in shifts if s.feature not in excused]
    events = [e for e in fused.group_events if e.feature not in excused]
    if not (shifts or events):
        return Observation("absent") if fused.any_reference else Observation("unknown")
    ranked = sorted(shifts, key=lambda s: -abs(s.change))
    widest = sorted(events, key=lambda e: -e.fraction)
    signals = [s.as_signal() for s in ranked] + [e.as_signal() for e in widest]
    score = max([1.0] * bool(shifts) + [e.fraction for e in events])
    parts = [s.describe() for s in ranked] + [e.describe() for e in events]
    reason = "group-level: " + "; ".join(parts) + f" ({composition.describe()})"
    return Observation("present", score, tuple(signals[:max_signals]), reason)
