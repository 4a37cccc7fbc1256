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
import logging
import time
from collections.abc import Mapping
from typing import Any

import faust
from faust.serializers import codecs
from faust.types import TP

from detectors.advisors.jobs import JobEvent, JobEventError
from detectors.vocabulary import Advice
from detectors.xid.kernel_log import parse_kernel_line
from streams.frames import Frame, FrameError, decode_frame, encode_frame
from streams.kafka.options import faust_credentials
from streams.kafka.topics import ensure_topics
from streams.records import AlertRecord, XidLine
from streams.settings import Settings
from streams.sinks.advice import advice_key, advice_record
from streams.sinks.alertmanager import AlertmanagerSink
from streams.sinks.credentials import access_for
from streams.sinks.grafana import GrafanaSink
from streams.sinks.outbox import open_outbox
from streams.sinks.payloads import AlertLinks, to_payload, to_record
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.acks import BucketAcks
from streams.worker.checkpoints import Checkpoints
from streams.worker.health import WorkerHealth, serve_worker_http
from streams.worker.monitor import LeanMonitor
from streams.worker.pipeline import Pipeline, Scored

log = logging.getLogger("peerwatch.worker")

# the group-state table's value codec: Faust's JSON (orjson), as the table's own default was
STATE_CODEC = codecs.get_codec("json")
TICK_EVERY_S = 1.0
KAFKA_PROBE_EVERY_S = 5.0  # readiness asks Kafka for the frames topic's offsets this often
LAG_EVERY_S = 10.0  # how often the frames topic's end offsets are asked for (consumer lag)
# The per-message costs outside the Pipeline (bench.worker_kafka; README): fetches of 4 MB
# a partition (Faust: 1 MB) take a bucket's frames in fewer round trips, and Faust's
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


def create_app(
    settings: Settings, metrics: WorkerMetrics | None = None, ready: WorkerHealth | None = None
) -> faust.App:
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

    class FramesTopic(faust.Topic):  # type: ignore[misc]
        """The frames topic; a key that is not UTF-8 is logged, counted and skipped.

        Faust acks such a message, then by default throws the error into the
        agent, which crashes and restarts on the next one. Values arrive as bytes
        and are decoded by the agent (``streams.frames``).
        """

        async def on_key_decode_error(self, exc: Exception, message: Any) -> None:
            skips.skip("decode", exc, message)

    frames_topic = FramesTopic(
        app,
        topics=[settings.topic_frames],
        key_type=str,
        value_type=bytes,
        value_serializer="raw",
        partitions=settings.topic_partitions,
    )
    alerts_topic = app.topic(
        settings.topic_alerts,
        key_type=str,
        value_type=AlertRecord,
        partitions=settings.topic_partitions,
    )
    # advice shares the alerts topic as its own JSON record (streams.sinks.advice)
    advice_topic = app.topic(
        settings.topic_alerts, key_type=str, value_type=bytes, value_serializer="raw"
    )
    # Values are the snapshot's JSON bytes, encoded here by the codec the table used to
    # apply itself (the same changelog bytes; old changelogs read as before). A table of
    # dicts kept every group's last snapshot alive as Python objects between buckets, a
    # second copy of the fleet's state that each full collection of the cyclic GC walked.
    state_table = app.Table(
        "group-state",
        default=None,
        partitions=settings.topic_partitions,
        key_type=str,
        value_type=bytes,  # Faust: raw bytes in and out
    )
    pipeline = Pipeline.from_settings(settings)
    # a job's retry chain spans its restarts, so it is kept apart from the group's state
    # (which goes when the group ends); same key and partitions as the frames
    retry_table = (
        app.Table("retry-state", default=None, partitions=settings.topic_partitions, key_type=str)
        if settings.topic_job_attempts
        else None
    )
    retry_partition_of: dict[str, int] = {}  # group -> the partition of its retry state
    links = AlertLinks.from_settings(settings)
    sink_holder: dict[str, Any] = {}  # the running sinks, set by their tasks

    def on_delivery(outcome: str, n: int) -> None:
        metrics.deliveries.labels(sink="alertmanager", outcome=outcome).inc(n)

    async def publish(scored: Scored) -> None:
        # The sinks first: an alert's way to Alertmanager must not wait for this bucket's
        # metrics, log lines and alert records (nor, through them, for the next group).
        submit_to_sinks(scored)
        if scored.ended:  # no bucket was scored: only the resolutions go out
            await send_changes(scored)
            return
        bucket = scored.bucket
        metrics.buckets.labels(group=bucket.group).inc()
        # One line per scored bucket: what `peerwatch chaos` counts (scored once/twice/never).
        log.info(
            "bucket_scored group=%s bucket=%d nodes=%d expected=%d",
            bucket.group,
            bucket.ts,
            len(bucket.frames),
            len(bucket.expected),
        )
        metrics.bucket_nodes.labels(group=bucket.group).set(len(bucket.frames))
        metrics.score_seconds.observe(scored.seconds)
        if scored.result.composition is not None:
            metrics.observe_composition(bucket.group, scored.result.composition)
        if scored.result.phase is not None:
            metrics.observe_phase(bucket.group, scored.result.phase.name)
        if not scored.result.stale:
            metrics.nodes.observe(
                bucket.group, scored.result.verdicts, bucket.frames, scored.active
            )
        metrics.nodes.count_xids(bucket.group, scored.changes)
        slo = pipeline.slo_summary(bucket.group)
        if slo is not None:
            verdict = scored.failslow
            metrics.observe_slo(bucket.group, slo, slow=verdict.slow if verdict else None)
        metrics.advisors.observe_ledger(bucket.group, *pipeline.ledger_figures(bucket.group))
        if (checkpoint := pipeline.checkpoint(bucket.group)) is not None:
            metrics.checkpoint.observe(bucket.group, checkpoint)
        await send_changes(scored)
        await send_advice(scored.advice)

    async def send_advice(advice: list[Advice]) -> None:
        metrics.advisors.count_advice(advice)
        for a in advice:
            log.info(
                "advice_given advisor=%s kind=%s group=%s node=%s action=%s summary=%s",
                a.advisor,
                a.kind,
                a.group,
                a.node,
                a.action,
                a.summary,
            )
            await advice_topic.send(key=advice_key(a), value=advice_record(a))

    async def send_changes(scored: Scored) -> None:
        for change in scored.changes:
            metrics.alerts.labels(alertname=change.alertname, status=change.status).inc()
            log.info(
                "alert_%s alertname=%s group=%s node=%s bucket=%d score=%.2f reason=%s",
                change.status,
                change.alertname,
                change.group,
                change.node,
                change.bucket_ts,
                change.score,
                change.reason,
            )
            await alerts_topic.send(key=change.node or change.group, value=to_record(change, links))

    def submit_to_sinks(scored: Scored) -> None:
        if (grafana := sink_holder.get("grafana")) is not None:
            grafana.submit(scored.changes)
        sink = sink_holder.get("am")
        if sink is not None:
            sink.submit(to_payload(c, links) for c in scored.changes)
            sink.keep_firing(to_payload(a, links) for a in scored.active)

    held = BucketAcks()  # frames not covered by a written snapshot yet (streams.worker.acks)
    metrics.frames_unacked.set_function(lambda: len(held))
    checkpoints = Checkpoints(settings.snapshot_every_buckets, settings.bucket_ms)
    partition_of: dict[str, int] = {}  # group -> the frames partition it arrives on
    owned: set[int] = set()  # frames partitions assigned to this worker
    lost: set[int] = set()  # frames partitions a rebalance took away, groups not yet forgotten

    def hold_retry(group: str, partition: int) -> None:
        # Memory is the truth for a group held here: XID causes (a bucket's, a log line's)
        # reach it between job events. The table only for one not held: new here, or moved
        # back after a rebalance (forget_lost_groups dropped it), as the group's state.
        retry_partition_of[group] = partition
        if retry_table is None or group in pipeline.retry_states:
            return
        if (snap := retry_table.get(group)) is not None:
            pipeline.restore_retry(group, snap)

    def write_retry(group: str) -> None:
        # every change written, so a crash or the next owner loses no XID cause either
        if retry_table is not None:
            retry_table[group] = pipeline.retry_snapshot(group)

    def forget_lost_groups() -> None:
        # Their state, open buckets and re-sends are the new owner's now (it restores the
        # table and gets the unacked frames again); kept here, they would go stale.
        for group in [g for g, p in retry_partition_of.items() if p in lost]:
            pipeline.forget_retry(group)  # also of a group ended, or with no frames here
            del retry_partition_of[group]
        for group in [g for g, p in partition_of.items() if p in lost]:
            pipeline.forget(group)
            held.drop(group)
            checkpoints.forget(group)
            metrics.forget_group(group)  # the new owner exports them now
            del partition_of[group]
            if (sink := sink_holder.get("am")) is not None:
                sink.forget_group(group)
            log.info("group_moved group=%s", group)
        lost.clear()

    # Faust's stubs want a receiver typed (sender, *args, signal=...); ours name what it sends
    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def _partitions_revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        # Stop re-sending at once: a worker that is leaving runs no agent step again, and a
        # re-send after the new owner resolved an alert would make it fire again. A group
        # that comes back here is put on the re-send schedule by its next bucket.
        ready.rebalancing()
        gone = {tp.partition for tp in revoked if tp.topic == settings.topic_frames}
        if (sink := sink_holder.get("am")) is not None:
            for group in [g for g, p in partition_of.items() if p in gone]:
                sink.forget_group(group)

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _partitions_assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        # Forgotten by the agent between two frames, never under one half-processed.
        now = {tp.partition for tp in assigned if tp.topic == settings.topic_frames}
        lost.update(owned - now)
        owned.clear()
        owned.update(now)
        ready.assigned(len(now))

    async def handle_frame(event: Any, frame: Frame) -> None:
        if lost:
            forget_lost_groups()
        done = event
        group = frame.group
        partition_of[group] = event.message.partition
        if group not in pipeline.windows:
            hold_retry(group, event.message.partition)
            if snap := state_table.get(group):
                pipeline.restore(group, STATE_CODEC.loads(snap))
                checkpoints.wrote(group, pipeline.window(group).closed_upto)
                log.info("group_restored group=%s", group)
        now = time.time()
        if frame.node or frame.left:
            # Held until a written snapshot holds what it changed: its bucket's, or for a
            # late frame or a departure (a member's GPU values or departure, taken now),
            # the next bucket's.
            held.hold(group, max(frame.ts, pipeline.window(group).closed_upto + 1), event)
            done = None
        if frame.left:
            pipeline.leave(group, frame.node, frame.ts, now)
            log.info("node_left group=%s node=%s", group, frame.node)
        elif frame.node:
            metrics.frames.inc()
            if not pipeline.add(
                group,
                frame.node,
                frame.ts,
                frame.values,
                frame.gpus,
                now,
                frame.role,
                on_hold=frame.on_hold,
            ):
                metrics.frames_late.labels(group=group).inc()
                log.debug("frame_late group=%s node=%s ts=%d", group, frame.node, frame.ts)
        scored = pipeline.due(group, now)
        if group in pipeline.retry_states and any(s.changes for s in scored):
            write_retry(group)  # it may have taken an XID alert as a cause (rare: transitions)
        for item in scored:
            await publish(item)
        if scored and scored[-1].ended:
            end_group(group, scored[-1])
        elif scored:
            checkpoint(group, scored)
        if done is not None:
            done.ack()

    def checkpoint(group: str, scored: list[Scored]) -> None:
        # Off the cadence when re-scoring these buckets after a crash would re-send what
        # they decided, or when a node was handed to the group (streams.worker.checkpoints).
        urgent = any(s.changes or s.advice for s in scored)
        urgent = pipeline.node_health.take_handed(group) or urgent
        closed_upto = pipeline.window(group).closed_upto
        if checkpoints.due(group, closed_upto, urgent):
            state_table[group] = STATE_CODEC.dumps(pipeline.snapshot(group))
            checkpoints.wrote(group, closed_upto)
            held.release(group, closed_upto)

    def end_group(group: str, end: Scored) -> None:
        # Its alerts were resolved in ``end``; its snapshot goes too (a tombstone in the
        # changelog): a job id that comes back later starts afresh, as it does here.
        held.release_all(group)  # the tombstone below covers every frame of it
        checkpoints.forget(group)
        if group in state_table:
            del state_table[group]
        partition_of.pop(group, None)
        metrics.forget_group(group)
        log.info("group_ended group=%s why=%s", group, end.ended)

    @app.agent(frames_topic)
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
                    await handle_frame(event, frame)
                except Exception as exc:  # one frame's (or one bucket's) fault: skip it
                    skips.skip("score", exc, event.message)
                    event.ack()  # (acking twice is harmless if it was held)
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("agent_died agent=score_frames")
            raise
        finally:
            ready.agent_running(False)

    xid_topic = app.topic(
        settings.topic_xid, key_type=str, value_type=XidLine, partitions=settings.topic_partitions
    )

    @app.agent(xid_topic)
    async def read_xid_lines(stream: Any) -> None:
        # Same key (group) and partition count as the frames: the worker that owns
        # a group's frames gets its log XIDs, judged with the group's next bucket.
        async for message in stream.events():
            record = message.value
            event = parse_kernel_line(record.line)
            if event is None:
                log.debug("xid_line_ignored node=%s line=%r", record.node, record.line[:120])
                continue
            gpu = event.pci_bus_id or "unknown"
            hold_retry(record.group, message.message.partition)
            pipeline.add_log_xid(
                record.group, event.with_origin(node=record.node, gpu=gpu, ts_ms=record.ts)
            )
            write_retry(record.group)
            log.info("xid_line node=%s xid=%d gpu=%s", record.node, event.xid, gpu)

    if settings.topic_job_attempts:
        jobs_topic = app.topic(
            settings.topic_job_attempts,
            key_type=str,
            value_type=bytes,
            value_serializer="raw",
            partitions=settings.topic_partitions,
        )

        @app.agent(jobs_topic)
        async def read_job_events(stream: Any) -> None:
            async for event in stream.events():
                message = event.message
                try:
                    job = JobEvent.from_dict(json.loads(event.value or b""))
                except (ValueError, RecursionError) as exc:  # JobEventError, bad JSON
                    reason = exc if isinstance(exc, JobEventError) else f"not JSON: {exc}"
                    log.warning(
                        "job_event_rejected topic=%s partition=%d offset=%d reason=%.300s",
                        message.topic,
                        message.partition,
                        message.offset,
                        reason,
                    )
                    continue
                group = job.peer_group
                hold_retry(group, message.partition)
                advice = pipeline.add_job_event(job)
                write_retry(group)
                metrics.advisors.observe_retry(group, pipeline.retry_figures(group))
                log.info(
                    "job_event job=%s attempt=%d state=%s group=%s",
                    job.name,
                    job.attempt,
                    job.state,
                    group,
                )
                await send_advice(advice)

    @app.on_rebalance_complete.connect  # type: ignore[arg-type]
    async def _restored(sender: Any, **kwargs: Any) -> None:
        ready.rebalance_complete()

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
            await frames_topic.send(key=group, value=encode_frame(tick_frame(group)))

    @app.timer(LAG_EVERY_S)
    async def measure_lag() -> None:
        tps = [tp for tp in app.consumer.assignment() if tp.topic == settings.topic_frames]
        try:
            ends = await app.consumer.highwaters(*tps) if tps else {}
        except Exception as exc:  # the broker is away: the gauge keeps its last values
            log.warning("consumer_lag_unknown error=%r", exc)
            return
        metrics.observe_lag(frames_lag(ends, app.monitor.tp_read_offsets))

    # undelivered alerts are journaled here, so a restart delivers what was decided before it
    outbox_dir = settings.outbox_dir or settings.datadir / "outbox"

    if settings.alertmanager_url:

        @app.task
        async def deliver_alerts() -> None:
            access = access_for(settings, "alertmanager")
            async with access.client() as client:
                sink = AlertmanagerSink(
                    access.url,
                    client,
                    auth=access.auth,
                    resend_s=settings.alert_resend_s,
                    on_result=on_delivery,
                    outbox=open_outbox(outbox_dir, "alertmanager"),
                )
                sink_holder["am"] = sink
                try:
                    await sink.run()
                finally:
                    del sink_holder["am"]

    if settings.grafana_url:

        @app.task
        async def annotate_grafana() -> None:
            access = access_for(settings, "grafana")
            async with access.client(timeout=10.0) as client:
                grafana = GrafanaSink(
                    access.url,
                    client,
                    auth=access.auth,
                    dashboard_uid=settings.grafana_dashboard_uid,
                    bucket_ms=settings.bucket_ms,
                    outbox=open_outbox(outbox_dir, "grafana"),
                )
                sink_holder["grafana"] = grafana
                try:
                    await grafana.run()
                finally:
                    del sink_holder["grafana"]

    app.peerwatch_pipeline = pipeline  # type: ignore[attr-defined]  # for tests and the demo
    return app


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
            "frame_skipped stage=%s topic=%s partition=%s offset=%s error=%.300r",
            stage,
            getattr(message, "topic", "?"),
            getattr(message, "partition", "?"),
            getattr(message, "offset", "?"),
            exc,
            exc_info=exc,
        )


def run_worker(settings: Settings, loglevel: str = "info") -> None:
    """Run the Faust worker in the foreground until SIGINT/SIGTERM."""
    metrics = WorkerMetrics()
    ready = WorkerHealth(metrics)
    if settings.worker_web_port:
        serve_worker_http(settings.worker_web_host, settings.worker_web_port, ready)
        log.info(
            "worker_http_listening host=%s port=%d",
            settings.worker_web_host,
            settings.worker_web_port,
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
