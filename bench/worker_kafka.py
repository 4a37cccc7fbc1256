"""The worker through real Apache Kafka and Faust: CPU seconds per bucket of its process(es).

    python -m bench.worker_kafka [--nodes 2500] [--buckets 6] [--warmup 2] [--workers 1]

A single-node KRaft broker (``scripts/kafka/kafka-kraft``) gets the frames topic
of a fresh run (``topic_partitions`` = ``--partitions``); ``--workers``
``peerwatch worker`` processes start on it, and once every one is ready and
together they own each partition (``peerwatch_worker_partitions``), ``--nodes``
nodes' frames are sent, encoded and keyed by group as the ingest writes them
(``bench.worker``'s fleet: the simulated ``gpu-slow`` job copied into groups of
60). The first ``--warmup`` buckets are sent and scored before the clock starts
(the first closes on its grace period, the detectors fill their state), as
``bench.worker`` leaves them untimed; then ``--buckets`` timed ones. A phase is
done when the workers' consumer group has committed every frame sent (a frame is
acked once its bucket is scored and its snapshot written: ``streams.worker.acks``) and
the group-state changelog has stopped growing, both read from the broker, so the
figure holds no ``/metrics`` page of the bench's making. With a snapshot every
``--snapshot-every-buckets`` K buckets, frames are acked only once a snapshot covers
their bucket, so each phase must end on a checkpoint bucket (a warm-up ending on the
K-th bucket of a block of K, timed buckets a multiple of K), or its frames would never
all be committed; the bench refuses other counts. The changelog is created
compacted as the worker's would be, but with a day's ``min.compaction.lag.ms``: the test
broker's 16-MB segments roll within a bucket at fleet scale and the log cleaner
removed the older snapshots of each group before they were read back (what made the
bytes read back 22-32 MB per bucket where 57.6 MB were written); each child's CPU seconds
(user + system, ``/proc``) are read before the timed frames go out and when they
are committed. ``/metrics`` pages are read as Prometheus asks for them
(OpenMetrics, gzip), one per worker after the warm-up (untimed) and two after the
timed buckets: the first holds the frame count, which must equal the frames sent,
and the scoring-time histogram. Their CPU cost is printed apart and added to the
figure as a Prometheus scraping every 15 s would cost it (the first page renders
every group's series scored since the last; the second, nothing scored between, is
what a scrape costs otherwise). Printed beside the baseline of the same run
(``bench.worker.run``, the in-process Pipeline on the same frames, the same warm-up):
fleet CPU seconds per 30-s bucket, per node, the group buckets' scoring time p50 / p99 (the
histogram's upper bounds), and the table's changelog bytes per timed bucket.

The workers' start (Faust, topic and changelog set-up, the group's rebalances)
is not in the figure; it holds the fetch, Faust's stream, the decode, the
Pipeline, the table writes and the offset commits. No figure here is asserted
anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import math
import os
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import worker as inproc
from streams.frames import encode_frame
from streams.kafka.topics import ensure_topics
from streams.lab.launchers import KafkaKRaft, PeerwatchProcess, free_port, peerwatch_env
from streams.settings import Settings

_TICKS = os.sysconf("SC_CLK_TCK")
SETTLE_S = 2.0
# How often the broker is asked whether every frame sent is committed (the workers do none
# of this work: a /metrics page is built by the worker, every node's series, and at 12,500
# nodes a page read every 5 s was a few CPU seconds per bucket of the bench's own making).
COMMITTED_EVERY_S = 1.0
# streams.worker.app's table: its changelog is <app id>-<table>-changelog
STATE_TABLE = "group-state"
# A scrape as Prometheus 2.x sends it (scrape_protocols' default; gzip): the worker then
# builds the OpenMetrics page and compresses it.
PROMETHEUS_SCRAPE = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "Accept-Encoding": "gzip",
}
SCRAPES_PER_BUCKET = 2  # Prometheus every 15 s, buckets of 30 s


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def preload(
    bootstrap: str, topic: str, fleet: inproc.Fleet, buckets: int, first: int = 0
) -> int:
    """Buckets ``first`` .. ``first + buckets - 1`` of the fleet on ``topic``, key = group,
    as the ingest sends them."""
    sent = 0
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        for index in range(first, first + buckets):
            for group, frames in fleet.bucket(index):
                for f in frames:
                    await producer.send(topic, encode_frame(f), key=group.encode())
                    sent += 1
            await producer.flush()
    finally:
        await producer.stop()
    return sent


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The next offset to be written, per partition of ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offsets on ``topic`` (a partition without one: absent)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


async def create_changelog(bootstrap: str, topic: str, partitions: int) -> None:
    """The table's changelog, compacted as Faust makes it, but not before a day: every
    snapshot written stays readable by ``changelog_bytes``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        config = {"cleanup.policy": "compact", "min.compaction.lag.ms": str(86_400_000)}
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=config)])
    finally:
        await admin.close()


def wait_committed(
    bootstrap: str, group_id: str, topic: str, ends: dict[int, int], timeout_s: float
) -> None:
    """Until ``group_id`` has committed ``topic`` up to ``ends`` on every partition."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = asyncio.run(committed(bootstrap, group_id, topic))
        if all(got.get(p, 0) >= end for p, end in ends.items()):  # 0: never written
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"frames not committed in {timeout_s:.0f} s: {got} < {ends}")
        time.sleep(COMMITTED_EVERY_S)


async def changelog_bytes(
    bootstrap: str, topic: str, partitions: int, since: dict[int, int]
) -> tuple[int, int]:
    """The records and their key + value bytes written to ``topic`` after ``since``."""
    ends = await end_offsets(bootstrap, topic, partitions)
    if all(end <= since.get(p, 0) for p, end in ends.items()):
        return 0, 0
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in ends if ends[p] > since.get(p, 0)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, since.get(tp.partition, 0))
        size, count, todo = 0, 0, {tp: ends[tp.partition] for tp in tps}
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=2000)
            for tp, records in batch.items():
                for r in records:
                    if r.offset < todo.get(tp, 0):
                        size += len(r.key or b"") + len(r.value or b"")
                        count += 1
                if records and records[-1].offset + 1 >= todo.get(tp, 0):
                    todo.pop(tp, None)
        return count, size
    finally:
        await consumer.stop()


def _page(port: int, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            body = reply.read()
            gzipped = reply.headers.get("Content-Encoding") == "gzip"
            return (gzip.decompress(body) if gzipped else body).decode()
    except OSError:
        return ""


def scrape(ports: Sequence[int], pids: Sequence[int]) -> tuple[list[str], float]:
    """One page per worker as Prometheus asks for it, and the workers' CPU seconds for it."""
    before = sum(cpu_seconds(pid) for pid in pids)
    pages = [_page(port, PROMETHEUS_SCRAPE) for port in ports]
    return pages, sum(cpu_seconds(pid) for pid in pids) - before


def _sum(page: str, metric: str) -> float:
    """The sum of ``metric``'s samples on a ``/metrics`` page."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith((f"{metric} ", f"{metric}{{"))
    )


def _sample(port: int, metric: str) -> float:
    """The sum of ``metric``'s samples on a worker's ``/metrics`` (0 while it does not answer)."""
    return _sum(_page(port), metric)


def histogram_quantile(pages: Sequence[str], metric: str, q: float) -> float:
    """The upper bound of the histogram bucket holding quantile ``q``, over every page."""
    counts: dict[float, float] = {}
    for page in pages:
        for line in page.splitlines():
            if line.startswith(f"{metric}_bucket{{"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                le = math.inf if bound == "+Inf" else float(bound)
                counts[le] = counts.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    if not counts or counts[max(counts)] == 0:
        return math.nan
    total = counts[max(counts)]
    return next(le for le in sorted(counts) if counts[le] >= q * total)


def wait_settled(ports: Sequence[int], partitions: int, timeout_s: float) -> None:
    """Until every worker is ready and together they own each partition, twice in a row
    ``SETTLE_S`` apart: frames sent before the last join would go to the first worker
    and be read again after the rebalance, so the figure would count the group's churn."""
    deadline = time.monotonic() + timeout_s
    seen = 0
    while seen < 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ports)} workers did not settle on {partitions} partitions")
        ready = all(_sample(p, "peerwatch_worker_ready") == 1 for p in ports)
        owned = sum(_sample(p, "peerwatch_worker_partitions") for p in ports)
        seen = seen + 1 if ready and owned == partitions else 0
        time.sleep(SETTLE_S)


@dataclass
class KafkaFigures:
    spent_s: float  # CPU seconds of every worker over the timed buckets
    wall_s: float  # wall seconds from the first timed frame sent to its last committed
    changelog_bytes: int = 0  # group-state changelog bytes written in the timed buckets
    changelog_records: int = 0  # and its records (snapshots and tombstones)
    # CPU seconds of every worker to build one /metrics page each, the first after the
    # timed buckets (every group's series changed since the last) and the next (none had)
    scrape_s: float = 0.0
    rescrape_s: float = 0.0
    pages: list[str] = field(default_factory=list)  # each worker's page after the run


def through_kafka(
    bootstrap: str,
    fleet: inproc.Fleet,
    buckets: int,
    workers: int,
    partitions: int,
    workdir: Path,
    timeout_s: float = 600.0,
    warmup: int = 0,
    snapshot_every: int = 1,
) -> KafkaFigures:
    """``warmup`` buckets scored, then ``buckets`` timed; every figure of the run."""
    run = os.urandom(4).hex()
    base = peerwatch_env(
        bootstrap,
        topics=f"bench-{run}",
        app_id=f"peerwatch-bench-{run}",
        topic_partitions=partitions,
        alertmanager_url=f"http://127.0.0.1:{free_port()}",
        snapshot_every_buckets=snapshot_every,
    )
    settings = Settings(**{k.removeprefix("PEERWATCH_").lower(): v for k, v in base.items()})
    changelog = f"{settings.app_id}-{STATE_TABLE}-changelog"
    asyncio.run(ensure_topics(settings))
    asyncio.run(create_changelog(bootstrap, changelog, partitions))
    procs, ports = [], []
    for i in range(workers):
        port = free_port()
        env = {**base, "PEERWATCH_WORKER_WEB_PORT": str(port)}
        env["PEERWATCH_DATADIR"] = str(workdir / f"worker-{run}-{i}")
        procs.append(
            PeerwatchProcess(
                ["worker"],
                env,
                workdir / f"worker-{run}-{i}.log",
                f"http://127.0.0.1:{port}/metrics",
                "peerwatch_worker_ready 1.0",
            )
        )
        ports.append(port)

    def send(count: int, first: int) -> int:
        n = asyncio.run(preload(bootstrap, settings.topic_frames, fleet, count, first))
        ends = asyncio.run(end_offsets(bootstrap, settings.topic_frames, partitions))
        wait_committed(bootstrap, settings.app_id, settings.topic_frames, ends, timeout_s)
        # the last snapshots' changelog writes may still be on their way after the commit
        before: dict[int, int] | None = None
        while (now := asyncio.run(end_offsets(bootstrap, changelog, partitions))) != before:
            before = now
            time.sleep(COMMITTED_EVERY_S)
        return n

    try:
        # started (and stopped) together: they join the group in one rebalance, not one each
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(PeerwatchProcess.start, procs))
        wait_settled(ports, partitions, timeout_s)
        total = send(warmup, 0) if warmup else 0
        since = asyncio.run(end_offsets(bootstrap, changelog, partitions)) if warmup else {}
        pids = [p.pid for p in procs if p.pid]
        scrape(ports, pids)  # untimed: a running worker's series were scraped before
        start_cpu = [cpu_seconds(pid) for pid in pids]
        started = time.monotonic()
        total += send(buckets, warmup)
        wall = time.monotonic() - started
        spent = sum(cpu_seconds(pid) for pid in pids) - sum(start_cpu)
        records, written = asyncio.run(changelog_bytes(bootstrap, changelog, partitions, since))
        pages, scrape_s = scrape(ports, pids)
        _, rescrape_s = scrape(ports, pids)
        counted = sum(_sum(page, "peerwatch_worker_frames_total") for page in pages)
        if counted != total:
            raise RuntimeError(f"the workers counted {counted:.0f} frames of {total} sent")
    finally:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(PeerwatchProcess.stop, procs))
    return KafkaFigures(spent, wall, written, records, scrape_s, rescrape_s, pages)


def check_phases(fleet: inproc.Fleet, warmup: int, buckets: int, every: int) -> None:
    """Each phase must end on a bucket whose snapshot is written (streams.worker.checkpoints: the
    K-th of each aligned block of K, or a group's first), or its frames stay un-acked."""
    first = fleet.template[0][0].ts // int(inproc.BUCKET_S * 1000)
    if (warmup == 1 or (first + warmup) % every == 0) and buckets % every == 0:
        return
    fits = [w for w in range(warmup, warmup + every) if (first + w) % every == 0]
    raise SystemExit(
        f"with a snapshot every {every} buckets, --buckets must be a multiple of {every} "
        f"and the warm-up end on a checkpoint bucket (--warmup {fits[0]})"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_kafka", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--buckets", type=int, default=6, help="timed buckets")
    parser.add_argument("--warmup", type=int, default=2, help="untimed buckets first (>= 2)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--snapshot-every-buckets",
        type=int,
        default=Settings.model_fields["snapshot_every_buckets"].default,
        help="the workers' snapshot_every_buckets",
    )
    args = parser.parse_args(argv)
    every = args.snapshot_every_buckets
    tmpl, settings = inproc.template("gpu-slow", 2000, args.warmup + args.buckets)
    fleet = inproc.Fleet(tmpl, args.nodes)
    check_phases(fleet, args.warmup, args.buckets, every)
    baseline = inproc.run(fleet, settings, buckets=args.buckets, warmup=args.warmup)
    base_s = sum(baseline.bucket_s) / len(baseline.bucket_s)
    with (
        tempfile.TemporaryDirectory(prefix="bench-worker-kafka-") as tmp,
        KafkaKRaft(Path(tmp) / "kafka") as kafka,
    ):
        got = through_kafka(
            kafka.bootstrap,
            fleet,
            args.buckets,
            args.workers,
            args.partitions,
            Path(tmp),
            warmup=args.warmup,
            snapshot_every=every,
        )
    per_bucket = got.spent_s / args.buckets
    print(
        f"worker through Kafka: {args.nodes:,} nodes ({fleet.groups} groups), {args.warmup} "
        f"warm-up + {args.buckets} timed buckets, {args.workers} worker(s) on "
        f"{args.partitions} partitions, a snapshot every {every} bucket(s); "
        f"{got.wall_s:.1f} s wall for the timed buckets"
    )
    print(f"  {'':<44} {'in-process':>12} {'through Kafka':>14}")
    print(f"  {'fleet CPU seconds per 30-s bucket':<44} {base_s:>12.3f} {per_bucket:>14.3f}")
    print(
        f"  {'CPU ms per node per bucket':<44} {base_s / args.nodes * 1e3:>12.3f} "
        f"{per_bucket / args.nodes * 1e3:>14.3f}"
    )
    closes = sorted(baseline.close_s)
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        local = closes[min(len(closes) - 1, int(q * len(closes)))] * 1e3 if closes else math.nan
        bound = histogram_quantile(got.pages, "peerwatch_worker_score_seconds", q) * 1e3
        print(f"  {'bucket close ' + label + ', ms (note below)':<44} "
              f"{local:>12.1f} {bound:>14.1f}")  # fmt: skip
    print(
        f"  {'changelog bytes per bucket':<44} "
        f"{inproc._median(baseline.snapshot_bytes):>12,.0f} "
        f"{got.changelog_bytes / args.buckets:>14,.0f}"
    )
    # in steady state each group's series are rendered once per bucket, by whichever
    # scrape comes first after it was scored: one page like the first, the rest like the next
    scraped = per_bucket + got.scrape_s + (SCRAPES_PER_BUCKET - 1) * got.rescrape_s
    print(
        f"  {'changelog records per bucket':<44} {fleet.groups:>12,} "
        f"{got.changelog_records / args.buckets:>14,.1f}"
    )
    print(
        f"  {f'fleet CPU s per bucket + {SCRAPES_PER_BUCKET} /metrics pages':<44} "
        f"{'':>12} {scraped:>14.3f}"
    )
    print(
        f"  one /metrics page per worker as Prometheus asks (OpenMetrics, gzip): "
        f"{got.scrape_s:.2f} CPU s the first after the timed buckets, {got.rescrape_s:.2f} "
        f"the next ({sum(len(p) for p in got.pages):,} bytes uncompressed)"
    )
    print(
        "  bucket close: in-process, the closing Pipeline.due and its snapshot's encoding;"
        " through Kafka, Pipeline.due's scoring (the worker's peerwatch_worker_score_seconds,"
        " the upper bound of the histogram bucket; its buckets count the warm-up too)"
    )
    print(
        f"  Faust + Kafka + decode share (1 - in-process / through Kafka): "
        f"{1 - base_s / per_bucket:.0%}"
    )


if __name__ == "__main__":
    main()
