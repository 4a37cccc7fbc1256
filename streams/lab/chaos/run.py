"""Run the simulator against real Kafka, Alertmanager, one ingest and N workers, with faults.

The lab: Apache Kafka (KRaft; or a broker given by address, then it cannot be
restarted), Alertmanager behind a ``StallingProxy``, ``peerwatch ingest`` and
``peerwatch worker`` processes on loopback, topics and consumer group of their
own. A few simulated jobs (one peer group each, an NVLink + bus fault in
each) stream over remote_write at a fixed pace while the schedule's faults
hit; afterwards the workers get time to catch up and re-send, and
``streams.lab.chaos.tally`` compares what they did with what the same samples give
in-process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer

from detectors.features import DEFAULT_BUCKET_MS
from streams.ingest.series import Series
from streams.lab.chaos.faults import Fault, parse_faults
from streams.lab.chaos.proxy import StallingProxy
from streams.lab.chaos.tally import (
    ChaosReport,
    Identity,
    Samples,
    decision_times,
    epoch_ms,
    identity,
    scored_buckets,
    tally,
)
from streams.lab.launchers import (
    LOOPBACK,
    Alertmanager,
    KafkaKRaft,
    PeerwatchProcess,
    free_port,
    peerwatch_env,
)
from streams.lab.simulator import ClusterConfig, NvlinkBusFault, generate, post_remote_write
from streams.settings import Settings
from streams.sinks.payloads import alert_labels
from streams.telemetry.logs import EventLog
from streams.worker.offline import score_rounds

log = EventLog("peerwatch.chaos")

BUCKET_MS = DEFAULT_BUCKET_MS
DEFAULT_FAULTS = (
    "kill-worker@60,am-stall@90:30,kill-ingest@150,restart-broker@210,am-outage@270:300"
)
GROUP_LABELS = ["train_job"]


@dataclass(frozen=True)
class ChaosPlan:
    """What to simulate and break. Times are wall seconds from the start of streaming."""

    groups: int = 6  # their names hash to 5 of 8 partitions
    nodes: int = 12  # per group
    rounds: int = 660  # scrape rounds (30 simulated s each)
    rounds_per_s: float = 1.0
    faults: tuple[Fault, ...] = field(default_factory=lambda: parse_faults(DEFAULT_FAULTS))
    workers: int = 2
    resend_s: float = 60.0  # the workers' Alertmanager re-send period
    partitions: int = 8  # of the frames topic (and the workers' table)
    ingest_wal: bool = False  # the ingest's write-ahead log (a 204 survives its kill -9)
    seed: int = 1

    def __post_init__(self) -> None:
        if self.groups < 1 or self.nodes < 4 or self.rounds < 10 or self.workers < 1:
            raise ValueError("need >= 1 group, >= 4 nodes, >= 10 rounds, >= 1 worker")
        if self.rounds_per_s <= 0:
            raise ValueError("rounds_per_s must be > 0")

    @property
    def stream_s(self) -> float:
        return self.rounds / self.rounds_per_s


def workload(plan: ChaosPlan, start_ms: int) -> list[ClusterConfig]:
    """One job per group, hosts of their own, each with a fault at its own time."""
    configs = []
    for i in range(plan.groups):
        host = f"c{i}n"
        onset_round = int(plan.rounds * (0.15 + 0.6 * i / plan.groups))
        configs.append(
            ClusterConfig(
                seed=plan.seed + i,
                cluster=f"chaos-{i}",
                job_name=f"chaos-{i}",
                job_nodes=plan.nodes,
                spares=0,
                host_prefix=host,
                start_ms=start_ms,
                checkpoint_interval_s=600.0,
                faults=(
                    NvlinkBusFault(
                        node=f"{host}{64 + plan.nodes // 3:03d}",
                        gpu=3,
                        onset_ms=start_ms + onset_round * BUCKET_MS + 7_000,
                    ),
                ),
            )
        )
    return configs


def rounds(configs: list[ClusterConfig], end_ms: int) -> Iterator[tuple[int, list[Series]]]:
    """Every job's scrape round ``t``, as one round of the whole fleet."""
    for items in zip(*(generate(c, end_ms=end_ms) for c in configs), strict=True):
        yield items[0][0], [s for _, series in items for s in series]


def expected_outcome(
    plan: ChaosPlan, start_ms: int
) -> tuple[dict[tuple[str, int], int], list[tuple[str, Identity, int]]]:
    """Buckets (with their node counts) and alert changes of the in-process pipeline."""
    configs = workload(plan, start_ms)
    end_ms = start_ms + plan.rounds * BUCKET_MS
    buckets: dict[tuple[str, int], int] = {}
    changes: list[tuple[str, Identity, int]] = []
    for _, scored in score_rounds(rounds(configs, end_ms), Settings(group_labels=GROUP_LABELS)):
        for item in scored:
            if not item.ended:  # a group's end scores no bucket, it only resolves
                buckets[(item.bucket.group, item.bucket.ts)] = len(item.bucket.frames)
            changes += [(c.status, identity(alert_labels(c)), c.bucket_ts) for c in item.changes]
    return buckets, changes


class _CountingTransport(httpx.AsyncHTTPTransport):
    """Counts the sender's request outcomes: HTTP status, or the error's name."""

    def __init__(self, outcomes: Counter[str]) -> None:
        super().__init__()
        self.outcomes = outcomes

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx.TransportError as exc:
            self.outcomes[type(exc).__name__] += 1
            raise
        self.outcomes[str(response.status_code)] += 1
        return response


_OUTCOME = re.compile(r'^peerwatch_ingest_samples_total\{outcome="([^"]+)"\} (\S+)$', re.M)


async def _ingest_outcomes(client: httpx.AsyncClient, url: str) -> dict[str, float] | None:
    """The ingest's samples by outcome (accepted, or a drop reason) from its /metrics."""
    try:
        page = (await client.get(url, timeout=2.0)).text
    except httpx.HTTPError:
        return None
    return {m[1]: float(m[2]) for m in _OUTCOME.finditer(page)}


class Lab:
    """The processes of one chaos run and the faults that hit them."""

    def __init__(self, plan: ChaosPlan, workdir: Path, kafka_bootstrap: str | None) -> None:
        self.plan = plan
        self.workdir = workdir
        self.kafka = None if kafka_bootstrap else KafkaKRaft(workdir / "kafka")
        self.bootstrap = kafka_bootstrap or self.kafka.bootstrap  # type: ignore[union-attr]
        self.alertmanager = Alertmanager(workdir / "alertmanager")
        self.proxy = StallingProxy(self.alertmanager.port)
        run = uuid.uuid4().hex[:8]
        self.ingest_port = free_port()
        self.env = peerwatch_env(
            self.bootstrap,
            topics=f"chaos-{run}",
            app_id=f"peerwatch-chaos-{run}",
            group_labels=GROUP_LABELS,
            ingest_port=self.ingest_port,
            alert_resend_s=plan.resend_s,
            topic_partitions=plan.partitions,
        )
        self.alerts_topic = self.env["PEERWATCH_TOPIC_ALERTS"]
        # the log (on by default) in the lab's directory, or off as the plan says
        ingest_env = self.env | peerwatch_env(
            self.bootstrap, ingest_wal=plan.ingest_wal, ingest_wal_dir=workdir / "ingest-wal"
        )
        self.ingest = PeerwatchProcess(
            ["ingest"], ingest_env, workdir / "ingest.log", f"{self.ingest_url}/-/ready"
        )
        self.workers: dict[str, PeerwatchProcess] = {}
        self._worker_ports: dict[str, int] = {}
        self.am_unreachable: list[tuple[float, float]] = []  # wall-clock outage and stall spans
        self._ingest_gone: Counter[str] = Counter()  # samples by outcome, ingests killed
        self._ingest_last: dict[str, float] = {}  # the running ingest's, at the last scrape

    @property
    def ingest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ingest_port}"

    def worker(self, name: str) -> PeerwatchProcess:
        port = self._worker_ports.setdefault(name, free_port())
        env = self.env | peerwatch_env(
            self.bootstrap,
            alertmanager_url=f"http://{LOOPBACK}:{self.proxy.port}",
            worker_web_port=port,
            datadir=self.workdir / name,
        )
        url = f"http://{LOOPBACK}:{port}/metrics"
        return PeerwatchProcess(
            ["worker"], env, self.workdir / f"{name}.log", url, "peerwatch_worker_ready 1.0"
        )

    async def start(self) -> None:
        if self.kafka is not None:
            await asyncio.to_thread(self.kafka.start)
        await asyncio.to_thread(self.alertmanager.start)
        await self.proxy.start()
        starting = [asyncio.to_thread(self.ingest.start)]
        for i in range(self.plan.workers):
            name = f"w{i + 1}"
            self.workers[name] = self.worker(name)
            starting.append(asyncio.to_thread(self.workers[name].start))
        await asyncio.gather(*starting)

    async def stop(self) -> None:
        await asyncio.gather(
            *(asyncio.to_thread(w.stop) for w in self.workers.values()),
            asyncio.to_thread(self.ingest.stop),
        )
        await self.proxy.stop()
        await asyncio.to_thread(self.alertmanager.stop)
        if self.kafka is not None:
            await asyncio.to_thread(self.kafka.stop)

    async def scrape_ingest(self, client: httpx.AsyncClient) -> None:
        outcomes = await _ingest_outcomes(client, f"{self.ingest_url}/metrics")
        if outcomes is not None:
            self._ingest_last = outcomes

    @property
    def ingest_outcomes(self) -> dict[str, int]:
        """Samples by outcome over every ingest's life (a kill loses < 1 s of counting)."""
        total = self._ingest_gone + Counter(self._ingest_last)
        return {k: int(v) for k, v in sorted(total.items())}

    async def inject(self, fault: Fault, client: httpx.AsyncClient) -> None:
        log.info("fault_start", fault=fault)
        if fault.kind == "kill-worker":
            name = self.busiest_worker()
            self.workers[name].kill()
            self.workers[name] = self.worker(name)
            await asyncio.to_thread(self.workers[name].start)
        elif fault.kind == "kill-ingest":
            await self.scrape_ingest(client)
            self.ingest.kill()
            self._ingest_gone.update(self._ingest_last)
            self._ingest_last = {}
            await asyncio.to_thread(self.ingest.start)
        elif fault.kind == "restart-broker":
            if self.kafka is None:
                raise ValueError("restart-broker needs a broker the lab started itself")
            await asyncio.to_thread(self.kafka.stop)
            await asyncio.to_thread(self.kafka.start)
        elif fault.kind == "am-outage":
            began = time.time()
            await asyncio.to_thread(self.alertmanager.stop)
            await asyncio.sleep(fault.duration_s)
            await asyncio.to_thread(self.alertmanager.start)
            self.am_unreachable.append((began, time.time()))
        elif fault.kind == "am-stall":
            began = time.time()
            self.proxy.stall()
            await asyncio.sleep(fault.duration_s)
            self.proxy.resume()
            self.am_unreachable.append((began, time.time()))
        elif fault.kind == "worker-join":
            name = f"w{len(self.workers) + 1}"
            self.workers[name] = self.worker(name)
            await asyncio.to_thread(self.workers[name].start)
        elif fault.kind == "worker-leave":
            name = self.busiest_worker()
            await asyncio.to_thread(self.workers[name].stop)
        log.info("fault_end", fault=fault)

    def busiest_worker(self) -> str:
        """The running worker that has scored the most buckets (a kill must hit work)."""
        done = Counter(worker for worker, *_ in self.scored())
        return max((n for n, w in self.workers.items() if w.running), key=lambda n: done[n])

    def worker_logs(self) -> dict[str, str]:
        paths = {name: self.workdir / f"{name}.log" for name in self.workers}
        return {n: p.read_text(errors="replace") for n, p in paths.items() if p.exists()}

    def scored(self) -> list[tuple[str, str, int, int]]:
        return [
            row for name, text in self.worker_logs().items() for row in scored_buckets(name, text)
        ]


class _AlertmanagerWatch:
    """Every (label set, startsAt) Alertmanager has shown, polled several times a bucket."""

    def __init__(self, url: str, every_s: float) -> None:
        self.url = url
        self.every_s = every_s
        self.seen: dict[Identity, set[int]] = {}
        self.polls = self.failed = 0
        self.poll_times: list[float] = []  # wall time of every answered poll
        self.shown: dict[Identity, set[int]] = {}  # label set -> indices of polls showing it

    async def poll(self, client: httpx.AsyncClient) -> set[Identity] | None:
        try:
            reply = await client.get(
                f"{self.url}/api/v2/alerts", params={"filter": 'source="peerwatch"'}, timeout=2.0
            )
            reply.raise_for_status()
        except httpx.HTTPError:
            self.failed += 1
            return None
        self.polls += 1
        self.poll_times.append(time.time())
        active = set()
        for alert in reply.json():
            ident = identity(alert["labels"])
            active.add(ident)
            self.shown.setdefault(ident, set()).add(len(self.poll_times) - 1)
            self.seen.setdefault(ident, set()).add(epoch_ms(alert["startsAt"]))
        return active

    async def run(self, client: httpx.AsyncClient) -> None:
        while True:
            await self.poll(client)
            await asyncio.sleep(self.every_s)


async def _read_topic(bootstrap: str, topic: str, idle_s: float = 3.0) -> list[dict[str, Any]]:
    """The alert records of ``topic`` (not advice records, ``streams.sinks.advice``:
    those are no decisions)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[dict[str, Any]] = []
    try:
        while batch := await consumer.getmany(timeout_ms=int(idle_s * 1000)):
            for messages in batch.values():
                records.extend(r for m in messages if "labels" in (r := json.loads(m.value)))
    finally:
        await consumer.stop()
    return records


async def run_chaos(
    plan: ChaosPlan,
    workdir: Path,
    kafka_bootstrap: str | None = None,
    observe: Callable[[Lab], Coroutine[Any, Any, None]] | None = None,
) -> ChaosReport:
    """Stream, break, settle, count. ``kafka_bootstrap``: use that broker (no restart fault).
    ``observe(lab)`` runs from the lab's start to its stop (the soak samples memory and lag)."""
    workdir.mkdir(parents=True, exist_ok=True)
    lab = Lab(plan, workdir, kafka_bootstrap)
    now_ms = int(time.time() * 1000)
    # Start in the past so the run ends before the present (the ingest refuses the future).
    start_ms = (now_ms - (plan.rounds + 4) * BUCKET_MS) // BUCKET_MS * BUCKET_MS
    configs = workload(plan, start_ms)
    outcomes: Counter[str] = Counter()
    samples = Samples()
    # An alert may live one bucket: poll several times per bucket of wall time.
    watch = _AlertmanagerWatch(lab.alertmanager.url, min(1.0, 0.2 / plan.rounds_per_s))
    await lab.start()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1)
    background: list[asyncio.Task[None]] = []
    try:
        async with (
            httpx.AsyncClient(timeout=30.0, transport=_CountingTransport(outcomes)) as sender,
            httpx.AsyncClient() as client,
        ):
            background.append(asyncio.create_task(watch.run(client)))
            background.append(asyncio.create_task(_scrape_forever(lab, client)))
            if observe is not None:
                background.append(asyncio.create_task(observe(lab)))
            loop = asyncio.get_running_loop()
            started = loop.time()
            faults = [
                asyncio.create_task(_at(started + f.at_s, lab.inject(f, client)))
                for f in plan.faults
            ]
            end_ms = start_ms + plan.rounds * BUCKET_MS
            for i, (_, series) in enumerate(rounds(configs, end_ms)):
                await asyncio.sleep(max(0.0, started + i / plan.rounds_per_s - loop.time()))
                await post_remote_write(f"{lab.ingest_url}/api/v1/write", series, sender)
                samples.sent += sum(len(s.samples) for s in series)
            log.info("streaming_done", rounds=plan.rounds, samples=samples.sent)
            expected = loop.run_in_executor(pool, expected_outcome, plan, start_ms)
            await asyncio.gather(*faults)
            await _settle(lab, plan, expected)
            expected_buckets, expected_changes = await expected
            await lab.scrape_ingest(client)
            am_final = await watch.poll(client) or set()
            decided = await _read_topic(lab.bootstrap, lab.alerts_topic)
    finally:
        for task in background:
            task.cancel()
        pool.shutdown(cancel_futures=True)
        await lab.stop()
    samples.requests = dict(outcomes)
    samples.ingest = lab.ingest_outcomes
    scored = lab.scored()
    observed = {
        "decided": decided,
        "am_seen": [[dict(i), sorted(starts)] for i, starts in watch.seen.items()],
        "am_final": [dict(i) for i in am_final],
        "am_polls": watch.polls,
        "am_polls_failed": watch.failed,
        "scored": scored,
        "expected_buckets": [[*k, v] for k, v in sorted(expected_buckets.items())],
        "expected_changes": [[st, dict(i), ts] for st, i, ts in expected_changes],
        "am_unreachable": lab.am_unreachable,
        "am_poll_times": watch.poll_times,
        "am_shown": [[dict(i), sorted(polls)] for i, polls in watch.shown.items()],
    }
    (workdir / "observed.json").write_text(json.dumps(observed, indent=1))
    return tally(
        faults=[str(f) for f in plan.faults],
        samples=samples,
        expected_buckets=expected_buckets,
        scored=scored,
        expected_changes=expected_changes,
        decided=decided,
        am_seen=watch.seen,
        am_final=am_final,
        decision_times=decision_times(lab.worker_logs().values()),
        am_unreachable=lab.am_unreachable,
        am_polls=(watch.poll_times, watch.shown),
    )


async def _at(when: float, action: Any) -> None:
    await asyncio.sleep(max(0.0, when - asyncio.get_running_loop().time()))
    await action


async def _scrape_forever(lab: Lab, client: httpx.AsyncClient) -> None:
    while True:
        with contextlib.suppress(Exception):
            await lab.scrape_ingest(client)
        await asyncio.sleep(1.0)


async def _settle(lab: Lab, plan: ChaosPlan, expected: asyncio.Future[Any]) -> None:
    """Let the last buckets close (ingest idle flush + grace) and the outboxes re-send: at
    least one re-send period plus the sinks' longest backoff, then until every expected
    bucket has been scored (or a deadline: then the report says what was never scored)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    earliest = began + max(40.0, plan.resend_s + 35.0)
    deadline = began + max(150.0, plan.resend_s + 90.0)
    while loop.time() < deadline:
        if loop.time() >= earliest and expected.done():
            scored = {(group, ts) for _, group, ts, _ in lab.scored()}
            if scored >= set(expected.result()[0]):
                return
        await asyncio.sleep(1.0)
    log.warning(
        "settle_deadline",
        waited_s=round(loop.time() - began),
        why="some expected buckets were not scored in time",
    )
