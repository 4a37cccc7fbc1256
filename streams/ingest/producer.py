"""Put built frames on Kafka, holding them while the broker is away.

Frames are queued in memory and sent in order by one background task; a frame
leaves the queue only after Kafka acknowledged it (acks=all). While the broker
is unreachable the task retries with backoff, and the ingest answers 503 once
the backlog passes its limit, so Prometheus keeps (and later re-sends) what we
could not take instead of it being lost.

Each frame of a batch has its own outcome: acknowledged frames leave the queue,
frames hit by a retriable error are sent again (only they, so no duplicates), and
a frame Kafka can never take (larger than ``max_request_size`` or the topic's
``max.message.bytes``) is logged, counted and dropped rather than wedging the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from streams.frames import Frame, encode_frame
from streams.kafka.options import client_options, start_client
from streams.retry import RetryCallState, doubling, retrying
from streams.settings import Settings
from streams.telemetry.logs import EventLog
from streams.telemetry.metrics import IngestMetrics

log = EventLog("peerwatch.ingest")

IDLE_PROBE_S = 2.0  # with nothing to send, ask Kafka for metadata this often (readiness)
PROBE_TIMEOUT_S = 5.0

# Sending such a frame again cannot help: it is (or its batch was) over a size limit.
_TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError)


class FrameProducer:
    def __init__(
        self,
        kafka: Settings,
        topic: str,
        metrics: IngestMetrics,
        *,
        max_backlog: int = 200_000,
        batch: int = 2_000,
    ) -> None:
        self._kafka = kafka
        self._bootstrap = kafka.broker_host_port  # for log lines
        self._topic = topic
        self._metrics = metrics
        self._max_backlog = max_backlog
        self._batch = batch
        self._queue: deque[Frame] = deque()
        self._enqueued = 0
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
    def backlog_full(self) -> bool:
        return len(self._queue) >= self._max_backlog

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def sequence(self) -> int:
        """Frames enqueued so far."""
        return self._enqueued

    @property
    def left_queue(self) -> int:
        """How many of them have left the queue (acknowledged or dropped), oldest first."""
        return self._enqueued - len(self._queue)

    def enqueue(self, frames: Iterable[Frame]) -> None:
        before = len(self._queue)
        self._queue.extend(frames)
        self._enqueued += len(self._queue) - before
        self._metrics.backlog.set(len(self._queue))
        if self._queue:
            self._wake.set()

    async def _connect(self) -> AIOKafkaProducer:
        async for attempt in retrying(
            doubling(0.5, 10.0), on=KafkaError, before_sleep=self._kafka_unavailable
        ):
            with attempt:
                producer = AIOKafkaProducer(
                    **client_options(self._kafka),
                    acks="all",
                    linger_ms=5,
                    max_batch_size=1 << 20,
                    request_timeout_ms=10_000,
                )
                await start_client(producer, self._kafka)
        log.info("kafka_connected", bootstrap=self._bootstrap)
        self._connected = True
        return producer

    def _kafka_unavailable(self, attempt: RetryCallState) -> None:
        error = attempt.outcome.exception() if attempt.outcome else None
        log.warning("kafka_unavailable", bootstrap=self._bootstrap, error=error)
        self._metrics.kafka_errors.inc()

    async def _send_batch(
        self, producer: AIOKafkaProducer, frames: list[Frame]
    ) -> tuple[list[Frame], KafkaError | None]:
        """Send ``frames``: the ones to send again (in order) and the error that kept them."""
        pending: list[tuple[Frame, asyncio.Future[object]]] = []
        unsent: list[Frame] = []
        error: KafkaError | None = None
        for i, frame in enumerate(frames):
            try:
                pending.append((frame, await self._send(producer, frame)))
            except _TOO_LARGE as exc:  # the client's own size check
                self._drop(frame, exc)
            except KafkaError as exc:  # e.g. no metadata: the rest of the batch waits
                unsent, error = frames[i:], exc
                break
        results = await asyncio.gather(*(f for _, f in pending), return_exceptions=True)
        retry: list[Frame] = []
        rejected: list[Frame] = []
        for (frame, _), result in zip(pending, results, strict=True):
            if isinstance(result, _TOO_LARGE):
                rejected.append(frame)
            elif isinstance(result, KafkaError):
                retry.append(frame)
                error = error or result
            elif isinstance(result, BaseException):
                raise result
        self._metrics.frames_sent.inc(len(pending) - len(retry) - len(rejected))
        for frame in rejected:
            # The broker refused a record batch; it may hold small frames too, so
            # each is sent alone: what is refused alone is the frame's own fault.
            try:
                await (await self._send(producer, frame))
            except _TOO_LARGE as exc:
                self._drop(frame, exc)
            except KafkaError as exc:
                retry.append(frame)
                error = error or exc
            else:
                self._metrics.frames_sent.inc()
        return retry + unsent, error

    async def _send(self, producer: AIOKafkaProducer, frame: Frame) -> asyncio.Future[object]:
        future: asyncio.Future[object] = await producer.send(
            self._topic, encode_frame(frame), key=frame.group.encode()
        )
        return future

    def _drop(self, frame: Frame, exc: KafkaError) -> None:
        self._metrics.frames_dropped.labels(reason="too_large").inc()
        log.error(
            "frame_dropped",
            reason="too_large",
            group=frame.group[:80],
            node=frame.node[:80],
            ts=frame.ts,
            bytes=len(encode_frame(frame)),
            error=str(exc)[:200],
        )

    async def run(self) -> None:
        """Send forever; frames that failed to send stay at the head of the queue and are retried.

        Anything but a Kafka error is a bug: it is recorded in ``failed`` (the
        ingest then answers 503 and reports not ready) and re-raised for the
        supervisor to log; the queue stays, and a new ``run()`` resumes it.
        """
        self.failed = None
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.failed = exc
            self._connected = False
            raise

    async def _run(self) -> None:
        producer = await self._connect()
        try:
            while True:
                if not self._queue:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), IDLE_PROBE_S)
                    except TimeoutError:
                        await self._probe(producer)
                        continue
                # each attempt sends the head of the queue as it is by then
                await retrying(doubling(0.2, 10.0), until=lambda error: error is None)(
                    self._send_head, producer
                )
                self._connected = True
        finally:
            await producer.stop()

    async def _send_head(self, producer: AIOKafkaProducer) -> KafkaError | None:
        """Send the head of the queue; what Kafka did not take goes back to the front."""
        batch = [self._queue[i] for i in range(min(self._batch, len(self._queue)))]
        retry, error = await self._send_batch(producer, batch)
        for _ in batch:
            self._queue.popleft()
        self._queue.extendleft(reversed(retry))
        self._metrics.backlog.set(len(self._queue))
        if error is not None:
            self._connected = False
            self._metrics.kafka_errors.inc()
            log.warning("kafka_send_failed", frames=len(retry), error=error)
        return error

    async def _probe(self, producer: AIOKafkaProducer) -> None:
        """Kafka's answer to a metadata request decides ``connected`` while nothing is sent:
        an idle ingest must not report ready for a broker that went away (nor stay down)."""
        try:
            await asyncio.wait_for(producer.client.fetch_all_metadata(), PROBE_TIMEOUT_S)
        except (KafkaError, TimeoutError) as exc:
            if self._connected:
                log.warning("kafka_unreachable", bootstrap=self._bootstrap, error=exc)
            self._connected = False
        else:
            if not self._connected:
                log.info("kafka_reachable", bootstrap=self._bootstrap)
            self._connected = True

    async def drain(self, timeout_s: float) -> bool:
        """Wait until the queue is empty (shutdown). True if it emptied in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._queue and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return not self._queue
