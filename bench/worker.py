"""Worker cost at fleet scale on one core: the ``Pipeline`` fed N nodes in groups of 60.

    python -m bench.worker [--nodes 12500] [--buckets 5] [--warmup 4] [--repeat 3] [--features 300]

Input: a short simulated run of ``--scenario`` (``gpu-slow``: one 60-node job,
every metric family on, one GPU slowing down partway) through the ingest's
``FrameBuilder`` once; its frames, bucket by bucket, are the template of every
group. Group ``g`` gets the template's nodes renamed (``<node>.g<g>``) and its
peer-scored values scaled by a factor of its own (per-GPU values, which feed the
XID and row-remap trackers, are kept as sent; every value a Python float, as
decoded from JSON). So the run measures the worker, not the simulator: frames
are built before each bucket's clock starts.

Each bucket, every group's frames go through ``Pipeline.add`` one by one, each
followed by ``Pipeline.due`` as the Faust agent does (the 60th closes the
bucket), and a closed bucket's snapshot is encoded by the codec of the
changelogged table (Faust's JSON: orjson when installed). Figures are process
CPU seconds (a busy machine slows wall time, much less CPU time), medians over
the timed buckets and then over ``--repeat`` fresh runs; the first
``--warmup`` buckets of a run are not timed (the first closes on its grace
period, the detectors fill their windows). The cyclic GC stays on, as in the
worker, and its share is printed.

Printed, each beside its yardstick in the same run:

- fleet seconds per 30-s bucket at ``--nodes`` against the design target
  (<= 5 s) and against the one-group (60-node job) run scaled to the fleet's
  group count (the same work if cost is linear in groups), and the part of it
  spent in ``Pipeline.due`` (closing the buckets and running the detector
  families; the snapshots and their encoding not in it);
- p50 / p99 per-group bucket-close-to-changes latency (the ``due`` call that
  closes a group's bucket, with its snapshot);
- the share per stage (exclusive time, from one more run with timers on each
  stage's entry points, so its total is a little higher);
- detector state per node (a walk of every object the pipeline holds, shared
  catalog and parameters left out) and the process's resident memory growth per
  node (RSS after the first run at that size, its pipeline alive, minus RSS before
  it: a later run reuses the heap the one before freed) at one group and at
  ``--nodes``, against the target (<= 100 KB per node), and the snapshot
  (changelog) bytes per bucket;
- the JSON decode of one bucket's frames into the worker's ``Frame`` values
  (from the bytes the ingest produces; Kafka's fetch and Faust's stream are not
  in it), beside the pipeline's own cost.

``--features N`` runs every figure twice, first with frames of ``N`` values
(per-GPU keys counted, as the ingest's ``max_features_per_group`` counts them),
then at the template's width (its RSS growth then reuses the heap the first freed:
for that figure, run without ``--features``). The extra values are peer-scored node
features the worker reads from an operator feature file (``feature_files``, the way
an operator adds features), so windows, peer scoring, the baselines and the group's
model all hold state for them; each node has a usual level of its own per feature
and every bucket varies around it.

No figure here is asserted anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from faust.serializers import codecs

from bench.procmem import rss_mib
from streams import catalog as feature_catalog
from streams.frames import Frame, decode_frame, encode_frame
from streams.lab.simulator.cluster import ClusterSimulator
from streams.lab.simulator.scenarios import get_scenario
from streams.worker.offline import build_pair
from streams.worker.pipeline import Pipeline

TARGET_FLEET_S = 5.0  # seconds of one core per 30-s bucket for the whole fleet
TARGET_BYTES_PER_NODE = 100_000
MIB_KB = 2**20 / 1000  # KB (1,000 bytes, as the target) in a MiB (/proc)
GROUP_SIZE = 60
TABLE_CODEC = codecs.get_codec("json")  # the group-state table's value codec (orjson if found)
BUCKET_S = 30.0

Template = list[list[Frame]]  # one group's frames, bucket by bucket (oldest first)


def template(scenario: str, seed: int, buckets: int) -> tuple[Template, Any]:
    """``buckets`` buckets of one simulated job's frames (its largest group), and settings."""
    spec = get_scenario(scenario)
    config, settings = spec.config_for(seed), spec.settings_for(seed)
    sim = ClusterSimulator(config)
    builder, _ = build_pair(settings)
    by_ts: dict[int, list[Frame]] = defaultdict(list)
    t_ms = config.start_ms
    while len(by_ts) < buckets + 1:  # the newest bucket may still be open
        builder.add(sim.scrape(t_ms), now_s=t_ms / 1000.0)
        for frame in builder.close_due_by_watermark(now_s=t_ms / 1000.0, idle_s=60.0):
            if frame.node and not frame.left:
                by_ts[frame.ts].append(frame)
        t_ms += config.interval_ms
    rounds = [by_ts[ts] for ts in sorted(by_ts)][:buckets]
    sizes: dict[str, int] = defaultdict(int)
    for frame in rounds[-1]:
        sizes[frame.group] += 1
    job = max(sizes, key=lambda g: sizes[g])
    return [[f for f in frames if f.group == job] for frames in rounds], settings


# --- wider frames (--features) ------------------------------------------------------------------

EXTRA_PREFIX = "bench_extra_"
_LEVELS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)  # units of real node features vary by 1e5
_DIRECTIONS = ("both", "up", "down")
_CLASSES = ("compute", "network", "memory", "interconnect", "host", "cpu")
_NODE_SPREAD = 0.03  # a node's usual level vs its peers' (a relative s.d.)
_BUCKET_NOISE = 0.01  # a bucket vs the node's usual level


def extra_features_toml(names: Sequence[str]) -> str:
    """An operator feature file (``features.toml``'s shape) of peer-scored gauges."""
    tables = []
    for i, name in enumerate(names):
        level = _LEVELS[i % len(_LEVELS)]
        tables.append(
            f'[[feature]]\nname = "{name}"\nmetrics = ["{name}"]\nkind = "gauge"\n'
            f'direction = "{_DIRECTIONS[i % len(_DIRECTIONS)]}"\nabs_floor = {level * 1e-3!r}\n'
            f'klass = "{_CLASSES[i % len(_CLASSES)]}"\n'
        )
    return "\n".join(tables)


def widen(
    tmpl: Template, settings: Any, width: int, directory: str | os.PathLike[str], seed: int
) -> tuple[Template, Any]:
    """The template's frames with ``width`` values each, and settings that score the extras.

    The extra features are written to a feature file in ``directory`` and named by the
    settings' ``feature_files``, as an operator adds features. Every node has its own
    usual level per feature (peers differ by ~3 %) and each bucket varies by ~1 % around
    it, so the baselines and the group's model learn real spreads, not constants."""
    have = len(tmpl[-1][0].values)
    if width < have:
        raise ValueError(f"--features {width}: the template's frames already hold {have} values")
    if width == have:
        return tmpl, settings
    names = [f"{EXTRA_PREFIX}{i:03d}" for i in range(width - have)]
    path = Path(directory) / "bench-extra-features.toml"
    path.write_text(extra_features_toml(names), encoding="utf-8")
    update: dict[str, Any] = {"feature_files": [*settings.feature_files, path]}
    if settings.features is not None:
        update["features"] = [*settings.features, *names]
    rng = np.random.default_rng(seed)
    nodes = sorted({f.node for frames in tmpl for f in frames})
    row = {node: i for i, node in enumerate(nodes)}
    level = np.array([_LEVELS[i % len(_LEVELS)] for i in range(len(names))])
    usual = level * (1.0 + _NODE_SPREAD * rng.standard_normal((len(nodes), len(names))))
    wide: Template = []
    for frames in tmpl:
        values = usual * (1.0 + _BUCKET_NOISE * rng.standard_normal(usual.shape))
        wide.append(
            [
                dataclasses.replace(
                    f,
                    values={
                        **f.values,
                        **dict(zip(names, values[row[f.node]].tolist(), strict=True)),
                    },
                )
                for f in frames
            ]
        )
    return wide, settings.model_copy(update=update)


def scored_features(settings: Any) -> frozenset[str]:
    """The names of the features the worker's peer scoring scores under ``settings``."""
    return frozenset(f.name for f in feature_catalog.features_for(settings) if f.scored)


@dataclass
class Fleet:
    """The template's frames spread over ``nodes`` nodes in groups of ``GROUP_SIZE``."""

    template: Template
    nodes: int
    scored: frozenset[str] = field(
        default_factory=lambda: frozenset(
            f.name for f in feature_catalog.DEFAULT_FEATURES if f.scored
        )
    )

    @property
    def groups(self) -> int:
        return math.ceil(self.nodes / GROUP_SIZE)

    def bucket(self, index: int) -> Iterator[tuple[str, list[Frame]]]:
        """Bucket ``index``'s frames, group by group; bucket times move on by 30 s per index."""
        base = self.template[index % len(self.template)]
        shift = (index // len(self.template)) * len(self.template) * int(BUCKET_S * 1000)
        left = self.nodes
        for g in range(self.groups):
            size = min(GROUP_SIZE, left)
            left -= size
            name = f"job-{g}"
            factor = 1.0 + 0.02 * ((g * 7919) % 101 - 50) / 50.0
            yield (
                name,
                [
                    Frame(
                        name,
                        f"{f.node}.g{g}",
                        f.ts + shift,
                        {
                            k: float(v * factor if k in self.scored else v)
                            for k, v in f.values.items()
                        },
                        dict(f.gpus),
                        role=f.role,
                        on_hold=f.on_hold,
                    )
                    for f in base[:size]
                ],
            )


@dataclass
class RunFigures:
    bucket_s: list[float]  # CPU seconds per timed bucket, the whole fleet
    due_s: list[float]  # of which in ``Pipeline.due`` (the scoring, without the snapshots)
    close_s: list[float]  # CPU seconds of each closing ``due`` call (+ snapshot), per group
    snapshot_bytes: list[int]  # JSON bytes of every group's snapshot, per timed bucket
    changes: int  # alert transitions seen in the timed buckets
    pipeline: Pipeline
    gc_s: float = 0.0  # CPU seconds in the cyclic garbage collector, timed buckets
    rss_growth_mib: float = 0.0  # resident memory after the run (pipeline alive) minus before


def run(
    fleet: Fleet,
    settings: Any,
    buckets: int,
    warmup: int,
    clock: Callable[[], float] = time.process_time,
    on_timed: Callable[[], None] | None = None,
) -> RunFigures:
    """One fresh pipeline through ``warmup + buckets`` buckets of ``fleet``; ``on_timed``
    is called as the first timed bucket starts. ``warmup`` >= 2: the first bucket
    closes on its grace period, during the second."""
    if warmup < 2:
        raise ValueError("warmup must be >= 2 buckets")
    gc.collect()  # what earlier runs left is not this run's state
    rss_before = rss_mib(os.getpid())
    pipeline = Pipeline.from_settings(settings)
    out = RunFigures([], [], [], [], 0, pipeline)
    collecting: list[float] = []
    gc_spent = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting.append(clock())
        elif collecting:
            gc_spent[0] += clock() - collecting.pop()

    gc.callbacks.append(on_gc)
    try:
        _feed(pipeline, fleet, buckets, warmup, clock, on_timed, out, gc_spent)
    finally:
        gc.callbacks.remove(on_gc)
    gc.collect()
    out.rss_growth_mib = rss_mib(os.getpid()) - rss_before
    return out


def _feed(
    pipeline: Pipeline,
    fleet: Fleet,
    buckets: int,
    warmup: int,
    clock: Callable[[], float],
    on_timed: Callable[[], None] | None,
    out: RunFigures,
    gc_spent: list[float],
) -> None:
    for index in range(warmup + buckets):
        groups = list(fleet.bucket(index))  # built before the clock starts
        timed = index >= warmup
        if index == warmup:
            gc_spent[0] = 0.0
            if on_timed is not None:
                on_timed()
        spent, scoring, size, changes = 0.0, 0.0, 0, 0
        for group, frames in groups:
            now_s = frames[0].ts / 1000.0 + BUCKET_S + 1.0
            started = clock()
            for f in frames:
                pipeline.add(f, now_s)
                before = clock()
                scored = pipeline.due(group, now_s)
                scoring += clock() - before
                if scored:
                    encoded = TABLE_CODEC.dumps(pipeline.snapshot(group))
                    size += len(encoded)
                    changes += sum(len(s.changes) for s in scored)
                    if timed:
                        out.close_s.append(clock() - before)
            spent += clock() - started
        if timed:
            out.bucket_s.append(spent)
            out.due_s.append(scoring)
            out.snapshot_bytes.append(size)
            out.changes += changes
        del groups
    out.gc_s = gc_spent[0]


def decode_s(fleet: Fleet, repeat: int, clock: Callable[[], float] = time.process_time) -> float:
    """CPU seconds to decode one bucket of the fleet's frames from the bytes the ingest
    puts on Kafka into the worker's ``Frame`` values (fastest of ``repeat``)."""
    wire = [encode_frame(f) for _, frames in fleet.bucket(0) for f in frames]
    best = math.inf
    for _ in range(repeat):
        started = clock()
        for body in wire:
            decode_frame(body)
        best = min(best, clock() - started)
    return best


# --- stage shares -------------------------------------------------------------------------------


class Stages:
    """Exclusive CPU time of the entry points of each stage (wrapped for one run)."""

    ENTRY_POINTS: tuple[tuple[str, str, str, str], ...] = (
        # (stage, module, class or "", attribute)
        ("window/merge", "streams.worker.windows", "GroupWindow", "add"),
        ("window/merge", "streams.worker.windows", "GroupWindow", "due"),
        ("peer scoring (score_bucket)", "detectors.peer_scoring", "", "score_bucket"),
        ("node/GPU health", "streams.worker.node_health", "NodeHealth", "add"),
        ("node/GPU health", "streams.worker.node_health", "NodeHealth", "step"),
        ("remap/xid trackers", "detectors.remap", "RemapTracker", "observe"),
        ("remap/xid trackers", "detectors.xid.gauge", "XidGaugeTracker", "observe"),
        ("remap/xid trackers", "detectors.xid.escalation", "XidEscalator", "decide"),
        ("fail-slow", "detectors.failslow.family", "FailSlow", "step"),
        ("snapshot (Pipeline.snapshot)", "streams.worker.pipeline", "Pipeline", "snapshot"),
        ("snapshot JSON (table codec)", "faust.serializers.codecs", "json", "_dumps"),
    )

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self.clock = clock
        self.spent: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock, stack, spent = self.clock, self._stack, self.spent

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = stack.pop()
                total = clock() - started
                spent[stage] += total - inner
                if stack:
                    stack[-1] += total

        return timed

    def __enter__(self) -> Stages:
        for stage, module, cls, attr in self.ENTRY_POINTS:
            owner = getattr(sys.modules[module], cls) if cls else sys.modules[module]
            original = owner.__dict__[attr] if cls else getattr(owner, attr)
            self._saved.append((owner, attr, original))
            setattr(owner, attr, self._wrap(stage, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()


# --- memory -------------------------------------------------------------------------------------


def state_bytes(pipeline: Pipeline) -> int:
    """Bytes of every object the pipeline holds for its groups and nodes: a walk of the
    references from its state, the shared catalog, features and parameters left out."""
    shared_roots = [
        pipeline.features,
        pipeline.params,
        pipeline.catalog,
        pipeline.gpu_params,
        pipeline.failslow_params,
        pipeline.failslow_inputs,
        pipeline.failslow_alert_params,
    ]
    shared = _reachable(shared_roots, set())
    health = pipeline.node_health
    roots = [
        pipeline.groups,
        health._nodes,
        health._homed,
        health._log_xids,
    ]
    return sum(sys.getsizeof(o) for o in _objects(roots, shared))


def _skip(obj: object) -> bool:
    return isinstance(obj, type | type(sys) | type(len) | type(_skip))


def _reachable(roots: Sequence[object], exclude: set[int]) -> set[int]:
    return {id(o) for o in _objects(roots, exclude)}


def _objects(roots: Sequence[object], exclude: set[int]) -> Iterator[object]:
    seen: set[int] = set(exclude)
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or _skip(obj):
            continue
        seen.add(id(obj))
        yield obj
        todo.extend(gc.get_referents(obj))


# --- report -------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Width:
    """One width's figures, for the side-by-side table of ``--features``."""

    values: int  # per frame
    fleet_s: float  # CPU seconds per bucket at --nodes
    walk_kb: tuple[float, float]  # object-walk state per node: one group, fleet
    rss_kb: tuple[float, float]  # RSS growth per node: one group, fleet
    snapshot_bytes: tuple[float, float]  # per bucket: one group, fleet


def measure(tmpl: Template, settings: Any, args: argparse.Namespace) -> Width:
    """Every figure at one frame width, printed; the memory and CPU ones returned."""
    group_nodes = len(tmpl[-1])
    scored = scored_features(settings)
    fleet = Fleet(tmpl, args.nodes, scored)
    one = Fleet(tmpl, group_nodes, scored)
    width = len(tmpl[-1][0].values)
    print(
        f"worker bench: {args.scenario} seed {args.seed}, {group_nodes} nodes per group, "
        f"{width} values per frame ({len(scored)} peer-scored features in the catalog); "
        f"{args.nodes:,} nodes = {fleet.groups} groups; {args.warmup} warm-up + {args.buckets} "
        "timed buckets per run, "
        f"{args.repeat} runs; CPU seconds of this process"
    )

    small = [run(one, settings, args.buckets, args.warmup) for _ in range(args.repeat)]
    big: list[RunFigures] = []
    for i in range(args.repeat):
        if big:  # one fleet's state alive at a time (300 features: GBs)
            big[-1] = dataclasses.replace(big[-1], pipeline=small[-1].pipeline)
        big.append(run(fleet, settings, args.buckets, args.warmup))
        print(f"  run {i + 1}: {_median(big[-1].bucket_s):.2f} s per bucket", flush=True)

    one_s = _median([_median(r.bucket_s) for r in small])
    fleet_s = _median([_median(r.bucket_s) for r in big])
    closes = [c for r in big for c in r.close_s]
    small_closes = [c for r in small for c in r.close_s]
    print()
    print(f"{'figure':<44} {'one group':>12} {'scaled':>10} {'fleet':>10}  target")
    print(
        f"{'fleet seconds per 30-s bucket':<44} {one_s:>12.3f} {one_s * fleet.groups:>10.2f} "
        f"{fleet_s:>10.2f}  <= {TARGET_FLEET_S:.0f} s"
        f" ({'met' if fleet_s <= TARGET_FLEET_S else 'missed'})"
    )
    due_one = _median([_median(r.due_s) for r in small])
    due_fleet = _median([_median(r.due_s) for r in big])
    print(
        f"{'  of which Pipeline.due':<44} {due_one:>12.3f} {due_one * fleet.groups:>10.2f} "
        f"{due_fleet:>10.2f}"
    )
    gc_one = _median([r.gc_s / args.buckets for r in small])
    gc_fleet = _median([r.gc_s / args.buckets for r in big])
    print(
        f"{'  of which cyclic GC':<44} {gc_one:>12.3f} {gc_one * fleet.groups:>10.2f} "
        f"{gc_fleet:>10.2f}"
    )
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        print(
            f"{'close-to-changes latency ' + label + ', ms':<44} "
            f"{_quantile(small_closes, q) * 1000:>12.1f} {'':>10} "
            f"{_quantile(closes, q) * 1000:>10.1f}"
        )
    walk = (
        state_bytes(small[-1].pipeline) / group_nodes / 1000,
        state_bytes(big[-1].pipeline) / args.nodes / 1000,
    )
    print(
        f"{'detector state per node (object walk), KB':<44} {walk[0]:>12.1f} {'':>10} "
        f"{walk[1]:>10.1f}  <= {TARGET_BYTES_PER_NODE // 1000} KB"
    )
    # the first run at each size: a later one reuses the heap its predecessor freed
    rss = (
        small[0].rss_growth_mib * MIB_KB / group_nodes,
        big[0].rss_growth_mib * MIB_KB / args.nodes,
    )
    big_rss = ", ".join(f"{r.rss_growth_mib:.0f}" for r in big)
    print(
        f"{'RSS growth per node (first run), KB':<44} {rss[0]:>12.1f} {'':>10} "
        f"{rss[1]:>10.1f}  <= {TARGET_BYTES_PER_NODE // 1000} KB (fleet runs: {big_rss} MiB)"
    )
    snap_small = _median([_median(r.snapshot_bytes) for r in small])
    snap_big = _median([_median(r.snapshot_bytes) for r in big])
    print(
        f"{'snapshot (changelog) bytes per bucket':<44} {snap_small:>12,.0f} "
        f"{snap_small * fleet.groups:>10,.0f} {snap_big:>10,.0f}"
    )
    dec_one, dec_fleet = decode_s(one, args.repeat), decode_s(fleet, args.repeat)
    print(
        f"{'frame JSON decode (decode_frame), s/bucket':<44} {dec_one:>12.3f} "
        f"{dec_one * fleet.groups:>10.2f} {dec_fleet:>10.2f}  "
        f"({dec_fleet / (dec_fleet + fleet_s):.0%} of decode + pipeline)"
    )
    print(
        f"alert transitions in the timed buckets: {small[-1].changes} (one group), "
        f"{big[-1].changes} (fleet, last run)"
    )
    print()
    return Width(width, fleet_s, walk, rss, (snap_small, snap_big))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker", description=__doc__)
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--scenario", default="gpu-slow")
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=4, help="untimed buckets per run (>= 2)")
    parser.add_argument("--buckets", type=int, default=5, help="timed buckets per run")
    parser.add_argument("--repeat", type=int, default=3, help="fresh runs at each size")
    parser.add_argument(
        "--features",
        type=int,
        default=None,
        help="also measure with this many values per frame (extra peer-scored node features)",
    )
    parser.add_argument("--no-stages", action="store_true", help="skip the stage-share run")
    args = parser.parse_args(argv)

    tmpl, settings = template(args.scenario, args.seed, args.warmup + args.buckets)
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as directory:
        widths = [(tmpl, settings)]
        if args.features is not None:  # first: its RSS growth is on a heap nothing freed yet
            widths.insert(0, widen(tmpl, settings, args.features, directory, args.seed))
        figures = sorted((measure(t, s, args) for t, s in widths), key=lambda w: w.values)
        gc.collect()
        if len(figures) > 1:
            print(f"{'values per frame':<44} " + " ".join(f"{w.values:>12}" for w in figures))
            rows: tuple[tuple[str, Callable[[Width], str]], ...] = (
                ("fleet CPU seconds per bucket", lambda w: f"{w.fleet_s:.2f}"),
                ("state per node, object walk, KB (1 group)", lambda w: f"{w.walk_kb[0]:.1f}"),
                ("state per node, object walk, KB (fleet)", lambda w: f"{w.walk_kb[1]:.1f}"),
                ("RSS growth per node, KB (1 group)", lambda w: f"{w.rss_kb[0]:.1f}"),
                ("RSS growth per node, KB (fleet)", lambda w: f"{w.rss_kb[1]:.1f}"),
                ("snapshot bytes per bucket (fleet)", lambda w: f"{w.snapshot_bytes[1]:,.0f}"),
            )
            for label, cell in rows:
                print(f"{label:<44} " + " ".join(f"{cell(w):>12}" for w in figures))
            print()
        if not args.no_stages:
            stage_shares(*widths[0], args)


def stage_shares(tmpl: Template, settings: Any, args: argparse.Namespace) -> None:
    """Where the fleet's time goes: one more run with timers on each stage's entry points."""
    fleet = Fleet(tmpl, args.nodes, scored_features(settings))
    with Stages() as stages:
        timed = run(fleet, settings, args.buckets, args.warmup, on_timed=stages.spent.clear)
    whole = sum(timed.bucket_s)
    print(
        f"stage shares at {args.nodes:,} nodes, {len(tmpl[-1][0].values)} values per frame "
        f"(one more run with timers on the stages' entry points: {_median(timed.bucket_s):.2f} s "
        "per bucket)"
    )
    rest = max(0.0, whole - sum(stages.spent.values()))
    n = args.buckets
    for stage, spent in [*sorted(stages.spent.items(), key=lambda kv: -kv[1]), ("other", rest)]:
        print(f"  {stage:<30} {spent / whole:6.1%}  {spent / n:7.2f} s per bucket")
    print(f"  (cyclic GC, inside the stages: {timed.gc_s / whole:.1%})")


if __name__ == "__main__":
    main()
