"""The checkpoint advisors in the worker's own path: the simulator's series → the ingest's
frame builder → ``Pipeline`` (as ``streams.worker.offline`` runs them): saves, an ECC fail-stop,
its restart load, and what the advisors made of them against the simulator's plan, across
a worker restart 40 min in (two saves and their interval are in the snapshot)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from detectors.advisors.checkpoint_family import CheckpointAdvisors, CheckpointState
from detectors.vocabulary import Advice
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.faults import CHECKPOINT_SAVE, JOB_DEATH, RESTART_LOAD, EccFault
from streams.lab.simulator.run import generate, ground_truth
from streams.settings import Settings
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.offline import build_pair
from streams.worker.pipeline import Pipeline

MINUTE = 60_000
SETTINGS = Settings(group_labels=["train_job"])
START = ClusterConfig().start_ms
# saves every 20 min from minute 3; an ECC XID at minute 47 kills the job a bucket later;
# it restarts 10 min after and loads for 25 min, then trains and saves again
CONFIG = ClusterConfig(
    seed=5,
    job_nodes=8,
    spares=0,
    checkpoint_interval_s=1200.0,
    checkpoint_jitter=0.0,
    first_save_s=180.0,
    faults=(EccFault("gpu066", 3, START + 47 * MINUTE + 10_000),),
)
END = START + 125 * MINUTE


@pytest.fixture(scope="module")
def run() -> tuple[CheckpointState, list[Advice]]:
    builder, pipeline = build_pair(SETTINGS)
    advice: list[Advice] = []
    now_s = 0.0
    for t_ms, series in generate(CONFIG, START, END):
        if t_ms == START + 40 * MINUTE:  # a worker restart: the group's snapshot, as JSON
            restored = Pipeline.from_settings(SETTINGS)
            for group in pipeline.groups:
                restored.restore(group, json.loads(json.dumps(pipeline.snapshot(group))))
            pipeline = restored
        now_s = t_ms / 1000.0
        builder.add(series, now_s=now_s)
        frames = builder.close_due_by_watermark(now_s=now_s, idle_s=SETTINGS.ingest_idle_flush_s)
        for f in frames:
            pipeline.add(f, now_s)
        for group in {f.group for f in frames} | set(pipeline.groups_waiting(now_s)):
            for scored in pipeline.due(group, now_s):
                advice += scored.advice
    (state,) = pipeline.family_states(CheckpointAdvisors.name).values()
    return state, advice


def test_the_family_runs_in_the_worker_pipeline(run: tuple[CheckpointState, list[Advice]]):
    state, _ = run
    truth = ground_truth(CONFIG, END)
    saves = [g for g in truth if g.kind == CHECKPOINT_SAVE and g.onset_ms < END - MINUTE]
    (load,) = [g for g in truth if g.kind == RESTART_LOAD]
    assert [g.kind for g in truth].count(JOB_DEATH) == 1
    assert state.interval.failures == 1  # the XID and the death it caused: one failure
    last = state.io.last_save
    assert last is not None and last.lost_s == pytest.approx(
        (saves[-1].end_ms - saves[-1].onset_ms) / 1000, rel=0.1
    )
    assert last.interval_s == pytest.approx(1200.0, abs=30)
    assert state.io.last_load is not None
    assert state.io.last_load.seconds == pytest.approx((load.end_ms - load.onset_ms) / 1000, abs=60)
    # saves before the death and after the restart; intervals only within a run
    assert len(state.interval.deltas) == len(saves)
    assert len(state.interval.intervals) == len(saves) - 2


def test_its_advice_comes_out_on_scored(run: tuple[CheckpointState, list[Advice]]) -> None:
    _, advice = run
    kinds = {a.kind for a in advice}
    assert {"queue_dominated_write", "queue_dominated_read"} <= kinds
    (write,) = [a for a in advice if a.kind == "queue_dominated_write"]
    assert dict(write.figures)["queue_share"] == pytest.approx(1.89 / 2.03, abs=0.005)
    assert write.group == "llm-pretrain" and write.advisor == "checkpoint_io"


def test_its_figures_are_metrics_and_go_with_the_group(
    run: tuple[CheckpointState, list[Advice]],
) -> None:
    state, _ = run
    metrics = WorkerMetrics()
    metrics.checkpoint.observe("llm-pretrain", state)
    text = generate_latest(metrics.registry).decode()
    f = state.figures
    assert f is not None
    for line in (
        f'peerwatch_checkpoint_interval_seconds{{group="llm-pretrain",kind="actual"}} {f.actual_s}',
        f'peerwatch_checkpoint_interval_seconds{{group="llm-pretrain",kind="optimal"}} '
        f"{f.optimal_s}",
        f'peerwatch_checkpoint_mtbf_seconds{{group="llm-pretrain"}} {f.mtbf_s}',
        'peerwatch_checkpoint_failures{group="llm-pretrain"} 1.0',
    ):
        assert line in text, line
    assert 'operation="WRITE",part="queue"' in text and 'direction="read"' in text
    metrics.forget_group("llm-pretrain")
    assert "llm-pretrain" not in generate_latest(metrics.registry).decode()
