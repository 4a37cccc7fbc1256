"""Fault onset to Alertmanager, on the real processes: where the time goes.

    python -m bench.e2e_latency [--jobs 4] [--nodes 60] [--warmup-min 6] [--speed 1]

Apache Kafka (KRaft, ``scripts/kafka/kafka-kraft``; or ``--kafka host:port``), Debian's
Alertmanager, ``peerwatch ingest`` and ``peerwatch worker`` run as child processes on
loopback. ``--jobs`` simulated jobs (``--nodes`` nodes + 3 spares each, their own peer
groups) are remote-written to the ingest: ``--warmup-min`` minutes of history as fast as
the ingest takes them, then live, in real time, the way Prometheus sends: every sample
leaves at its scrape time (each target's own phase in the 30-s interval) through a
remote_write queue that sends 2,000 samples at once or whatever waited 5 s
(``max_samples_per_send`` and ``batch_send_deadline``, Prometheus' defaults). In the live
part each job gets one NVLink + bus fault (XID 145 then 79) on one node, onsets spread
over the scrape phase.

For the first firing of every alert of a faulty job the run lines up (all on this
machine's one clock):

- onset: the simulator's truth;
- the alert's bucket end (the bucket the detectors decided it on);
- the closing sample: the first sample the ingest got with a time past that bucket's end
  plus ``ingest_grace_s`` (its watermark then closes the bucket), its scrape time and when
  the ingest acknowledged its remote_write request;
- the frames of that bucket on Kafka (record CreateTime, from a consumer of the frames
  topic), the worker's ``bucket_scored`` and ``alert_firing`` log lines (JSON logs);
- Alertmanager's ``updatedAt`` for the alert (when it received it; read by polling
  ``/api/v2/alerts``).

and splits onset -> Alertmanager into **bucket** (onset to the end of the alert's bucket:
bucketing and the detector's own evidence), **grace** (bucket end to the closing
sample's scrape: ``ingest_grace_s`` rounded up to the next scrape), **scrape/remote_write**
(the closing sample's scrape to its request's acknowledgement) and **processing**
(acknowledgement to Alertmanager: flush, Kafka, Faust, detectors, the sink's POST).

Yardsticks from the same run: the design's floor for the waiting part (bucket end +
``ingest_grace_s`` - onset: no implementation can alert before its watermark closes the
bucket), and for processing a minimal forwarder: a plain aiokafka consumer of the same
frames topic that POSTs one alert per victim frame straight to the same Alertmanager
(frame CreateTime -> ``updatedAt``), beside peerwatch's frame-on-Kafka -> Alertmanager.

``--speed S`` runs the live part S x faster than real time (simulated clock ahead of
the wall clock; the ingest's grace and the buckets are event time, so the pipeline
keeps up): for the smoke test only; its seconds are not a fleet's. No figure here is
asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer

from bench.worker import _quantile
from streams.frames import FrameError, decode_frame
from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.lab.launchers import (
    Alertmanager,
    KafkaKRaft,
    PeerwatchProcess,
    free_port,
    peerwatch_env,
)
from streams.lab.simulator import ClusterConfig, NvlinkBusFault, generate
from streams.lab.simulator.run import MAX_SAMPLES_PER_SEND, REMOTE_WRITE_HEADERS

BUCKET_MS = 30_000
SEND_DEADLINE_S = 5.0  # Prometheus' queue_config.batch_send_deadline
INGEST_GRACE_S = 15.0  # the ingest's default ingest_grace_s, set explicitly below
POLL_S = 0.1  # Alertmanager is read this often
BASELINE_SOURCE = "e2e-baseline"


@dataclass(frozen=True)
class Job:
    config: ClusterConfig
    victim: str
    onset_ms: int


@dataclass
class Observed:
    """Timestamps seen during the run, on the wall clock (seconds) unless named ``_ms``."""

    requests: list[tuple[list[int], float]] = field(default_factory=list)  # live: ts, acked
    frames: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # CreateTime
    baseline: dict[tuple[str, int], float] = field(default_factory=dict)  # victim frame -> sent
    alerts: dict[str, dict] = field(default_factory=dict)  # fingerprint -> first seen
    stages: dict[str, float] = field(default_factory=dict)  # wall seconds of the run's parts


# --- the simulated jobs and their sender --------------------------------------------------------


def plan(
    jobs: int, nodes: int, warmup_min: float, live_s: float, speed: float
) -> tuple[list[Job], SimClock]:
    """``jobs`` jobs whose history starts ``warmup_min`` simulated minutes before the live
    part, and the live part's clock: ``speed`` x the wall clock, never ahead of it (the
    ingest refuses samples from the future); at speed 1 the simulated clock is the wall's."""
    now = time.time()
    live_start = int((now - live_s * (speed - 1)) * 1000)
    clock = SimClock(live_start, now, speed)
    start = (live_start - int(warmup_min * 60_000)) // BUCKET_MS * BUCKET_MS
    live_bucket = -(-live_start // BUCKET_MS) * BUCKET_MS
    out = []
    for k in range(jobs):
        # two onsets per bucket, at phases 7, 18, 29, 10, ... s into them
        onset = live_bucket + (k // 2 + 1) * BUCKET_MS + (7_000 + 11_000 * k) % BUCKET_MS
        first_host = 100 + k * (nodes + 3)  # every job on hosts of its own
        victim = f"gpu{first_host + (17 * k + 5) % nodes:03d}"
        config = ClusterConfig(
            first_host_number=first_host,
            seed=100 + k,
            job_name=f"e2e-{uuid.uuid4().hex[:6]}-{k}",
            job_nodes=nodes,
            start_ms=start,
            checkpoint_interval_s=420.0,
            faults=(NvlinkBusFault(node=victim, gpu=3, onset_ms=onset),),
        )
        out.append(Job(config, victim, onset))
    return out, clock


def rounds(jobs: Sequence[Job]) -> Iterator[tuple[int, list[Series]]]:
    """Every job's scrape round at each ``t``, merged."""
    for together in zip(*(generate(j.config) for j in jobs), strict=True):
        yield together[0][0], [s for _, series in together for s in series]


class Sender:
    """A Prometheus remote_write queue on one shard: samples enter at their scrape time,
    leave in requests of ``MAX_SAMPLES_PER_SEND`` or after ``SEND_DEADLINE_S``."""

    def __init__(self, url: str, client: httpx.AsyncClient, clock: SimClock, seen: Observed):
        self.url, self.client, self.clock, self.seen = url, client, clock, seen
        self.pending: list[Series] = []
        self.oldest_ms: int | None = None

    async def post(self, series: list[Series], live: bool) -> None:
        body = encode_write_request(series)
        while True:
            reply = await self.client.post(self.url, content=body, headers=REMOTE_WRITE_HEADERS)
            if reply.status_code < 300:
                break
            if reply.status_code < 500:
                raise RuntimeError(f"remote_write refused: {reply.status_code} {reply.text}")
            await asyncio.sleep(0.05)  # 503: the ingest is busy, send again
        if live:
            self.seen.requests.append((sorted(s.samples[0][0] for s in series), time.time()))

    async def history(self, series: list[Series]) -> None:
        for i in range(0, len(series), MAX_SAMPLES_PER_SEND):
            await self.post(series[i : i + MAX_SAMPLES_PER_SEND], live=False)

    async def live(self, series: list[Series]) -> None:
        """One round, each sample no earlier than its scrape time."""
        for s in sorted(series, key=lambda s: s.samples[0][0]):
            ts = s.samples[0][0]
            while self.oldest_ms is not None and self.oldest_ms + SEND_DEADLINE_S * 1000 <= ts:
                await self.clock.until(self.oldest_ms + SEND_DEADLINE_S * 1000)
                await self.flush()
            await self.clock.until(ts)
            self.pending.append(s)
            self.oldest_ms = ts if self.oldest_ms is None else self.oldest_ms
            if len(self.pending) >= MAX_SAMPLES_PER_SEND:
                await self.flush()

    async def flush(self) -> None:
        batch, self.pending, self.oldest_ms = self.pending, [], None
        if batch:
            await self.post(batch, live=True)


@dataclass
class SimClock:
    """Simulated ms -> wall seconds: ``wall = wall0 + (sim - sim0) / speed``."""

    sim0_ms: int
    wall0: float
    speed: float

    def wall(self, sim_ms: float) -> float:
        return self.wall0 + (sim_ms - self.sim0_ms) / 1000.0 / self.speed

    async def until(self, sim_ms: float) -> None:
        delay = self.wall(sim_ms) - time.time()
        if delay > 0.002:
            await asyncio.sleep(delay)


async def send(url: str, jobs: Sequence[Job], clock: SimClock, end_ms: int, seen: Observed) -> None:
    """The rounds that ended before the live part as fast as the ingest takes them, then
    the rest live, up to ``end_ms``."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        sender = Sender(url, client, clock, seen)
        started = time.time()
        for t, series in rounds(jobs):
            if t >= end_ms:
                break
            if t + BUCKET_MS <= clock.sim0_ms:
                await sender.history(series)
                continue
            if "history" not in seen.stages:
                seen.stages["history"] = time.time() - started
            await sender.live(series)
        await sender.flush()


# --- what the run shows --------------------------------------------------------------------------


async def watch_frames(
    bootstrap: str, topic: str, victims: dict[str, str], am_url: str, seen: Observed
) -> None:
    """Every frame's CreateTime by (group, bucket); each victim frame also goes straight
    to Alertmanager (the minimal forwarder)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            async for message in consumer:
                try:
                    frame = decode_frame(message.value)
                except FrameError:
                    continue
                if not frame.node:
                    continue  # a tick
                created = message.timestamp / 1000.0
                seen.frames.setdefault((frame.group, frame.ts), []).append(created)
                if victims.get(frame.group) == frame.node:
                    alert = {
                        "labels": {
                            "alertname": "E2eBaselineFrame",
                            "source": BASELINE_SOURCE,
                            "group": frame.group,
                            "bucket": str(frame.ts),
                        },
                        "annotations": {"created": str(created)},
                    }
                    (await client.post(f"{am_url}/api/v2/alerts", json=[alert])).raise_for_status()
                    seen.baseline[(frame.group, frame.ts)] = created
    finally:
        await consumer.stop()


async def watch_alertmanager(url: str, seen: Observed) -> None:
    """The first sighting of every alert, with Alertmanager's ``updatedAt`` then."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            reply = await client.get(f"{url}/api/v2/alerts")
            for alert in reply.json():
                seen.alerts.setdefault(alert["fingerprint"], alert)
            await asyncio.sleep(POLL_S)


def epoch_s(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def worker_events(log: Path) -> tuple[dict[tuple[str, int], float], dict[tuple, tuple[int, float]]]:
    """From the worker's JSON log: when each (group, bucket) was scored, and each alert's
    first firing (its bucket and when)."""
    scored: dict[tuple[str, int], float] = {}
    firing: dict[tuple, tuple[int, float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        message: str = record.get("message", "")
        event, _, rest = message.partition(" ")
        if event not in ("bucket_scored", "alert_firing"):
            continue
        kv = dict(p.split("=", 1) for p in rest.split(" ") if "=" in p)
        at = epoch_s(record["time"])
        if event == "bucket_scored":
            scored.setdefault((kv["group"], int(kv["bucket"])), at)
        else:
            node = None if kv["node"] == "None" else kv["node"]
            firing.setdefault((kv["group"], kv["alertname"], node), (int(kv["bucket"]), at))
    return scored, firing


@dataclass(frozen=True)
class Timeline:
    group: str
    alert: str
    bucket_s: float  # onset -> end of the alert's bucket
    grace_s: float  # bucket end -> the closing sample's scrape
    remote_write_s: float  # that scrape -> its request acknowledged
    processing_s: float  # acknowledged -> Alertmanager
    ingest_s: float  # acknowledged -> last frame of the bucket on Kafka
    worker_s: float  # last frame on Kafka -> bucket scored (Faust + detectors)
    sink_s: float  # scored -> Alertmanager received it
    floor_s: float  # bucket end + ingest_grace_s - onset: the design's wait
    kafka_to_am_s: float  # last frame on Kafka -> Alertmanager

    @property
    def total_s(self) -> float:
        return self.bucket_s + self.grace_s + self.remote_write_s + self.processing_s


def closing_sample(seen: Observed, after_ms: int) -> tuple[int, float] | None:
    """The first acknowledged request holding a sample at or after ``after_ms``: that
    sample's scrape time and the acknowledgement."""
    for stamps, acked in sorted(seen.requests, key=lambda r: r[1]):
        later = [ts for ts in stamps if ts >= after_ms]
        if later:
            return later[0], acked
    return None


def timelines(jobs: Sequence[Job], seen: Observed, clock: SimClock, log: Path) -> list[Timeline]:
    """One timeline per alert of a faulty job that fired at or after its fault's bucket."""
    scored, firing = worker_events(log)
    received: dict[tuple, float] = {}
    for alert in seen.alerts.values():
        labels = alert["labels"]
        if labels.get("source") == "peerwatch":
            key = (labels.get("group"), labels["alertname"], labels.get("node"))
            received[key] = min(received.get(key, math.inf), epoch_s(alert["updatedAt"]))
    by_group = {j.config.job_name: j for j in jobs}
    span = 1.0 / 1000.0 / clock.speed  # simulated ms -> wall seconds
    out = []
    for (group, alertname, node), (bucket, _) in sorted(firing.items()):
        job = by_group.get(group)
        key = (group, alertname, node)
        if job is None or bucket < job.onset_ms // BUCKET_MS * BUCKET_MS or key not in received:
            continue
        end_ms = bucket + BUCKET_MS
        closing = closing_sample(seen, end_ms + int(INGEST_GRACE_S * 1000))
        frames = seen.frames.get((group, bucket))
        if closing is None or not frames or (group, bucket) not in scored:
            continue
        scrape_ms, acked = closing
        on_kafka, at_am = max(frames), received[key]
        out.append(
            Timeline(
                group=group,
                alert=f"{alertname} {node or '(group)'}",
                bucket_s=(end_ms - job.onset_ms) * span,
                grace_s=(scrape_ms - end_ms) * span,
                remote_write_s=acked - clock.wall(scrape_ms),
                processing_s=at_am - acked,
                ingest_s=on_kafka - acked,
                worker_s=scored[(group, bucket)] - on_kafka,
                sink_s=at_am - scored[(group, bucket)],
                floor_s=(end_ms + INGEST_GRACE_S * 1000 - job.onset_ms) * span,
                kafka_to_am_s=at_am - on_kafka,
            )
        )
    return out


def forwarder_s(seen: Observed) -> list[float]:
    """The minimal forwarder's frame CreateTime -> Alertmanager ``updatedAt``."""
    out = []
    for alert in seen.alerts.values():
        labels = alert["labels"]
        if labels.get("source") == BASELINE_SOURCE:
            created = float(alert["annotations"]["created"])
            out.append(epoch_s(alert["updatedAt"]) - created)
    return out


# --- the run -------------------------------------------------------------------------------------


async def run(
    bootstrap: str,
    am_url: str,
    workdir: Path,
    jobs: int,
    nodes: int,
    warmup_min: float,
    speed: float,
    timeout_s: float,
) -> tuple[list[Job], SimClock, Observed, Path]:
    run_id = uuid.uuid4().hex[:8]
    ingest_port, web_port = free_port(), free_port()
    env = peerwatch_env(
        bootstrap,
        topics=f"e2e-{run_id}",
        app_id=f"peerwatch-e2e-{run_id}",
        group_labels=["train_job"],
        ingest_port=ingest_port,
        ingest_grace_s=INGEST_GRACE_S,
        worker_web_port=web_port,
        datadir=workdir / "worker",
        alertmanager_url=am_url,
        log_format="json",
    )
    seen = Observed()
    ingest = PeerwatchProcess(
        ["ingest"], env, workdir / "ingest.log", f"http://127.0.0.1:{ingest_port}/-/ready"
    )
    worker = PeerwatchProcess(
        ["worker"],
        env,
        workdir / "worker.log",
        f"http://127.0.0.1:{web_port}/metrics",
        "peerwatch_worker_ready 1.0",
    )
    started = time.time()
    with ingest, worker:
        seen.stages["start"] = time.time() - started
        # the clock starts now: the live part's simulated time must not overtake the wall's
        live_s = 120.0 + (jobs // 2 + 8) * BUCKET_MS / 1000.0 / speed
        job_list, clock = plan(jobs, nodes, warmup_min, live_s, speed)
        victims = {j.config.job_name: j.victim for j in job_list}
        watchers = [
            asyncio.create_task(
                watch_frames(bootstrap, env["PEERWATCH_TOPIC_FRAMES"], victims, am_url, seen)
            ),
            asyncio.create_task(watch_alertmanager(am_url, seen)),
        ]
        last_onset = max(j.onset_ms for j in job_list)
        # the job's death alerts three buckets after its fault (GroupDegraded); that bucket
        # closes on a sample past its end + the grace
        end_ms = last_onset // BUCKET_MS * BUCKET_MS + 6 * BUCKET_MS
        try:
            sending = time.time()
            await asyncio.wait_for(
                send(f"http://127.0.0.1:{ingest_port}/api/v1/write", job_list, clock, end_ms, seen),
                timeout_s,
            )
            seen.stages["send"] = time.time() - sending
            # the last buckets close on the ingest's idle flush; then the sink posts
            await asyncio.sleep(5.0 if speed == 1 else 2.0)
            for task in watchers:
                if task.done():
                    task.result()  # a watcher that died says why
        finally:
            for task in watchers:
                task.cancel()
            for task in watchers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return job_list, clock, seen, workdir / "worker.log"


def report(
    jobs: Sequence[Job], lines: Sequence[Timeline], forward: Sequence[float], speed: float
) -> None:
    print(
        f"\n{len(lines)} alerts from {len(jobs)} NVLink + bus faults"
        + ("" if speed == 1 else f"; live part at {speed:g}x real time: not a fleet's seconds")
    )
    print(f"{'alert':<34} {'bucket':>7} {'grace':>6} {'rw':>6} {'proc':>6} {'total':>7}  s")
    for t in lines:
        print(
            f"{t.alert:<34} {t.bucket_s:>7.2f} {t.grace_s:>6.2f} {t.remote_write_s:>6.2f} "
            f"{t.processing_s:>6.2f} {t.total_s:>7.2f}"
        )
    rows = [
        ("onset -> Alertmanager", [t.total_s for t in lines], "floor: bucket end + grace - onset",
         [t.floor_s for t in lines]),
        ("  bucket (onset -> its end)", [t.bucket_s for t in lines], "", []),
        ("  grace (end -> closing scrape)", [t.grace_s for t in lines],
         "ingest_grace_s", [INGEST_GRACE_S / speed]),
        ("  scrape/remote_write", [t.remote_write_s for t in lines],
         "Prometheus batch_send_deadline", [SEND_DEADLINE_S / speed]),
        ("  processing (ack -> Alertmanager)", [t.processing_s for t in lines], "target", [1.0]),
        ("    ingest (ack -> frames on Kafka)", [t.ingest_s for t in lines], "", []),
        ("    worker (Kafka -> bucket scored)", [t.worker_s for t in lines], "", []),
        ("    sink (scored -> Alertmanager)", [t.sink_s for t in lines], "", []),
        ("  frames on Kafka -> Alertmanager", [t.kafka_to_am_s for t in lines],
         "minimal forwarder (aiokafka -> POST)", list(forward)),
    ]  # fmt: skip
    head = f"{'p50':>7} {'p99':>7}"
    print(f"\n{'span, s':<38} {head}   {'baseline, same run':<38} {head}")
    for name, values, base_name, base in rows:
        line = f"{name:<38} {_quantile(values, 0.5):>7.3f} {_quantile(values, 0.99):>7.3f}"
        if base:
            line += f"   {base_name:<38} {_quantile(base, 0.5):>7.3f} {_quantile(base, 0.99):>7.3f}"
        print(line)
    processing = [t.processing_s for t in lines]
    if processing:
        p99 = _quantile(processing, 0.99)
        print(f"\nprocessing p99 {p99:.3f} s: target <= 1 s {'met' if p99 <= 1.0 else 'missed'}")


def main(argv: Sequence[str] | None = None) -> list[Timeline]:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e_latency", description=__doc__)
    parser.add_argument("--jobs", type=int, default=4, help="jobs, one fault each")
    parser.add_argument("--nodes", type=int, default=60, help="job nodes per job (+3 spares)")
    parser.add_argument(
        "--warmup-min", type=float, default=6.0, help="history before the live part"
    )
    parser.add_argument("--speed", type=float, default=1.0, help="live part x real time")
    parser.add_argument("--kafka", help="host:port of a broker (default: start KRaft Kafka)")
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after, s")
    args = parser.parse_args(argv)
    if args.speed < 1 or args.jobs < 1 or args.nodes < 10:
        parser.error("need --speed >= 1, --jobs >= 1, --nodes >= 10")
    workdir = Path(tempfile.mkdtemp(prefix="peerwatch-e2e-"))
    with contextlib.ExitStack() as stack:
        bootstrap = args.kafka
        started = time.time()
        if bootstrap is None:
            bootstrap = stack.enter_context(KafkaKRaft(workdir / "kafka")).bootstrap
        am = stack.enter_context(Alertmanager(workdir / "alertmanager"))
        print(
            f"e2e latency: {args.jobs} jobs x {args.nodes} nodes, {args.warmup_min:g} min of "
            f"history, live at {args.speed:g}x; Kafka and Alertmanager up in "
            f"{time.time() - started:.0f} s; logs in {workdir}",
            flush=True,
        )
        jobs, clock, seen, log = asyncio.run(
            run(bootstrap, am.url, workdir, args.jobs, args.nodes, args.warmup_min, args.speed,
                args.timeout)
        )  # fmt: skip
    print(
        "wall seconds: "
        + ", ".join(f"{name} {s:.0f}" for name, s in seen.stages.items())
        + f"; {len(seen.requests)} live requests"
    )
    lines = timelines(jobs, seen, clock, log)
    report(jobs, lines, forwarder_s(seen), args.speed)
    silent = sorted({j.config.job_name for j in jobs} - {t.group for t in lines})
    if silent:  # the smoke test's check: every fault reached Alertmanager, traced
        raise SystemExit(f"no traced alert in Alertmanager for the fault of {', '.join(silent)}")
    return lines


if __name__ == "__main__":
    main()
