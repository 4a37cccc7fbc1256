"""Soak: the chaos lab at a steady rate for N minutes, faults sprinkled in -- memory and lag.

    python -m bench.soak --minutes 30 [--groups 6] [--nodes 12] [--rounds-per-s 1] [--json F]

Runs ``streams.lab.chaos`` (the simulator over remote_write into ``peerwatch ingest``
with its write-ahead log, Apache Kafka, two ``peerwatch worker``s, Alertmanager
behind the stalling proxy) for ``--minutes`` of streaming at a fixed pace. The
faults cycle through ``FAULT_CYCLE``, spread evenly from 10 % to 75 % of the run,
so its last quarter is undisturbed. Every ``--every-s`` seconds it samples each
process's RSS (``/proc/PID/status``; a restarted process is a new pid) and the
workers' consumer lag on the frames topic: end offsets minus the consumer
group's committed offsets. A worker commits a frame only once its bucket is
scored, so a bucket or so of frames is its resting lag.

It prints, over the streaming time, per process: pids seen, RSS at start / end /
max and its growth (median of the last third minus median of the first third,
for the pid that lived longest: a restart starts from scratch), lag at start /
end / max, then the chaos tally. Exit status 1 if the tally finds loss or
duplicates. Not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from bench.procmem import growth_mib, rss_mib
from streams.lab.chaos.faults import KINDS, Fault
from streams.lab.chaos.run import ChaosPlan, Lab, run_chaos
from streams.lab.chaos.tally import ChaosReport

FAULT_CYCLE = ("kill-worker", "am-stall", "kill-ingest", "restart-broker", "am-outage")
LASTING_S = {"am-stall": 30.0, "am-outage": 120.0}  # at most half the gap to the next fault
LAG_TIMEOUT_S = 5.0


def sprinkled_faults(stream_s: float, count: int, broker: bool = True) -> tuple[Fault, ...]:
    """``count`` faults cycling through ``FAULT_CYCLE`` (without ``restart-broker`` when the
    broker is not the lab's own), evenly from 10 % to 75 % of ``stream_s``."""
    kinds = [k for k in FAULT_CYCLE if broker or k != "restart-broker"]
    first, last = 0.10 * stream_s, 0.75 * stream_s
    gap = (last - first) / (count - 1) if count > 1 else last - first
    faults = []
    for i in range(count):
        kind = kinds[i % len(kinds)]
        lasting = round(min(LASTING_S[kind], gap / 2), 1) if KINDS[kind] else 0.0
        faults.append(Fault(kind, round(first + i * gap, 1), lasting))
    return tuple(faults)


@dataclass
class Trace:
    """What the soak sampled, seconds from the start of streaming."""

    rss: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)  # t, pid, MiB
    lag: list[tuple[float, int | None]] = field(default_factory=list)  # None: no answer


class FramesLag:
    """Frames on ``topic`` the consumer ``group`` has not committed yet, over all partitions."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._committed: dict[int, int] = {}  # partition -> newest committed offset seen

    async def frames(self) -> int | None:
        """The lag now, or None if Kafka did not answer (a broker restart): the clients
        start afresh at the next call."""
        try:
            return await asyncio.wait_for(self._lag(), LAG_TIMEOUT_S)
        except (KafkaError, OSError, TimeoutError):
            await self.close()
            return None

    async def _lag(self) -> int | None:
        if self._admin is None or self._consumer is None:
            self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, enable_auto_commit=False
            )
            await self._admin.start()
            await self._consumer.start()
        described = await self._admin.describe_topics([self.topic])
        partitions = [
            p["partition"] for d in described if not d["error_code"] for p in d["partitions"]
        ]
        if not partitions:
            return None  # not created yet
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        ends = await self._consumer.end_offsets(tps)
        answer = await self._admin.list_consumer_group_offsets(self.group, partitions=tps)
        committed = {tp.partition: a.offset for tp, a in answer.items()}
        return uncommitted({tp.partition: ends[tp] for tp in tps}, committed, self._committed)

    async def close(self) -> None:
        admin, consumer, self._admin, self._consumer = self._admin, self._consumer, None, None
        if consumer is not None:
            with contextlib.suppress(KafkaError, OSError):
                await consumer.stop()
        if admin is not None:
            with contextlib.suppress(KafkaError, OSError):
                await admin.close()


def uncommitted(
    ends: dict[int, int], committed: dict[int, int], seen: dict[int, int]
) -> int | None:
    """Records past the committed offsets, summed over partitions (end offsets ``ends``).
    A partition never committed counts from 0; one that was committed before and now
    answers none (-1: a restarted broker's coordinator still loading its offsets) makes
    the sample unknown (None), not the whole topic. ``seen`` keeps what was committed."""
    lag = 0
    for partition, end in ends.items():
        offset = committed.get(partition, -1)
        if offset < 0:
            if partition in seen:
                return None
            offset = 0
        else:
            seen[partition] = offset
        lag += max(0, end - offset)
    return lag


def lab_pids(lab: Lab) -> dict[str, int | None]:
    """The lab's processes now, by name (a stopped one: None)."""
    pids: dict[str, int | None] = {"driver": os.getpid(), "ingest": lab.ingest.pid}
    pids.update((name, w.pid) for name, w in lab.workers.items())
    pids["alertmanager"] = lab.alertmanager.pid
    if lab.kafka is not None:
        pids["kafka"] = lab.kafka.pid
    return pids


async def sample(lab: Lab, trace: Trace, every_s: float) -> None:
    """Sample ``lab`` into ``trace`` every ``every_s`` until cancelled."""
    began = time.monotonic()
    lag = FramesLag(lab.bootstrap, lab.env["PEERWATCH_TOPIC_FRAMES"], lab.env["PEERWATCH_APP_ID"])
    try:
        while True:
            t = time.monotonic() - began
            for name, pid in lab_pids(lab).items():
                if pid is None:
                    continue
                with contextlib.suppress(OSError):  # it died between the two looks
                    trace.rss.setdefault(name, []).append((t, pid, rss_mib(pid)))
            trace.lag.append((t, await lag.frames()))
            await asyncio.sleep(max(0.0, began + len(trace.lag) * every_s - time.monotonic()))
    finally:
        await lag.close()


@dataclass
class ProcessMemory:
    name: str
    pids: int  # 1 + restarts seen
    start_mib: float
    end_mib: float
    max_mib: float
    growth_mib: float | None  # of the longest-lived pid: its last third minus its first
    lived_s: float  # how long that pid was sampled


@dataclass
class LagFigures:
    start: int | None
    end: int | None
    max: int | None
    median: float | None
    samples: int
    unanswered: int  # samples Kafka did not answer (broker restarting)


def memory(trace: Trace, until_s: float) -> list[ProcessMemory]:
    """Each process's RSS figures over the samples up to ``until_s``."""
    out = []
    for name, rows in trace.rss.items():
        rows = [r for r in rows if r[0] <= until_s]
        if not rows:
            continue
        lives: dict[int, list[tuple[float, float]]] = {}
        for t, pid, mib in rows:
            lives.setdefault(pid, []).append((t, mib))
        longest = max(lives.values(), key=lambda life: life[-1][0] - life[0][0])
        values = [mib for _, _, mib in rows]
        out.append(
            ProcessMemory(
                name=name,
                pids=len(lives),
                start_mib=values[0],
                end_mib=values[-1],
                max_mib=max(values),
                growth_mib=growth_mib([mib for _, mib in longest]),
                lived_s=longest[-1][0] - longest[0][0],
            )
        )
    return out


def lag_figures(trace: Trace, until_s: float) -> LagFigures:
    rows = [lag for t, lag in trace.lag if t <= until_s]
    answered = [lag for lag in rows if lag is not None]
    return LagFigures(
        start=answered[0] if answered else None,
        end=answered[-1] if answered else None,
        max=max(answered) if answered else None,
        median=statistics.median(answered) if answered else None,
        samples=len(rows),
        unanswered=len(rows) - len(answered),
    )


@dataclass
class SoakResult:
    plan: ChaosPlan
    memory: list[ProcessMemory]
    lag: LagFigures
    chaos: ChaosReport
    trace: Trace

    @property
    def samples_per_s(self) -> float:
        return self.chaos.samples.sent / self.plan.stream_s

    def render(self) -> str:
        p = self.plan
        lines = [
            f"soak: {p.stream_s / 60:.0f} min streaming, {p.groups} groups x {p.nodes} nodes, "
            f"{p.rounds_per_s:g} rounds/s: {self.samples_per_s:,.0f} samples/s; "
            f"{len(p.faults)} faults",
            "process        pids  RSS MiB start    end    max  growth MiB (longest-lived pid)",
        ]
        for m in self.memory:
            growth = "-" if m.growth_mib is None else f"{m.growth_mib:+.1f} over {m.lived_s:.0f} s"
            lines.append(
                f"{m.name:<14} {m.pids:>4}  {m.start_mib:>13.0f} {m.end_mib:>6.0f} "
                f"{m.max_mib:>6.0f}  {growth}"
            )
        lag = self.lag
        lines.append(
            f"frames lag (not yet committed by the workers): start {lag.start}, end {lag.end}, "
            f"max {lag.max}, median {lag.median}; {lag.unanswered} of {lag.samples} samples "
            "unanswered"
        )
        return "\n".join([*lines, "", self.chaos.render()])

    def to_dict(self) -> dict[str, Any]:
        plan = {**asdict(self.plan), "faults": [str(f) for f in self.plan.faults]}
        return {
            "plan": plan,
            "samples_per_s": self.samples_per_s,
            "memory": [asdict(m) for m in self.memory],
            "lag": asdict(self.lag),
            "chaos": self.chaos.to_dict(),
            "trace": asdict(self.trace),
        }


async def soak(
    plan: ChaosPlan, workdir: Path, kafka_bootstrap: str | None = None, every_s: float = 5.0
) -> SoakResult:
    trace = Trace()
    report = await run_chaos(
        plan, workdir, kafka_bootstrap, observe=lambda lab: sample(lab, trace, every_s)
    )
    return SoakResult(
        plan, memory(trace, plan.stream_s), lag_figures(trace, plan.stream_s), report, trace
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0, help="of streaming")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--nodes", type=int, default=12, help="per group")
    parser.add_argument("--rounds-per-s", type=float, default=1.0, help="30-s scrape rounds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--faults", type=int, default=None, help="how many (default: 1 per 3 min)")
    parser.add_argument("--every-s", type=float, default=5.0, help="sampling period")
    parser.add_argument("--kafka", default=None, help="use this broker (no broker restart)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)

    stream_s = args.minutes * 60
    count = args.faults if args.faults is not None else max(2, int(args.minutes // 3))
    plan = ChaosPlan(
        groups=args.groups,
        nodes=args.nodes,
        rounds=int(stream_s * args.rounds_per_s),
        rounds_per_s=args.rounds_per_s,
        faults=sprinkled_faults(stream_s, count, broker=args.kafka is None),
        workers=args.workers,
        ingest_wal=True,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="peerwatch-soak-"))
    print(f"lab in {workdir}; faults {', '.join(map(str, plan.faults))}", flush=True)
    result = asyncio.run(soak(plan, workdir, args.kafka, args.every_s))
    print(result.render())
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=1) + "\n")
    if not result.chaos.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
