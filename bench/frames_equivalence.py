"""Check that ``FrameBuilder`` behaves exactly like the baseline builder it replaced.

    python -m bench.frames_equivalence [--cases 2000] [--rounds 120]

Two inputs, each fed to ``bench.baseline_frames.BaselineFrameBuilder`` and to
``streams.ingest.builder.FrameBuilder`` side by side; after every call the
stats (per drop reason, in order), the emitted frames (values in order too) and
the public counters must be equal:

- random streams: a few dozen label sets (gauges, counters, ``per`` ratios, label
  matches, per-GPU features, nodes and groups coming and going, NULs inside
  labels, equal labels in new dicts), samples that are duplicate, out of order,
  late, from the future, NaN, +-Inf, stale markers or huge, several per series,
  closes at the watermark, at a given time, idle and flushes, small TTLs,
  horizons and label memos;
- simulator scenarios with every metric family, with and without stale markers.

A third input holds ``FrameBuilder.add_batch`` (the compiled decoder's columns)
to ``FrameBuilder.add`` (``Series``) the same way: random scrape-shaped streams of
one-sample series in ``SampleBatch`` columns -- targets sharing a timestamp per
scrape, HA replicas, roles, scheduler assignments, label copies, jitter, repeats,
every odd value.

A case where both builders raise the same error (``math.fsum`` over sums that
overflow) counts as equal. Prints one line per input; exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.baseline_frames import BaselineFrameBuilder
from bench.ingest_bench import make_builder
from detectors.features import FeatureSpec
from streams.catalog import DEFAULT_FEATURES
from streams.frames import Frame
from streams.ingest.builder import FrameBuilder, node_from_instance
from streams.ingest.remote_write import STALE_NAN
from streams.ingest.series import SampleBatch, Series
from streams.lab.evaluation.runner import evaluation_settings
from streams.lab.simulator.run import generate
from streams.lab.simulator.scenarios import get_scenario

BUCKET_MS = 30_000
T0 = 1_700_000_010_000 // BUCKET_MS * BUCKET_MS
NFS = (
    "node_mountstats_nfs_operations_response_time_seconds_total",
    "node_mountstats_nfs_operations_requests_total",
    "node_mountstats_nfs_operations_queue_time_seconds_total",
)
NAMES = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "node_intr_total",
    "node_procs_running",
    "node_cpu_seconds_total",
    "alias_metric",
    "unknown_metric",
    *NFS,
)
# a metric feeding two features, one of them as a counter, one through an alias
FEATURES = (
    *DEFAULT_FEATURES,
    FeatureSpec("alias_sum", ("alias_metric", "DCGM_FI_DEV_GPU_TEMP"), "gauge", reduce="sum"),
    FeatureSpec("alias_rate", ("alias_metric",), "counter", reduce="min"),
)
VALUES = (50.0, 0.0, -3.0, 2.0, math.nan, math.inf, -math.inf, STALE_NAN, 1e308, -1e308)


def outcome(call: Callable[..., Any], *args: Any) -> Any:
    """The call's result, or its error's type: both builders must fail alike."""
    try:
        return call(*args)
    except (OverflowError, ValueError) as exc:
        return type(exc)


def comparable(frames: Any) -> Any:
    if not isinstance(frames, list):
        return frames
    return [(dataclasses.astuple(f), list(f.values), list(f.gpus)) for f in frames]


def state(b: Any) -> tuple[Any, ...]:
    return b.tracked_series, b.kept_frames, b.open_frames, b.watermark_ms


def node_groups(r: random.Random) -> dict[str, dict[str, str]]:
    """Each node's group labels for one random stream, on every series of the node.

    By design the builder decides a node's group per node, from any of its series, and
    holds it (``FrameBuilder``: membership); the baseline decides per series. Both agree
    when every series of a node names one group for the whole stream, which is what the
    random streams send; membership itself is tested in tests/unit/test_membership.py
    and held to ``add_batch`` by the batch cases here."""
    groups: dict[str, dict[str, str]] = {}
    for node in ("n1", "n2", "::1", "n3", "h1"):
        labels = {"cluster": r.choice(("c1", "c2"))}
        if r.random() < 0.3:
            labels["job"] = r.choice(("j1", "j2", ""))  # "": the cluster names the group
        groups[node] = labels
    return groups


def random_labels(
    r: random.Random, groups: dict[str, dict[str, str]] | None = None
) -> dict[str, str]:
    """A random series' labels; with ``groups``, its node's group labels from there."""
    labels = {"__name__": r.choice(NAMES)}
    options: tuple[tuple[float, str, Sequence[str]], ...] = (
        (0.9, "instance", ("n1:9100", "n1:9400", "n2:9100", "[::1]:9100", "n3")),
        (0.3, "hostname", ("h1", "n1")),
        *(
            ()
            if groups is not None
            else ((0.8, "cluster", ("c1", "c2")), (0.3, "job", ("j1", "j2", "")))
        ),
        (0.6, "gpu", ("0", "1", "2")),
        (0.5, "operation", ("GETATTR", "READ", "WRITE")),
        (0.3, "mode", ("idle", "user")),
        (0.2, r.choice(("weird", "w\x00")), ("a\x00b", "a", "\x00", "b")),
    )
    for p, name, values in options:
        if r.random() < p:
            labels[name] = r.choice(values)
    if groups is not None:
        instance, hostname = labels.get("instance"), labels.get("hostname")
        node = node_from_instance(instance) if instance else hostname
        if node is not None:
            labels.update(groups[node])
    return labels


def close_both(r: random.Random, a: Any, b: Any, t: int, now_s: float | None) -> tuple[Any, Any]:
    """Both builders' frames from one random way of closing: at the watermark, at a given
    time, idle, a flush or none."""
    choice, idle = r.random(), r.choice((None, 30.0))
    if choice < 0.6:
        return outcome(a.close_due_by_watermark, now_s, idle), outcome(
            b.close_due_by_watermark, now_s, idle
        )
    if choice < 0.7:
        watermark = t - r.randint(0, 100_000)
        return outcome(a.close_due, watermark, now_s, idle), outcome(
            b.close_due, watermark, now_s, idle
        )
    if choice < 0.75:
        return outcome(a.flush_all), outcome(b.flush_all)
    return [], []


def step(a: Any, b: Any, stats: tuple[Any, Any], frames: tuple[Any, Any]) -> bool | None:
    """One call's comparison: False if the builders differ, True if both failed alike
    (their states after a failure are not compared), None to go on."""
    sa, sb = stats
    if (sa.accepted, list(sa.dropped.items())) != (sb.accepted, list(sb.dropped.items())):
        return False
    if comparable(frames[0]) != comparable(frames[1]):
        return False
    if not isinstance(frames[0], list):
        return True
    return None if state(a) == state(b) else False


def random_case(seed: int) -> bool:
    r = random.Random(seed)
    kwargs: dict[str, Any] = {
        "group_labels": ("job", "cluster"),
        "grace_ms": r.choice((0, 15_000)),
        "late_horizon_ms": r.choice((0, 60_000, 600_000)),
        "series_ttl_ms": r.choice((30_000, 120_000, 600_000)),
        "max_future_ms": r.choice((0, 300_000)),
    }
    a, b = BaselineFrameBuilder(FEATURES, **kwargs), FrameBuilder(FEATURES, **kwargs)
    a.label_memo_size = b.label_memo_size = r.choice((3, 50, 1_000_000))
    groups = node_groups(r)
    pool = [random_labels(r, groups) for _ in range(r.randint(1, 40))]
    t, now = T0, T0 / 1000
    for _ in range(r.randint(1, 60)):
        batch = []
        # By design a sample's bucket is its scrape's round (``streams.ingest.scrape_phase``),
        # the baseline's is the bucket its timestamp falls in: they agree for scrapes near
        # mid-bucket (within the 5-s re-learn tolerance), which is where these are; a sample
        # rounds back or ahead (late, out of order, from the future) stays on that phase.
        mid = t - t % BUCKET_MS + BUCKET_MS // 2
        for _ in range(r.randint(0, 30)):
            labels = r.choice(pool)
            if r.random() < 0.2:
                labels = dict(labels)  # equal labels, another dict
            count = 1 if r.random() < 0.8 else r.randint(0, 4)
            # one round per series and call: the builder holds a node's group from its
            # series' first sample, so a later sample in a newer round would be on hold
            round_ms = mid + (r.randint(-7, 1) * BUCKET_MS if r.random() < 0.3 else 0)
            samples = [
                (
                    round_ms + r.randint(-2000, 2000),
                    r.choice(VALUES) if r.random() < 0.5 else r.uniform(0, 100),
                )
                for _ in range(count)
            ]
            batch.append(Series(labels, samples))
        now_s = None if r.random() < 0.3 else now + r.uniform(-400, 100)
        stats = a.add(batch, now_s=now_s), b.add(batch, now_s=now_s)
        verdict = step(a, b, stats, close_both(r, a, b, t, now_s))
        if verdict is not None:
            return verdict
        t += r.choice((0, 5000, 30_000, 30_000, 90_000))
        now += 30
    return comparable(outcome(a.flush_all)) == comparable(outcome(b.flush_all))


def batch_case(seed: int, native: bool | None = None) -> bool:
    """A random scrape-shaped stream through ``add`` and ``add_batch``: equal throughout.
    ``native``: ``add_batch`` with the compiled loop (True), without (False), or as installed."""
    r = random.Random(seed)
    kwargs: dict[str, Any] = {
        "group_labels": ("job", "cluster"),
        "role_labels": ("role",),
        "grace_ms": r.choice((0, 15_000)),
        "late_horizon_ms": r.choice((0, 60_000, 600_000)),
        "series_ttl_ms": r.choice((60_000, 600_000)),
        "max_future_ms": r.choice((0, 300_000)),
        "membership_hold_buckets": r.choice((0, 2)),
    }
    a, b = FrameBuilder(FEATURES, **kwargs), FrameBuilder(FEATURES, native=native, **kwargs)
    a.label_memo_size = b.label_memo_size = r.choice((50, 1_000_000, 1_000_000))
    pool = [random_labels(r) for _ in range(r.randint(1, 60))]
    replicas = r.random() < 0.2
    for labels in pool:
        if replicas and r.random() < 0.2:
            labels["prometheus_replica"] = r.choice(("r1", "r2"))
        if r.random() < 0.1:
            labels["role"] = r.choice(("trainer", "server"))
    phase = {k: r.randint(0, 29_999) for k in ("n1:9100", "n1:9400", "n2:9100", "[::1]:9100")}
    t, now = T0, T0 / 1000
    for _ in range(r.randint(1, 40)):
        chosen = pool if r.random() < 0.7 else r.sample(pool, r.randint(0, len(pool)))
        labels_list, ts_list, values = [], [], []
        odd = r.random() < 0.4  # else a clean scrape: what the fast path is for
        jitter = r.choice((0, 200, 20_000)) if odd else 0
        shifts = {k: r.choice((0, 0, 0, -60_000, -700_000, 400_000)) for k in phase}
        for labels in chosen:
            if odd and r.random() < 0.05:
                labels = dict(labels)  # equal labels, another dict
            instance = labels.get("instance", "")
            ts = t + phase.get(instance, 7) + shifts.get(instance, 0)
            ts += r.randint(-jitter, jitter)
            value = r.choice(VALUES) if r.random() < 0.05 else r.uniform(0, 100) + t / 1e4
            labels_list.append(labels)
            ts_list.append(ts)
            values.append(value)
        if odd and r.random() < 0.1 and labels_list:
            i = r.randrange(len(labels_list))  # one series twice in a body
            labels_list.append(labels_list[i])
            ts_list.append(ts_list[i] + r.choice((0, 1000)))
            values.append(1.0)
        if r.random() < 0.05:
            node, job = r.choice(("n1", "n2", "h1")), r.choice((None, "j1", "j3"))
            a.assign(node, job)
            b.assign(node, job)
        batch = SampleBatch(labels_list, np.array(ts_list, np.int64), np.array(values, np.float64))
        clock = r.random()  # mostly the samples' own time, as a live stream's
        now_s = t / 1000 + r.uniform(-5, 40) if clock < 0.8 else None
        if clock > 0.9:
            now_s = now + r.uniform(-400, 100)
        stats = a.add(batch.series(), now_s=now_s), b.add_batch(batch, now_s=now_s)
        verdict = step(a, b, stats, close_both(r, a, b, t, now_s))
        if verdict is not None:
            return verdict
        if a.phases.relearned != b.phases.relearned:
            return False
        if a.dropped_results != b.dropped_results:
            return False
        t += r.choice((0, 30_000, 30_000, 30_000, 60_000))
        now += 30
    return comparable(outcome(a.flush_all)) == comparable(outcome(b.flush_all))


def scenario_case(name: str, seed: int, rounds: int, stale: bool) -> bool:
    scenario = get_scenario(name)
    config = scenario.config_for(seed)
    if stale:
        config = dataclasses.replace(config, emit_stale_markers=True)
    # grouped by ``cluster``, a label on every series: the builder's per-node membership
    # (train_job on some exporters only, spares in none) is not the baseline's design
    settings = evaluation_settings().model_copy(update={"group_labels": ["cluster"]})
    a = make_builder(BaselineFrameBuilder, settings)
    b = make_builder(FrameBuilder, settings)
    for i, (t_ms, series) in enumerate(generate(config, config.start_ms)):
        if i >= rounds:
            break
        now_s = t_ms / 1000
        sa, sb = a.add(series, now_s=now_s), b.add(series, now_s=now_s)
        if (sa.accepted, sa.dropped) != (sb.accepted, sb.dropped):
            return False
        fa: list[Frame] = a.close_due_by_watermark(now_s=now_s, idle_s=60.0)
        fb: list[Frame] = b.close_due_by_watermark(now_s=now_s, idle_s=60.0)
        if comparable(fa) != comparable(fb) or state(a) != state(b):
            return False
    return comparable(a.flush_all()) == comparable(b.flush_all())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.frames_equivalence")
    parser.add_argument("--cases", type=int, default=2000, help="random streams")
    parser.add_argument("--rounds", type=int, default=120, help="rounds per scenario")
    args = parser.parse_args(argv)
    failed = [seed for seed in range(args.cases) if not random_case(seed)]
    print(f"random streams: {args.cases - len(failed)}/{args.cases} equal", end="")
    print(f" (differ: seeds {failed[:10]})" if failed else "")
    unequal = [seed for seed in range(args.cases) if not batch_case(seed)]
    print(f"add_batch vs add: {args.cases - len(unequal)}/{args.cases} equal", end="")
    print(f" (differ: seeds {unequal[:10]})" if unequal else "")
    different = len(failed) + len(unequal)
    for name in ("nvlink-bus-fault-16", "host-down", "exporter-down", "late-scrape", "fault-mix"):
        for seed, stale in ((0, False), (1, True)):
            same = scenario_case(name, seed, args.rounds, stale)
            different += not same
            marker = ", stale markers" if stale else ""
            print(f"{name} seed {seed}{marker}: {'equal' if same else 'DIFFERENT'}")
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
