"""Weeks of one gang-scheduled job's attempts, failures and retries, with their ground truth.

Report 000's cluster in miniature: 63 nodes, a 60-node job, 3 spares, a failure
every ``mtbf_h`` hours of training (compressed from its 56.2 h so eight weeks
hold ~100). A failure's hidden cause says what should follow it:

* ``app`` — an application-class XID (94, 31, 43) or a transient NCCL error:
  the next attempt trains; truth ``retry``;
* ``reset`` — a reset-class XID (145, 149, 119) on one node: truth
  ``reset_gpu``; a reset fails to fix it with ``p_reset_fails``, and the same
  XID on the same node then means ``exclude_nodes``;
* ``hardware`` — XID 79: the node goes to repair for days; ``exclude_nodes``;
* ``loop`` — a persistent NCCL fault for hours: every attempt fails the same
  way; ``retry`` until the ``max_identical``-th identical failure, then ``stop``;
* ``outage`` — licences lapse on 4 nodes for hours: the gang cannot be placed;
  ``stop``.

Any failure that leaves fewer than ``gang`` healthy nodes is ``stop``, and so
is the ``max_failures``-th failure in a row. Three flaky nodes take most
node faults (the report's top 3 took over half of the exclusions), one node
raises application-class XID 13 far more often than its peers, and the
first XID 79 node reboots in 5 minutes and is placed straight back.

The scheduler here is the report's (a retry ~10 min after each failure, up
to ``max_retries``, nodes out while in repair; then a person restarts the
job); the advisor runs beside it and is scored against the truth:
``python -m streams.lab.simulator.retry_chains --seed 1``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detectors.advisors.jobs import JobEvent
from detectors.advisors.ledger import (
    LedgerParams,
    LedgerState,
    concentration,
    observe_job,
    step_ledger,
)
from detectors.advisors.retry import RetryParams, RetryState, observe_xid, retry_summary, step_retry
from detectors.families import XID_ALERT
from detectors.vocabulary import Advice, AlertChange
from detectors.xid.catalog import XidCatalog
from streams.catalog import load_xid_catalog

__all__ = ["ChainScenario", "ChainTruth", "XidSeen", "generate", "replay"]

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
START_MS = 1_764_547_200_000  # 2025-12-01 00:00 UTC
PROFILE = "report"  # the report's XID → action mapping
CAUSES = ("app", "reset", "hardware", "loop", "outage")
APP_XIDS = (94, 31, 43)
RESET_XIDS = (145, 149, 119)


@dataclass(frozen=True)
class XidSeen:
    """An XID peerwatch saw on a node (kernel log or DCGM), with the catalog's action."""

    node: str
    xid: int
    action: str
    ts: int


@dataclass
class ChainTruth:
    steps: dict[str, str] = field(default_factory=dict)  # failed attempt's job_id -> step
    causes: dict[str, str] = field(default_factory=dict)  # failed attempt's job_id -> cause
    chains: int = 0
    chains_recovered: int = 0
    manual_sessions: int = 0
    manual_trained: int = 0
    downtime_auto_h: list[float] = field(default_factory=list)
    downtime_manual_h: list[float] = field(default_factory=list)
    exclusions: list[tuple[str, int]] = field(default_factory=list)  # (node, when)
    flaky: tuple[str, ...] = ()
    app_xid_node: str = ""
    returned: tuple[str, ...] = ()  # nodes placed back right after a serious XID


@dataclass
class ChainScenario:
    inputs: list[JobEvent | XidSeen]  # in time order
    truth: ChainTruth
    nodes: tuple[str, ...]


@dataclass
class _Sim:
    rng: np.random.Generator
    nodes: tuple[str, ...]
    gang: int
    retry: RetryParams
    max_retries: int
    out: list[JobEvent | XidSeen] = field(default_factory=list)
    truth: ChainTruth = field(default_factory=ChainTruth)
    down_until: dict[str, int] = field(default_factory=dict)
    licence_until: int = 0
    attempt: int = 0
    job_nodes: list[str] = field(default_factory=list)

    def up(self, t: int) -> list[str]:
        lapsed = set(self.nodes[-4:]) if t < self.licence_until else set()
        return [n for n in self.nodes if self.down_until.get(n, 0) <= t and n not in lapsed]

    def event(self, state: str, t: int, **kw: Any) -> JobEvent:
        data = {"job_id": f"solar-{self.attempt}", "name": "solar", "attempt": self.attempt}
        ev = JobEvent.from_dict({**data, "state": state, "ts": t, **kw})
        self.out.append(ev)
        return ev

    def xid(self, node: str, code: int, t: int, *, scheduler_knows: bool) -> list[dict[str, Any]]:
        action = _catalog().lookup(code).action
        self.out.append(XidSeen(node, code, action, t - int(self.rng.integers(1, 4)) * MIN))
        return [{"node": node, "xid": code}] if scheduler_knows else []


def generate(
    seed: int = 1,
    days: float = 56.0,
    *,
    n_nodes: int = 63,
    gang: int = 60,
    mtbf_h: float = 10.0,
    p_reset_fails: float = 0.4,
    max_retries: int = 30,
    retry: RetryParams | None = None,
) -> ChainScenario:
    """The scenario for ``seed``: its inputs in time order and their truth."""
    rng = np.random.default_rng(seed)
    nodes = tuple(f"gpu{i:03d}" for i in range(n_nodes))
    picks = rng.choice(n_nodes - 4, size=4, replace=False)  # never a licence-lapsing node
    flaky = tuple(sorted(nodes[i] for i in picks[:3]))
    app_node = nodes[picks[3]]
    sim = _Sim(rng, nodes, gang, retry or RetryParams(), max_retries)
    sim.truth.flaky, sim.truth.app_xid_node = flaky, app_node
    end = START_MS + int(days * DAY)
    _background_xids(sim, app_node, START_MS, end)

    t, trigger = START_MS, "manual"
    sim.job_nodes = list(sim.up(t)[:gang])
    failures = identical = 0
    signature: str | None = None
    reset_nodes: set[str] = set()
    down_since: int | None = None
    chain_open = quick_return_done = False
    loop_until = 0
    pending: tuple[str, int] | None = None  # a reset that did not fix (node, XID)
    retries = 0
    fail_nodes: tuple[str, ...] = ()  # the failure's culprit node, if it has one
    while t < end:
        sim.attempt += 1
        pool = sim.up(t)
        keep = [n for n in sim.job_nodes if n in pool]
        spares = [n for n in pool if n not in keep]
        placed = sorted(keep + spares[: gang - len(keep)])
        if len(placed) < gang:  # cannot be scheduled: the attempt fails at once
            ev = sim.event("failed", t, nodes=[], exit_reason="unschedulable", pool=pool, gang=gang)
            cause, step, fail_nodes = "outage", "stop", ()
            sig = "unschedulable|xid="
        else:
            if trigger == "manual":
                sim.truth.manual_sessions += 1
                chain_open = False
            elif not chain_open:
                chain_open = True
                sim.truth.chains += 1
            for node in sorted(set(sim.job_nodes) - set(placed)):
                sim.truth.exclusions.append((node, t))
            sim.job_nodes = placed
            sim.event("running", t, nodes=placed, trigger=trigger, pool=pool, gang=gang)
            init = t + int(rng.integers(3, 8)) * MIN
            if t < loop_until:
                ev = sim.event("failed", init, nodes=placed, exit_reason="nccl_timeout", pool=pool)
                cause, step, fail_nodes, sig = "loop", "retry", (), "nccl_timeout|xid="
            elif pending is not None and pending[0] in placed:
                node, code = pending
                xids = sim.xid(node, code, init, scheduler_knows=bool(rng.random() < 0.5))
                ev = sim.event(
                    "failed", init, nodes=placed, exit_reason="xid", xids=xids, pool=pool
                )
                cause, step, fail_nodes = "reset", "exclude_nodes", (node,)
                sig = f"xid|xid={code}"
                sim.down_until[node] = init + int(rng.uniform(1, 3) * DAY)
                pending = None
            else:
                pending = None
                trained = t + int(rng.uniform(25, 35) * MIN)  # the restart load
                sim.event("training", trained, nodes=placed)
                if down_since is not None:
                    hours = (trained - down_since) / HOUR
                    kept = (
                        sim.truth.downtime_manual_h
                        if trigger == "manual"
                        else (sim.truth.downtime_auto_h)
                    )
                    kept.append(hours)
                    down_since = None
                if trigger == "manual":
                    sim.truth.manual_trained += 1
                elif chain_open:
                    sim.truth.chains_recovered += 1
                chain_open = False
                failures, identical, signature, reset_nodes, retries = 0, 0, None, set(), 0
                t = trained + int(rng.exponential(mtbf_h) * HOUR)
                if t >= end:
                    break
                down_since = t
                cause = str(rng.choice(CAUSES, p=[0.4, 0.25, 0.2, 0.1, 0.05]))
                node = _victim(rng, placed, flaky)
                code, fail_nodes = 0, (node,)
                if cause == "app":  # the job's fault: any node may log it
                    code = int(rng.choice(APP_XIDS)) if rng.random() < 0.7 else 0
                    node, step, fail_nodes = str(rng.choice(placed)), "retry", ()
                elif cause == "reset":
                    code, step = int(rng.choice(RESET_XIDS)), "reset_gpu"
                    if rng.random() < p_reset_fails:
                        pending = (node, code)
                elif cause == "hardware":
                    code, step = 79, "exclude_nodes"
                    quick = not quick_return_done and node not in flaky
                    quick_return_done |= quick
                    repair = 5 * MIN if quick else int(rng.uniform(1, 4) * DAY)
                    sim.down_until[node] = t + repair
                    if quick:
                        sim.truth.returned = (*sim.truth.returned, node)
                elif cause == "loop":
                    loop_until = t + int(rng.uniform(1, 6) * HOUR)
                    step, fail_nodes = "retry", ()
                else:  # outage: four nodes' licences lapse
                    sim.licence_until = t + int(rng.uniform(3, 9) * HOUR)
                    step, fail_nodes = "retry", ()
                xids = (
                    sim.xid(node, code, t, scheduler_knows=bool(rng.random() < 0.5)) if code else []
                )
                reason = "xid" if code else "nccl_timeout"
                ev = sim.event(
                    "failed", t, nodes=placed, exit_reason=reason, xids=xids, pool=sim.up(t - 1)
                )
                sig = f"{reason}|xid={code if step != 'retry' else ''}"  # app XIDs: the job's
        # the truth for this failure, by the policy's rules, from what the scenario knows
        identical = identical + 1 if sig == signature else 1
        signature = sig
        failures += 1
        if step == "reset_gpu" and reset_nodes.issuperset(fail_nodes):
            step = "exclude_nodes"  # reset once in this chain, failed again
        if step == "reset_gpu":
            reset_nodes.update(fail_nodes)
        left = set(ev.pool or ()) - (set(fail_nodes) if step == "exclude_nodes" else set())
        if (
            identical >= sim.retry.max_identical
            or failures >= sim.retry.max_failures
            or len(left) < gang
        ):
            step = "stop"
        sim.truth.steps[ev.job_id], sim.truth.causes[ev.job_id] = step, cause
        # the report's scheduler: retry in ~10 min, a person after max_retries
        retries += 1
        if retries < max_retries:
            t, trigger = ev.ts + int(rng.integers(10, 12)) * MIN, "auto"
        else:
            fixed = max(loop_until, sim.licence_until, ev.ts)
            t, trigger, retries = fixed + int(rng.uniform(0.5, 7) * HOUR), "manual", 0
    inputs = sorted(sim.out, key=lambda x: (x.ts, 0 if isinstance(x, XidSeen) else 1))
    return ChainScenario(inputs, sim.truth, nodes)


@functools.cache
def _catalog() -> XidCatalog:
    return load_xid_catalog(PROFILE)


def _victim(rng: np.random.Generator, placed: Sequence[str], flaky: Sequence[str]) -> str:
    """The node a node fault hits: a flaky one (in the job) four times in five."""
    candidates = [n for n in flaky if n in placed]
    if candidates and rng.random() < 0.8:
        return str(rng.choice(candidates))
    return str(rng.choice(list(placed)))


def _background_xids(sim: _Sim, app_node: str, start: int, end: int) -> None:
    """Application-class XID 13 on every node now and then, and on ``app_node`` daily."""
    for node in sim.nodes:
        per_day = 0.7 if node == app_node else 1 / 120
        t = start
        while (t := t + int(sim.rng.exponential(1 / per_day) * DAY)) < end:
            sim.out.append(XidSeen(node, 13, "RESTART_APP", t))


# --- the advisors on it ---------------------------------------------------------------------


@dataclass
class ChainOutcome:
    advice: list[Advice]
    steps: dict[str, str]  # failed attempt's job_id -> advised step
    retry: dict[str, Any]
    ledger: LedgerState
    ledger_params: LedgerParams


def replay(
    scenario: ChainScenario,
    retry: RetryParams | None = None,
    ledger: LedgerParams | None = None,
) -> ChainOutcome:
    """Both advisors over the scenario's inputs, in order (the live pipeline's calls)."""
    catalog = _catalog()
    rp, lp = retry or RetryParams(), ledger or LedgerParams()
    rs, ls = RetryState(), LedgerState()
    advice: list[Advice] = []
    steps: dict[str, str] = {}
    for item in scenario.inputs:
        if isinstance(item, XidSeen):
            observe_xid(rs, rp, item.node, item.xid, item.action, item.ts)
            change = AlertChange(
                XID_ALERT, item.node, "solar", "firing", "warning", float(item.xid), (), "",
                item.ts, item.ts, item.ts, action=item.action,
            )  # fmt: skip
            advice += step_ledger(ls, lp, "solar", item.ts, scenario.nodes, [change])
            continue
        said = step_retry(rs, rp, catalog, item)
        for a in said:
            steps[item.job_id] = a.kind
        advice += said + observe_job(ls, lp, item)
    return ChainOutcome(advice, steps, retry_summary(rs.stats), ls, lp)


def compare(scenario: ChainScenario, outcome: ChainOutcome) -> dict[str, Any]:
    """The advisors' figures next to the truth."""
    truth = scenario.truth
    matched = sum(outcome.steps.get(j) == s for j, s in truth.steps.items())
    share, top = concentration(outcome.ledger, outcome.ledger_params)
    last = max(x.ts for x in scenario.inputs)
    since = last - outcome.ledger_params.window_s * 1000
    window = Counter(n for n, ts in truth.exclusions if ts > since)
    whole = Counter(n for n, _ in truth.exclusions)
    flagged = {k: sorted({a.node or "" for a in outcome.advice if a.kind == k}) for k in _FLAGS}

    def median(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 2) if xs else None

    r = outcome.retry
    return {
        "failed_attempts": len(truth.steps),
        "steps_matched": matched,
        "steps_truth": dict(Counter(truth.steps.values())),
        "steps_advised": dict(Counter(outcome.steps.values())),
        "mismatches": {
            j: (s, outcome.steps.get(j))
            for j, s in truth.steps.items()
            if outcome.steps.get(j) != s
        },
        "chains": (r["chains"], truth.chains),
        "chains_recovered": (r["chains_recovered"], truth.chains_recovered),
        "manual_sessions": (r["manual_sessions"], truth.manual_sessions),
        "manual_trained": (r["manual_trained"], truth.manual_trained),
        "median_downtime_auto_h": (
            _round(r["median_downtime_auto_h"]),
            median(truth.downtime_auto_h),
        ),
        "median_downtime_manual_h": (
            _round(r["median_downtime_manual_h"]),
            median(truth.downtime_manual_h),
        ),
        "exclusions_last_window": (
            sum(len(n.exclusions) for n in outcome.ledger.nodes.values()),
            window.total(),
        ),
        "top3_share_last_window": (_round(share), _round(_top_share(window))),
        "top3_last_window": (top, _top(window)),
        "exclusions_whole_run": whole.total(),
        "top3_share_whole_run": _round(_top_share(whole)),
        "chronic_nodes": (flagged["chronic_node"], sorted(truth.flaky)),
        "xid_above_peers": (flagged["xid_above_peers"], [truth.app_xid_node]),
        "returned_after_xid": (flagged["returned_after_xid"], sorted(truth.returned)),
    }


_FLAGS = ("chronic_node", "xid_above_peers", "returned_after_xid")


def _top(counts: Counter[str], k: int = 3) -> list[str]:
    return sorted(counts, key=lambda n: (-counts[n], n))[:k]  # ties by name, as the ledger


def _top_share(counts: Counter[str], k: int = 3) -> float | None:
    total = counts.total()
    return sum(counts[n] for n in _top(counts, k)) / total if total else None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=float, default=56.0)
    args = parser.parse_args(argv)
    scenario = generate(args.seed, args.days)
    print(json.dumps(compare(scenario, replay(scenario)), indent=1))


if __name__ == "__main__":
    main()
