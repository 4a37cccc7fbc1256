"""Frames in, scored buckets and alert changes out, for any number of groups.

The Faust worker and the offline paths (demo's direct mode, evaluate,
backtest) run this same object, so what is measured offline is what runs live.
It holds per-group windows and detector state; ``snapshot``/``restore`` give
the JSON-safe form the worker keeps in a changelogged Faust table.

Per group and closed bucket, three detector families run in turn: the peer
scoring (``detectors.group``), per-GPU health (``detectors.gpu_health``, kept
per node and following it across groups: ``streams.node_health``) and
fail-slow (``detectors.failslow``: the job's throughput from its trainer
metrics, change points, culprit localisation among the group's nodes, staged
advice, throughput-SLO accounting, and the ``PeerwatchFailSlow`` /
``PeerwatchJobSlow`` alerts). A group is one job here (``group_labels`` set to
the scheduler's job label), and all its nodes are one role: frames carry no
rank labels yet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from detectors.alerts import (
    NODE_DEVIATION,
    AlertChange,
    AlertKey,
    Labels,
    active_alerts,
    keep_identity,
)
from detectors.failslow.alerts import (
    FailSlowAlertParams,
    FailSlowAlertState,
    step_failslow_alerts,
)
from detectors.failslow.inputs import InputParams, job_inputs
from detectors.failslow.localise import NodeMetrics
from detectors.failslow.monitor import (
    FailSlowParams,
    FailSlowState,
    FailSlowVerdict,
    step_failslow,
)
from detectors.failslow.slo import SloSummary, summarise
from detectors.features import DEFAULT_BUCKET_MS, FeatureSpec, class_of
from detectors.gpu_health import GpuHealthParams
from detectors.group import BucketResult, GroupState, ScoringParams, score_bucket
from detectors.phase import Phase
from detectors.state_codec import TRANSIENT, JsonState
from detectors.xid.catalog import XidCatalog
from detectors.xid.events import XidEvent
from streams.catalog import features_for, load_xid_catalog
from streams.node_health import NodeHealth, ended
from streams.settings import Settings
from streams.windows import ClosedBucket, GroupWindow


@dataclass
class Scored:
    bucket: ClosedBucket
    result: BucketResult  # the peer scoring
    changes: list[AlertChange]  # every alert transition: peer scoring, per-GPU health, fail-slow
    active: list[AlertChange]  # every firing alert of the group after this bucket
    seconds: float  # time spent scoring
    failslow: FailSlowVerdict | None = None  # the job's fail-slow verdict (None: stale bucket)
    ended: str | None = None  # why the group ended: its alerts resolved, its state dropped


@dataclass
class _FailSlowGroup(JsonState):
    """One group's fail-slow state; ``window`` (the last buckets' node metrics) is not kept
    across restarts: it refills in ``localise_buckets`` buckets."""

    state: FailSlowState = field(default_factory=FailSlowState)
    alerts: FailSlowAlertState = field(default_factory=FailSlowAlertState)
    window: list[tuple[int, Mapping[str, NodeMetrics]]] = field(
        default_factory=list, metadata=TRANSIENT
    )


class Pipeline:
    def __init__(
        self,
        features: Sequence[FeatureSpec],
        params: ScoringParams,
        catalog: XidCatalog,
        *,
        bucket_ms: int = DEFAULT_BUCKET_MS,
        grace_s: float = 20.0,
        membership_buckets: int = 20,
        gpu_health: GpuHealthParams | None = None,
        failslow: FailSlowParams | None = None,
    ) -> None:
        self.features = tuple(features)
        self.params = params
        self.catalog = catalog
        self.gpu_params = gpu_health or GpuHealthParams(bucket_ms=bucket_ms)
        self.failslow_params = failslow or failslow_params(bucket_ms)
        if self.gpu_params.bucket_ms != bucket_ms or self.failslow_params.slo.bucket_s != (
            bucket_ms / 1000.0
        ):
            raise ValueError(f"GPU health and fail-slow parameters must use bucket_ms={bucket_ms}")
        self.failslow_inputs = InputParams(gpus_per_node=self.failslow_params.slo.gpus_per_node)
        self.failslow_alert_params = FailSlowAlertParams(
            resolve_after=self.failslow_params.slo.merge_gap_buckets or 1, bucket_ms=bucket_ms
        )
        self.bucket_ms = bucket_ms
        self.grace_s = grace_s
        self.membership_buckets = membership_buckets
        self.windows: dict[str, GroupWindow] = {}
        self.states: dict[str, GroupState] = {}
        # per-GPU health (XIDs, remaps) is the node's, wherever its frames go
        self.node_health = NodeHealth(catalog, self.gpu_params)
        self.failslow_groups: dict[str, _FailSlowGroup] = {}
        # labels of the group's firing peer alerts, held until they resolve (keep_identity)
        self.identities: dict[str, dict[AlertKey, Labels]] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> Pipeline:
        """The pipeline the worker runs for ``settings`` (features, catalog, timing, every
        detector family's parameters)."""
        return cls(
            features_for(settings),
            settings.scoring,
            load_xid_catalog(settings.xid_profile, settings.xid_overrides),
            bucket_ms=settings.bucket_ms,
            grace_s=settings.grace_s,
            membership_buckets=settings.membership_buckets,
            gpu_health=settings.gpu_health,
            failslow=settings.failslow,
        )

    def window(self, group: str) -> GroupWindow:
        win = self.windows.get(group)
        if win is None:
            win = self.windows[group] = GroupWindow(
                group, self.features, self.bucket_ms, self.grace_s, self.membership_buckets
            )
        return win

    def add(
        self,
        group: str,
        node: str,
        ts: int,
        values: Mapping[str, float],
        gpus: Mapping[str, str],
        now_s: float,
        role: str | None = None,
        *,
        on_hold: bool = False,
    ) -> bool:
        """Take one frame; False when it is late and was dropped. ``on_hold``: the node's
        group label was missing from it (``Frame.on_hold``)."""
        self.node_health.add(group, node, ts, values, gpus)
        return self.window(group).add(node, ts, values, gpus, now_s, role, on_hold=on_hold)

    def leave(self, group: str, node: str, ts: int, now_s: float) -> None:
        """``node`` left ``group`` at bucket ``ts``; its alerts resolve at the next scored
        bucket."""
        self.window(group).leave(node, ts, now_s)

    def add_log_xid(self, group: str, event: XidEvent) -> None:
        """An XID from a kernel log line; judged with the next scored bucket of the node's
        group (``group``, the shipper's, until the node's frames have said where it is)."""
        self.node_health.add_log_xid(group, event)

    def due(self, group: str, now_s: float) -> list[Scored]:
        """Score every bucket of ``group`` that is ready to close."""
        out = []
        for bucket in self.window(group).due(now_s):
            started = time.perf_counter()
            state = self.states.get(group) or GroupState()
            state, result = score_bucket(
                state,
                group,
                bucket.ts,
                bucket.frames,
                bucket.gpus,
                bucket.expected,
                self.features,
                self.params,
                bucket.roles,
                bucket.on_hold,
            )
            self.states[group] = state
            gpu_changes, gpu_active = self.node_health.step(
                group, bucket.ts, symptoms=[*result.active, *result.changes]
            )
            paused = result.phase is not None and result.phase.expected
            verdict, slow_changes, slow_active = self._step_failslow(
                group, bucket, result.idle, paused
            )
            self.identities[group], peer_changes, peer_active = keep_identity(
                self.identities.get(group, {}),
                map(self._classify, result.changes),
                map(self._classify, result.active),
            )
            out.append(
                Scored(
                    bucket,
                    result,
                    with_phase([*peer_changes, *gpu_changes, *slow_changes], result.phase),
                    with_phase([*peer_active, *gpu_active, *slow_active], result.phase),
                    time.perf_counter() - started,
                    verdict,
                )
            )
        why = self.window(group).ended(now_s)
        if why is not None:
            out.append(self._end(group, why))
        return out

    def _end(self, group: str, why: str) -> Scored:
        """The group ended: every alert it holds resolves, and it is forgotten (a group that
        stops scoring would otherwise fire, and be re-sent, forever)."""
        win = self.windows[group]
        ts = max(win.closed_upto, 0)
        state = self.states.get(group)
        firing = active_alerts(state.alerts.values(), group=group, bucket_ts=ts) if state else ()
        _, peer, _ = keep_identity(
            self.identities.get(group, {}), (ended(c, ts, why) for c in firing), ()
        )
        slow = self.failslow_groups.get(group)
        slow_changes = [ended(c, ts, why) for c in slow.alerts.active()] if slow else []
        gpu_changes = self.node_health.end_group(group, win.left, ts, why)
        self._drop(group)
        bucket = ClosedBucket(group, ts, {}, {}, frozenset())
        result = BucketResult(group, ts, {}, (), (), ())
        return Scored(bucket, result, [*peer, *gpu_changes, *slow_changes], [], 0.0, ended=why)

    def _step_failslow(
        self,
        group: str,
        bucket: ClosedBucket,
        idle: Collection[str] = (),
        paused: bool = False,
    ) -> tuple[FailSlowVerdict | None, tuple[AlertChange, ...], tuple[AlertChange, ...]]:
        """The job's throughput and node metrics → verdict → fail-slow alert changes.

        Only the job population describes the job (idle spares are no one's peers), and
        nodes are localised against the peers of their role, as in peer scoring. In a
        checkpoint save or restart load (``paused``: the phase classifier's expected
        phases) the job is not training: its throughput is no evidence of a slowdown.
        """
        slow = self.failslow_groups.get(group)
        if slow is None:
            slow = self.failslow_groups[group] = _FailSlowGroup()
        index = bucket.ts // self.bucket_ms
        last = slow.state.changepoint.last_bucket
        if last is not None and index <= last:  # stale (a redelivery after a restart)
            return None, (), slow.alerts.active()
        frames = {n: f for n, f in bucket.frames.items() if n not in idle}
        inputs = job_inputs(frames, bucket.gpus, self.failslow_inputs)
        if paused:
            inputs = replace(inputs, throughput=math.nan)
        keep = self.failslow_params.localise_buckets
        slow.window = [(i, m) for i, m in slow.window if i > index - keep]
        if math.isfinite(inputs.throughput):
            # Only a training job's metrics describe it: while it reports no
            # throughput (dead, restarting) nothing is localised or learnt from them.
            slow.window.append((index, inputs.metrics))
        metrics = [m for _, m in slow.window] if math.isfinite(inputs.throughput) else []
        slow.state, verdict = step_failslow(
            slow.state,
            self.failslow_params,
            bucket=index,
            throughput=inputs.throughput,
            n_gpus=inputs.n_gpus,
            metrics=metrics,
            roles=bucket.roles or None,
        )
        step = step_failslow_alerts(
            slow.alerts,
            verdict,
            group=group,
            bucket_ts=bucket.ts,
            params=self.failslow_alert_params,
        )
        slow.alerts = step.state
        return verdict, step.changes, step.active

    def slo_summary(self, group: str) -> SloSummary | None:
        """The job's throughput-SLO figures so far (None before its first scored bucket)."""
        slow = self.failslow_groups.get(group)
        if slow is None or slow.state.slo.last_bucket is None:
            return None
        return summarise(slow.state.slo, self.failslow_params.slo)

    def _classify(self, change: AlertChange) -> AlertChange:
        """A deviation alert names the class of the signal that leads it (network, cpu, …).

        Collapse and silence are symptoms of a fail-stop: the XID, when there is
        one, says which part failed, so they claim no class here.
        """
        if change.alertname != NODE_DEVIATION or any(k == "class" for k, _ in change.labels):
            return change
        klass = class_of(change.signals, self.features)
        if klass is None:
            return change
        return replace(change, labels=tuple(sorted((*change.labels, ("class", klass)))))

    def groups_waiting(self, now_s: float) -> list[str]:
        """Groups with an open bucket past its grace period, or that ended (a timer should
        wake them: nothing else would)."""
        return [
            g
            for g, w in self.windows.items()
            if w.oldest_open_age(now_s) >= self.grace_s or w.ended(now_s) is not None
        ]

    def forget(self, group: str) -> None:
        """Drop everything held for ``group``: another worker owns it now (a rebalance), and
        if it comes back here it must be restored from the table, not from stale memory."""
        self._drop(group)
        self.node_health.forget_group(group)

    def _drop(self, group: str) -> None:
        self.windows.pop(group, None)
        self.states.pop(group, None)
        self.failslow_groups.pop(group, None)
        self.identities.pop(group, None)

    def snapshot(self, group: str) -> dict[str, Any]:
        state = self.states.get(group)
        slow = self.failslow_groups.get(group)
        return {
            "window": self.window(group).snapshot(),
            "detector": state.to_dict() if state is not None else None,
            "nodes": self.node_health.snapshot(group),
            "failslow": slow.to_dict() if slow is not None else None,
            "identity": [
                [name, node, dict(labels)]
                for (name, node), labels in sorted(
                    self.identities.get(group, {}).items(),
                    key=lambda kv: (kv[0][0], kv[0][1] or ""),
                )
            ],
        }

    def restore(self, group: str, snap: Mapping[str, Any]) -> None:
        self.window(group).restore(snap.get("window", {}))
        if snap.get("detector") is not None:
            self.states[group] = GroupState.from_dict(snap["detector"])
        if snap.get("nodes") is not None:
            self.node_health.restore(group, snap["nodes"])
        elif snap.get("gpu_health") is not None:  # saved before per-node GPU health
            self.node_health.restore_group_state(group, snap["gpu_health"])
        if snap.get("failslow") is not None:
            self.failslow_groups[group] = _FailSlowGroup.from_dict(snap["failslow"])
        self.identities[group] = {
            (str(name), None if node is None else str(node)): tuple(sorted(labels.items()))
            for name, node, labels in snap.get("identity", ())
        }


def with_phase(changes: Sequence[AlertChange], phase: Phase | None) -> list[AlertChange]:
    """Every alert of the group carries the bucket's training phase as an annotation."""
    if phase is None:
        return list(changes)
    text = phase.describe()
    return [
        replace(c, annotations=tuple(sorted({**dict(c.annotations), "phase": text}.items())))
        for c in changes
    ]


def failslow_params(bucket_ms: int) -> FailSlowParams:
    """The fail-slow defaults for buckets of ``bucket_ms`` (loss and SLO time are in seconds)."""
    return FailSlowParams().for_bucket(bucket_ms / 1000.0)
