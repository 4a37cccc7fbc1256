"""Run labelled scenarios through the live code path and score them.

Each (scenario, seed) run: the simulator's scrape rounds go through the
ingest's ``FrameBuilder`` and the worker's ``Pipeline`` in one process
(``streams.worker.offline``), exactly what the worker decides over Kafka; a
row-remap creep, which spans weeks, also goes through the same per-GPU health
detector on its coarse fast-path track. The alerts are scored against the
run's ground truth (``streams.lab.evaluation.scoring``), with the worker
settings the scenario carries (``Scenario.settings_for``: the library's
original scenarios group by ``train_job``, the real-fleet ones as a new user
would for the seed's label layout). Runs are independent, so they spread over
worker processes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from detectors.features import per_gpu_key
from detectors.gpu_health import GpuHealthState, step_gpu_health
from detectors.vocabulary import AlertChange
from streams.catalog import load_xid_catalog
from streams.gc_pause import gc_paused
from streams.lab.evaluation.scoring import RunScore, score_run
from streams.lab.simulator.remap import RemapSeries
from streams.lab.simulator.run import generate_batches
from streams.lab.simulator.scenarios import Scenario, get_scenario
from streams.settings import Settings
from streams.worker.offline import score_rounds


@dataclass
class RunResult:
    scenario: str
    seed: int
    score: RunScore
    seconds: float
    changes: list[AlertChange] = field(default_factory=list)
    node_scores: list[tuple[int, str, float]] = field(default_factory=list)


def evaluation_settings() -> Settings:
    """The settings of the library's original scenarios: group by the job label ``train_job``."""
    return Settings(group_labels=["train_job"])


def remap_track_changes(track: RemapSeries, group: str, settings: Settings) -> list[AlertChange]:
    """Feed one GPU's coarse remap track through the per-GPU health detector."""
    catalog = load_xid_catalog(settings.xid_profile, settings.xid_overrides)
    params = settings.gpu_health
    state = GpuHealthState.new(catalog, params)
    gpu = str(track.gpu)
    changes: list[AlertChange] = []
    for t_ms, correctable, uncorrectable, failure, pending in track.samples():
        values = {
            per_gpu_key("remap_correctable", gpu): float(correctable),
            per_gpu_key("remap_uncorrectable", gpu): float(uncorrectable),
            per_gpu_key("remap_failure", gpu): float(failure),
            per_gpu_key("remap_pending", gpu): float(pending),
        }
        bucket = t_ms - t_ms % settings.bucket_ms
        changes.extend(step_gpu_health(state, group, bucket, {track.node: values}, params))
    return changes


def run_one(name: str, seed: int, keep_scores: bool = False) -> RunResult:
    """One scenario and seed, scored. Top-level so process pools can call it.

    The cyclic collector is off for the run: a run leaves a few hundred objects in
    cycles, while the collector's passes over what the builder and pipeline hold
    cost ~6 % of it; what is left is collected once at the end."""
    with gc_paused():
        result = _run_one(name, seed, keep_scores)
    gc.collect()
    return result


def _run_one(name: str, seed: int, keep_scores: bool) -> RunResult:
    started = time.perf_counter()
    scenario: Scenario = get_scenario(name)
    settings = scenario.settings_for(seed)
    config = scenario.config_for(seed)
    end_ms = scenario.end_ms(seed)
    changes: list[AlertChange] = []
    node_scores: list[tuple[int, str, float]] = []
    rounds = generate_batches(config, config.start_ms, end_ms)  # = scenario.rounds(seed)
    for _frames, scored in score_rounds(rounds, settings):
        for item in scored:
            changes.extend(item.changes)
            if keep_scores:
                node_scores.extend(
                    (item.bucket.ts, node, verdict.score)
                    for node, verdict in item.result.verdicts.items()
                )
    start_ms = config.start_ms
    for track in scenario.remap_tracks(seed):
        group = config.job_name if config.job_label else config.cluster
        changes.extend(remap_track_changes(track, group, settings))
        start_ms = min(start_ms, int(track.t_ms[0]) if len(track.t_ms) else start_ms)
    score = score_run(
        scenario.ground_truth(seed),
        changes,
        nodes=config.hosts,
        start_ms=start_ms,
        end_ms=end_ms,
        bucket_ms=settings.bucket_ms,
    )
    return RunResult(name, seed, score, time.perf_counter() - started, changes, node_scores)


def run_suite(
    names: Sequence[str],
    seeds: Iterable[int],
    *,
    jobs: int = 2,
    plot_first: bool = False,
    on_done: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """Every (scenario, seed) pair, ``jobs`` processes at a time, in a stable order.

    The longest runs start first (``rounds_per_seed``), so that the pool does
    not end on one long run with the other processes idle; ``on_done`` is
    called as each run finishes (a progress bar)."""
    pairs = [(name, seed) for name in names for seed in seeds]
    keep = [plot_first and i == 0 for i in range(len(pairs))]
    done = on_done or (lambda _result: None)
    if jobs <= 1:
        results = []
        for (name, seed), k in zip(pairs, keep, strict=True):
            results.append(run_one(name, seed, k))
            done(results[-1])
        return results
    cost = {name: get_scenario(name).rounds_per_seed for name in names}
    order = sorted(range(len(pairs)), key=lambda i: -cost[pairs[i][0]])
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, *pairs[i], keep[i]): i for i in order}
        by_index: dict[int, RunResult] = {}
        for future in as_completed(futures):
            by_index[futures[future]] = future.result()
            done(by_index[futures[future]])
    return [by_index[i] for i in range(len(pairs))]
