"""`peerwatch ingest`: the Prometheus remote_write receiver.

Status codes follow what Prometheus does with them (REFERENCE.md):

    204  accepted (also metadata-only requests)
    400  undecodable body; one-line reason; Prometheus drops it (retrying the
         same bytes cannot help)
    413  body above ``max_body_bytes``
    415  remote_write 2.0 or another content type we do not speak
    503  Kafka cannot take more right now; Prometheus keeps the data and
         re-sends it with backoff, so nothing is lost

Samples become frames in a ``FrameBuilder``; a flusher closes buckets as event
time (or, for a quiet sender, wall time) passes and hands them to the
``FrameProducer``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams.ingest.frames import frame_builder_for
from streams.ingest.producer import FrameProducer
from streams.ingest.remote_write import RemoteWriteError, WriteRequestDecoder
from streams.metrics import IngestMetrics
from streams.settings import Settings
from streams.topics import ensure_topics

log = logging.getLogger("peerwatch.ingest")

FLUSH_EVERY_S = 0.25


class Ingest:
    def __init__(self, settings: Settings, producer: FrameProducer, metrics: IngestMetrics):
        self.settings = settings
        self.producer = producer
        self.metrics = metrics
        self.builder = frame_builder_for(settings)
        # Series of metrics no feature uses are skipped before their labels are
        # parsed: most of what exporters send, and most of the decode cost.
        self.decoder = WriteRequestDecoder(
            metric_names=self.builder.metric_names, max_body_bytes=8 * settings.max_body_bytes
        )

    def _reply(self, status: int, text: str | None = None) -> web.Response:
        self.metrics.requests.labels(code=str(status)).inc()
        return web.Response(status=status, text=text)

    async def write(self, request: web.Request) -> web.Response:
        ctype = request.headers.get("Content-Type", "application/x-protobuf")
        if "proto=io.prometheus.write.v2" in ctype or not ctype.startswith(
            "application/x-protobuf"
        ):
            return self._reply(415, f"unsupported content type {ctype!r}; send remote_write 1.0\n")
        if (request.content_length or 0) > self.settings.max_body_bytes:
            return self._reply(413, f"body above {self.settings.max_body_bytes} bytes\n")
        if not self.producer.accepting:
            log.warning("ingest_backpressure backlog=%d", self.producer.backlog)
            if self.producer.failed is not None:
                reason = f"frame producer failed ({self.producer.failed!r})"
            elif not self.producer.connected:
                reason = "kafka unreachable"
            else:
                reason = "backlog full"
            return self._reply(503, f"{reason}; retry later\n")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._reply(413, f"body above {self.settings.max_body_bytes} bytes\n")
        try:
            series = self.decoder.decode(body)
        except RemoteWriteError as exc:
            log.warning("remote_write_rejected peer=%s reason=%s", request.remote, exc)
            return self._reply(400, f"{exc}\n")
        stats = self.builder.add(series, now_s=time.time())
        self.metrics.samples.labels(outcome="accepted").inc(stats.accepted)
        for reason, n in stats.dropped.items():
            if n:
                self.metrics.samples.labels(outcome=reason).inc(n)
        return self._reply(204)

    async def metrics_page(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.producer.accepting else 503)

    async def flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            self.producer.enqueue(
                self.builder.close_due_by_watermark(
                    now_s=time.time(), idle_s=self.settings.ingest_idle_flush_s
                )
            )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post("/api/v1/write", self.write)
        app.router.add_post("/receive", self.write)  # the path some adapters use
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_get("/-/ready", self.ready)
        app.cleanup_ctx.append(self._background)
        return app

    async def _produce(self) -> None:
        # Topics first (Kafka may still be away: the HTTP side answers 503 until
        # the producer has connected), then send forever.
        await ensure_topics(self.settings, attempts=None)
        await self.producer.run()

    async def _background(self, app: web.Application) -> AsyncIterator[None]:
        tasks = [
            asyncio.create_task(self._produce(), name="producer"),
            asyncio.create_task(self.flush_forever(), name="flusher"),
        ]
        yield
        tasks[1].cancel()
        self.producer.enqueue(self.builder.flush_all())
        if not await self.producer.drain(timeout_s=10.0):
            log.error("ingest_shutdown_unsent frames=%d", self.producer.backlog)
        tasks[0].cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def build_ingest(settings: Settings) -> Ingest:
    metrics = IngestMetrics()
    producer = FrameProducer(
        settings.broker_host_port,
        settings.topic_frames,
        metrics,
        max_backlog=settings.ingest_max_backlog_frames,
    )
    return Ingest(settings, producer, metrics)


def run_ingest(settings: Settings) -> None:
    ingest = build_ingest(settings)
    log.info("ingest_listening host=%s port=%d", settings.ingest_host, settings.ingest_port)
    web.run_app(
        ingest.app(),
        host=settings.ingest_host,
        port=settings.ingest_port,
        print=None,
        handle_signals=True,
    )
