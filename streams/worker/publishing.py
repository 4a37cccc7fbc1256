"""What the worker makes known of a scored bucket: the sinks first, then metrics, log
lines, the alerts topic's records and advice."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from detectors.advisors.checkpoint_family import CheckpointAdvisors
from detectors.advisors.ledger import NodeLedger
from detectors.failslow.family import FailSlow
from detectors.vocabulary import Advice
from streams.records import AlertRecord
from streams.sinks.advice import advice_key, advice_record
from streams.sinks.payloads import AlertLinks, to_record
from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.delivery import Sinks
from streams.worker.pipeline import Pipeline, Scored

log = EventLog("peerwatch.worker")

# a topic's send: (key, value) -> done (Faust's ``Topic.send`` with its arguments named)
SendAlert = Callable[[str, AlertRecord], Awaitable[object]]
SendAdvice = Callable[[str, bytes], Awaitable[object]]


@dataclass(frozen=True)
class Publisher:
    pipeline: Pipeline
    sinks: Sinks
    metrics: WorkerMetrics
    links: AlertLinks
    send_alert: SendAlert
    send_advice: SendAdvice

    async def publish(self, scored: Scored) -> None:
        # The sinks first: an alert's way to Alertmanager must not wait for this bucket's
        # metrics, log lines and alert records (nor, through them, for the next group).
        self.sinks.submit(scored.changes, scored.active)
        if scored.ended:  # no bucket was scored: only the resolutions go out
            await self._send_changes(scored)
            return
        observe_bucket(self.metrics, self.pipeline, scored)
        await self._send_changes(scored)
        await self.advise(scored.advice)

    async def _send_changes(self, scored: Scored) -> None:
        for change in scored.changes:
            self.metrics.alerts.labels(alertname=change.alertname, status=change.status).inc()
            log.info(
                f"alert_{change.status}",
                alertname=change.alertname,
                group=change.group,
                node=change.node,
                bucket=change.bucket_ts,
                score=change.score,
                reason=change.reason,
                fmt={"score": "%.2f"},
            )
            await self.send_alert(change.node or change.group, to_record(change, self.links))

    async def advise(self, advice: list[Advice]) -> None:
        """Count, log and send advice (a bucket's, or a job event's)."""
        self.metrics.advisors.count_advice(advice)
        for a in advice:
            log.info(
                "advice_given",
                advisor=a.advisor,
                kind=a.kind,
                group=a.group,
                node=a.node,
                action=a.action,
                summary=a.summary,
            )
            await self.send_advice(advice_key(a), advice_record(a))


def observe_bucket(metrics: WorkerMetrics, pipeline: Pipeline, scored: Scored) -> None:
    """A scored bucket's figures on the worker's /metrics, and its log line."""
    bucket, result = scored.bucket, scored.result
    metrics.buckets.labels(group=bucket.group).inc()
    # One line per scored bucket: what `peerwatch chaos` counts (scored once/twice/never).
    log.info(
        "bucket_scored",
        group=bucket.group,
        bucket=bucket.ts,
        nodes=len(bucket.frames),
        expected=len(bucket.expected),
    )
    metrics.bucket_nodes.labels(group=bucket.group).set(len(bucket.frames))
    metrics.score_seconds.observe(scored.seconds)
    if result.composition is not None:
        metrics.observe_composition(bucket.group, result.composition)
    if result.phase is not None:
        metrics.observe_phase(bucket.group, result.phase.name)
    if not result.stale:
        metrics.nodes.observe(bucket.group, result.verdicts, bucket.frames, scored.active)
    metrics.nodes.count_xids(bucket.group, scored.changes)
    for family, figures in pipeline.figures(bucket.group).items():
        FIGURES_TO_METRICS[family](metrics, bucket.group, figures, scored)


def _slow(scored: Scored) -> bool | None:
    return None if scored.failslow is None else scored.failslow.slow


# Where each family's figures (``Family.figures``) go on /metrics; a family that exports
# figures needs an entry here (a KeyError in the first bucket otherwise, in every test).
FIGURES_TO_METRICS: dict[str, Callable[[WorkerMetrics, str, Any, Scored], None]] = {
    FailSlow.name: lambda m, group, slo, scored: m.observe_slo(group, slo, slow=_slow(scored)),
    NodeLedger.name: lambda m, group, ledger, _: m.advisors.observe_ledger(group, ledger),
    CheckpointAdvisors.name: lambda m, group, state, _: m.checkpoint.observe(group, state),
}
