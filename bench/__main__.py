"""Every benchmark of issue 12 (fleet scale) with one command, each beside its baselines.

    python -m bench [--smoke] [--only NAME ...] [--kafka host:port]

Runs, one after another, each as its own child process (``python -m <module> ARGS``:
a bench's CPU and memory figures are its process's own, and one that fails does not
stop the rest):

- ``ingest``: decode + frame building on one core (``bench.ingest_bench``), beside the
  pre-rework builder, the library limit and the naive design;
- ``worker``: the in-process Pipeline at fleet size (``bench.worker``): seconds per
  bucket, close-to-changes latency, detector state per node (the memory figure) and
  changelog bytes, one group beside the fleet, at 88 and at 300 values per frame;
- ``worker-kafka``: the worker through real Kafka and Faust (``bench.worker_kafka``),
  beside the in-process Pipeline on the same frames; ``worker-kafka-k4`` the same with
  a snapshot every 4 buckets, ``worker-kafka-4w`` with 4 workers on 4 partitions;
- ``frame-codec``: JSON against binary frame codecs (``bench.frame_codec``);
- ``e2e``: fault onset to Alertmanager on the real processes (``bench.e2e_latency``),
  beside the design's floor and a minimal forwarder;
- ``evaluate``: the evaluation suite's wall time (``python -m streams evaluate``),
  beside the issue's 300-s target.

``--smoke`` runs each at a small size (4 min 13 s together at a load of 10 on the shared
2 cores, 2026-12-01; most of it process and broker start-ups): it checks that every
bench still runs end to end, its figures are not the fleet's. Each bench
prints its own table; the closing summary gives every bench's wall time and status,
and the exit status is non-zero when any failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

EVALUATE_TARGET_S = 300.0  # issue 12, part 5


@dataclass(frozen=True)
class Bench:
    name: str
    module: str  # run as ``python -m module``
    full: tuple[str, ...]
    smoke: tuple[str, ...]
    kafka: bool = False  # takes ``--kafka host:port`` (else it starts its own broker)


# the 100,000-GPU fleet: 12,500 nodes; 4 untimed buckets (a multiple of 4 for the cadence)
FLEET = ("--nodes", "12500", "--warmup", "4", "--buckets", "4")

BENCHES = (
    Bench("ingest", "bench.ingest_bench", (), ("--rounds", "2", "--repeat", "1")),
    Bench(
        "worker",
        "bench.worker",
        ("--features", "300"),  # the memory figures at 88 and at 300 values per frame
        ("--nodes", "120", "--warmup", "2", "--buckets", "2", "--repeat", "1", "--no-stages"),
    ),
    Bench("worker-kafka", "bench.worker_kafka", FLEET, ("--nodes", "120", "--buckets", "3")),
    # the changelog a quarter as often (the setting's default stays 1: docs/configuration.md)
    Bench(
        "worker-kafka-k4",
        "bench.worker_kafka",
        (*FLEET, "--snapshot-every-buckets", "4"),
        ("--nodes", "120", "--warmup", "2", "--buckets", "2", "--snapshot-every-buckets", "2"),
    ),
    Bench(
        "worker-kafka-4w",
        "bench.worker_kafka",
        (*FLEET, "--workers", "4", "--partitions", "4"),
        ("--nodes", "120", "--buckets", "3", "--workers", "2", "--partitions", "4"),
    ),
    Bench("frame-codec", "bench.frame_codec", (), ("--frames", "200", "--repeat", "1")),
    Bench(
        "e2e",
        "bench.e2e_latency",
        (),
        ("--jobs", "1", "--nodes", "12", "--warmup-min", "4", "--speed", "20"),
        kafka=True,
    ),
    Bench(
        "evaluate",
        "streams",
        ("evaluate",),
        ("evaluate", "--scenario", "ecc-xid94", "--seeds", "1", "--jobs", "1"),
    ),
)


def command(bench: Bench, smoke: bool, kafka: str | None) -> list[str]:
    args = [sys.executable, "-m", bench.module, *(bench.smoke if smoke else bench.full)]
    if kafka is not None and bench.kafka:
        args += ["--kafka", kafka]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    names = [b.name for b in BENCHES]
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="small sizes: does it all run?")
    parser.add_argument("--only", action="append", choices=names, help="this bench (repeatable)")
    parser.add_argument("--kafka", help="host:port of a broker for the benches that take one")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHES if args.only is None or b.name in args.only]
    results: list[tuple[Bench, int, float]] = []
    for bench in chosen:
        args_ = command(bench, args.smoke, args.kafka)
        print(f"\n=== {bench.name}: {' '.join(args_[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(args_, check=False).returncode
        results.append((bench, code, time.monotonic() - started))
    print(f"\n=== summary{' (smoke sizes: not the fleet figures)' if args.smoke else ''}")
    for bench, code, wall in results:
        note = ""
        if bench.name == "evaluate":
            note = f"   target < {EVALUATE_TARGET_S:.0f} s" + ("" if not args.smoke else " (full)")
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"  {bench.name:<14} {wall:7.1f} s  {status}{note}")
    return 0 if all(code == 0 for _, code, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
