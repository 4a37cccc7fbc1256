"""The checkpoint advisors as one detector family: I/O per save and load, then the interval.

They run after peer scoring (the bucket's training phase, the idle nodes) and per-GPU
health (an XID alert that calls for at least an application restart on a node of the job
is a fail-stop for the MTBF); the interval advisor takes the save the I/O advisor closed
in the same bucket, so the two share a state. They raise no alerts, so a group's end
resolves nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from detectors.advisors.checkpoint_interval import (
    CheckpointIntervalParams,
    CheckpointIntervalState,
    IntervalFigures,
    step_checkpoint_interval,
)
from detectors.advisors.checkpoint_io import (
    CheckpointIoParams,
    CheckpointIoState,
    step_checkpoint_io,
)
from detectors.families import XID_ALERT
from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd, GroupFamily
from detectors.state_codec import JsonState
from detectors.vocabulary import AlertChange
from detectors.xid.actions import action_rank, is_action

__all__ = ["CheckpointAdvisors", "CheckpointState", "fail_stop"]

_RESTART_APP = action_rank("RESTART_APP")


@dataclass(frozen=True)
class CheckpointState(JsonState):
    """Both advisors' states; ``figures``: the interval advice's latest (None before it has
    a save's cost and an interval); ``last_ts``: the last bucket judged."""

    io: CheckpointIoState = field(default_factory=CheckpointIoState)
    interval: CheckpointIntervalState = field(default_factory=CheckpointIntervalState)
    figures: IntervalFigures | None = None
    last_ts: int | None = None


class CheckpointAdvisors(GroupFamily[CheckpointState]):
    """The checkpoint I/O and interval advisors, for buckets of ``bucket_ms``."""

    name = "checkpoint"
    state_type = CheckpointState

    def __init__(
        self, io: CheckpointIoParams, interval: CheckpointIntervalParams, bucket_ms: int
    ) -> None:
        self.io = io
        self.interval = interval
        self.bucket_s = bucket_ms / 1000.0

    def step(
        self, state: CheckpointState, bucket: ClosedBucket, found: BucketEvidence
    ) -> FamilyStep[CheckpointState]:
        phase = found.phase
        if phase is None or (state.last_ts is not None and bucket.ts <= state.last_ts):
            return FamilyStep(state)  # a stale bucket (a redelivery): judged already
        job = {n: f for n, f in bucket.frames.items() if n not in found.idle}
        io = step_checkpoint_io(
            state.io,
            self.io,
            group=bucket.group,
            bucket_ts=bucket.ts,
            bucket_s=self.bucket_s,
            phase=phase,
            frames=job,
        )
        interval = step_checkpoint_interval(
            state.interval,
            self.interval,
            group=bucket.group,
            bucket_ts=bucket.ts,
            bucket_s=self.bucket_s,
            phase=phase.name,
            save=io.closed,
            fail_stop=fail_stop(found.changes, job.keys()),
        )
        figures = interval.figures or state.figures
        return FamilyStep(
            CheckpointState(io.state, interval.state, figures, bucket.ts),
            advice=(*io.advice, *interval.advice),
        )

    def end(self, state: CheckpointState, ending: GroupEnd) -> tuple[AlertChange, ...]:
        return ()

    def save(self, group: str, state: CheckpointState | None) -> dict[str, Any]:
        """Nothing before the first bucket: a snapshot written before the advisors existed
        is written back unchanged."""
        return {} if state is None else super().save(group, state)

    def figures(self, state: CheckpointState) -> CheckpointState:
        return state  # its figures are the state's (the last bucket's save and interval)


def fail_stop(changes: Iterable[AlertChange], job: Collection[str]) -> bool:
    """An XID alert fired on a node of the job whose action restarts the application or
    more: the job stops (its death follows, counted as the same failure)."""
    return any(
        c.alertname == XID_ALERT
        and c.status == "firing"
        and c.node in job
        and is_action(c.action)
        and action_rank(c.action or "") >= _RESTART_APP
        for c in changes
    )
