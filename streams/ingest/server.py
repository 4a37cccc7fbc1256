"""`peerwatch ingest`: the Prometheus remote_write receiver.

Status codes follow what Prometheus does with them (REFERENCE.md):

    204  accepted (also metadata-only requests)
    401  no or wrong credentials, when the ingest asks for them (``security``)
    400  undecodable body; one-line reason; Prometheus drops it (retrying the
         same bytes cannot help)
    413  body above ``max_body_bytes``
    415  remote_write 2.0 or another content type we do not speak
    503  we cannot take it right now (the write-ahead log full or its disk
         failing, backlog full, a background task restarting, too many writes in
         progress, a body that did not arrive in time; Kafka away when the log is
         off); Prometheus keeps the data and re-sends it with backoff

With the write-ahead log (``ingest_wal``, on by default) a 204 means the body is
on disk (``streams.ingest.wal``): it is replayed after a crash, so while Kafka is
away writes go on being taken until the log holds ``ingest_wal_max_bytes``.

Samples become frames in a ``FrameBuilder``; a flusher closes buckets as event
time (or, for a quiet sender, wall time) passes and hands them to the
``FrameProducer``. Decoding and frame building run on one worker thread, never
on the event loop: a large body costs seconds of CPU, and meanwhile the loop
keeps answering ``/-/ready``, ``/metrics`` and the 503s. The producer and the
flusher are supervised: one that dies is logged, counted, takes readiness down
and is restarted with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

from streams.frames import Frame
from streams.ingest.builder import AddStats, FrameBuilder, frame_builder_for
from streams.ingest.membership import MembershipFollower
from streams.ingest.producer import FrameProducer
from streams.ingest.remote_write import (
    DECODER_CHOICES,
    NATIVE_AVAILABLE,
    NOT_INSTALLED,
    RemoteWriteError,
    WriteRequestDecoder,
    uses_native,
)
from streams.ingest.request_timer import request_timer
from streams.ingest.security import WriteAuth, server_ssl_context
from streams.ingest.wal import WalRefused, WalUnusable, WriteAheadLog
from streams.kafka.options import KafkaLoginError
from streams.kafka.topics import ensure_topics
from streams.retry import RetryCallState, doubling, retrying
from streams.settings import Settings
from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import IngestMetrics

log = EventLog("peerwatch.ingest")

FLUSH_EVERY_S = 0.25
RESTART_MIN_S = 0.5  # first restart of a failed background task; doubles up to RESTART_MAX_S
RESTART_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a task that ran this long before failing restarts at RESTART_MIN_S
# the scrape phases go to the write-ahead log at most this often (a fleet's first minute
# learns one per target; the log's segments wait for the phases that cover them)
KEEP_PHASES_S = 10.0
WAL_LOG_EVERY_S = 10.0  # the write-ahead log's refusals are logged at most this often


class Ingest:
    def __init__(self, settings: Settings, producer: FrameProducer, metrics: IngestMetrics):
        self.settings = settings
        self.producer = producer
        self.metrics = metrics
        self.auth = WriteAuth.from_settings(settings)
        self.builder = frame_builder_for(settings)
        # Series of metrics no feature uses are skipped before their labels are
        # parsed: most of what exporters send, and most of the decode cost.
        self.decoder = WriteRequestDecoder(
            metric_names=self.builder.metric_names,
            max_body_bytes=8 * settings.max_body_bytes,
            max_series_per_request=settings.ingest_max_series_per_request,
            native=DECODER_CHOICES[settings.ingest_decoder],
        )
        # The one thread that touches the decoder and the builder (neither is thread-safe).
        self._work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-work")
        self._in_flight = 0
        self._bucket_due = asyncio.Event()  # set by a write that closed a bucket (flush_forever)
        self._exported: dict[str, int] = {}  # builder totals already in ``metrics``
        # The supervised background tasks, by name; a failed one is in ``down`` until restarted.
        self.tasks: dict[str, Callable[[], Awaitable[None]]] = {
            "producer": self._produce,
            "flusher": self.flush_forever,
        }
        self.down: dict[str, BaseException] = {}
        self.restart_min_s = RESTART_MIN_S
        # the log first: an unusable directory stops the start before anything is answered
        wal_dir = settings.ingest_wal_path
        self.wal = None
        if wal_dir is not None:
            try:
                self.wal = WriteAheadLog(wal_dir, max_bytes=settings.ingest_wal_max_bytes)
            except WalUnusable as exc:  # the one line says which setting put it there
                raise WalUnusable(f"write-ahead log {exc}; {_wal_setting(settings)}") from None
            metrics.wal_bytes.set(self.wal.held_bytes)
        self._wal_log: tuple[float, int] | None = None  # last refusal line's time, since then
        self.replaying = False  # the log's bodies are being replayed (writes wait: 503)
        self.replay_failed: BaseException | None = None
        self.keep_phases_s = KEEP_PHASES_S
        self._phases_kept = 0  # the builder's ``phases.learned`` when the log last kept them
        self._phases_kept_at = -math.inf
        self.membership: MembershipFollower | None = None
        if settings.membership_file or settings.topic_jobs:
            self.membership = MembershipFollower(
                self._assign_on_work_thread,
                path=settings.membership_file,
                kafka=settings,
                topic=settings.topic_jobs,
            )
            self.tasks["membership"] = self.membership.run

    def _assign_on_work_thread(self, node: str, job: str | None) -> None:
        # the builder lives on the work thread: assignments queue there, in order
        self._work.submit(self.builder.assign, node, job)

    def _reply(self, status: int, text: str | None = None) -> web.Response:
        self.metrics.requests.labels(code=str(status)).inc()
        return web.Response(status=status, text=text)

    def _unavailable(self) -> str | None:
        """Why the ingest cannot take data now (a 503 and readiness down), or None.

        Kafka away is a reason only without the write-ahead log: with it, what is taken
        is on disk until Kafka has it, and only the log's bound stops the taking.
        """
        if self.replaying:
            return "replaying the write-ahead log"
        if self.replay_failed is not None:  # what it did not replay stays for the next start
            return f"write-ahead log replay failed ({self.replay_failed!r}); restart the ingest"
        if self.down:
            name, exc = next(iter(self.down.items()))
            return f"{name} failed ({exc!r}), restarting"
        if self.producer.failed is not None:
            return f"frame producer failed ({self.producer.failed!r})"
        if self.wal is None and not self.producer.connected:
            return "kafka unreachable"
        if self.producer.backlog_full:
            return "backlog full"
        return self._wal_full()

    def _wal_full(self) -> str | None:
        """Why the write-ahead log takes no more (it cannot hold one more body of
        ``max_body_bytes``), or None."""
        wal = self.wal
        if wal is None or wal.room_for(self.settings.max_body_bytes):
            return None
        return (
            f"write-ahead log full ({wal.held_bytes} of ingest_wal_max_bytes "
            f"{wal.max_bytes} bytes held until Kafka has their frames)"
        )

    def _wal_refused(self, reason: str, why: str) -> web.Response:
        """The 503 of a write the log did not take: counted, and logged at once and then
        at most every ``WAL_LOG_EVERY_S`` with the count since (a full log refuses every
        write of every Prometheus)."""
        self.metrics.wal_refused.labels(reason=reason).inc()
        now = time.monotonic()
        last_s, since = self._wal_log or (-math.inf, 0)
        if now - last_s >= WAL_LOG_EVERY_S:
            assert self.wal is not None
            log.warning(
                "wal_refused",
                reason=reason,
                why=why,
                refused=since + 1,
                held_bytes=self.wal.held_bytes,
                path=self.wal.directory,
            )
            self._wal_log = (now, 0)
        else:
            self._wal_log = (last_s, since + 1)
        return self._reply(503, f"{why}; retry later\n")

    def _refused(self, request: web.Request) -> web.Response | None:
        """The 401 for a write without the credentials the settings ask for, else None."""
        if self.auth is None:
            return None
        reason = self.auth.failure(request.headers.get("Authorization"))
        if reason is None:
            return None
        self.metrics.auth_failures.labels(reason=reason).inc()
        self.auth.log_failure(reason, request.remote, time.monotonic())
        reply = self._reply(401, "unauthorized\n")
        for challenge in self.auth.challenges:
            reply.headers.add("WWW-Authenticate", challenge)
        return reply

    async def write(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        ctype = request.headers.get("Content-Type", "application/x-protobuf")
        if "proto=io.prometheus.write.v2" in ctype or not ctype.startswith(
            "application/x-protobuf"
        ):
            return self._reply(415, f"unsupported content type {ctype!r}; send remote_write 1.0\n")
        if (request.content_length or 0) > self.settings.max_body_bytes:
            return self._reply(413, f"body above {self.settings.max_body_bytes} bytes\n")
        if (full := self._wal_full()) is not None:
            return self._wal_refused("full", full)
        if (reason := self._unavailable()) is not None:
            log.warning("ingest_backpressure", reason=reason, backlog=self.producer.backlog)
            return self._reply(503, f"{reason}; retry later\n")
        if self._in_flight >= self.settings.ingest_max_concurrent_requests:
            log.warning("ingest_busy", in_flight=self._in_flight)
            return self._reply(503, f"{self._in_flight} writes in progress; retry later\n")
        self._in_flight += 1
        self.metrics.in_flight.set(self._in_flight)
        try:
            return await self._take(request)
        finally:
            self._in_flight -= 1
            self.metrics.in_flight.set(self._in_flight)

    async def _take(self, request: web.Request) -> web.Response:
        try:
            body = await asyncio.wait_for(request.read(), self.settings.ingest_body_timeout_s)
        except web.HTTPRequestEntityTooLarge:
            return self._reply(413, f"body above {self.settings.max_body_bytes} bytes\n")
        except TimeoutError:
            log.warning("ingest_body_timeout", peer=request.remote)
            reply = self._reply(
                503, f"body not received within {self.settings.ingest_body_timeout_s:g} s\n"
            )
            # Send it and hang up: aiohttp would otherwise keep reading the slow body for
            # up to 10 s more ("lingering") to let the client see the reply.
            await reply.prepare(request)
            await reply.write_eof()
            request.protocol.force_close()
            return reply
        loop = asyncio.get_running_loop()
        try:
            stats, due = await loop.run_in_executor(self._work, self._decode_and_add, body)
        except RemoteWriteError as exc:
            log.warning("remote_write_rejected", peer=request.remote, reason=str(exc))
            return self._reply(400, f"{exc}\n")
        except WalRefused as exc:  # not on disk, so not taken: Prometheus sends it again
            what = "full" if exc.reason == "full" else "cannot be written"
            return self._wal_refused(exc.reason, f"write-ahead log {what} ({exc})")
        if due:
            self._bucket_due.set()  # its frames go out now, not on the flusher's next tick
        self.metrics.count_samples(stats.accepted, stats.dropped, time.monotonic())
        return self._reply(204)

    def _decode_and_add(self, body: bytes) -> tuple[AddStats, bool]:
        """On the work thread: the body's samples into the builder (and first on disk); and
        whether they moved the watermark past an open bucket's end."""
        series = self.decoder.decode_batch(body)
        if self.wal is not None:
            try:
                self.wal.append(body)  # WalRefused: the builder has not seen it either
            finally:
                self.metrics.wal_bytes.set(self.wal.held_bytes)
        stats = self.builder.add_batch(series, now_s=time.time())
        if self.wal is not None:
            self.wal.filed(_newest_open_bucket(self.builder))
        return stats, self.builder.bucket_due

    def _replay(self) -> list[Frame]:
        """On the work thread, before serving: the bodies the write-ahead log holds, filed
        into the rounds the process that wrote them learnt (its kept scrape phases); the
        frames of the buckets they closed (a long outage's log must not sit in open
        buckets at once)."""
        assert self.wal is not None
        kept = self.wal.kept_state()
        if kept is not None:
            try:
                self.builder.restore_scrape_phases(json.loads(kept)["scrape_phases"])
            except (ValueError, KeyError, TypeError) as exc:  # a damaged file: learn afresh
                log.warning("wal_state_unreadable", path=self.wal.directory, error=exc)
        bodies, frames = 0, []
        for index, body in self.wal.replay():
            try:
                series = self.decoder.decode_batch(body)
            except RemoteWriteError:
                continue  # a body is logged only once decoded: a damaged file
            self.builder.add_batch(series, now_s=time.time())
            self.wal.replayed(index, _newest_open_bucket(self.builder))
            if self.builder.bucket_due:
                frames += self.builder.close_due_by_watermark()
            bodies += 1
        log.info(
            "wal_replayed",
            bodies=bodies,
            segments=self.wal.segments,
            held_bytes=self.wal.held_bytes,
            frames=len(frames),
        )
        return frames

    def _checkpoint(self, roll: bool = False) -> None:
        """On the work thread, after a flush: keep the scrape phases if they changed, drop the
        log segments whose frames are out.

        The log keeps the open buckets' bodies and those of the round before them: a
        replay then sees each counter's previous sample, so the open buckets' rates come
        out as they would have (the frames of that round go to Kafka twice; the worker
        merges them).
        """
        if self.wal is None:
            return
        builder = self.builder
        learned, now = builder.phases.learned, time.monotonic()
        due = roll or now - self._phases_kept_at >= self.keep_phases_s
        if learned != self._phases_kept and due:
            state = {"scrape_phases": builder.scrape_phases()}
            self.wal.keep_state(json.dumps(state, separators=(",", ":")).encode())
            self._phases_kept, self._phases_kept_at = learned, now
        span = builder.open_buckets
        self.wal.checkpoint(
            None if span is None else span[0] - builder.bucket_ms,
            self.producer.sequence,
            self.producer.left_queue,
            roll=roll,
            state_current=learned == self._phases_kept,
        )
        self.metrics.wal_bytes.set(self.wal.held_bytes)

    def _close_due(self) -> list[Frame]:
        """On the work thread: the frames whose buckets are due."""
        frames = self.builder.close_due_by_watermark(
            now_s=time.time(), idle_s=self.settings.ingest_idle_flush_s
        )
        self._export_builder_counts()
        return frames

    def _export_builder_counts(self) -> None:
        """The builder's running totals outside ``add`` as counter increments."""
        builder = self.builder
        for reason, total in builder.dropped_results.items():
            self._export(self.metrics.features_dropped.labels(reason=reason), reason, total)
        self._export(self.metrics.ha_failovers, "ha_failovers", builder.ha.failovers)

    def _export(self, counter: Counter, name: str, total: int) -> None:
        step = total - self._exported.get(name, 0)
        if step:
            counter.inc(step)
            self._exported[name] = total

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def ready(self, request: web.Request) -> web.Response:
        reason = self._unavailable()
        if reason is None and self.wal is not None and not self.producer.connected:
            reason = "kafka unreachable; writes are kept in the write-ahead log"
            return web.Response(text=reason)  # ready: it takes them
        return web.Response(status=503 if reason else 200, text=reason)

    async def healthy(self, request: web.Request) -> web.Response:
        """Liveness: the event loop answers (readiness is about Kafka and the tasks)."""
        return web.Response(text="ok\n")

    async def flush_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # every FLUSH_EVERY_S (idle flush, departures), and at once when a write closed a
            # bucket: that wait was up to a tick of each alert's latency
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._bucket_due.wait(), FLUSH_EVERY_S)
            self._bucket_due.clear()
            self.producer.enqueue(await loop.run_in_executor(self._work, self._close_due))
            await loop.run_in_executor(self._work, self._checkpoint)

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.settings.max_body_bytes,
            middlewares=[request_timer(self.metrics.request_seconds)],
        )
        app.router.add_post("/api/v1/write", self.write)
        app.router.add_post("/receive", self.write)  # the path some adapters use
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_get("/-/ready", self.ready)
        app.router.add_get("/-/healthy", self.healthy)
        app.cleanup_ctx.append(self._background)
        return app

    async def _produce(self) -> None:
        # Topics first (Kafka may still be away: the HTTP side answers 503 until
        # the producer has connected), then send forever.
        await ensure_topics(self.settings, None, self.metrics.kafka_errors.inc)
        await self.producer.run()

    async def _replay_log(self) -> None:
        """The log's bodies into the builder, on the work thread ahead of anything else
        (the flusher's work queues behind it), their closed buckets' frames to Kafka."""
        loop = asyncio.get_running_loop()
        try:
            self.producer.enqueue(await loop.run_in_executor(self._work, self._replay))
        except Exception as exc:
            self.replay_failed = exc
            log.error("wal_replay_failed", path=self.wal and self.wal.directory, exc_info=exc)
        finally:
            self.replaying = False

    async def supervise(self, name: str) -> None:
        """Run background task ``name`` forever, restarting it with backoff when it fails;
        a task that had run ``HEALTHY_AFTER_S`` before failing starts at the shortest wait."""
        loop = asyncio.get_running_loop()

        async def run() -> None:
            if name in self.down:
                del self.down[name]
                log.info("background_task_restarted", task=name)
            started = loop.time()
            try:
                await self.tasks[name]()
                raise RuntimeError(f"{name} returned")  # they run until cancelled
            except Exception as exc:
                if loop.time() - started < HEALTHY_AFTER_S:
                    raise
                failed(name, exc, self.restart_min_s)
            await asyncio.sleep(self.restart_min_s)  # then a fresh backoff

        def failed(name: str, exc: BaseException, restart_in_s: float) -> None:
            self.down[name] = exc
            self.metrics.task_failures.labels(task=name).inc()
            if isinstance(exc, KafkaLoginError):  # settings to fix, not a bug: no traceback
                log.error(
                    "background_task_failed",
                    task=name,
                    restart_in_s=restart_in_s,
                    error=str(exc),
                    fmt={"restart_in_s": "%.1f"},
                )
            else:
                log.error(
                    "background_task_failed",
                    task=name,
                    restart_in_s=restart_in_s,
                    exc_info=exc,
                    fmt={"restart_in_s": "%.1f"},
                )

        def before_restart(attempt: RetryCallState) -> None:
            assert attempt.outcome is not None and attempt.next_action is not None
            exc = attempt.outcome.exception()
            assert exc is not None  # retried on exceptions only
            failed(name, exc, attempt.next_action.sleep)

        while True:
            await retrying(
                doubling(self.restart_min_s, RESTART_MAX_S),
                on=Exception,
                before_sleep=before_restart,
            )(run)

    async def _background(self, app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        tasks = {}
        if self.wal is not None:
            # while it runs the ingest serves (live; not ready, writes 503): a full log takes
            # a minute or more, longer than a startup probe waits for a first answer
            self.replaying = True
            tasks["replay"] = asyncio.create_task(self._replay_log(), name="replay")
        tasks |= {name: asyncio.create_task(self.supervise(name), name=name) for name in self.tasks}
        yield
        tasks["flusher"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks["flusher"]
        self.producer.enqueue(await loop.run_in_executor(self._work, self.builder.flush_all))
        # with the log, frames Kafka cannot take now wait in it: no use waiting for Kafka
        if self.wal is None or self.producer.connected:
            await self.producer.drain(timeout_s=10.0)
        if self.producer.backlog and self.wal is None:
            log.error("ingest_shutdown_unsent", frames=self.producer.backlog)  # lost
        elif self.producer.backlog and self.wal is not None:  # replayed at the next start
            log.warning(
                "ingest_shutdown_unsent", frames=self.producer.backlog, kept_in=self.wal.directory
            )
        await loop.run_in_executor(self._work, self._checkpoint, True)  # all out: log empties
        if self.wal is not None:
            self.wal.close()
        for task in tasks.values():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._work.shutdown(wait=False, cancel_futures=True)


def _wal_setting(settings: Settings) -> str:
    """Which setting put the write-ahead log where it is, and how to run without it."""
    if settings.ingest_wal_dir is not None:
        return "set ingest_wal_dir to a writable directory, or ingest_wal to false"
    return (
        "it is <datadir>/ingest-wal (ingest_wal_dir unset): set ingest_wal_dir or datadir "
        "to a writable directory, or ingest_wal to false"
    )


def _newest_open_bucket(builder: FrameBuilder) -> int | None:
    """The newest bucket the builder holds an open frame in (what a body just added may
    have gone into: ``FrameBuilder.open_buckets``)."""
    span = builder.open_buckets
    return None if span is None else span[1]


def build_ingest(settings: Settings) -> Ingest:
    native = uses_native(DECODER_CHOICES[settings.ingest_decoder])  # the decoder's own rule
    metrics = IngestMetrics(decoder="native" if native else "python")
    producer = FrameProducer(
        settings,
        settings.topic_frames,
        metrics,
        max_backlog=settings.ingest_max_backlog_frames,
    )
    return Ingest(settings, producer, metrics)


def say_decoder(decoder: WriteRequestDecoder) -> None:
    """The start-up line naming the remote_write decoder in use, a warning on the fallback."""
    if decoder.native:
        log.info("ingest_decoder", decoder="native")
    elif NATIVE_AVAILABLE:
        log.info("ingest_decoder", decoder="python", set_by="ingest_decoder")
    else:  # an install without cargo: a fifth of the compiled decoder's rate, say so
        log.warning("ingest_decoder", decoder="python", reason=NOT_INSTALLED)


def run_ingest(settings: Settings) -> None:
    ingest = build_ingest(settings)
    say_decoder(ingest.decoder)
    ssl_context = server_ssl_context(settings)
    log.info(
        "ingest_listening",
        host=settings.ingest_host,
        port=settings.ingest_port,
        tls=ssl_context is not None,
        auth="+".join(ingest.auth.schemes) if ingest.auth else "none",
    )
    web.run_app(
        ingest.app(),
        host=settings.ingest_host,
        port=settings.ingest_port,
        ssl_context=ssl_context,
        access_log=web.access_logger if settings.ingest_access_log else None,
        print=None,
        handle_signals=True,
    )
