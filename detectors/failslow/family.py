"""Fail-slow as a detector family: the job's throughput and node metrics → verdict → alerts.

Per closed bucket: the job's inputs from its frames (:mod:`detectors.failslow.inputs`),
the monitor's verdict (change points, culprit localisation among the group's nodes,
staged advice, throughput-SLO accounting: :mod:`detectors.failslow.monitor`) and the
``PeerwatchFailSlow`` / ``PeerwatchJobSlow`` alerts (:mod:`detectors.failslow.alerts`).
It reads what peer scoring found: only the job population describes the job (idle
spares are no one's peers), and in a checkpoint save or restart load the job is not
training, so its throughput is no evidence of a slowdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from detectors.failslow.alerts import (
    FailSlowAlertParams,
    FailSlowAlertState,
    step_failslow_alerts,
)
from detectors.failslow.inputs import InputParams, job_inputs
from detectors.failslow.localise import NodeMetrics
from detectors.failslow.monitor import FailSlowParams, FailSlowState, step_failslow
from detectors.failslow.slo import SloSummary, summarise
from detectors.family import BucketEvidence, ClosedBucket, FamilyStep, GroupEnd, GroupFamily
from detectors.state_codec import TRANSIENT, JsonState
from detectors.vocabulary import AlertChange

__all__ = ["FailSlow", "FailSlowGroup"]


@dataclass(frozen=True)
class FailSlowGroup(JsonState):
    """One group's fail-slow state; ``window`` (the last buckets' node metrics) is not kept
    across restarts: it refills in ``localise_buckets`` buckets."""

    state: FailSlowState = field(default_factory=FailSlowState)
    alerts: FailSlowAlertState = field(default_factory=FailSlowAlertState)
    window: tuple[tuple[int, Mapping[str, NodeMetrics]], ...] = field(
        default=(), metadata=TRANSIENT
    )


class FailSlow(GroupFamily[FailSlowGroup]):
    """The fail-slow family, for buckets of ``alerts.bucket_ms``."""

    name = "failslow"
    state_type = FailSlowGroup

    def __init__(self, params: FailSlowParams, bucket_ms: int) -> None:
        self.params = params
        self.bucket_ms = bucket_ms
        self.inputs = InputParams(gpus_per_node=params.slo.gpus_per_node)
        self.alerts = FailSlowAlertParams(
            resolve_after=params.slo.merge_gap_buckets or 1, bucket_ms=bucket_ms
        )

    def step(
        self, state: FailSlowGroup, bucket: ClosedBucket, found: BucketEvidence
    ) -> FamilyStep[FailSlowGroup]:
        index = bucket.ts // self.bucket_ms
        last = state.state.changepoint.last_bucket
        if last is not None and index <= last:  # stale (a redelivery after a restart)
            return FamilyStep(state, active=state.alerts.active())
        frames = {n: f for n, f in bucket.frames.items() if n not in found.idle}
        inputs = job_inputs(frames, bucket.gpus, self.inputs)
        if found.paused:
            inputs = replace(inputs, throughput=math.nan)
        keep = self.params.localise_buckets
        window = tuple((i, m) for i, m in state.window if i > index - keep)
        training = math.isfinite(inputs.throughput)
        if training:
            # Only a training job's metrics describe it: while it reports no
            # throughput (dead, restarting) nothing is localised or learnt from them.
            window += ((index, inputs.metrics),)
        monitor, verdict = step_failslow(
            state.state,
            self.params,
            bucket=index,
            throughput=inputs.throughput,
            n_gpus=inputs.n_gpus,
            metrics=[m for _, m in window] if training else [],
            roles=bucket.roles or None,
        )
        step = step_failslow_alerts(
            state.alerts, verdict, group=bucket.group, bucket_ts=bucket.ts, params=self.alerts
        )
        return FamilyStep(
            FailSlowGroup(monitor, step.state, window),
            step.changes,
            step.active,
            found=replace(found, failslow=verdict),
        )

    def end(self, state: FailSlowGroup, ending: GroupEnd) -> tuple[AlertChange, ...]:
        return tuple(map(ending.resolve, state.alerts.active()))

    def figures(self, state: FailSlowGroup) -> SloSummary | None:
        """The job's throughput-SLO figures so far (None before its first scored bucket)."""
        if state.state.slo.last_bucket is None:
            return None
        return summarise(state.state.slo, self.params.slo)
