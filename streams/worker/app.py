"""The Faust worker: frames in, alerts out. Thin wiring around ``Pipeline``.

Topics: ``peerwatch.frames`` (key = group) is consumed by one agent, so a group
is always handled by one worker, in order. Per-group detector state and window
membership live in the changelogged table ``group-state`` (co-partitioned with
the frames topic), so a restarted worker continues with its learned state.
Open buckets are not saved: a frame is acked only once a snapshot written after its
bucket was scored covers it (``streams.worker.acks``; a group's snapshot is written every
``snapshot_every_buckets`` buckets: ``streams.worker.checkpoints``), so a crash re-delivers the
frames of open buckets and of those scored since the last snapshot.

Quiet groups: a bucket must close even if no further frame arrives. A 1-s timer
sends a *tick* (a frame with an empty node) for every group with an overdue
bucket; the tick travels the frames topic to the agent that owns the group,
which closes the bucket inside normal stream processing — the only place where
Faust lets a table be written.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import faust
from faust.serializers import codecs
from faust.types import TP, TopicT

from detectors.advisors.jobs import JobEvent, JobEventError
from detectors.xid.kernel_log import parse_kernel_line
from streams.frames import Frame, FrameError, decode_frame, encode_frame
from streams.kafka.options import faust_credentials
from streams.kafka.topics import ensure_topics
from streams.records import AlertRecord, XidLine
from streams.settings import Settings
from streams.sinks.payloads import AlertLinks
from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.checkpoints import Checkpoints
from streams.worker.consuming import GroupConsumer
from streams.worker.delivery import Sinks
from streams.worker.health import WorkerHealth, serve_worker_http
from streams.worker.monitor import LeanMonitor
from streams.worker.ownership import Ownership
from streams.worker.pipeline import Pipeline
from streams.worker.publishing import Publisher

log = EventLog("peerwatch.worker")

# the group-state table's value codec: Faust's JSON (orjson), as the table's own default was
STATE_CODEC = codecs.get_codec("json")
TICK_EVERY_S = 1.0
KAFKA_PROBE_EVERY_S = 5.0  # readiness asks Kafka for the frames topic's offsets this often
LAG_EVERY_S = 10.0  # how often the frames topic's end offsets are asked for (consumer lag)
# The per-message costs outside the Pipeline (bench.worker_kafka; docs/benchmarks.md): fetches
# of 4 MB a partition (Faust: 1 MB) take a bucket's frames in fewer round trips, and Faust's
# per-event monitor counters are read by nothing here (streams.worker.monitor). The producer
# keeps Faust's linger (0) and batch size: with 50 ms / 512 KB a rebalance could find a
# group's last snapshot still in the old owner's producer while the frames it covers were
# committed (test_scale_out: a bucket short of a frame, buckets never scored).
FAUST_THROUGHPUT: dict[str, Any] = {
    "consumer_max_fetch_size": 4 * 1024 * 1024,
    "Monitor": LeanMonitor,
}


def tick_frame(group: str) -> Frame:
    """The wake-up message for a quiet group (see module docstring)."""
    return Frame(group=group, node="", ts=-1, values={}, gpus={})


@dataclass(frozen=True)
class WorkerTopics:
    """The topics the worker reads and writes (the jobs topic only when configured)."""

    frames: TopicT
    alerts: TopicT
    advice: TopicT  # the alerts topic, its records raw JSON (streams.sinks.advice)
    xid: TopicT
    jobs: TopicT | None

    @classmethod
    def declare(cls, app: faust.App, settings: Settings, skips: _Skips) -> WorkerTopics:
        class FramesTopic(faust.Topic):  # type: ignore[misc]
            """The frames topic; a key that is not UTF-8 is logged, counted and skipped.

            Faust acks such a message, then by default throws the error into the
            agent, which crashes and restarts on the next one. Values arrive as bytes
            and are decoded by the agent (``streams.frames``).
            """

            async def on_key_decode_error(self, exc: Exception, message: Any) -> None:
                skips.skip("decode", exc, message)

        partitions = settings.topic_partitions
        raw: dict[str, Any] = {"key_type": str, "value_type": bytes, "value_serializer": "raw"}
        return cls(
            frames=FramesTopic(app, topics=[settings.topic_frames], partitions=partitions, **raw),
            alerts=app.topic(
                settings.topic_alerts,
                key_type=str,
                value_type=AlertRecord,
                partitions=partitions,
            ),
            advice=app.topic(settings.topic_alerts, **raw),
            xid=app.topic(
                settings.topic_xid, key_type=str, value_type=XidLine, partitions=partitions
            ),
            jobs=(
                app.topic(settings.topic_job_attempts, partitions=partitions, **raw)
                if settings.topic_job_attempts
                else None
            ),
        )


def create_app(
    settings: Settings, metrics: WorkerMetrics | None = None, ready: WorkerHealth | None = None
) -> faust.App:
    """The worker's Faust app: its topics, tables, agents, timers and sink tasks."""
    metrics = metrics or WorkerMetrics()
    ready = ready or WorkerHealth(metrics)
    app = faust.App(
        settings.app_id,
        broker=settings.kafka,
        broker_credentials=faust_credentials(settings),
        store=settings.store,
        datadir=str(settings.datadir),
        topic_partitions=settings.topic_partitions,
        web_enabled=False,
        # a single worker should own its partitions at once, not after rebalance delays
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        stream_wait_empty=False,
        producer_acks=-1,
        **FAUST_THROUGHPUT,
    )
    skips = _Skips(metrics)
    topics = WorkerTopics.declare(app, settings, skips)
    pipeline = Pipeline.from_settings(settings)
    links = AlertLinks.from_settings(settings)
    sinks = Sinks(settings, metrics, links)  # built before the agents that submit to them
    publisher = Publisher(
        pipeline,
        sinks,
        metrics,
        links,
        send_alert=lambda key, record: topics.alerts.send(key=key, value=record),
        send_advice=lambda key, record: topics.advice.send(key=key, value=record),
    )
    ownership = Ownership(settings.topic_frames)
    consumer = GroupConsumer(
        pipeline,
        publisher,
        sinks,
        metrics,
        ownership,
        Checkpoints(settings.snapshot_every_buckets, settings.bucket_ms),
        state_table=_state_table(app, settings),
        state_codec=STATE_CODEC,
        # a job's retry chain spans its restarts, so it is kept apart from the group's
        # state (which goes when the group ends); same key and partitions as the frames
        retry_table=(
            app.Table(
                "retry-state", default=None, partitions=settings.topic_partitions, key_type=str
            )
            if settings.topic_job_attempts
            else None
        ),
    )
    metrics.frames_unacked.set_function(lambda: len(consumer.held))
    _consume(app, topics, consumer, skips, ready)
    _follow_rebalances(app, ownership, sinks, ready)
    _keep_time(app, settings, pipeline, topics.frames, metrics, ready)
    for deliver in sinks.tasks():
        app.task(deliver)
    app.peerwatch_pipeline = pipeline  # type: ignore[attr-defined]  # for tests and the demo
    return app


def _state_table(app: faust.App, settings: Settings) -> Any:
    # Values are the snapshot's JSON bytes, encoded by the codec the table used to apply
    # itself (the same changelog bytes). A table of dicts kept every group's last snapshot
    # alive as Python objects between buckets, a second copy of the fleet's state that
    # each full collection of the cyclic GC walked.
    return app.Table(
        "group-state",
        default=None,
        partitions=settings.topic_partitions,
        key_type=str,
        value_type=bytes,  # Faust: raw bytes in and out
    )


def _consume(
    app: faust.App,
    topics: WorkerTopics,
    consumer: GroupConsumer,
    skips: _Skips,
    ready: WorkerHealth,
) -> None:
    """The agents: frames, kernel-log XID lines and (when configured) job events."""

    @app.agent(topics.frames)
    async def score_frames(stream: Any) -> None:
        ready.agent_running(True)
        try:
            async for event in stream.noack().events():
                try:
                    try:
                        frame = decode_frame(event.value)
                    except FrameError as exc:
                        skips.skip("decode", exc, event.message)
                        event.ack()
                        continue
                    await consumer.frame(event, event.message.partition, frame)
                except Exception as exc:  # one frame's (or one bucket's) fault: skip it
                    skips.skip("score", exc, event.message)
                    event.ack()  # (acking twice is harmless if it was held)
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("agent_died", agent="score_frames")
            raise
        finally:
            ready.agent_running(False)

    @app.agent(topics.xid)
    async def read_xid_lines(stream: Any) -> None:
        # Same key (group) and partition count as the frames: the worker that owns
        # a group's frames gets its log XIDs, judged with the group's next bucket.
        async for message in stream.events():
            record = message.value
            event = parse_kernel_line(record.line)
            if event is None:
                log.debug(
                    "xid_line_ignored", node=record.node, line=record.line[:120], fmt={"line": "%r"}
                )
                continue
            gpu = event.pci_bus_id or "unknown"
            origin = event.with_origin(node=record.node, gpu=gpu, ts_ms=record.ts)
            consumer.xid(record.group, message.message.partition, origin)
            log.info("xid_line", node=record.node, xid=event.xid, gpu=gpu)

    if topics.jobs is not None:

        @app.agent(topics.jobs)
        async def read_job_events(stream: Any) -> None:
            async for event in stream.events():
                message = event.message
                try:
                    job = JobEvent.from_dict(json.loads(event.value or b""))
                except (ValueError, RecursionError) as exc:  # JobEventError, bad JSON
                    reason = exc if isinstance(exc, JobEventError) else f"not JSON: {exc}"
                    log.warning(
                        "job_event_rejected",
                        topic=message.topic,
                        partition=message.partition,
                        offset=message.offset,
                        reason=str(reason)[:300],
                    )
                    continue
                await consumer.job_event(job, message.partition)


def _follow_rebalances(
    app: faust.App, ownership: Ownership, sinks: Sinks, ready: WorkerHealth
) -> None:
    # Faust's stubs want a receiver typed (sender, *args, signal=...); ours name what it sends
    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def _partitions_revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        # Stop re-sending at once: a worker that is leaving runs no agent step again, and a
        # re-send after the new owner resolved an alert would make it fire again. A group
        # that comes back here is put on the re-send schedule by its next bucket.
        ready.rebalancing()
        for group in ownership.revoked(revoked):
            sinks.forget_group(group)

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _partitions_assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        # the groups moved away are forgotten by the agent between two frames
        ready.assigned(ownership.assigned(assigned))

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def _restored(sender: Any, **kwargs: Any) -> None:
        ready.rebalance_complete()


def _keep_time(
    app: faust.App,
    settings: Settings,
    pipeline: Pipeline,
    frames: TopicT,
    metrics: WorkerMetrics,
    ready: WorkerHealth,
) -> None:
    """The timers: quiet groups' ticks, the Kafka probe behind readiness, consumer lag."""
    kafka_probe: list[asyncio.Task[Any]] = []  # the probe in flight, if any

    @app.timer(KAFKA_PROBE_EVERY_S)
    async def probe_kafka() -> None:
        # Asked through the app's own consumer (its brokers and credentials). A probe still
        # unanswered at the next tick means Kafka is away; none is stacked behind it.
        if kafka_probe and not kafka_probe[0].done():
            ready.kafka(f"no answer within {KAFKA_PROBE_EVERY_S:g} s")
            return
        kafka_probe[:] = [asyncio.ensure_future(_ask_kafka())]

    async def _ask_kafka() -> None:
        try:
            await app.consumer.highwaters(TP(settings.topic_frames, 0))
        except Exception as exc:
            ready.kafka(f"{type(exc).__name__}: {exc}")
        else:
            ready.kafka(None)

    @app.timer(TICK_EVERY_S)
    async def wake_quiet_groups() -> None:
        for group in pipeline.groups_waiting(time.time()):
            await frames.send(key=group, value=encode_frame(tick_frame(group)))

    @app.timer(LAG_EVERY_S)
    async def measure_lag() -> None:
        tps = [tp for tp in app.consumer.assignment() if tp.topic == settings.topic_frames]
        try:
            ends = await app.consumer.highwaters(*tps) if tps else {}
        except Exception as exc:  # the broker is away: the gauge keeps its last values
            log.warning("consumer_lag_unknown", error=exc)
            return
        metrics.observe_lag(frames_lag(ends, app.monitor.tp_read_offsets))


def frames_lag(ends: Mapping[Any, int], read: Mapping[Any, int]) -> dict[int, int]:
    """Messages not read yet per partition: the end offset (the next offset to be written)
    minus the next one this worker reads. A partition not read from yet has no figure (its
    position is the committed offset, which Faust does not expose): no series rather than a
    guess; a worker stuck before its first frame is ``peerwatch_worker_ready`` 0."""
    return {tp.partition: max(0, end - read[tp] - 1) for tp, end in ends.items() if tp in read}


class _Skips:
    """The skipping of frames that cannot be handled: counted, logged with their offset."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def skip(self, stage: str, exc: BaseException, message: Any) -> None:
        self.metrics.frames_failed.labels(stage=stage).inc()
        log.error(
            "frame_skipped",
            stage=stage,
            topic=getattr(message, "topic", "?"),
            partition=getattr(message, "partition", "?"),
            offset=getattr(message, "offset", "?"),
            error=exc,
            exc_info=exc,
        )


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run the Faust worker in the foreground until SIGINT/SIGTERM."""
    metrics = WorkerMetrics()
    ready = WorkerHealth(metrics)
    if settings.worker_web_port:
        serve_worker_http(settings.worker_web_host, settings.worker_web_port, ready)
        log.info(
            "worker_http_listening", host=settings.worker_web_host, port=settings.worker_web_port
        )
    asyncio.run(ensure_topics(settings))
    app = create_app(settings, metrics, ready)
    settings.datadir.mkdir(parents=True, exist_ok=True)
    # The CLI has set up logging (text or JSON): mode's own setup would replace it with
    # its coloured format, so the worker's lines and Faust's would differ from the ingest's.
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, override_logging=False)
    worker.spinner = None  # mode's logging setup drops it at INFO; it writes terminal escapes
    asyncio.set_event_loop(worker.loop)
    ready.loop = worker.loop
    worker.execute_from_commandline()
