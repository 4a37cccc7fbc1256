"""Ingest throughput on one core: the frame builder and the remote_write decoder.

    python -m bench.ingest_bench [--rounds 20] [--repeat 5] [--scenario gpu-slow] [--seed 2000]

Input: scrape rounds of a scenario's simulated cluster (``gpu-slow``: 63 nodes,
every metric family on, ~9,900 series per round, one sample each -- the shape
Prometheus sends), and the same rounds as remote_write bodies of at most 2,000
samples (Prometheus' ``max_samples_per_send``). Each row runs a *baseline* and
the current code on the same input in this process, interleaved, the median of
``--repeat`` runs each, so a busy machine slows both alike:

- ``add()`` / ``add() + close``: ``FrameBuilder`` against the builder as it was
  before the hot-path rework (``bench.baseline_frames``);
- ``add(), fresh label dicts``: the same with every round's label dicts copied,
  so every series resolves its labels anew (a decoder whose label cache turns
  over, as at fleet scale, hands out new dicts);
- ``decode + add``: the ingest's request path, pure-Python decoder + builder,
  baseline builder vs current; with the decoder's ``metric_names`` prefilter
  (as the ingest runs it) and without;
- ``native decode (+ add)``: the pure-Python decoder vs the compiled one
  (``native/``), each with ``FrameBuilder``;
- ``columns``: the compiled decoder's ``Series`` (``decode`` + ``add``) vs its
  columns (``decode_batch`` + ``add_batch``, what the ingest runs);
- ``loop``: ``add_batch``'s Python loop vs its compiled loop (``native/``'s
  ``AddKernel``, which takes the plain samples and leaves the rest to the Python loop),
  both on the compiled decoder's columns;
- ``library limit``: the yardstick of issue 12 -- snappy + upb
  ``ParseFromString`` of the same bodies into the prompb classes, and the same
  plus a Python walk of every label and sample (no decoder does less work);
- ``naive design``: the other yardstick of issue 12 -- one message per sample in
  prometheus-kafka-adapter's JSON (name, labels, value as a string, RFC 3339 time,
  here with milliseconds so the frames are the same) handled one at a time as a plain
  Faust agent would (orjson decode, parse the time, ``add`` one series), measured in
  this process on the consumer's CPU only: no Kafka, no producer, no adapter (a real
  broker run of 400,000 messages per round is beyond this 2-core machine); against
  the columns path;
- ``prefilter``: decode (+ add) unfiltered vs with the prefilter; the simulator
  emits few series no feature reads (~20 %, a real node_exporter ~95 %), so
  this says what the prefilter costs on series it lets through.
- ``write-ahead log``, in *wall* time (an fsync waits on the disk, it costs little
  CPU): the ingest's request path on the work thread (columns decode + add) without
  the log and with it (each body written and fsynced before the next, as before a
  204), in a fresh directory under ``--wal-dir`` (default: the temp directory: put it
  on the disk the log will live on); and the replay of that log at a start (read,
  decode, add), in MB of log per second.

Rates are samples offered (accepted or dropped) per second of process CPU time,
one round untimed first to warm caches; the cyclic GC stays on, as in the
ingest, with the bench's own inputs frozen out of its sight (``gc.freeze``): an
ingest holds no rounds of ``Series``, and a full pass over them would be billed to
whichever row it fell in. Both builders must emit the same frames: the run checks that and says so.
No figure here is asserted anywhere; the design target (>= 350,000 samples/s on
one core, DESIGN.md section 8) is printed beside the decode + add rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import cramjam
import orjson

from bench.baseline_frames import BaselineFrameBuilder
from streams.frames import Frame
from streams.ingest.builder import KERNEL_AVAILABLE, FrameBuilder
from streams.ingest.remote_write import (
    NATIVE_AVAILABLE,
    WriteRequest,
    WriteRequestDecoder,
    encode_write_request,
)
from streams.ingest.series import Series
from streams.ingest.wal import WriteAheadLog
from streams.lab.evaluation.runner import evaluation_settings
from streams.lab.simulator.cluster import ClusterSimulator
from streams.lab.simulator.run import MAX_SAMPLES_PER_SEND, split_samples
from streams.lab.simulator.scenarios import get_scenario
from streams.settings import Settings

TARGET_SAMPLES_PER_S = 350_000

Round = tuple[int, list[Series]]
Builder = Any  # FrameBuilder or BaselineFrameBuilder: the same interface


def make_builder(cls: type, settings: Settings, **kwargs: Any) -> Builder:
    """A builder of ``cls`` configured as ``streams.ingest.builder.frame_builder_for`` does."""
    from streams.catalog import features_for

    return cls(
        features_for(settings),
        node_labels=tuple(settings.node_labels),
        group_labels=tuple(settings.group_labels),
        bucket_ms=settings.bucket_ms,
        **kwargs,
    )


def simulate(scenario: str, seed: int, rounds: int) -> list[Round]:
    config = get_scenario(scenario).config_for(seed)
    sim = ClusterSimulator(config)
    times = [config.start_ms + i * config.interval_ms for i in range(rounds)]
    return [(t, sim.scrape(t)) for t in times]


def encode(rounds: list[Round]) -> list[tuple[int, list[bytes], int]]:
    """Each round as remote_write bodies, with its sample count."""
    return [
        (
            t,
            [encode_write_request(b) for b in split_samples(series, MAX_SAMPLES_PER_SEND)],
            sum(len(s.samples) for s in series),
        )
        for t, series in rounds
    ]


def feed(builder: Builder, t_ms: int, series: list[Series], close: bool) -> list[Frame]:
    now_s = t_ms / 1000.0
    builder.add(series, now_s=now_s)
    return builder.close_due_by_watermark(now_s=now_s, idle_s=60.0) if close else []


def run_series(
    cls: type, settings: Settings, rounds: list[Round], close: bool
) -> tuple[float, list[Frame]]:
    """CPU seconds for rounds[1:] through a fresh builder (rounds[0] warms it), and its frames."""
    builder = make_builder(cls, settings)
    frames = feed(builder, *rounds[0], close)
    spent = 0.0
    for t_ms, series in rounds[1:]:
        started = time.process_time()
        frames += feed(builder, t_ms, series, close)
        spent += time.process_time() - started
    return spent, frames


def run_series_cpu(cls: type, settings: Settings, rounds: list[Round], close: bool) -> float:
    return run_series(cls, settings, rounds, close)[0]


def run_bodies(
    cls: type | None,
    settings: Settings,
    bodies: list[tuple[int, list[bytes], int]],
    prefilter: bool,
    native: bool = False,
    columns: bool = False,
    loop: bool | None = None,
) -> float:
    """CPU seconds to decode bodies[1:] and add them to a ``cls`` builder (None: decode
    only); bodies[0] warms the decoder's caches and the builder. ``columns``: the
    compiled decoder's ``decode_batch`` and the builder's ``add_batch``; ``loop``: its
    compiled loop (True), its Python loop (False), as installed (None)."""
    extra = {} if loop is None else {"native": loop}
    builder = make_builder(cls or FrameBuilder, settings, **extra)
    decoder = WriteRequestDecoder(
        metric_names=builder.metric_names if prefilter else None, native=native
    )
    decode = decoder.decode_batch if columns else decoder.decode
    add = builder.add_batch if columns else builder.add
    spent = 0.0
    for i, (t_ms, requests, _) in enumerate(bodies):
        started = time.process_time()
        now_s = t_ms / 1000.0
        for body in requests:
            series = decode(body)
            if cls is not None:
                add(series, now_s=now_s)
        if i:
            spent += time.process_time() - started
    if native:
        assert decoder.fallback_bodies == 0, "the compiled decoder left bodies to Python"
    return spent


def run_bodies_wal(
    settings: Settings, bodies: list[tuple[int, list[bytes], int]], wal_dir: Path | None
) -> float:
    """Wall seconds to take bodies[1:] as the ingest's work thread does (columns decode,
    the log's append when ``wal_dir`` is given -- written and fsynced -- then add)."""
    builder = make_builder(FrameBuilder, settings)
    decoder = WriteRequestDecoder(metric_names=builder.metric_names)
    with tempfile.TemporaryDirectory(dir=wal_dir) as directory:
        wal = WriteAheadLog(Path(directory)) if wal_dir is not None else None
        spent = 0.0
        for i, (t_ms, requests, _) in enumerate(bodies):
            started = time.perf_counter()
            for body in requests:
                batch = decoder.decode_batch(body)
                if wal is not None:
                    wal.append(body)
                builder.add_batch(batch, now_s=t_ms / 1000.0)
            if i:
                spent += time.perf_counter() - started
        if wal is not None:
            wal.close()
    return spent


def run_replay(
    settings: Settings, bodies: list[tuple[int, list[bytes], int]], wal_dir: Path
) -> tuple[float, int]:
    """(wall seconds, bytes) to replay a log of all ``bodies`` into a fresh builder, as the
    ingest does at a start (read each segment, decode, add)."""
    with tempfile.TemporaryDirectory(dir=wal_dir) as directory:
        wal = WriteAheadLog(Path(directory), roll_s=3600.0)  # one segment
        for _, requests, _ in bodies:
            for body in requests:
                wal.append(body)
        size = wal.held_bytes
        wal.close()
        builder = make_builder(FrameBuilder, settings)
        decoder = WriteRequestDecoder(metric_names=builder.metric_names)
        now_s = bodies[-1][0] / 1000.0
        started = time.perf_counter()
        replaying = WriteAheadLog(Path(directory))
        for _, body in replaying.replay():
            builder.add_batch(decoder.decode_batch(body), now_s=now_s)
        spent = time.perf_counter() - started
        replaying.close()
    return spent, size


def adapter_messages(rounds: list[Round]) -> list[tuple[int, list[bytes]]]:
    """Each round as prometheus-kafka-adapter's messages: one JSON object per sample."""

    def message(labels: dict[str, str], ts: int, value: float) -> bytes:
        time_text = datetime.fromtimestamp(ts / 1000, UTC).isoformat(timespec="milliseconds")
        return orjson.dumps(
            {
                "timestamp": time_text.replace("+00:00", "Z"),
                "value": repr(float(value)),
                "name": labels.get("__name__", ""),
                "labels": labels,
            }
        )

    return [
        (t, [message(s.labels, ts, v) for s in series for ts, v in s.samples])
        for t, series in rounds
    ]


def run_naive(
    settings: Settings, messages: list[tuple[int, list[bytes]]]
) -> tuple[float, list[Frame]]:
    """CPU seconds of a plain agent over messages[1:]: decode each, ``add`` it alone."""
    builder = make_builder(FrameBuilder, settings)
    spent = 0.0
    frames: list[Frame] = []
    for i, (t_ms, batch) in enumerate(messages):
        started = time.process_time()
        now_s = t_ms / 1000.0
        for raw in batch:
            m = orjson.loads(raw)
            ts = round(datetime.fromisoformat(m["timestamp"]).timestamp() * 1000)
            builder.add([Series(m["labels"], [(ts, float(m["value"]))])], now_s=now_s)
        frames += builder.close_due_by_watermark(now_s=now_s, idle_s=60.0)
        if i:
            spent += time.process_time() - started
    return spent, frames + builder.flush_all()


def closed_and_flushed(settings: Settings, rounds: list[Round]) -> list[Frame]:
    """``run_naive``'s frames, from ``FrameBuilder.add`` of each round's series."""
    builder = make_builder(FrameBuilder, settings)
    frames: list[Frame] = []
    for t_ms, series in rounds:
        frames += feed(builder, t_ms, series, True)
    return frames + builder.flush_all()


def run_library_limit(bodies: list[tuple[int, list[bytes], int]], walk: bool) -> float:
    """CPU seconds for snappy + upb ``WriteRequest.FromString`` of bodies[1:], and with
    ``walk`` a Python pass over every label and sample (what any Python consumer pays)."""
    spent = 0.0
    for i, (_, requests, _) in enumerate(bodies):
        started = time.process_time()
        for body in requests:
            request = WriteRequest.FromString(bytes(cramjam.snappy.decompress_raw(body)))
            if walk:
                for ts in request.timeseries:
                    labels = {label.name: label.value for label in ts.labels}
                    samples = [(s.timestamp, s.value) for s in ts.samples]
                    del labels, samples
        if i:
            spent += time.process_time() - started
    return spent


def best_pair(
    baseline: Callable[[], float], current: Callable[[], float], repeat: int
) -> tuple[float, float]:
    """Median of ``repeat`` runs of each, interleaved (A B A B ...) so load hits both."""
    a, b = [], []
    for _ in range(repeat):
        a.append(baseline())
        b.append(current())
    return statistics.median(a), statistics.median(b)


def frames_equal(a: Sequence[Frame], b: Sequence[Frame]) -> bool:
    """Same frames in the same order, values in the same order too.

    ``pci_bus_id@<gpu>`` entries of ``gpus`` (the bus id map the worker needs, added
    after the baseline was frozen) are left out of the comparison.
    """
    return len(a) == len(b) and all(
        _without_pci(x) == _without_pci(y) and list(x.values) == list(y.values)
        for x, y in zip(a, b, strict=True)
    )


def _without_pci(frame: Frame) -> tuple[Any, ...]:
    gpus = {k: v for k, v in frame.gpus.items() if not k.startswith("pci_bus_id@")}
    return dataclasses.astuple(dataclasses.replace(frame, gpus=gpus))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest_bench", description=__doc__)
    parser.add_argument("--scenario", default="gpu-slow")
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds (plus one warm-up)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--wal-dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the write-ahead log rows write (the disk the ingest's log is on)",
    )
    args = parser.parse_args(argv)

    settings = evaluation_settings()
    rounds = simulate(args.scenario, args.seed, args.rounds + 1)
    bodies = encode(rounds)
    samples = sum(n for _, _, n in bodies[1:])
    per_round = len(rounds[0][1])
    print(
        f"ingest bench: {args.scenario} seed {args.seed}, {per_round:,} series/round, "
        f"{args.rounds} rounds timed ({samples:,} samples), median of {args.repeat}, "
        "samples/s of CPU time on one core"
    )

    rows: list[tuple[str, str, float, str, float]] = []
    fresh = [(t, [Series(dict(s.labels), s.samples) for s in series]) for t, series in rounds]
    # The inputs (~10 objects per series and round) are this process's, not the ingest's:
    # out of the collector's sight, so that its passes walk what an ingest's would.
    gc.collect()
    gc.freeze()
    for label, inputs, close in (
        ("add()", rounds, False),
        ("add() + close", rounds, True),
        ("add(), fresh label dicts", fresh, False),
    ):
        a, b = best_pair(
            partial(run_series_cpu, BaselineFrameBuilder, settings, inputs, close),
            partial(run_series_cpu, FrameBuilder, settings, inputs, close),
            args.repeat,
        )
        rows.append((label, "baseline builder", a, "FrameBuilder", b))
    for label, prefilter in (
        ("decode + add, prefiltered", True),
        ("decode + add, unfiltered", False),
    ):
        a, b = best_pair(
            partial(run_bodies, BaselineFrameBuilder, settings, bodies, prefilter),
            partial(run_bodies, FrameBuilder, settings, bodies, prefilter),
            args.repeat,
        )
        rows.append((label, "baseline builder", a, "FrameBuilder", b))
    a, b = best_pair(
        partial(run_bodies, FrameBuilder, settings, bodies, False),
        partial(run_bodies, FrameBuilder, settings, bodies, True),
        args.repeat,
    )
    rows.append(("prefilter, decode + add", "unfiltered", a, "prefiltered", b))
    a, b = best_pair(
        partial(run_bodies, None, settings, bodies, False),
        partial(run_bodies, None, settings, bodies, True),
        args.repeat,
    )
    rows.append(("prefilter, decode alone", "unfiltered", a, "prefiltered", b))
    if NATIVE_AVAILABLE:
        for label, cls, prefilter in (
            ("native decode + add, prefiltered", FrameBuilder, True),
            ("native decode + add, unfiltered", FrameBuilder, False),
            ("native decode alone, unfiltered", None, False),
        ):
            a, b = best_pair(
                partial(run_bodies, cls, settings, bodies, prefilter, False),
                partial(run_bodies, cls, settings, bodies, prefilter, True),
                args.repeat,
            )
            rows.append((label, "Python decoder", a, "native", b))
        for label, prefilter in (
            ("columns decode + add, prefiltered", True),
            ("columns decode + add, unfiltered", False),
        ):
            a, b = best_pair(
                partial(run_bodies, FrameBuilder, settings, bodies, prefilter, True),
                partial(run_bodies, FrameBuilder, settings, bodies, prefilter, True, True),
                args.repeat,
            )
            rows.append((label, "native Series", a, "columns", b))
        a, b = best_pair(
            partial(run_bodies, None, settings, bodies, False, True),
            partial(run_bodies, None, settings, bodies, False, True, True),
            args.repeat,
        )
        rows.append(("columns decode alone, unfiltered", "native Series", a, "columns", b))
    if KERNEL_AVAILABLE:
        for label, prefilter in (
            ("loop decode + add, prefiltered", True),
            ("loop decode + add, unfiltered", False),
        ):
            a, b = best_pair(
                partial(run_bodies, FrameBuilder, settings, bodies, prefilter, True, True, False),
                partial(run_bodies, FrameBuilder, settings, bodies, prefilter, True, True, True),
                args.repeat,
            )
            rows.append((label, "Python loop", a, "compiled loop", b))
    if NATIVE_AVAILABLE:
        best = partial(run_bodies, FrameBuilder, settings, bodies, False, True, True)
        messages = adapter_messages(rounds)
        a, b = best_pair(lambda: run_naive(settings, messages)[0], best, args.repeat)
        rows.append(("naive design (in-process)", "msg per sample", a, "columns", b))
        a, b = best_pair(partial(run_library_limit, bodies, False), best, args.repeat)
        rows.append(("library limit vs columns", "snappy + upb", a, "columns", b))
        a, b = best_pair(partial(run_library_limit, bodies, True), best, args.repeat)
        rows.append(("library limit + walk vs columns", "upb + walk", a, "columns", b))
    a, b = best_pair(
        partial(run_library_limit, bodies, False),
        partial(run_library_limit, bodies, True),
        args.repeat,
    )
    rows.append(("library limit: snappy + upb", "parse", a, "parse + walk", b))

    print()
    print(
        f"{'path':<33} {'baseline':<17} {'samples/s':>10}   {'new':<13} {'samples/s':>10}  speed-up"
    )
    for label, base_name, base_s, new_name, new_s in rows:
        base_rate, new_rate = samples / base_s, samples / new_s
        mark = ""
        if "decode + add," in label or label.endswith("vs columns") or "naive" in label:
            mark = "  (target met)" if new_rate >= TARGET_SAMPLES_PER_S else "  (below target)"
        print(
            f"{label:<33} {base_name:<17} {base_rate:>10,.0f}   {new_name:<13} {new_rate:>10,.0f}"
            f"  {base_s / new_s:5.2f}x{mark}"
        )

    if NATIVE_AVAILABLE:
        a, b = best_pair(
            partial(run_bodies_wal, settings, bodies, None),
            partial(run_bodies_wal, settings, bodies, args.wal_dir),
            args.repeat,
        )
        requests = sum(len(r) for _, r, _ in bodies[1:])
        print()
        print(f"write-ahead log in {args.wal_dir}, wall time, columns decode + add:")
        print(
            f"  without the log {samples / a:>10,.0f} samples/s   with it (fsync per body) "
            f"{samples / b:>10,.0f} samples/s  {b / a:5.2f}x the time, "
            f"+{(b - a) / requests * 1000:.2f} ms per body ({requests:,} bodies)"
        )
        replays = [run_replay(settings, bodies, args.wal_dir) for _ in range(args.repeat)]
        spent = statistics.median(s for s, _ in replays)
        size = replays[0][1]
        print(
            f"  replay at a start: {size / 1e6:.1f} MB of log in {spent:.2f} s, "
            f"{size / 1e6 / spent:.1f} MB/s ({samples / spent:,.0f} samples/s)"
        )

    naive_frames = run_naive(settings, adapter_messages(rounds))[1]
    same = frames_equal(naive_frames, closed_and_flushed(settings, rounds))
    verdict = "identical to" if same else "DIFFERENT from"
    print(f"naive design: {len(naive_frames):,} frames, {verdict} FrameBuilder's (same series)")
    _, base_frames = run_series(BaselineFrameBuilder, settings, rounds, True)
    _, new_frames = run_series(FrameBuilder, settings, rounds, True)
    same = frames_equal(base_frames, new_frames)
    print()
    print(
        f"frames: {len(new_frames):,} from FrameBuilder, "
        f"{'identical to' if same else 'DIFFERENT from'} the baseline builder's"
    )
    print(f"design target: >= {TARGET_SAMPLES_PER_S:,} samples/s on one core (decode + add)")
    if not NATIVE_AVAILABLE:
        print("compiled decoder not installed (pip install ./native): its rows are left out")


if __name__ == "__main__":
    main()
