"""What the worker's agents do with a message: frames, kernel-log XIDs and job events
into the ``Pipeline``, its decisions published, its state written to the tables.

A group's state is restored from the ``group-state`` table when its first message
arrives here, and written back on the checkpoint cadence (``streams.worker.checkpoints``);
a frame is acked only once a written snapshot covers it (``streams.worker.acks``). A
job's retry chain spans its restarts, so it lives in a table of its own
(``retry-state``), written on every change.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from detectors.advisors.jobs import JobEvent
from detectors.xid.events import XidEvent
from streams.frames import Frame
from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.acks import Ackable, BucketAcks
from streams.worker.checkpoints import Checkpoints
from streams.worker.delivery import Sinks
from streams.worker.ownership import Ownership
from streams.worker.pipeline import Pipeline, Scored
from streams.worker.publishing import Publisher

log = EventLog("peerwatch.worker")


class Codec(Protocol):
    def dumps(self, obj: Any) -> bytes: ...
    def loads(self, s: bytes) -> Any: ...


@dataclass
class GroupConsumer:
    pipeline: Pipeline
    publisher: Publisher
    sinks: Sinks
    metrics: WorkerMetrics
    ownership: Ownership
    checkpoints: Checkpoints
    state_table: MutableMapping[str, bytes | None]
    state_codec: Codec
    retry_table: MutableMapping[str, Any] | None
    held: BucketAcks = field(default_factory=BucketAcks)  # not covered by a snapshot yet

    async def frame(self, event: Ackable, partition: int, frame: Frame) -> None:
        """One frame (or tick) from ``partition``; ``event`` is acked when it is safe."""
        if self.ownership.moved:
            self._forget_moved()
        pipeline, group = self.pipeline, frame.group
        self.ownership.frames_from(group, partition)
        if group not in pipeline.windows:
            self._restore(group, partition)
        now = time.time()
        done: Ackable | None = event
        if frame.node or frame.left:
            # Held until a written snapshot holds what it changed: its bucket's, or for a
            # late frame or a departure (a member's GPU values or departure, taken now),
            # the next bucket's.
            self.held.hold(group, max(frame.ts, pipeline.window(group).closed_upto + 1), event)
            done = None
        if frame.left:
            pipeline.add(frame, now)
            log.info("node_left", group=group, node=frame.node)
        elif frame.node:
            self._add(frame, now)
        scored = pipeline.due(group, now)
        if group in pipeline.retries and any(s.changes for s in scored):
            self._write_retry(group)  # it may have taken an XID alert as a cause (rare)
        for item in scored:
            await self.publisher.publish(item)
        if scored and scored[-1].ended:
            self._end(group, scored[-1])
        elif scored:
            self._checkpoint(group, scored)
        if done is not None:
            done.ack()

    def _add(self, frame: Frame, now: float) -> None:
        self.metrics.frames.inc()
        group = frame.group
        if not self.pipeline.add(frame, now):
            self.metrics.frames_late.labels(group=group).inc()
            log.debug("frame_late", group=group, node=frame.node, ts=frame.ts)

    def xid(self, group: str, partition: int, event: XidEvent) -> None:
        """An XID from a node's kernel log, judged with the group's next bucket."""
        self._hold_retry(group, partition)
        self.pipeline.add_log_xid(group, event)
        self._write_retry(group)

    async def job_event(self, job: JobEvent, partition: int) -> None:
        group = job.peer_group
        self._hold_retry(group, partition)
        advice = self.pipeline.add_job_event(job)
        self._write_retry(group)
        self.metrics.advisors.observe_retry(group, self.pipeline.retries.figures(group))
        log.info("job_event", job=job.name, attempt=job.attempt, state=job.state, group=group)
        await self.publisher.advise(advice)

    def _restore(self, group: str, partition: int) -> None:
        self._hold_retry(group, partition)
        if snap := self.state_table.get(group):
            self.pipeline.restore(group, self.state_codec.loads(snap))
            self.checkpoints.wrote(group, self.pipeline.window(group).closed_upto)
            log.info("group_restored", group=group)

    def _checkpoint(self, group: str, scored: list[Scored]) -> None:
        # Off the cadence when re-scoring these buckets after a crash would re-send what
        # they decided, or when a node was handed to the group (streams.worker.checkpoints).
        urgent = any(s.changes or s.advice for s in scored)
        urgent = self.pipeline.node_health.take_handed(group) or urgent
        closed_upto = self.pipeline.window(group).closed_upto
        if self.checkpoints.due(group, closed_upto, urgent):
            self.state_table[group] = self.state_codec.dumps(self.pipeline.snapshot(group))
            self.checkpoints.wrote(group, closed_upto)
            self.held.release(group, closed_upto)

    def _end(self, group: str, end: Scored) -> None:
        # Its alerts were resolved in ``end``; its snapshot goes too (a tombstone in the
        # changelog): a job id that comes back later starts afresh, as it does here.
        self.held.release_all(group)  # the tombstone below covers every frame of it
        self.checkpoints.forget(group)
        if group in self.state_table:
            del self.state_table[group]
        self.ownership.ended(group)
        self.metrics.forget_group(group)
        log.info("group_ended", group=group, why=end.ended)

    def _hold_retry(self, group: str, partition: int) -> None:
        # Memory is the truth for a group held here: XID causes (a bucket's, a log line's)
        # reach it between job events. The table only for one not held: new here, or moved
        # back after a rebalance (_forget_moved dropped it), as the group's state.
        self.ownership.retries_from(group, partition)
        if self.retry_table is None or group in self.pipeline.retries:
            return
        if (snap := self.retry_table.get(group)) is not None:
            self.pipeline.retries.restore(group, snap)

    def _write_retry(self, group: str) -> None:
        # every change written, so a crash or the next owner loses no XID cause either
        if self.retry_table is not None:
            self.retry_table[group] = self.pipeline.retries.snapshot(group)

    def _forget_moved(self) -> None:
        # Their state, open buckets and re-sends are the new owner's now (it restores the
        # table and gets the unacked frames again); kept here, they would go stale.
        groups, retries = self.ownership.take_moved()
        for group in retries:
            self.pipeline.retries.forget(group)  # also of a group ended, or with no frames here
        for group in groups:
            self.pipeline.forget(group)
            self.held.drop(group)
            self.checkpoints.forget(group)
            self.metrics.forget_group(group)  # the new owner exports them now
            self.sinks.forget_group(group)
            log.info("group_moved", group=group)
