"""The worker through real Apache Kafka and Faust: CPU seconds per bucket of its process(es).

    python -m bench.worker_kafka [--nodes 2500] [--buckets 6] [--workers 1]

A single-node KRaft broker (``scripts/kafka/kafka-kraft``) gets the frames topic
of a fresh run (``topic_partitions`` = ``--partitions``); ``--workers``
``peerwatch worker`` processes start on it, and once every one is ready and
together they own each partition (``peerwatch_worker_partitions``), ``--nodes``
nodes' frames for ``--buckets`` buckets are sent, encoded and keyed by group as
the ingest writes them (``bench.worker``'s fleet: the simulated ``gpu-slow`` job
copied into groups of 60). The bench polls the workers' ``/metrics`` until every
frame is counted (``peerwatch_worker_frames``) and reads each child's CPU seconds
from ``/proc`` (user + system) before the first frame is sent and when the last
is counted (the count is read every ``COUNT_EVERY_S``: the figure may hold up to
that much of the worker's time after the last frame). Printed beside the baseline of
the same run (``bench.worker.run``, the in-process Pipeline on the same frames): fleet
CPU seconds per 30-s bucket, and per node.

The workers' start (Faust, topic and changelog set-up, the group's rebalances)
is not in the figure; it holds the fetch, Faust's stream, the decode and the
Pipeline. The baseline times every bucket but the first two (they close on
grace); the Kafka figure is the whole run divided by ``--buckets``. No figure here is
asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiokafka import AIOKafkaProducer

from bench import worker as inproc
from streams.frames import encode_frame
from streams.lab.launchers import KafkaKRaft, PeerwatchProcess, free_port, peerwatch_env
from streams.settings import Settings
from streams.topics import ensure_topics

_TICKS = os.sysconf("SC_CLK_TCK")
SETTLE_S = 2.0
# How often the frame count is read while frames flow. Each /metrics page is built by the
# worker (every node's series): at 2,500 nodes a 0.5-s poll was 16 % of the worker's
# py-spy samples, the bench's own load in the figure (Prometheus scrapes every 15-30 s).
COUNT_EVERY_S = 5.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def preload(bootstrap: str, topic: str, fleet: inproc.Fleet, buckets: int) -> int:
    """Every bucket's frames on ``topic``, key = group, as the ingest sends them."""
    sent = 0
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        for index in range(buckets):
            for group, frames in fleet.bucket(index):
                for f in frames:
                    await producer.send(topic, encode_frame(f), key=group.encode())
                    sent += 1
            await producer.flush()
    finally:
        await producer.stop()
    return sent


def _sample(port: int, metric: str) -> float:
    """The sum of ``metric``'s samples on a worker's ``/metrics`` (0 while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            page = reply.read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith((f"{metric} ", f"{metric}{{"))
    )


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


def through_kafka(
    bootstrap: str,
    fleet: inproc.Fleet,
    buckets: int,
    workers: int,
    partitions: int,
    workdir: Path,
    timeout_s: float = 600.0,
) -> tuple[float, float]:
    """(CPU seconds of every worker from ready to the last frame, wall seconds)."""
    run = os.urandom(4).hex()
    base = peerwatch_env(
        bootstrap,
        topics=f"bench-{run}",
        app_id=f"peerwatch-bench-{run}",
        topic_partitions=partitions,
        alertmanager_url=f"http://127.0.0.1:{free_port()}",
    )
    settings = Settings(**{k.removeprefix("PEERWATCH_").lower(): v for k, v in base.items()})
    asyncio.run(ensure_topics(settings))
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
    try:
        # started (and stopped) together: they join the group in one rebalance, not one each
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(PeerwatchProcess.start, procs))
        wait_settled(ports, partitions, timeout_s)
        start_cpu = [cpu_seconds(p.pid) for p in procs if p.pid]
        started = time.monotonic()
        total = asyncio.run(preload(bootstrap, settings.topic_frames, fleet, buckets))
        while sum(_sample(port, "peerwatch_worker_frames_total") for port in ports) < total:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"workers did not count {total} frames in {timeout_s:.0f} s")
            time.sleep(COUNT_EVERY_S)
        wall = time.monotonic() - started
        spent = sum(cpu_seconds(p.pid) for p in procs if p.pid) - sum(start_cpu)
    finally:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(PeerwatchProcess.stop, procs))
    return spent, wall


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_kafka", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2500)
    parser.add_argument("--buckets", type=int, default=6)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    tmpl, settings = inproc.template("gpu-slow", 2000, args.buckets)
    fleet = inproc.Fleet(tmpl, args.nodes)
    baseline = inproc.run(fleet, settings, buckets=args.buckets - 2, warmup=2)
    base_s = sum(baseline.bucket_s) / len(baseline.bucket_s)
    with (
        tempfile.TemporaryDirectory(prefix="bench-worker-kafka-") as tmp,
        KafkaKRaft(Path(tmp) / "kafka") as kafka,
    ):
        spent, wall = through_kafka(
            kafka.bootstrap, fleet, args.buckets, args.workers, args.partitions, Path(tmp)
        )
    per_bucket = spent / args.buckets
    print(
        f"worker through Kafka: {args.nodes:,} nodes ({fleet.groups} groups), {args.buckets} "
        f"buckets, {args.workers} worker(s) on {args.partitions} partitions; {wall:.1f} s wall"
    )
    print(f"  {'':<40} {'in-process':>12} {'through Kafka':>14}")
    print(f"  {'fleet CPU seconds per 30-s bucket':<40} {base_s:>12.3f} {per_bucket:>14.3f}")
    print(
        f"  {'CPU ms per node per bucket':<40} {base_s / args.nodes * 1e3:>12.3f} "
        f"{per_bucket / args.nodes * 1e3:>14.3f}"
    )
    print(
        f"  Faust + Kafka + decode share (1 - in-process / through Kafka): "
        f"{1 - base_s / per_bucket:.0%}"
    )


if __name__ == "__main__":
    main()
