"""Put built frames on Kafka, holding them while the broker is away.

Frames are queued in memory and sent in order by one background task; a frame
leaves the queue only after Kafka acknowledged it (acks=all). While the broker
is unreachable the task retries with backoff, and the ingest answers 503 once
the backlog passes its limit, so Prometheus keeps (and later re-sends) what we
could not take instead of it being lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from streams.ingest.frames import FrameData
from streams.metrics import IngestMetrics
from streams.records import Frame

log = logging.getLogger("peerwatch.ingest")


def encode_frame(frame: FrameData) -> bytes:
    record = Frame(
        group=frame.group, node=frame.node, ts=frame.ts, values=frame.values, gpus=frame.gpus,
        left=frame.left,
    )
    return record.dumps(serializer="json")


class FrameProducer:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        metrics: IngestMetrics,
        *,
        max_backlog: int = 200_000,
        batch: int = 2_000,
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._metrics = metrics
        self._max_backlog = max_backlog
        self._batch = batch
        self._queue: deque[FrameData] = deque()
        self._producer: AIOKafkaProducer | None = None
        self._wake = asyncio.Event()
        self._connected = False
        self.failed: BaseException | None = None  # set if run() died: a bug, not an outage

    @property
    def backlog(self) -> int:
        return len(self._queue)

    @property
    def accepting(self) -> bool:
        """False while Kafka is unreachable or the backlog is full: the HTTP side answers 503.

        What was accepted before stays queued and is delivered once Kafka is back.
        """
        return self._connected and self.failed is None and len(self._queue) < self._max_backlog

    @property
    def connected(self) -> bool:
        return self._connected

    def enqueue(self, frames: Iterable[FrameData]) -> None:
        self._queue.extend(frames)
        self._metrics.backlog.set(len(self._queue))
        if self._queue:
            self._wake.set()

    async def _connect(self) -> AIOKafkaProducer:
        backoff = 0.5
        while True:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap,
                acks="all",
                linger_ms=5,
                max_batch_size=1 << 20,
                request_timeout_ms=10_000,
            )
            try:
                await producer.start()
            except KafkaError as exc:
                await producer.stop()
                log.warning("kafka_unavailable bootstrap=%s error=%r", self._bootstrap, exc)
                self._metrics.kafka_errors.inc()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            log.info("kafka_connected bootstrap=%s", self._bootstrap)
            self._connected = True
            return producer

    async def _send_batch(self, producer: AIOKafkaProducer, frames: list[FrameData]) -> None:
        futures = [
            await producer.send(self._topic, encode_frame(f), key=f.group.encode()) for f in frames
        ]
        await asyncio.gather(*futures)

    async def run(self) -> None:
        """Send forever; a failed batch stays at the head of the queue and is retried.

        Anything but a Kafka error is a bug: it is logged, recorded in ``failed``
        (the ingest then answers 503 and reports not ready) and re-raised.
        """
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failed = exc
            self._connected = False
            log.exception("frame_producer_failed backlog=%d", len(self._queue))
            raise

    async def _run(self) -> None:
        producer = await self._connect()
        backoff = 0.2
        try:
            while True:
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                batch = [self._queue[i] for i in range(min(self._batch, len(self._queue)))]
                try:
                    await self._send_batch(producer, batch)
                except KafkaError as exc:
                    self._connected = False
                    self._metrics.kafka_errors.inc()
                    log.warning("kafka_send_failed frames=%d error=%r", len(batch), exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                self._connected = True
                backoff = 0.2
                for _ in batch:
                    self._queue.popleft()
                self._metrics.frames_sent.inc(len(batch))
                self._metrics.backlog.set(len(self._queue))
        finally:
            await producer.stop()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until the queue is empty (shutdown). True if it emptied in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._queue and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return not self._queue
