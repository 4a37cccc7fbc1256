"""Frames in, scored buckets and alert changes out, for any number of groups.

The Faust worker and the offline paths (demo's direct mode, evaluate,
backtest) run this same object, so what is measured offline is what runs live.
It holds one :class:`_Group` per group (its window and each detector family's
state); ``snapshot``/``restore`` give the JSON-safe form the worker keeps in a
changelogged Faust table, each family's part under its own keys.

Per group and closed bucket the detector families (``detectors.family``) run in
turn, each seeing what the earlier ones found: the peer scoring
(``detectors.peer_scoring``), per-GPU health (``detectors.gpu_health``, kept per
node and following it across groups: ``streams.worker.node_health``) and fail-slow
(``detectors.failslow.family``: the job's throughput from its trainer metrics,
change points, culprit localisation among the group's nodes, staged advice,
throughput-SLO accounting, and the ``PeerwatchFailSlow`` / ``PeerwatchJobSlow``
alerts), then the advisors (``detectors.advisors``: checkpoint I/O and interval, the
node ledger last; their ``Advice`` rides on ``Scored.advice``). A group is one job
here (``group_labels`` set to the scheduler's job label), and all its nodes are one
role: frames carry no rank labels yet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from detectors.advisors.checkpoint_family import CheckpointAdvisors
from detectors.advisors.checkpoint_interval import CheckpointIntervalParams
from detectors.advisors.checkpoint_io import CheckpointIoParams
from detectors.advisors.jobs import JobEvent
from detectors.advisors.ledger import LedgerParams, LedgerState, NodeLedger, observe_job
from detectors.advisors.retry import RetryChains, RetryParams
from detectors.failslow.family import FailSlow
from detectors.failslow.monitor import FailSlowParams, FailSlowVerdict
from detectors.families import XID_ALERT
from detectors.family import BucketEvidence, ClosedBucket, Family, GroupEnd
from detectors.features import DEFAULT_BUCKET_MS, FeatureSpec
from detectors.gpu_health import GpuHealthParams
from detectors.group import BucketResult, ScoringParams
from detectors.peer_scoring import PeerScoring
from detectors.phase import Phase
from detectors.vocabulary import Advice, AlertChange
from detectors.xid.catalog import XidCatalog
from detectors.xid.events import XidEvent
from streams.catalog import features_for, load_xid_catalog
from streams.frames import Frame
from streams.settings import Settings
from streams.worker.node_health import NodeGpuHealth, NodeHealth
from streams.worker.windows import GroupWindow

_T = TypeVar("_T")


@dataclass
class Scored:
    bucket: ClosedBucket
    result: BucketResult  # the peer scoring
    changes: list[AlertChange]  # every alert transition: peer scoring, per-GPU health, fail-slow
    active: list[AlertChange]  # every firing alert of the group after this bucket
    seconds: float  # time spent scoring
    failslow: FailSlowVerdict | None = None  # the job's fail-slow verdict (None: stale bucket)
    ended: str | None = None  # why the group ended: its alerts resolved, its state dropped
    advice: list[Advice] = field(default_factory=list)  # the advisor families' advice


@dataclass
class _Group:
    """What the pipeline holds for one group: its window and, per family that has run or
    been restored, that family's state (by family name)."""

    window: GroupWindow
    states: dict[str, Any] = field(default_factory=dict)


class _Windows(Mapping[str, GroupWindow]):
    def __init__(self, groups: Mapping[str, _Group]) -> None:
        self._groups = groups

    def __getitem__(self, group: str) -> GroupWindow:
        return self._groups[group].window

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)


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
        retry: RetryParams | None = None,
        ledger: LedgerParams | None = None,
        checkpoint_io: CheckpointIoParams | None = None,
        checkpoint_interval: CheckpointIntervalParams | None = None,
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
        self.bucket_ms = bucket_ms
        self.grace_s = grace_s
        self.membership_buckets = membership_buckets
        # per-GPU health (XIDs, remaps) is the node's, wherever its frames go
        self.node_health = NodeHealth(catalog, self.gpu_params)
        self.failslow_family = failslow_family = FailSlow(self.failslow_params, bucket_ms)
        self.failslow_inputs = failslow_family.inputs
        self.failslow_alert_params = failslow_family.alerts
        # per group; outlives the group's end (a job's retries span its restarts)
        self.retries = RetryChains(retry or RetryParams(), catalog)
        self.ledger_family = NodeLedger(ledger or LedgerParams())
        # The detector families, in the order they run (a later one sees what the earlier
        # ones found): a new family is one more entry here.
        self.families: tuple[Family[Any], ...] = (
            PeerScoring(self.features, params),
            NodeGpuHealth(self.node_health),
            failslow_family,
            CheckpointAdvisors(
                checkpoint_io or CheckpointIoParams(),
                checkpoint_interval or CheckpointIntervalParams(),
                bucket_ms,
            ),
            self.ledger_family,  # last: it records every change of the bucket
        )
        self.groups: dict[str, _Group] = {}

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
            retry=settings.retry,
            ledger=settings.ledger,
            checkpoint_io=settings.checkpoint_io,
            checkpoint_interval=settings.checkpoint_interval,
        )

    def window(self, group: str) -> GroupWindow:
        return self._group(group).window

    def _group(self, group: str) -> _Group:
        held = self.groups.get(group)
        if held is None:
            held = self.groups[group] = _Group(
                GroupWindow(
                    group, self.features, self.bucket_ms, self.grace_s, self.membership_buckets
                )
            )
        return held

    @property
    def windows(self) -> Mapping[str, GroupWindow]:
        """The groups' windows (a view: the worker asks ``group in windows`` per frame)."""
        return _Windows(self.groups)

    def family_states(self, family: str) -> dict[str, Any]:
        """Family ``family``'s state of every group that has one (tests and benchmarks)."""
        states = ((g, held.states.get(family)) for g, held in self.groups.items())
        return {g: state for g, state in states if state is not None}

    def figures(self, group: str) -> dict[str, object]:
        """Each family's figures of ``group`` for /metrics (``Family.figures``), by family
        name; families without any (or before the group's first bucket) are absent."""
        held = self.groups.get(group)
        if held is None:
            return {}
        out = {}
        for family in self.families:
            state = held.states.get(family.name)
            if state is not None and (figures := family.figures(state)) is not None:
                out[family.name] = figures
        return out

    def add(self, frame: Frame, now_s: float) -> bool:
        """Take one frame; False when it is late and was dropped. A departure notice
        (``Frame.left``): its node's alerts resolve at the group's next scored bucket."""
        window = self.window(frame.group)
        if frame.left:
            window.leave(frame.node, frame.ts, now_s)
            return True
        self.node_health.add(frame.group, frame.node, frame.ts, frame.values, frame.gpus)
        return window.add(
            frame.node, frame.ts, frame.values, frame.gpus, now_s, frame.role,
            on_hold=frame.on_hold,
        )  # fmt: skip

    def add_log_xid(self, group: str, event: XidEvent) -> None:
        """An XID from a kernel log line; judged with the next scored bucket of the node's
        group (``group``, the shipper's, until the node's frames have said where it is)."""
        self.node_health.add_log_xid(group, event)
        if event.node is not None and event.ts_ms is not None:  # a cause for a failure soon
            action = self.catalog.lookup(event.xid, event.substatus).action
            self.retries.xid(group, event.node, event.xid, action, event.ts_ms)

    def add_job_event(self, event: JobEvent) -> list[Advice]:
        """One job lifecycle event from the scheduler: the retry advisor's step for a failed
        attempt, the ledger's word on a node placed back too soon.

        Event-driven, not a family stepped per bucket: the advice must reach the scheduler
        before its retry delay runs out, whether or not a bucket of the group closes, and a
        job's attempts outlive the group that scores its nodes (its frames stop while it
        restarts, and the group ends).
        """
        group = event.peer_group
        advice = self.retries.job_event(event)
        held = self.groups.get(group)  # the ledger is the scored group's: none before frames
        if held is None:
            return advice
        ledger = held.states.setdefault(NodeLedger.name, LedgerState())
        return advice + observe_job(ledger, self.ledger_family.params, event)

    def _retry_causes(self, group: str, changes: Sequence[AlertChange]) -> None:
        """A bucket's XID alerts: causes for the retry advisor when a job fails soon after."""
        for c in changes:
            if c.alertname == XID_ALERT and c.status == "firing" and c.node and c.action:
                self.retries.xid(group, c.node, round(c.score), c.action, c.bucket_ts)

    def due(self, group: str, now_s: float) -> list[Scored]:
        """Score every bucket of ``group`` that is ready to close: each family in turn."""
        held = self._group(group)
        out = []
        for bucket in held.window.due(now_s):
            started = time.perf_counter()
            found = BucketEvidence()
            changes: list[AlertChange] = []
            active: list[AlertChange] = []
            advice: list[Advice] = []
            for family in self.families:
                state = held.states.get(family.name)
                found = replace(found, changes=tuple(changes))
                step = family.step(family.new() if state is None else state, bucket, found)
                held.states[family.name] = step.state
                changes += step.changes
                active += step.active
                advice += step.advice
                found = found if step.found is None else step.found
            if found.peer is None:
                raise RuntimeError("the peer scoring family must run in every bucket")
            self._retry_causes(group, changes)
            out.append(
                Scored(
                    bucket,
                    found.peer,
                    with_phase(changes, found.phase),
                    with_phase(active, found.phase),
                    time.perf_counter() - started,
                    found.failslow,
                    advice=advice,
                )
            )
        why = held.window.ended(now_s)
        if why is not None:
            out.append(self._end(group, why))
        return out

    def _end(self, group: str, why: str) -> Scored:
        """The group ended: every alert it holds resolves, and it is forgotten (a group that
        stops scoring would otherwise fire, and be re-sent, forever)."""
        held = self.groups[group]
        ending = GroupEnd(group, max(held.window.closed_upto, 0), why, frozenset(held.window.left))
        changes: list[AlertChange] = []
        for family in self.families:
            state = held.states.get(family.name)
            changes += family.end(family.new() if state is None else state, ending)
        self.groups.pop(group, None)
        bucket = ClosedBucket(group, ending.ts, {}, {}, frozenset())
        result = BucketResult(group, ending.ts, {}, (), (), ())
        return Scored(bucket, result, changes, [], 0.0, ended=why)

    def groups_waiting(self, now_s: float) -> list[str]:
        """Groups with an open bucket past its grace period, or that ended (a timer should
        wake them: nothing else would)."""
        return [
            g
            for g, held in self.groups.items()
            if held.window.oldest_open_age(now_s) >= self.grace_s
            or held.window.ended(now_s) is not None
        ]

    def forget(self, group: str) -> None:
        """Drop everything held for ``group``: another worker owns it now (a rebalance), and
        if it comes back here it must be restored from the table, not from stale memory."""
        self.groups.pop(group, None)
        self.node_health.forget_group(group)
        self.retries.forget(group)

    def snapshot(self, group: str) -> dict[str, Any]:
        """The group's window and every family's part (its own keys), JSON-safe."""
        held = self._group(group)
        out: dict[str, Any] = {"window": held.window.snapshot()}
        for family in self.families:
            out.update(family.save(group, held.states.get(family.name)))
        return out

    def restore(self, group: str, snap: Mapping[str, Any]) -> None:
        held = self._group(group)
        held.window.restore(snap.get("window", {}))
        for family in self.families:
            state = family.load(group, snap)
            if state is not None:
                held.states[family.name] = state


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
