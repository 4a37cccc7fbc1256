"""The advisors in the pipeline: XIDs the group's buckets raise are the retry advisor's causes,
job events get their advice at once, the node ledger steps with every scored bucket."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from detectors.advisors.jobs import JobEvent
from detectors.advisors.ledger import LedgerFigures, LedgerParams, NodeLedger
from detectors.group import ScoringParams
from detectors.xid.events import XidEvent
from streams.catalog import DEFAULT_FEATURES, load_xid_catalog
from streams.frames import Frame
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.pipeline import Pipeline, Scored

B = 30_000
T0 = 1_760_000_000_000 - 1_760_000_000_000 % B
NODES = [f"n{i:02d}" for i in range(8)]


def pipeline(**kw: object) -> Pipeline:
    return Pipeline(DEFAULT_FEATURES, ScoringParams(), load_xid_catalog("report"), **kw)


def busy(**extra: float) -> dict[str, float]:
    return {"gpu_util": 95.0, "procs_running": 14.0, "xid_last@0": 0.0, **extra}


def run(p: Pipeline, i: int, frames: dict[str, dict[str, float]]) -> list[Scored]:
    ts = T0 + i * B
    for node, values in frames.items():
        p.add(Frame("job-a", node, ts, values), ts / 1000 + 30)
    return p.due("job-a", ts / 1000 + 90)


def job(state: str, ts: int, attempt: int = 1, **kw: object) -> JobEvent:
    return JobEvent.from_dict(
        {"job_id": f"s{attempt}", "name": "llm", "attempt": attempt, "state": state, "ts": ts,
         "nodes": NODES, "group": "job-a", **kw}
    )  # fmt: skip


def with_xid(p: Pipeline, node: str, xid: int) -> list[Scored]:
    out = []
    for i in range(4):
        out += run(p, i, {n: busy() for n in NODES})
    frames = {n: busy() for n in NODES}
    frames[node] = busy(**{"xid_last@0": float(xid)})
    return out + run(p, 4, frames)


def test_an_xid_a_bucket_raised_is_the_cause_of_the_failure_after_it():
    p = pipeline()
    with_xid(p, "n03", 79)
    (advice,) = p.add_job_event(job("failed", T0 + 5 * B, exit_reason="xid"))
    assert (advice.advisor, advice.kind, advice.nodes) == ("retry", "exclude_nodes", ("n03",))


def test_an_xid_from_a_kernel_log_line_counts_before_any_bucket_closes():
    p = pipeline()
    event = XidEvent(xid=145, source="log").with_origin(node="n05", gpu="0", ts_ms=T0)
    p.add_log_xid("job-a", event)
    (advice,) = p.add_job_event(job("failed", T0 + 60_000, exit_reason="xid"))
    assert (advice.kind, advice.nodes) == ("reset_gpu", ("n05",))


def test_the_ledger_steps_with_each_scored_bucket():
    p = pipeline(ledger=LedgerParams(min_app_xids=1, peer_ratio=1.0))  # 1 > 1 x floor 0.5
    out = with_xid(p, "n02", 13)
    said = [(a.advisor, a.kind, a.node) for s in out for a in s.advice]
    assert said == [("ledger", "xid_above_peers", "n02")]
    assert p.figures("job-a")[NodeLedger.name] == LedgerFigures(None, {"n02": {13: 1}}, {})


def test_the_ledger_is_in_the_group_snapshot_and_the_retry_state_in_its_own():
    p = pipeline()
    with_xid(p, "n02", 13)
    p.add_job_event(job("running", T0))
    p.add_job_event(job("running", T0 + B, 2, nodes=NODES[1:]))  # n00 left out: an exclusion
    p.add_job_event(job("failed", T0 + 2 * B, 2, exit_reason="nccl"))
    q = pipeline()
    q.restore("job-a", p.snapshot("job-a"))
    q.retries.restore("job-a", p.retries.snapshot("job-a"))
    ledgers = [pipe.family_states(NodeLedger.name) for pipe in (p, q)]
    assert ledgers[0] == ledgers[1] and q.retries.states == p.retries.states
    assert q.figures("job-a")[NodeLedger.name].exclusions == {"n00": 1}


def test_a_job_s_retry_state_outlives_its_group():
    """Its frames stop while it restarts, the group ends; the chain goes on."""
    p = pipeline(membership_buckets=3)
    run(p, 0, {n: busy() for n in NODES})
    p.add_job_event(job("failed", T0 + B, exit_reason="nccl"))
    ended = p.due("job-a", T0 / 1000 + 3600)
    assert ended and ended[-1].ended is not None and "job-a" not in p.family_states(NodeLedger.name)
    (second,) = p.add_job_event(job("failed", T0 + 2 * B, 2, exit_reason="nccl"))
    assert dict(second.figures)["failures"] == 2


@pytest.mark.parametrize("group", [None, "job-a"])
def test_a_job_event_without_a_group_is_its_name_s(group):
    p = pipeline()
    ev = job("failed", T0, exit_reason="nccl", group=group)
    (advice,) = p.add_job_event(ev)
    assert advice.group == (group or "llm")


def test_a_job_event_for_a_group_without_frames_holds_no_group():
    """Only the retry state: a group made here would end at once and be ticked for nothing."""
    p = pipeline()
    p.add_job_event(job("running", T0))
    p.add_job_event(job("failed", T0 + B, exit_reason="nccl"))
    assert p.groups == {} and set(p.retries.states) == {"job-a"}


def test_the_advisor_series_follow_the_figures_and_go_with_the_group():
    metrics = WorkerMetrics()
    p = pipeline()
    with_xid(p, "n02", 13)
    p.add_job_event(job("running", T0))
    p.add_job_event(job("running", T0 + B, 2, nodes=NODES[1:]))
    advice = p.add_job_event(job("failed", T0 + 2 * B, 2, exit_reason="nccl"))
    metrics.advisors.observe_ledger("job-a", p.figures("job-a")[NodeLedger.name])
    metrics.advisors.observe_retry("job-a", p.retries.figures("job-a"))
    metrics.advisors.count_advice(advice)
    page = generate_latest(metrics.registry).decode()
    assert 'peerwatch_ledger_node_xids{group="job-a",node="n02",xid="13"} 1.0' in page
    assert 'peerwatch_ledger_node_exclusions{group="job-a",node="n00"} 1.0' in page
    assert 'peerwatch_ledger_exclusion_concentration{group="job-a"} 1.0' in page
    assert 'peerwatch_advice_total{advisor="retry",group="job-a",kind="retry"} 1.0' in page
    metrics.forget_group("job-a")
    assert 'group="job-a"' not in generate_latest(metrics.registry).decode()
