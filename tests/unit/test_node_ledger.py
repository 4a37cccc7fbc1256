"""The node-health ledger against hand-computed figures: concentration, chronic nodes, the
peer-rate flag for application-class XIDs, nodes placed back after an XID, the window."""

from __future__ import annotations

import json

import pytest

from detectors.advisors.jobs import JobEvent
from detectors.advisors.ledger import (
    LedgerParams,
    LedgerState,
    concentration,
    observe_job,
    reset_counts,
    step_ledger,
    xid_counts,
)
from detectors.families import NODE_DEVIATION, XID_ALERT
from detectors.vocabulary import AlertChange

H = 3_600_000
DAY = 24 * H
NODES = [f"n{i:02d}" for i in range(10)]


def xid(node: str, code: int, ts: int, action: str = "RESTART_APP") -> AlertChange:
    return AlertChange(
        alertname=XID_ALERT,
        node=node,
        group="g",
        status="firing",
        severity="warning",
        score=float(code),
        signals=(),
        reason="",
        bucket_ts=ts,
        starts_bucket_ts=ts,
        evidence_since_ts=ts,
        action=action,
    )


def running(name: str, nodes: list[str], ts: int, attempt: int = 1) -> JobEvent:
    return JobEvent.from_dict(
        {
            "job_id": f"{name}{attempt}",
            "name": name,
            "attempt": attempt,
            "state": "running",
            "ts": ts,
            "nodes": nodes,
            "group": "g",
        }
    )


def kinds(advice) -> list[tuple[str, str | None]]:
    return [(a.kind, a.node) for a in advice]


def test_top3_share_of_exclusions_is_concentration():
    """Exclusions 5, 4, 3, 1, 1 over five nodes: top 3 = 12 of 14 = 85.7 %."""
    state, params = LedgerState(), LedgerParams(min_exclusions=10)
    counts = {"n00": 5, "n01": 4, "n02": 3, "n03": 1, "n04": 1}
    out = []
    attempt = 0
    for node, n in counts.items():
        for _ in range(n):  # each time, the node is in one attempt and not in the next
            attempt += 1
            out += observe_job(state, params, running("j", [node, "n09"], attempt * H, attempt))
            attempt += 1
            out += observe_job(state, params, running("j", ["n09"], attempt * H, attempt))
    share, top = concentration(state, params)
    assert share == pytest.approx(12 / 14) and top == ["n00", "n01", "n02"]
    raised = [a for a in out if a.kind == "exclusions_concentrated"]
    assert len(raised) == 1 and raised[0].nodes == ("n00", "n01", "n02")
    # the 10th exclusion raised it: 5 + 4 + 1 of n02's (10 of 10 in the top 3)
    assert dict(raised[0].figures)["exclusions"] == 10


def test_no_concentration_below_min_exclusions_or_when_spread():
    state, params = LedgerState(), LedgerParams(min_exclusions=4, top_k=1)
    out = []
    for i, node in enumerate(NODES[:8]):  # one exclusion each: top 1 = 1/8
        out += observe_job(state, params, running(f"j{i}", [node, "n09"], H, 1))
        out += observe_job(state, params, running(f"j{i}", ["n09"], 2 * H, 2))
    assert concentration(state, params)[0] == pytest.approx(1 / 8)
    assert [a for a in out if a.kind == "exclusions_concentrated"] == []


def test_a_node_excluded_three_times_is_chronic_once():
    state, params = LedgerState(), LedgerParams()
    out = []
    for k in range(4):
        out += observe_job(state, params, running("j", ["n01", "n02"], (2 * k) * H, 2 * k + 1))
        out += observe_job(state, params, running("j", ["n02"], (2 * k + 1) * H, 2 * k + 2))
    assert kinds(out) == [("chronic_node", "n01")]
    assert dict(out[0].figures)["exclusions"] == 3


def test_application_xids_far_above_the_peers_flag_the_node():
    """XID 13: n00 6 times, n01 once, 8 more peers with none. n00's peer mean 1/9 < floor
    0.5: 6 > 5 x 0.5. n01: 1 < min_app_xids. XID 79 on n02 is not application-class."""
    state, params = LedgerState(), LedgerParams()
    changes = [xid("n00", 13, k * H) for k in range(6)] + [xid("n01", 13, H)]
    changes += [xid("n02", 79, H, "RESTART_BM") for _ in range(6)]
    out = step_ledger(state, params, "g", 6 * H, NODES, changes)
    assert kinds(out) == [("xid_above_peers", "n00")]
    figs = dict(out[0].figures)
    assert (figs["count"], figs["peers"]) == (6, 9)
    assert figs["peer_mean"] == pytest.approx(1 / 9)
    assert xid_counts(state)["n00"] == {13: 6}
    assert step_ledger(state, params, "g", 7 * H, NODES, []) == []  # said once


def test_peers_with_the_same_rate_do_not_flag():
    """Every node has XID 31 four times: peer mean 4, 4 < 5 x 4."""
    state, params = LedgerState(), LedgerParams()
    changes = [xid(n, 31, k * H) for n in NODES for k in range(4)]
    assert step_ledger(state, params, "g", 5 * H, NODES, changes) == []


def test_the_peer_flag_needs_the_ratio():
    """n00 has 9 XID 43, the 9 peers 2 each (mean 2): 9 < 5 x 2 at ratio 5, 9 > 4 x 2 at 4."""
    changes = [xid("n00", 43, k) for k in range(9)]
    changes += [xid(n, 43, k) for n in NODES[1:] for k in range(2)]
    assert step_ledger(LedgerState(), LedgerParams(), "g", H, NODES, changes) == []
    out = step_ledger(LedgerState(), LedgerParams(peer_ratio=4), "g", H, NODES, changes)
    assert kinds(out) == [("xid_above_peers", "n00")]


def test_counts_leave_the_window_and_reset_clears_them():
    state, params = LedgerState(), LedgerParams(window_s=2 * 86_400.0)
    step_ledger(state, params, "g", 0, NODES, [xid("n00", 13, 0), xid("n00", 31, 0)])
    assert xid_counts(state) == {"n00": {13: 1, 31: 1}}
    reset_counts(state, "n00", 13)
    assert xid_counts(state) == {"n00": {31: 1}}
    step_ledger(state, params, "g", 2 * DAY + 1, NODES, [])
    assert xid_counts(state) == {}


def test_a_flag_rises_again_after_it_cleared():
    state, params = LedgerState(), LedgerParams()
    changes = [xid("n00", 13, k) for k in range(3)]
    assert kinds(step_ledger(state, params, "g", H, NODES, changes)) == [("xid_above_peers", "n00")]
    reset_counts(state, "n00")
    assert step_ledger(state, params, "g", 2 * H, NODES, []) == []
    again = [xid("n00", 13, 2 * H + k) for k in range(3)]
    assert kinds(step_ledger(state, params, "g", 3 * H, NODES, again)) == [
        ("xid_above_peers", "n00")
    ]


def test_a_node_placed_back_soon_after_a_serious_xid_is_reported():
    state, params = LedgerState(), LedgerParams(return_window_s=3600)
    step_ledger(state, params, "g", H, NODES, [xid("n01", 79, H, "RESTART_BM")])
    step_ledger(state, params, "g", H, NODES, [xid("n02", 94, H, "RESTART_APP")])
    out = observe_job(state, params, running("j", ["n01", "n02", "n03"], H + 20 * 60_000))
    assert kinds(out) == [("returned_after_xid", "n01")]
    assert dict(out[0].figures)["minutes"] == pytest.approx(20)
    assert observe_job(state, params, running("k", ["n01"], H + 30 * 60_000)) == []  # once


def test_a_node_placed_back_after_the_return_window_is_not():
    state, params = LedgerState(), LedgerParams(return_window_s=3600)
    step_ledger(state, params, "g", H, NODES, [xid("n01", 79, H, "RESTART_BM")])
    assert observe_job(state, params, running("j", ["n01"], 2 * H + 1)) == []


def test_other_alerts_count_towards_chronic():
    state, params = LedgerState(), LedgerParams(chronic_alerts=3)
    dev = [
        AlertChange(NODE_DEVIATION, "n05", "g", "firing", "warning", 5.0, (), "", k, k, k)
        for k in range(3)
    ]
    assert kinds(step_ledger(state, params, "g", H, NODES, dev)) == [("chronic_node", "n05")]


def test_application_xids_do_not_make_a_node_chronic():
    """Regression (found by the retry_chains scenario): the node with daily XID 13 was called
    chronic too; application-class XIDs go to the peer comparison only."""
    state, params = LedgerState(), LedgerParams(chronic_alerts=3, min_app_xids=10)
    changes = [xid("n05", 13, k) for k in range(5)]
    assert step_ledger(state, params, "g", H, NODES, changes) == []
    serious = [xid("n06", 79, k, "RESTART_BM") for k in range(3)]
    assert kinds(step_ledger(state, params, "g", H, NODES, serious)) == [("chronic_node", "n06")]


def test_state_round_trips_through_json():
    state, params = LedgerState(), LedgerParams()
    step_ledger(state, params, "g", H, NODES, [xid("n00", 13, k) for k in range(4)])
    observe_job(state, params, running("j", ["n01", "n02"], H))
    observe_job(state, params, running("j", ["n02"], 2 * H, 2))
    back = LedgerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert back == state
    assert concentration(back, params) == concentration(state, params) == (1.0, ["n01"])


@pytest.mark.parametrize(
    "bad",
    [
        {"window_s": 0},
        {"top_k": 0},
        {"concentration_share": 1.0},
        {"peer_ratio": 0.5},
        {"app_xids": (0,)},
        {"return_min_action": "REBOOT"},
    ],
)
def test_bad_params_are_refused(bad):
    with pytest.raises(ValueError):
        LedgerParams(**bad)
