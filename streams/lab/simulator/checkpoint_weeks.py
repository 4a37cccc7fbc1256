"""Weeks of checkpoints and failures: the scenario, a fast path for the advisors, their truth.

``checkpoint_weeks`` builds the scenario: saves every 2.23 h (the source's 4 K phase, ~3x
Young/Daly's optimum at its failure rate) for three weeks, and ECC fail-stops (XID 94: the
job dies a bucket later, restarts ``restart_delay_s`` later on the same nodes and loads its
checkpoint) at exponential gaps of mean 56.2 h (the source's MTBF) of running time.

``bucket_frames`` is the fast path: the frames the ingest would build from the simulated
cluster's GPU and NFS series, bucket by bucket, for the features the phase classifier and
the checkpoint advisors read, from the same job plan (epochs, saves, loads), node traits
and calibration as :mod:`activity` -- but as rates rather than counters and without the
other series, so three weeks of an 8-node job take seconds instead of hours.

``truth`` is the plan's ground truth in the advisors' terms.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import pairwise

import numpy as np

from detectors.advisors.checkpoint_interval import (
    CheckpointIntervalParams,
    CheckpointIntervalState,
    IntervalFigures,
    overhead,
    step_checkpoint_interval,
)
from detectors.advisors.checkpoint_io import (
    CheckpointIoParams,
    CheckpointIoState,
    IoEvent,
    step_checkpoint_io,
)
from detectors.phase import Phase, PhaseParams, step_phase
from detectors.vocabulary import Advice
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.faults import EccFault
from streams.lab.simulator.timeline import JobPlan, plan_job
from streams.lab.simulator.traits import shaped_traits

WEEKS = 3
CADENCE_H = 2.23  # source: median interval of the 4 K phase
MTBF_H = 56.2  # source: 1,294 h of training over 23 abnormal ends
_H_MS = 3_600_000


def checkpoint_weeks(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    """The scenario's cluster: the cadence, and the failures drawn over ``WEEKS`` weeks."""
    config = replace(
        base,
        checkpoint_interval_s=CADENCE_H * 3600.0,
        first_save_s=float(rng.uniform(0.05, 1.0)) * CADENCE_H * 3600.0,
    )
    end = config.start_ms + WEEKS * 7 * 24 * _H_MS
    interval = config.interval_ms
    down_ms = interval + int((config.restart_delay_s + config.restart_load_s) * 1000)
    faults, t = [], config.start_ms
    while True:
        onset = t + int(rng.exponential(MTBF_H) * _H_MS)
        if onset >= end:
            break
        node = config.job_hosts[int(rng.integers(config.job_nodes))]
        faults.append(EccFault(node, int(rng.integers(config.gpus_per_node)), onset))
        death = config.start_ms + (onset - config.start_ms) // interval * interval + interval
        t = death + down_ms  # the next failure comes in the next run's training
    return replace(config, faults=(*config.faults, *faults))


def bucket_frames(
    config: ClusterConfig, end_ms: int, chunk: int = 2880
) -> Iterator[tuple[int, dict[str, dict[str, float]]]]:
    """``(bucket_ts, node -> features)`` for every bucket of the job's nodes until ``end_ms``
    (computed ``chunk`` buckets at a time: numpy on one bucket's 8 nodes is all overhead)."""
    plan = plan_job(config)
    # normals and uniforms from streams of their own, row by row: chunking changes nothing
    rngs = (
        np.random.default_rng((config.seed, 0xC4EC, 0)),
        np.random.default_rng((config.seed, 0xC4EC, 1)),
    )
    hosts = config.hosts[: config.job_nodes]  # an ECC fail-stop keeps them: no spare joins
    interval = config.interval_ms
    for first in range(config.start_ms, end_ms, interval * chunk):
        stamps = range(first, min(first + interval * chunk, end_ms), interval)
        columns = _readings(config, plan, stamps, rngs)
        rows = {name: values.tolist() for name, values in columns.items()}
        for k, ts in enumerate(stamps):
            yield ts, {h: {name: v[k][i] for name, v in rows.items()} for i, h in enumerate(hosts)}


def _readings(
    config: ClusterConfig,
    plan: JobPlan,
    stamps: range,
    rngs: tuple[np.random.Generator, np.random.Generator],
) -> dict[str, np.ndarray]:
    """Each feature as a (buckets, job nodes) array, by :mod:`activity`'s formulas."""
    cal, tr = config.calibration, shaped_traits(config)
    n, g, b = config.job_nodes, config.gpus_per_node, len(stamps)
    interval = config.interval_ms
    member = np.zeros((b, n), dtype=bool)
    loading, stall, share = np.zeros((b, 1), dtype=bool), np.zeros((b, 1)), np.zeros((b, 1))
    for k, ts in enumerate(stamps):
        epoch = plan.running_at(ts)
        if epoch is None:
            continue
        member[k, [m for m in epoch.members if m < n]] = True
        if ts < epoch.train_ms:
            loading[k] = True
            continue
        overlap = plan.save_overlap(epoch, ts, ts + interval)
        stall[k], share[k] = overlap.stalled_ms / interval, overlap.save_share
    normal = rngs[0].standard_normal((b, n, 3 + g))
    z, zg = normal[..., :3], np.abs(normal[..., 3:])
    ug = rngs[1].random((b, n, g))
    train = 100.0 - np.floor(cal.gpu_util_train_noise * zg)
    lo, hi = cal.gpu_util_save
    util = (1.0 - stall[..., None]) * train + stall[..., None] * (lo + ug * (hi - lo))
    lo, hi = cal.gpu_util_load
    util = np.where(loading[..., None], lo + ug * (hi - lo), util).min(axis=2)
    latency = tr.nfs_latency[:n] * (1.0 + cal.nfs_noise * z[..., 0])
    save = np.where(member, tr.save_bytes[:n] * share / (interval / 1000.0), 0.0)
    save *= 1.0 + cal.save_bytes_noise * z[..., 1]
    save_requests = save / cal.write_rpc_bytes
    idle = cal.write_idle_per_s
    requests = idle + save_requests
    loads = member & loading
    per_read = cal.read_request_s * latency
    return {
        "gpu_util": np.where(member, util, 0.0),
        "nfs_write_bytes_rate": idle * cal.write_idle_rpc_bytes + save,
        "nfs_read_bytes_rate": np.where(
            loads,
            cal.load_bytes_per_node / max(config.restart_load_s, 1.0) * (1.0 + 0.05 * z[..., 2]),
            cal.read_idle_per_s * cal.read_rpc_bytes,
        ),
        "nfs_write_queue_s": latency
        * (idle * cal.write_idle_queue_s + save_requests * cal.write_save_queue_s)
        / requests,
        "nfs_write_rtt_s": latency
        * (idle * cal.write_idle_response_s + save_requests * cal.write_save_response_s)
        / requests,
        "nfs_read_queue_s": np.where(
            loads, per_read * cal.read_queue_fraction, cal.read_idle_queue_s * latency
        ),
        "nfs_read_rtt_s": np.where(
            loads, per_read * (1.0 - cal.read_queue_fraction), cal.read_idle_response_s * latency
        ),
    }


@dataclass(frozen=True)
class Truth:
    """The plan's saves (start, seconds), intervals within a run, loads (start, seconds),
    failures, the time the job ran (its epochs, loads included), bytes per save, and the
    node-mean seconds per WRITE in a save / READ in a load (calibration x node latencies)."""

    saves: tuple[tuple[int, float], ...]
    intervals: tuple[float, ...]
    loads: tuple[tuple[int, float], ...]
    failures: int
    up_s: float
    save_bytes: float
    write_request_s: float
    read_request_s: float

    @property
    def delta_s(self) -> float:
        return statistics.median(s for _, s in self.saves)

    @property
    def interval_s(self) -> float:
        return statistics.median(self.intervals)

    def mtbf_s(self, prior_mtbf_s: float = 0.0, prior_failures: float = 0.0) -> float:
        """Up time over failures, with the advisor's prior when given."""
        return (self.up_s + prior_failures * prior_mtbf_s) / (self.failures + prior_failures)

    def optimal_s(self, mtbf_s: float) -> float:
        return math.sqrt(2.0 * self.delta_s * mtbf_s)


def truth(config: ClusterConfig, end_ms: int) -> Truth:
    plan = plan_job(config)
    saves, intervals, loads, up_ms = [], [], [], 0
    for epoch in plan.epochs:
        if epoch.start_ms >= end_ms:
            break
        stop = end_ms if epoch.end_ms is None else min(epoch.end_ms, end_ms)
        up_ms += stop - epoch.start_ms
        if epoch.train_ms > epoch.start_ms:
            loads.append((epoch.start_ms, (min(epoch.train_ms, stop) - epoch.start_ms) / 1000))
        starts = []
        for start, end in plan.saves(epoch, stop):
            saves.append((start, (end - start) / 1000.0))
            starts.append(start)
        intervals += [(b - a) / 1000.0 for a, b in pairwise(starts)]
    failures = sum(1 for e in plan.epochs if e.end_ms is not None and e.end_ms <= end_ms)
    tr, cal = shaped_traits(config), config.calibration
    latency = float(tr.nfs_latency[: config.job_nodes].mean())
    return Truth(
        tuple(saves), tuple(intervals), tuple(loads), failures, up_ms / 1000.0,
        float(tr.save_bytes[: config.job_nodes].sum()),
        (cal.write_save_queue_s + cal.write_save_response_s) * latency,
        cal.read_request_s * latency,
    )  # fmt: skip


@dataclass
class Advised:
    """What the phase classifier and the checkpoint advisors made of the run."""

    saves: list[IoEvent] = field(default_factory=list)
    loads: list[IoEvent] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)
    interval: CheckpointIntervalState = field(default_factory=CheckpointIntervalState)
    figures: IntervalFigures | None = None


def advise(
    config: ClusterConfig,
    end_ms: int,
    io_params: CheckpointIoParams | None = None,
    interval_params: CheckpointIntervalParams | None = None,
) -> Advised:
    """The fast path's buckets through ``detectors.phase`` and both advisors, as the worker
    runs them (the XID fail-stop in its onset's bucket)."""
    io_params = io_params or CheckpointIoParams()
    interval_params = interval_params or CheckpointIntervalParams()
    phase_params, bucket_s = PhaseParams(), config.interval_ms / 1000.0
    interval = config.interval_ms
    xids = {f.onset_ms // interval * interval for f in config.faults if f.stops_job_at_ms}
    nodes = list(config.job_hosts)
    out, phase, io = Advised(), Phase(), CheckpointIoState()
    for ts, frames in bucket_frames(config, end_ms):
        phase = step_phase(phase, frames, nodes, phase_params)
        step = step_checkpoint_io(
            io, io_params, group="job", bucket_ts=ts, bucket_s=bucket_s, phase=phase, frames=frames
        )
        io = step.state
        if step.closed is not None:
            (out.saves if step.closed.kind == "save" else out.loads).append(step.closed)
        advice = step_checkpoint_interval(
            out.interval,
            interval_params,
            group="job",
            bucket_ts=ts,
            bucket_s=bucket_s,
            phase=phase.name,
            save=step.closed,
            fail_stop=ts in xids,
        )
        out.interval = advice.state
        out.figures = advice.figures or out.figures
        out.advice += [*step.advice, *advice.advice]
    return out


def comparison(
    advised: Advised, real: Truth, params: CheckpointIntervalParams | None = None
) -> list[tuple[str, float, float]]:
    """(figure, advisors', truth's) rows; the truth's MTBF carries the advisor's prior."""
    params = params or CheckpointIntervalParams()
    m = real.mtbf_s(params.prior_mtbf_s, params.prior_failures)
    t_opt = real.optimal_s(m)
    f = advised.figures
    nan = math.nan
    return [
        ("saves", len(advised.saves), len(real.saves)),
        ("save delta_s (median)", statistics.median(e.lost_s for e in advised.saves), real.delta_s),
        ("save bytes (median)", statistics.median(e.bytes for e in advised.saves), real.save_bytes),
        (
            "interval_s (median)",
            statistics.median(e.interval_s for e in advised.saves if e.interval_s is not None),
            real.interval_s,
        ),
        ("loads", len(advised.loads), len(real.loads)),
        (
            "load_s (median)",
            statistics.median(e.seconds for e in advised.loads),
            statistics.median(s for _, s in real.loads),
        ),
        ("failures", advised.interval.failures, real.failures),
        ("up_h", advised.interval.up_s / 3600, real.up_s / 3600),
        ("mtbf_h (prior 56.2 h x 1)", f.mtbf_s / 3600 if f else nan, m / 3600),
        ("optimal_s (Young/Daly)", f.optimal_s if f else nan, t_opt),
        ("interval / optimal", f.ratio if f else nan, real.interval_s / t_opt),
        (
            "overhead actual",
            f.actual_overhead if f else nan,
            overhead(real.interval_s, real.delta_s, m),
        ),
        ("overhead optimal", f.optimal_overhead if f else nan, overhead(t_opt, real.delta_s, m)),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--weeks", type=float, default=WEEKS)
    parser.add_argument("--nodes", type=int, default=8, help="job nodes (the fast path's)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    config = checkpoint_weeks(rng, ClusterConfig(job_nodes=args.nodes, spares=0, seed=args.seed))
    end = config.start_ms + int(args.weeks * 7 * 24 * _H_MS)
    advised = advise(config, end)
    print(f"{'figure':<28} {'advisors':>16} {'truth':>16}")
    for name, ours, real in comparison(advised, truth(config, end)):
        print(f"{name:<28} {ours:>16.6g} {real:>16.6g}")
    kinds = Counter(a.kind for a in advised.advice)
    print("advice:", ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
    last = {a.kind: a for a in advised.advice}
    for kind in sorted(last):
        print(f"  last {kind}: {last[kind].summary}")


if __name__ == "__main__":
    main()
