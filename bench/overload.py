"""Overload: the ingest at 1x and at 2x what it takes -- its answers and its memory.

    python -m bench.overload [--seconds 60] [--broker kraft|embedded] [--scenario gpu-slow]

Runs ``peerwatch ingest`` as a child process on loopback (default settings,
fresh topics) against Apache Kafka (``KafkaKRaft``) or the embedded broker, and
drives it with Prometheus-shaped remote_write bodies: the scenario's simulated
cluster (``gpu-slow``: ~9,900 series per scrape round), one copy per *sender*,
renamed so each sender is its own peer group of distinct nodes, sent round
after round in bodies of at most 2,000 samples. A sender behaves like a
Prometheus remote_write shard: it posts one body at a time, in order, and on a
503 retries the same body with Prometheus' backoff (30 ms doubling to 5 s).
Senders share one event clock: a sender more than ``MAX_LAG_ROUNDS`` rounds
behind the newest skips ahead (as data a real fleet would send now), so no
sample drops as late only because the driver lagged.

First it ramps senders 4, 8, 16, ... (``RAMP_STEP_S`` each) until 503s appear;
the last step without 503 is 1x. Then it runs ``--seconds`` at 1x (baseline),
then ``--seconds`` at 2x, and prints for each: requests answered 204 / 503 /
other, samples accepted per second (the ingest's own
``peerwatch_ingest_samples_total{outcome="accepted"}``), drops by reason, the
slowest ``/-/ready`` answer (polled each second), and the ingest's RSS
(``/proc/PID/status`` VmRSS) at the phase's start, middle and end and its peak.
Not a test: nothing is asserted; the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import cramjam

from bench.fuzz_wire import label, varint
from bench.ingest_bench import simulate
from bench.procmem import rss_mib
from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.services import EmbeddedBroker, KafkaKRaft, PeerwatchProcess, free_port
from streams.sources.simulator.run import MAX_SAMPLES_PER_SEND

HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "peerwatch-bench-overload",
}
RAMP_STEP_S = 4.0
MAX_SENDERS = 256
MAX_LAG_ROUNDS = 5
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.03, 5.0  # Prometheus' queue_config defaults
RENAMED = frozenset(("instance", "hostname", "Hostname", "cluster"))
# one Sample {double value = 1; int64 timestamp = 2} as the last field of a TimeSeries
_SAMPLE = struct.Struct("<BBBdBBBBBBB")


def _label(name: str, value: str) -> bytes:
    return label(name.encode(), value.encode())


def series_head(labels: dict[str, str]) -> bytes:
    """A WriteRequest's ``timeseries`` entry up to its one sample: tag, length, labels."""
    return _head([_label(k, labels[k]) for k in sorted(labels)])


def _head(fields: list[bytes]) -> bytes:
    encoded = b"".join(fields)
    return b"\x0a" + varint(len(encoded) + 18) + encoded


def sample_tail(ts: int, value: float) -> bytes:
    """The sample field: 18 bytes, the timestamp a 6-byte varint (2^35 <= ts < 2^42 ms)."""
    t = [(ts >> shift) & 0x7F | 0x80 for shift in range(0, 42, 7)]
    t[5] &= 0x7F
    return _SAMPLE.pack(0x12, 0x10, 0x09, value, 0x10, *t)


class Fleet:
    """The simulated rounds, as (series index, offset in round ms, value) rows, and each
    sender's renamed copy of the series heads."""

    def __init__(self, scenario: str, rounds: int, seed: int = 2000) -> None:
        simulated = simulate(scenario, seed, rounds)
        self.interval_ms = simulated[1][0] - simulated[0][0]
        index: dict[tuple[tuple[str, str], ...], int] = {}
        self.labels: list[dict[str, str]] = []
        self.rounds: list[list[tuple[int, int, float]]] = []
        for t, series in simulated:
            rows = []
            for s in series:
                key = tuple(sorted(s.labels.items()))
                i = index.get(key)
                if i is None:
                    i = index[key] = len(self.labels)
                    self.labels.append(s.labels)
                rows.extend((i, ts - t, v) for ts, v in s.samples)
            self.rounds.append(rows)
        self._heads: dict[int, list[bytes]] = {}
        self._fields = {kv: _label(*kv) for labels in self.labels for kv in labels.items()}
        # the hand encoding must be what encode_write_request sends
        ts, value = 1_759_276_800_123, 42.5
        ours = series_head(self.labels[0]) + sample_tail(ts, value)
        theirs = cramjam.snappy.decompress_raw(
            encode_write_request([Series(dict(self.labels[0]), [(ts, value)])])
        )
        assert ours == bytes(theirs), "bench encoding differs from encode_write_request"

    @property
    def samples_per_round(self) -> float:
        return statistics.fmean(len(r) for r in self.rounds)

    def heads(self, sender: int) -> list[bytes]:
        heads = self._heads.get(sender)
        if heads is None:
            # node and group labels get the sender's prefix: its own nodes in its own group
            tag = f"s{sender:03d}-"
            renamed: dict[tuple[str, str], bytes] = {}
            heads = []
            for labels in self.labels:
                fields = []
                for k in sorted(labels):
                    v = labels[k]
                    if k in RENAMED:
                        f = renamed.get((k, v))
                        if f is None:
                            f = renamed[(k, v)] = _label(k, tag + v)
                        fields.append(f)
                    else:
                        fields.append(self._fields[(k, v)])
                heads.append(_head(fields))
            self._heads[sender] = heads
        return heads

    def bodies(self, sender: int, k: int, start_ms: int) -> list[tuple[bytes, int]]:
        """Sender ``sender``'s round ``k`` as snappy bodies with their sample counts."""
        heads = self.heads(sender)
        rows = self.rounds[k % len(self.rounds)]
        t = start_ms + k * self.interval_ms
        out = []
        for at in range(0, len(rows), MAX_SAMPLES_PER_SEND):
            chunk = rows[at : at + MAX_SAMPLES_PER_SEND]
            raw = b"".join(heads[i] + sample_tail(t + off, v) for i, off, v in chunk)
            out.append((bytes(cramjam.snappy.compress_raw(raw)), len(chunk)))
        return out


@dataclass
class Tally:
    codes: Counter[str] = field(default_factory=Counter)
    samples_204: int = 0
    rounds_skipped: int = 0


class Load:
    """Senders posting to the ingest; ``target`` says how many run."""

    def __init__(self, fleet: Fleet, url: str, start_ms: int) -> None:
        self.fleet, self.url, self.start_ms = fleet, url, start_ms
        self.target = 0
        self.tally = Tally()
        self.newest = -1  # the newest round any sender started
        self._next: dict[int, int] = {}  # sender -> its next round
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.session: aiohttp.ClientSession | None = None

    def set_senders(self, n: int) -> None:
        assert self.session is not None
        self.target = n
        for i in range(n):
            task = self._tasks.get(i)
            if task is None or task.done():
                self._tasks[i] = asyncio.create_task(self._sender(i))

    async def stop(self) -> None:
        """Every sender stops now; a round cut short is not sent again (skipped)."""
        self.target = 0
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _sender(self, i: int) -> None:
        while i < self.target:
            k = self._next.get(i, 0)
            if k < self.newest - MAX_LAG_ROUNDS:
                self.tally.rounds_skipped += self.newest - MAX_LAG_ROUNDS - k
                k = self.newest - MAX_LAG_ROUNDS
            self.newest = max(self.newest, k)
            self._next[i] = k + 1
            for body, n in self.fleet.bodies(i, k, self.start_ms):
                await self._post(body, n)

    async def _post(self, body: bytes, n: int) -> None:
        assert self.session is not None
        backoff = BACKOFF_MIN_S
        while True:
            try:
                async with self.session.post(self.url, data=body, headers=HEADERS) as reply:
                    await reply.read()
                    code = str(reply.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                code = type(exc).__name__
            self.tally.codes[code] += 1
            if code == "204":
                self.tally.samples_204 += n
                return
            if code not in ("503", "ServerDisconnectedError", "ClientOSError"):
                return  # Prometheus drops what it cannot ever send
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)


async def scrape_samples(session: aiohttp.ClientSession, base: str) -> Counter[str]:
    """The ingest's ``peerwatch_ingest_samples_total`` by outcome."""
    async with session.get(f"{base}/metrics") as reply:
        text = await reply.text()
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith('peerwatch_ingest_samples_total{outcome="'):
            name, value = line.split(" ")
            out[name.split('"')[1]] = int(float(value))
    return out


async def ready_latency(session: aiohttp.ClientSession, base: str) -> float:
    started = time.perf_counter()
    try:
        async with session.get(f"{base}/-/ready") as reply:
            await reply.read()
    except (aiohttp.ClientError, TimeoutError):
        return float("inf")
    return time.perf_counter() - started


async def phase(
    name: str, load: Load, senders: int, seconds: float, pid: int, base: str
) -> dict[str, object]:
    assert load.session is not None
    load.tally = Tally()
    before = await scrape_samples(load.session, base)
    rss = {"start": rss_mib(pid)}
    peak, ready_max = rss["start"], 0.0
    started = time.monotonic()
    load.set_senders(senders)
    while (elapsed := time.monotonic() - started) < seconds:
        await asyncio.sleep(1.0)
        ready_max = max(ready_max, await ready_latency(load.session, base))
        now = rss_mib(pid)
        peak = max(peak, now)
        if "mid" not in rss and elapsed >= seconds / 2:
            rss["mid"] = now
    elapsed = time.monotonic() - started
    rss["end"] = rss_mib(pid)
    after = await scrape_samples(load.session, base)
    outcomes = after - before
    return {
        "phase": name,
        "senders": senders,
        "seconds": elapsed,
        "codes": dict(load.tally.codes),
        "accepted_per_s": outcomes.pop("accepted", 0) / elapsed,
        "drops": dict(outcomes),
        "rounds_skipped": load.tally.rounds_skipped,
        "ready_max_s": ready_max,
        "rss_mib": {**rss, "peak": max(peak, rss["end"])},
    }


async def ramp(load: Load) -> int:
    """Double the senders until a step sees a 503; the last step without one (1x)."""
    n = 4
    while n <= MAX_SENDERS:
        load.tally = Tally()
        load.set_senders(n)
        await asyncio.sleep(RAMP_STEP_S)
        codes = load.tally.codes
        print(f"  ramp: {n:4d} senders  {dict(codes)}", flush=True)
        if codes.get("503"):
            return max(n // 2, 1)
        n *= 2
    return MAX_SENDERS


async def drive(fleet: Fleet, port: int, pid: int, seconds: float) -> list[dict[str, object]]:
    base = f"http://127.0.0.1:{port}"
    now_ms = int(time.time() * 1000)
    start_ms = now_ms - now_ms % fleet.interval_ms - 6 * 3600 * 1000  # event time: 6 h ago
    load = Load(fleet, f"{base}/api/v1/write", start_ms)
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        load.session = session
        one_x = await ramp(load)
        await load.stop()
        await asyncio.sleep(2.0)
        results = [await phase("1x", load, one_x, seconds, pid, base)]
        await load.stop()
        await asyncio.sleep(2.0)
        results.append(await phase("2x", load, 2 * one_x, seconds, pid, base))
        await load.stop()
    return results


def report(results: list[dict[str, object]], idle_rss: float) -> None:
    print(f"\ningest RSS idle (ready, before any write): {idle_rss:.0f} MiB")
    for r in results:
        codes = dict(r["codes"])  # type: ignore[call-overload]
        ok, busy = codes.pop("204", 0), codes.pop("503", 0)
        rss = r["rss_mib"]
        print(
            f"{r['phase']}: {r['senders']} senders, {r['seconds']:.0f} s: "
            f"204 {ok}, 503 {busy}, other {sum(codes.values())} {codes or ''}; "
            f"accepted {r['accepted_per_s']:,.0f} samples/s; drops {r['drops']}; "
            f"rounds skipped {r['rounds_skipped']}; slowest /-/ready {r['ready_max_s']:.2f} s; "
            f"RSS MiB start {rss['start']:.0f} mid {rss['mid']:.0f} "  # type: ignore[index]
            f"end {rss['end']:.0f} peak {rss['peak']:.0f}"  # type: ignore[index]
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--broker", choices=("kraft", "embedded"), default="kraft")
    parser.add_argument("--scenario", default="gpu-slow")
    parser.add_argument("--rounds", type=int, default=8, help="distinct simulated rounds")
    args = parser.parse_args(argv)

    fleet = Fleet(args.scenario, args.rounds)
    for sender in range(MAX_SENDERS):  # before the clock starts: the ramp is not driver-bound
        fleet.heads(sender)
    print(
        f"fleet: {args.scenario}, {len(fleet.labels):,} series, "
        f"{fleet.samples_per_round:,.0f} samples per round and sender; load "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="peerwatch-overload-") as tmp:
        workdir = Path(tmp)
        broker = KafkaKRaft(workdir / "kafka") if args.broker == "kraft" else EmbeddedBroker()
        with broker:
            run, port = uuid.uuid4().hex[:8], free_port()
            env = {
                "PEERWATCH_KAFKA": f"kafka://{broker.bootstrap}",
                "PEERWATCH_TOPIC_FRAMES": f"overload-{run}-frames",
                "PEERWATCH_TOPIC_ALERTS": f"overload-{run}-alerts",
                "PEERWATCH_TOPIC_XID": f"overload-{run}-xid",
                "PEERWATCH_INGEST_PORT": str(port),
            }
            ready = f"http://127.0.0.1:{port}/-/ready"
            with PeerwatchProcess(["ingest"], env, workdir / "ingest.log", ready) as ingest:
                assert ingest.pid is not None
                idle_rss = rss_mib(ingest.pid)
                results = asyncio.run(drive(fleet, port, ingest.pid, args.seconds))
    report(results, idle_rss)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
