"""Job membership from the scheduler: which nodes run which job, as JSON events.

Labels are the default source of a node's peer group (``frames``). A scheduler
knows better and sooner: Slurm's prolog/epilog, a Kubernetes operator or
Backend.AI's session events say when a job starts on which nodes, when a spare
is swapped in and when the job ends. peerwatch takes them as one JSON object
per event, from a file (JSON lines, appended to; ``membership_file``) or from a
Kafka topic (``topic_jobs``, key = job)::

    {"job": "llm-42", "state": "running", "nodes": ["gpu064", "gpu065"], "ts": 1764547200000}
    {"job": "llm-42", "state": "ended", "ts": 1764550800000}

``running`` states the job's whole node list (a resize or a spare swap is a new
``running`` event; nodes missing from it left the job), ``ended`` that every
node left it. ``ts`` (ms) orders a job's events: an older one than the last
applied for the job is ignored (a redelivery). An assigned node is in its job
whatever its series' labels say; a node that leaves falls back to its labels.

Errors: a line that is not such an event raises :class:`MembershipError` with
the reason; the sources log it and go on with the next line.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from detectors.checks import check_name
from detectors.errors import InputError
from streams.kafka.options import client_options, start_client
from streams.retry import RetryCallState, doubling, retrying
from streams.settings import Settings
from streams.telemetry.logs import EventLog

__all__ = [
    "JobMembership",
    "MembershipError",
    "MembershipEvent",
    "MembershipFile",
    "MembershipFollower",
    "parse_event",
]

log = EventLog("peerwatch.membership")

JobState = Literal["running", "ended"]
MAX_NODES_PER_JOB = 100_000  # a bound on one event, far above any gang
RECONNECT_S = 0.5  # pause after a membership consumer that worked dies, then a fresh backoff


class MembershipError(InputError):
    """A membership event that cannot be read."""


@dataclass(frozen=True)
class MembershipEvent:
    job: str
    state: JobState
    nodes: frozenset[str]
    ts: int


def _name(value: object, what: str) -> str:
    return check_name(value, what, MembershipError)


def parse_event(raw: str | bytes) -> MembershipEvent:
    """One event from its JSON text (see the module docstring for the schema)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise MembershipError(f"not JSON: {exc}") from None
    except RecursionError:  # json's answer to deep nesting: no ValueError, so say it here
        raise MembershipError("nested too deeply to be an event") from None
    if not isinstance(data, dict):
        raise MembershipError(f"an event is a JSON object, got {type(data).__name__}")
    job = _name(data.get("job"), "job")
    state = data.get("state")
    if state not in ("running", "ended"):
        raise MembershipError(f"state must be 'running' or 'ended', got {state!r:.80}")
    ts = data.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < 1 << 53:
        raise MembershipError(f"ts must be epoch milliseconds (an integer), got {ts!r:.80}")
    raw_nodes = data.get("nodes", [])
    if not isinstance(raw_nodes, list):
        raise MembershipError("nodes must be a list of node names")
    if len(raw_nodes) > MAX_NODES_PER_JOB:
        raise MembershipError(f"more than {MAX_NODES_PER_JOB} nodes in one event")
    nodes = frozenset(_name(n, "a node name") for n in raw_nodes)
    if state == "running" and not nodes:
        raise MembershipError("a running job needs its nodes")
    return MembershipEvent(job, state, nodes, ts)


@dataclass
class JobMembership:
    """The scheduler's current view: job -> nodes, node -> job, built from events in order."""

    jobs: dict[str, frozenset[str]] = field(default_factory=dict)
    node_job: dict[str, str] = field(default_factory=dict)
    _last_ts: dict[str, int] = field(default_factory=dict)

    def apply(self, event: MembershipEvent) -> dict[str, str | None]:
        """Apply one event; returns the nodes whose job changed (None: in no job now)."""
        last = self._last_ts.get(event.job)
        if last is not None and event.ts < last:
            return {}
        self._last_ts[event.job] = event.ts
        old = self.jobs.get(event.job, frozenset())
        new = event.nodes if event.state == "running" else frozenset()
        changes: dict[str, str | None] = {}
        for node in sorted(old - new):
            if self.node_job.get(node) == event.job:
                del self.node_job[node]
                changes[node] = None
        for node in sorted(new):
            if self.node_job.get(node) != event.job:
                previous = self.node_job.get(node)
                if previous is not None:  # one node, one job: the newer event wins
                    self.jobs[previous] = self.jobs[previous] - {node}
                self.node_job[node] = event.job
                changes[node] = event.job
        if new:
            self.jobs[event.job] = new
        else:
            self.jobs.pop(event.job, None)
        return changes

    def apply_all(self, events: Iterable[MembershipEvent]) -> dict[str, str | None]:
        changes: dict[str, str | None] = {}
        for event in events:
            changes.update(self.apply(event))
        return changes


class MembershipFile:
    """A JSON-lines file of events that the scheduler appends to; ``poll`` reads what is new.

    A file that was replaced or truncated is read again from its start (the
    caller gets every event again; applying them again changes nothing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._inode: int | None = None
        self._offset = 0
        self._line = 0  # lines read so far (for error messages)
        self._partial = b""

    def poll(self) -> Iterator[MembershipEvent]:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._offset, self._line, self._partial = stat.st_ino, 0, 0, b""
        if stat.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read(stat.st_size - self._offset)
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        for line in lines:
            self._line += 1
            if not line.strip():
                continue
            try:
                yield parse_event(line)
            except MembershipError as exc:
                log.warning(
                    "membership_event_rejected", file=self.path, line=self._line, reason=str(exc)
                )


# --- following the sources ----------------------------------------------------------------------


class MembershipFollower:
    """Applies the scheduler's events to ``assign(node, job | None)`` as they come.

    Sources: a JSON-lines file polled every ``poll_s`` seconds, and/or a Kafka
    topic read from its beginning by every ingest replica (no consumer group:
    each replica needs the whole table). Bad events are logged and skipped;
    an unreachable broker is retried with backoff while the file source goes on.
    """

    def __init__(
        self,
        assign: Callable[[str, str | None], None],
        *,
        path: str | Path | None = None,
        kafka: Settings | None = None,
        topic: str | None = None,
        poll_s: float = 2.0,
    ) -> None:
        self._assign = assign
        self.table = JobMembership()
        self._file = MembershipFile(path) if path else None
        self._kafka, self._topic = kafka, topic
        self._poll_s = poll_s

    def apply(self, event: MembershipEvent) -> None:
        for node, job in self.table.apply(event).items():
            self._assign(node, job)
            log.info("membership_changed", node=node, job=job)

    def poll_file(self) -> None:
        if self._file is not None:
            for event in self._file.poll():
                self.apply(event)

    async def run(self) -> None:
        tasks = []
        if self._file is not None:
            tasks.append(asyncio.create_task(self._follow_file(), name="membership-file"))
        if self._kafka and self._topic:
            tasks.append(asyncio.create_task(self._follow_topic(), name="membership-topic"))
        if tasks:
            await asyncio.gather(*tasks)

    async def _follow_file(self) -> None:
        while True:
            self.poll_file()
            await asyncio.sleep(self._poll_s)

    async def _follow_topic(self) -> None:
        assert self._kafka is not None and self._topic is not None  # run() checked both
        while True:  # a fresh backoff after every connection that worked
            consumer = await self._consumer()
            try:
                async for message in consumer:
                    try:
                        self.apply(parse_event(message.value or b""))
                    except MembershipError as exc:
                        log.warning(
                            "membership_event_rejected",
                            topic=message.topic,
                            partition=message.partition,
                            offset=message.offset,
                            reason=str(exc),
                        )
            except KafkaError as exc:
                log.warning("membership_topic_unavailable", topic=self._topic, error=exc)
            finally:
                await consumer.stop()
            await asyncio.sleep(RECONNECT_S)

    async def _consumer(self) -> AIOKafkaConsumer:
        """A consumer of the membership topic from its start, once Kafka takes it."""
        assert self._kafka is not None and self._topic is not None
        kafka, topic = self._kafka, self._topic

        async def start() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                topic,
                **client_options(kafka),
                group_id=None,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            try:
                await start_client(consumer, kafka)
            except BaseException:
                await consumer.stop()
                raise
            return consumer

        def unavailable(attempt: RetryCallState) -> None:
            error = attempt.outcome.exception() if attempt.outcome else None
            log.warning("membership_topic_unavailable", topic=topic, error=error)

        return await retrying(doubling(0.5, 30.0), on=KafkaError, before_sleep=unavailable)(start)
