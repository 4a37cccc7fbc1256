"""The retry advisor against hand-computed figures: backoff, caps, XID branching, gang
feasibility, chain success and downtime."""

from __future__ import annotations

import json

import pytest

from detectors.advisors.jobs import JobEvent, JobEventError
from detectors.advisors.retry import (
    RetryParams,
    RetryState,
    observe_xid,
    retry_summary,
    step_retry,
)
from streams.catalog import load_xid_catalog

REPORT = load_xid_catalog("report")
NVIDIA = load_xid_catalog("nvidia")
H = 3_600_000
MIN = 60_000
GANG = tuple(f"gpu{i:03d}" for i in range(60))


def event(state: str, ts: int, attempt: int = 1, **kw: object) -> JobEvent:
    data = {"job_id": f"s{attempt}", "name": "llm", "attempt": attempt, "state": state, "ts": ts}
    data.setdefault("nodes", list(GANG))
    data.update(kw)
    return JobEvent.from_dict(data)


def fail(state: RetryState, ts: int, attempt: int, params: RetryParams | None = None, **kw):
    (advice,) = step_retry(
        state, params or RetryParams(), REPORT, event("failed", ts, attempt, **kw)
    )
    return advice


def figures(advice) -> dict:
    return dict(advice.figures)


def test_backoff_doubles_from_ten_minutes_to_forty():
    assert [RetryParams().delay_s(n) for n in range(1, 6)] == [600, 1200, 2400, 2400, 2400]


def test_retries_back_off_10_20_40_min_across_different_failures():
    state, delays = RetryState(), []
    for n, reason in enumerate(("nccl", "oom", "nccl", "oom"), start=1):
        step_retry(state, RetryParams(), REPORT, event("running", n * H, n))
        advice = fail(state, n * H + MIN, n, exit_reason=reason)
        assert advice.kind == "retry"
        delays.append(figures(advice)["delay_s"])
    assert delays == [600, 1200, 2400, 2400]


def test_the_same_failure_three_times_in_a_row_stops_the_chain():
    """Report 000's chain that failed 30 times in a row would have stopped at the third."""
    state = RetryState()
    kinds = [fail(state, n * H, n, exit_reason="nccl_timeout").kind for n in range(1, 4)]
    assert kinds == ["retry", "retry", "stop"]
    last = fail(state, 4 * H, 4, exit_reason="nccl_timeout")
    assert figures(last)["why"] == "identical_cap" and figures(last)["identical"] == 4


def test_an_application_xid_on_some_node_does_not_break_the_identical_streak():
    """Regression (found by the retry_chains scenario): an XID 13 logged on one of the 60
    nodes just before the third NCCL failure made it look different, and it was retried."""
    state, params = RetryState(), RetryParams()
    fail(state, H, 1, exit_reason="nccl_timeout")
    fail(state, 2 * H, 2, exit_reason="nccl_timeout")
    observe_xid(state, params, "gpu026", 13, "RESTART_APP", 3 * H - MIN)
    assert fail(state, 3 * H, 3, exit_reason="nccl_timeout").kind == "stop"


def test_failures_of_any_kind_stop_at_max_failures():
    state, params = RetryState(), RetryParams(max_failures=4)
    kinds = [fail(state, n * H, n, params, exit_reason=f"r{n % 2}").kind for n in range(1, 5)]
    assert kinds == ["retry", "retry", "retry", "stop"]


def test_training_resets_the_counts():
    state = RetryState()
    fail(state, H, 1, exit_reason="nccl")
    fail(state, 2 * H, 2, exit_reason="nccl")
    step_retry(state, RetryParams(), REPORT, event("running", 3 * H, 3))
    step_retry(state, RetryParams(), REPORT, event("training", 3 * H + MIN, 3))
    advice = fail(state, 10 * H, 3, exit_reason="nccl")
    assert advice.kind == "retry" and figures(advice)["delay_s"] == 600


@pytest.mark.parametrize(
    ("catalog", "xid", "kind", "nodes"),
    [
        (REPORT, 94, "retry", ()),  # RESTART_APP: retry, the node stays
        (REPORT, 31, "retry", ()),
        (REPORT, 145, "reset_gpu", ("gpu007",)),  # report profile: RESET_GPU
        (REPORT, 119, "reset_gpu", ("gpu007",)),
        (REPORT, 79, "exclude_nodes", ("gpu007",)),  # CONTACT_SUPPORT: out, a spare in
        (NVIDIA, 79, "exclude_nodes", ("gpu007",)),  # RESTART_BM
        (NVIDIA, 999, "exclude_nodes", ("gpu007",)),  # unknown: CONTACT_SUPPORT
    ],
)
def test_the_step_follows_the_xid_class(catalog, xid, kind, nodes):
    state = RetryState()
    ev = event("failed", H, 1, exit_reason="xid", xids=[{"node": "gpu007", "xid": xid}])
    (advice,) = step_retry(state, RetryParams(), catalog, ev)
    assert (advice.kind, advice.nodes) == (kind, nodes)


def test_a_stop_action_pages_at_once():
    params = RetryParams(stop_actions=("CONTACT_SUPPORT",))
    advice = fail(RetryState(), H, 1, params, xids=[{"node": "gpu007", "xid": 79}])
    assert (advice.kind, advice.action, figures(advice)["why"]) == (
        "stop",
        "STOP_AND_PAGE",
        "catalog",
    )


def test_a_node_reset_once_that_fails_again_is_excluded():
    state = RetryState()
    first = fail(state, H, 1, exit_reason="xid", xids=[{"node": "gpu007", "xid": 145}])
    second = fail(state, 2 * H, 2, exit_reason="xid", xids=[{"node": "gpu007", "xid": 149}])
    assert (first.kind, second.kind, second.nodes) == ("reset_gpu", "exclude_nodes", ("gpu007",))


def test_xids_seen_on_the_nodes_within_the_window_are_the_cause():
    state, params = RetryState(), RetryParams(xid_window_s=600)
    observe_xid(state, params, "gpu003", 79, "RESTART_BM", H - 11 * MIN)  # too early
    observe_xid(state, params, "gpu999", 79, "RESTART_BM", H - MIN)  # not the job's node
    assert fail(state, H, 1, params).kind == "retry"
    observe_xid(state, params, "gpu004", 79, "RESTART_BM", 2 * H - 9 * MIN)
    advice = fail(state, 2 * H, 2, params)
    assert (advice.kind, advice.nodes) == ("exclude_nodes", ("gpu004",))


@pytest.mark.parametrize(("bad", "kind", "available"), [(2, "exclude_nodes", 60), (3, "stop", 59)])
def test_a_gang_the_pool_cannot_hold_stops(bad, kind, available):
    """60-node gang, 62 healthy nodes (2 spares): 2 excluded leave 60, 3 leave 59."""
    pool = [*GANG, "gpu060", "gpu061"]
    xids = [{"node": f"gpu00{i}", "xid": 79} for i in range(bad)]
    advice = fail(RetryState(), H, 1, xids=xids, pool=pool, gang=60)
    assert (advice.kind, figures(advice)["available"]) == (kind, available)
    if kind == "stop":
        assert figures(advice)["why"] == "gang_unschedulable"


def test_a_pool_short_of_the_gang_stops_even_a_plain_retry():
    """The report's licence case: 59 nodes could join the pool, the job needs 60."""
    advice = fail(RetryState(), H, 1, exit_reason="unschedulable", pool=list(GANG[:59]), gang=60)
    assert (advice.kind, figures(advice)["why"]) == ("stop", "gang_unschedulable")


def test_exclusions_count_against_the_pool_until_the_node_is_placed_again():
    state, pool = RetryState(), [*GANG, "gpu060"]
    assert (
        fail(state, H, 1, xids=[{"node": "gpu001", "xid": 79}], pool=pool).kind == "exclude_nodes"
    )
    # gpu001 is still out: a second XID 79 leaves 59 of 61
    second = fail(state, 2 * H, 2, xids=[{"node": "gpu002", "xid": 79}], pool=pool)
    assert (second.kind, figures(second)["available"]) == ("stop", 59)
    step_retry(state, RetryParams(), REPORT, event("running", 3 * H, 3, nodes=list(GANG)))
    assert "gpu001" not in state.excluded and "gpu002" not in state.excluded


def test_chain_success_and_downtime_auto_against_manual():
    """Job a: trains, fails, an auto retry trains 1.9 h later (a recovered chain). Job b:
    trains, fails, two auto retries fail, a person restarts it and it trains 3.3 h after the
    failure (a chain that did not recover, a manual session that trained)."""
    s, p = RetryState(), RetryParams()

    def go(name: str, state: str, ts: int, attempt: int, **kw: object) -> None:
        ev = JobEvent.from_dict(
            {
                "job_id": f"{name}{attempt}",
                "name": name,
                "attempt": attempt,
                "state": state,
                "ts": ts,
                "nodes": ["n1", "n2"],
                **kw,
            }
        )
        step_retry(s, p, REPORT, ev)

    go("a", "running", 0, 1)
    go("a", "training", MIN, 1)
    go("a", "failed", 10 * H, 1, exit_reason="xid", xids=[{"node": "n1", "xid": 94}])
    go("a", "running", 10 * H + 10 * MIN, 2)
    go("a", "training", 10 * H + 114 * MIN, 2)  # 1.9 h after the failure
    go("b", "running", 0, 1)
    go("b", "training", MIN, 1)
    go("b", "failed", 5 * H, 1, exit_reason="nccl")
    go("b", "running", 5 * H + 10 * MIN, 2)
    go("b", "failed", 5 * H + 20 * MIN, 2, exit_reason="nccl")
    go("b", "running", 5 * H + 40 * MIN, 3)
    go("b", "failed", 5 * H + 50 * MIN, 3, exit_reason="nccl")
    go("b", "running", 8 * H, 4, trigger="manual")
    go("b", "training", 8 * H + 18 * MIN, 4)  # 3.3 h after the failure
    got = retry_summary(s.stats)
    assert (got["chains"], got["chains_recovered"], got["chain_success"]) == (2, 1, 0.5)
    assert (got["retries"], got["manual_sessions"], got["manual_trained"]) == (3, 3, 3)
    assert got["median_downtime_auto_h"] == pytest.approx(1.9)
    assert got["median_downtime_manual_h"] == pytest.approx(3.3)
    assert got["advice"] == {"retry": 3, "stop": 1}  # a once; b twice, then its third stopped


def test_a_redelivered_event_is_ignored():
    state = RetryState()
    assert fail(state, H, 1, exit_reason="nccl").kind == "retry"
    assert step_retry(state, RetryParams(), REPORT, event("failed", H, 1, exit_reason="nccl")) == []
    assert state.chains["llm"].failures == 1


def test_jobs_that_never_end_are_forgotten_least_recent_first():
    state, params = RetryState(), RetryParams(max_chains=2)
    for n, name in enumerate(("a", "b", "c"), start=1):
        ev = JobEvent.from_dict(
            {"job_id": name, "name": name, "attempt": 1, "state": "running", "ts": n * H}
        )
        step_retry(state, params, REPORT, ev)
    assert sorted(state.chains) == ["b", "c"]


def test_state_round_trips_through_json():
    state = RetryState()
    observe_xid(state, RetryParams(), "gpu001", 79, "RESTART_BM", H - MIN)
    fail(state, H, 1, xids=[{"node": "gpu002", "xid": 145}], pool=[*GANG, "gpu060"])
    back = RetryState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state
    assert fail(back, 2 * H, 2).kind == fail(state, 2 * H, 2).kind


def test_advice_round_trips_as_its_event_record():
    advice = fail(RetryState(), H, 1, xids=[{"node": "gpu002", "xid": 79}])
    record = json.loads(json.dumps(advice.to_dict()))
    assert record["advisor"] == "retry" and record["nodes"] == ["gpu002"]
    assert record["figures"]["delay_s"] == 600.0


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"state": "lost"}, "state must be one of"),
        ({"attempt": 0}, "attempt must be an integer >= 1"),
        ({"ts": "now"}, "ts must be an integer"),
        ({"nodes": "gpu001"}, "nodes must be a list"),
        ({"xids": [{"node": "gpu001"}]}, "xids xid"),
        ({"trigger": "cron"}, "trigger must be"),
        ({"name": ""}, "name must be a non-empty string"),
    ],
)
def test_a_malformed_job_event_names_its_field(patch, message):
    data = {"job_id": "s1", "name": "llm", "attempt": 1, "state": "failed", "ts": 0} | patch
    with pytest.raises(JobEventError, match=message):
        JobEvent.from_dict(data)


def test_a_job_event_round_trips_and_defaults_its_trigger_and_gang():
    ev = event("running", H, 2, pool=["a", "b"], group="cluster")
    assert JobEvent.from_dict(ev.to_dict()) == ev
    assert (ev.started_by, ev.gang_size, ev.peer_group) == ("auto", 60, "cluster")
    assert event("running", H, 1).started_by == "manual"


@pytest.mark.parametrize(
    "bad",
    [
        {"base_delay_s": -1},
        {"backoff_factor": 0.5},
        {"max_identical": 0},
        {"retry_actions": ("REBOOT",)},
        {"retry_actions": ("RESET_GPU",)},  # also a reset action
    ],
)
def test_bad_params_are_refused(bad):
    with pytest.raises(ValueError):
        RetryParams(**bad)
