"""Overload: the ingest at 1x and at 2x what it takes -- its answers and its memory.

    python -m bench.overload [--seconds 60] [--broker kraft|embedded] [--scenario gpu-slow]

Runs ``peerwatch ingest`` as a child process on loopback (default settings,
fresh topics) against Apache Kafka (``KafkaKRaft``) or the embedded broker, and
drives it from a second child process (the load generator, so its CPU does not
delay the sampling) with Prometheus-shaped remote_write bodies: the scenario's
simulated cluster (``gpu-slow``: ~9,900 series per scrape round), one renamed
copy per *fleet* (its own peer group of distinct nodes), sent round after
round in bodies of at most 2,000 samples. A sender behaves like a Prometheus
remote_write shard: it posts one body at a time, in order, and on a 503
retries the same body with Prometheus' backoff (30 ms doubling to 5 s).
Senders share one event clock: a fleet more than ``MAX_LAG_ROUNDS`` rounds
behind the newest skips ahead (as data a real fleet would send now), so no
sample drops as late only because the driver lagged.

First it ramps senders 4, 8, 16, ... (one fleet each; a step lasts
``RAMP_STEP_S`` and until it had as many answers as senders, at most
``RAMP_MAX_S``) until 503s appear; the last step without 503 is 1x. It warms up at 1x until
every 1x fleet had a round answered 204 (so its series exist), runs
``--seconds`` at 1x, then ``--seconds`` at 2x: twice the senders on the *same*
fleets (each fleet's series split over two senders, as Prometheus reshards), so
2x adds load, not series. For each phase it prints requests answered 204 /
503 / other, samples accepted per second (the ingest's own
``peerwatch_ingest_samples_total{outcome="accepted"}``), drops by reason, the
slowest ``/-/ready`` answer and the ingest's RSS (``/proc/PID/status``, both
sampled each second by the parent): start, mid, end, peak and its growth
(median of the last third minus median of the first), and says whether 503s
appeared and RSS stayed flat (growth under ``FLAT_FRACTION`` of the phase's
start). Not a test: nothing is asserted; the figures depend on the machine.

On SIGINT, SIGTERM or SIGHUP, or an exception, every child process group (load
generator, ingest, broker) is killed before the bench exits.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import struct
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

import aiohttp
import cramjam

from bench.fuzz_wire import label, varint
from bench.ingest_bench import simulate
from bench.procmem import growth_mib, rss_mib
from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.lab.launchers import (
    EmbeddedBroker,
    KafkaKRaft,
    PeerwatchProcess,
    free_port,
    peerwatch_env,
)
from streams.lab.simulator.run import MAX_SAMPLES_PER_SEND

HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "peerwatch-bench-overload",
}
RAMP_STEP_S = 4.0
RAMP_MAX_S = 30.0  # a ramp step's longest wait for as many answers as it has senders
WARM_MAX_S = 240.0  # the warm-up gives up after this long (the report says so)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops every child
FLAT_FRACTION = 0.05  # RSS is flat if it grew less than this fraction of the phase's start
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
            rows: list[tuple[int, int, float]] = []
            for s in series:
                key = tuple(sorted(s.labels.items()))
                i = index.get(key)
                if i is None:
                    i = index[key] = len(self.labels)
                    self.labels.append(s.labels)
                rows.extend((i, ts - t, v) for ts, v in s.samples)
            self.rounds.append(rows)
        self._heads: dict[int, list[bytes]] = {}
        self._shards: dict[tuple[int, int, int], list[tuple[int, int, float]]] = {}
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

    def _shard_rows(self, r: int, shard: int, shards: int) -> list[tuple[int, int, float]]:
        if shards == 1:
            return self.rounds[r]
        rows = self._shards.get((r, shard, shards))
        if rows is None:
            rows = [row for row in self.rounds[r] if row[0] % shards == shard]
            self._shards[(r, shard, shards)] = rows
        return rows

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

    def bodies(
        self, fleet: int, k: int, start_ms: int, shard: int = 0, shards: int = 1
    ) -> list[tuple[bytes, int]]:
        """Fleet ``fleet``'s round ``k`` -- the series of ``shard`` of ``shards`` (split by
        series) -- as snappy bodies with their sample counts."""
        heads = self.heads(fleet)
        rows = self._shard_rows(k % len(self.rounds), shard, shards)
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
    """Senders posting to the ingest: ``set_senders`` says how many, on how many fleets."""

    def __init__(self, fleet: Fleet, url: str, start_ms: int) -> None:
        self.fleet, self.url, self.start_ms = fleet, url, start_ms
        self.target = 0
        self.fleets = 0
        self.tally = Tally()
        self.newest = -1  # the newest round any sender started
        self.warm: set[int] = set()  # fleets that had a whole round answered 204
        self._next: dict[tuple[int, int, int], int] = {}  # (fleet, shard, shards) -> next round
        self._fleet_next: dict[int, int] = {}  # fleet -> its newest round started, + 1
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.session: aiohttp.ClientSession | None = None

    def set_senders(self, n: int, fleets: int | None = None) -> None:
        """``n`` senders on ``fleets`` fleets (default ``n``, else a divisor of ``n``): sender
        ``i`` sends shard ``i // fleets`` of fleet ``i % fleets``'s series. Resharding
        (other ``fleets``) needs ``stop`` first."""
        assert self.session is not None
        fleets = fleets or n
        shards = n // fleets
        assert n % fleets == 0 and (self.target == 0 or shards == self.target // self.fleets)
        self.target, self.fleets = n, fleets
        for i in range(n):
            task = self._tasks.get(i)
            if task is None or task.done():
                self._tasks[i] = asyncio.create_task(self._sender(i, fleets, shards))

    async def stop(self) -> None:
        """Every sender stops now; a round cut short is not sent again (skipped)."""
        self.target = 0
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _sender(self, i: int, fleets: int, shards: int) -> None:
        fleet, shard = i % fleets, i // fleets
        key = (fleet, shard, shards)
        while i < self.target:
            k = self._next.get(key, self._fleet_next.get(fleet, 0))
            if k < self.newest - MAX_LAG_ROUNDS:
                self.tally.rounds_skipped += self.newest - MAX_LAG_ROUNDS - k
                k = self.newest - MAX_LAG_ROUNDS
            self.newest = max(self.newest, k)
            self._next[key] = k + 1
            self._fleet_next[fleet] = max(self._fleet_next.get(fleet, 0), k + 1)
            whole = True
            for body, n in self.fleet.bodies(fleet, k, self.start_ms, shard, shards):
                whole = await self._post(body, n) and whole
            if whole and shards == 1:
                self.warm.add(fleet)

    async def _post(self, body: bytes, n: int) -> bool:
        """True if the body was answered 204."""
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
                return True
            if code not in ("503", "ServerDisconnectedError", "ClientOSError"):
                return False  # Prometheus drops what it cannot ever send
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


async def phase(
    name: str, load: Load, senders: int, fleets: int, seconds: float, base: str
) -> dict[str, Any]:
    """``seconds`` of ``senders`` on ``fleets``: answers and accepted samples, and the
    phase's span in ``time.monotonic()`` (the parent's samples are matched to it)."""
    assert load.session is not None
    load.tally = Tally()
    before = await scrape_samples(load.session, base)
    started = time.monotonic()
    load.set_senders(senders, fleets)
    await asyncio.sleep(seconds)
    ended = time.monotonic()
    after = await scrape_samples(load.session, base)
    outcomes = after - before
    await load.stop()
    return {
        "phase": name,
        "senders": senders,
        "fleets": fleets,
        "span": (started, ended),
        "seconds": ended - started,
        "codes": dict(load.tally.codes),
        "accepted_per_s": outcomes.pop("accepted", 0) / (ended - started),
        "drops": dict(outcomes),
        "rounds_skipped": load.tally.rounds_skipped,
    }


async def ramp(load: Load) -> int:
    """Double the senders until a step sees a 503; the last step without one (1x)."""
    n = 4
    while n <= MAX_SENDERS:
        load.tally = Tally()
        load.set_senders(n)
        started = time.monotonic()
        await asyncio.sleep(RAMP_STEP_S)
        # a slow ingest answers late: a step lasts until each sender had an answer on average
        while sum(load.tally.codes.values()) < n and time.monotonic() - started < RAMP_MAX_S:
            await asyncio.sleep(0.5)
        codes = load.tally.codes
        print(f"  ramp: {n:4d} senders  {dict(codes)}", flush=True)
        if codes.get("503"):
            return max(n // 2, 1)
        n *= 2
    return MAX_SENDERS


async def warm_up(load: Load, fleets: int) -> float:
    """Run ``fleets`` senders until each fleet had a whole round answered 204 (its series
    exist before anything is measured), at most ``WARM_MAX_S``; the seconds it took."""
    started = time.monotonic()
    load.set_senders(fleets)
    while not load.warm >= set(range(fleets)) and time.monotonic() - started < WARM_MAX_S:
        await asyncio.sleep(0.5)
    await load.stop()
    print(f"  warm-up: {len(load.warm & set(range(fleets)))} of {fleets} fleets", flush=True)
    return time.monotonic() - started


async def drive(fleet: Fleet, port: int, seconds: float) -> dict[str, Any]:
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
        warm_s = await warm_up(load, one_x)
        await asyncio.sleep(2.0)
        results = [await phase("1x", load, one_x, one_x, seconds, base)]
        await asyncio.sleep(2.0)
        results.append(await phase("2x", load, 2 * one_x, one_x, seconds, base))
    return {"phases": results, "warm_s": warm_s, "warm_fleets": len(load.warm)}


def _load_process(fleet: Fleet, port: int, seconds: float, results: Connection) -> None:
    """The load generator's process: drive, then hand the figures to the parent."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked across the fork
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    results.send(asyncio.run(drive(fleet, port, seconds)))


def ready_latency(base: str) -> float:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=30) as reply:
            reply.read()
    except OSError:
        return float("inf")
    return time.perf_counter() - started


def watch(
    pid: int, base: str, load: multiprocessing.process.BaseProcess, results: Connection
) -> tuple[Any, list[tuple[float, float, float]]]:
    """Sample the ingest each second -- (monotonic time, RSS MiB, /-/ready seconds) -- until
    the load generator hands over its figures."""
    samples: list[tuple[float, float, float]] = []
    tick = time.monotonic()
    while not results.poll(max(0.0, tick - time.monotonic())):
        if not load.is_alive() and not results.poll():
            raise RuntimeError(f"the load generator exited with status {load.exitcode}")
        tick += 1.0
        samples.append((time.monotonic(), rss_mib(pid), ready_latency(base)))
    return results.recv(), samples


def memory(span: tuple[float, float], samples: list[tuple[float, float, float]]) -> dict[str, Any]:
    """The ingest's RSS and /-/ready over one phase, and whether RSS stayed flat."""
    rows = [(rss, ready) for t, rss, ready in samples if span[0] <= t <= span[1]]
    rss = [r for r, _ in rows]
    growth = growth_mib(rss)
    return {
        "rss_mib": {
            "start": rss[0],
            "mid": rss[len(rss) // 2],
            "end": rss[-1],
            "peak": max(rss),
            "growth": growth,
            "samples": len(rss),
        },
        "rss_flat": growth is not None and growth < FLAT_FRACTION * rss[0],
        "ready_max_s": max(ready for _, ready in rows),
    }


def report(results: list[dict[str, Any]], idle_rss: float, warm: tuple[float, int]) -> None:
    print(f"\ningest RSS idle (ready, before any write): {idle_rss:.0f} MiB")
    print(f"warm-up: {warm[0]:.0f} s, {warm[1]} fleets had a whole round answered 204")
    for r in results:
        codes = dict(r["codes"])
        ok, busy = codes.pop("204", 0), codes.pop("503", 0)
        rss = r["rss_mib"]
        print(
            f"{r['phase']}: {r['senders']} senders on {r['fleets']} fleets, "
            f"{r['seconds']:.0f} s: 204 {ok}, 503 {busy}, other {sum(codes.values())} "
            f"{codes or ''}; accepted {r['accepted_per_s']:,.0f} samples/s; drops {r['drops']}; "
            f"rounds skipped {r['rounds_skipped']}; slowest /-/ready {r['ready_max_s']:.2f} s; "
            f"RSS MiB start {rss['start']:.0f} mid {rss['mid']:.0f} end {rss['end']:.0f} "
            f"peak {rss['peak']:.0f}, growth first -> last third {rss['growth']:+.1f} "
            f"({rss['samples']} samples)"
        )
    for r in results:
        print(
            f"{r['phase']}: 503s {'yes' if r['codes'].get('503') else 'no'}; RSS "
            f"{'flat' if r['rss_flat'] else 'NOT flat'} "
            f"(grew {r['rss_mib']['growth']:+.1f} MiB, flat below {FLAT_FRACTION:.0%} of its start)"
        )


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the children


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each phase")
    parser.add_argument("--broker", choices=("kraft", "embedded"), default="kraft")
    parser.add_argument("--scenario", default="gpu-slow")
    parser.add_argument("--rounds", type=int, default=8, help="distinct simulated rounds")
    args = parser.parse_args(argv)
    # SIGINT too: started in the background, a shell hands it down ignored
    for sig in STOP_SIGNALS:
        signal.signal(sig, _exit_on_signal)

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
        run, port = uuid.uuid4().hex[:8], free_port()
        env = peerwatch_env(
            broker.bootstrap, topics=f"overload-{run}", ingest_port=port, datadir=workdir / "data"
        )
        base = f"http://127.0.0.1:{port}"
        ingest = PeerwatchProcess(["ingest"], env, workdir / "ingest.log", f"{base}/-/ready")
        # fork: the child shares the prepared fleet; it is in our process group (a Ctrl-C
        # reaches it too), the broker and the ingest lead groups of their own
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        load = context.Process(target=_load_process, args=(fleet, port, args.seconds, send))
        try:
            broker.start()
            ingest.start()
            assert ingest.pid is not None
            print(f"pids: broker {broker.pid}, ingest {ingest.pid}", flush=True)
            idle_rss = rss_mib(ingest.pid)
            # a signal inside fork() would be swallowed by its at-fork hooks: hold it until after
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                load.start()
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            print(f"pids: load generator {load.pid}", flush=True)
            driven, samples = watch(ingest.pid, base, load, receive)
            load.join()
            ingest.stop()
            broker.stop()
        finally:
            # whatever happened (signal, exception): no child outlives the bench
            if load.pid is not None and load.is_alive():
                load.kill()
                load.join()
            ingest.kill()
            broker.kill()
    results = [{**r, **memory(r["span"], samples)} for r in driven["phases"]]
    report(results, idle_rss, (driven["warm_s"], driven["warm_fleets"]))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
