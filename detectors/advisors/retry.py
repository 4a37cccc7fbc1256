"""The retry advisor: for each failed attempt of a job, the next step and when.

Report 000's auto-retry chains (a fixed ~10 min delay) recovered 33.3 % of
chains against 12.5 % of manual restarts, but one chain failed 30 times in a
row: the same failure, retried under the same conditions. So the step follows
the failure's XID class (the catalog's action, or its escalation by
``detectors.xid.escalation``): ``retry`` (application-class), ``reset_gpu``
then retry (reset-class; a node reset once in the chain that fails again is
excluded instead), ``exclude_nodes`` and take a spare (reboot, support or an
operator workflow), or ``stop`` and page. Retries back off (10 → 20 → 40 min
by default); the same failure ``max_identical`` times in a row, or
``max_failures`` failures of any kind, stop the chain; so does a gang that the
pool left after exclusions cannot hold (retrying cannot schedule it).

A failure's XIDs are the scheduler's (:attr:`JobEvent.xids`) and those seen on
the attempt's nodes within ``xid_window_s`` before it (:func:`observe_xid`).
Every function updates the state in place and returns what it says.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from detectors.advisors.jobs import JobEvent
from detectors.checks import Checked, checked, each, integer, real
from detectors.errors import RulesError
from detectors.state_codec import JsonState
from detectors.vocabulary import Advice, Figure
from detectors.xid.actions import action_rule
from detectors.xid.catalog import XidCatalog

__all__ = [
    "ADVISOR",
    "STEPS",
    "RetryChains",
    "RetryParams",
    "RetryState",
    "RetryStats",
    "Step",
    "observe_xid",
    "retry_summary",
    "step_retry",
]

ADVISOR = "retry"
Step = Literal["retry", "reset_gpu", "exclude_nodes", "stop"]
STEPS: tuple[Step, ...] = ("retry", "reset_gpu", "exclude_nodes", "stop")  # least disruptive first
_RANK = {s: i for i, s in enumerate(STEPS)}
_ACTION = {
    "retry": "RETRY",
    "reset_gpu": "RESET_GPU_THEN_RETRY",
    "exclude_nodes": "EXCLUDE_AND_RETRY",
    "stop": "STOP_AND_PAGE",
}
# an attempt's events in lifecycle order: same-ms events apply in it, a repeat is dropped
_ORDER = {"running": 0, "training": 1, "failed": 2, "completed": 2, "cancelled": 2}
MAX_XIDS = 10_000  # recent XIDs kept per group, far above a window's worth


@dataclass(frozen=True)
class RetryParams(Checked):
    """Backoff, caps and the catalog action → step mapping (any other action excludes)."""

    base_delay_s: float = real(600.0, at_least=0)
    backoff_factor: float = real(2.0, at_least=1)
    max_delay_s: float = real(2400.0, at_least=0)
    max_identical: int = integer(3)  # the same failure this many times in a row: stop and page
    max_failures: int = integer(6)  # failures in a row of any kind (since the job last trained)
    # XIDs on the attempt's nodes this long before it failed
    xid_window_s: float = real(600.0, at_least=0)
    exclusion_s: float = real(86_400.0, at_least=0)  # an excluded node is out of the pool this long
    retry_actions: tuple[str, ...] = checked(("IGNORE", "RESTART_APP"), each(action_rule))
    reset_actions: tuple[str, ...] = checked(("RESET_GPU",), each(action_rule))
    stop_actions: tuple[str, ...] = checked((), each(action_rule))
    max_downtimes: int = integer(1000)  # downtimes kept for the medians
    # job names kept per group: the least recently heard of goes first
    max_chains: int = integer(10_000)

    def __post_init__(self) -> None:
        super().__post_init__()
        seen: set[str] = set()
        for name in ("retry_actions", "reset_actions", "stop_actions"):
            for action in getattr(self, name):
                if action in seen:
                    raise RulesError(f"{name}: {action} is mapped to two steps")
                seen.add(action)

    def delay_s(self, failures: int) -> float:
        """The wait before retry number ``failures`` (1 = after the first failure)."""
        return float(
            min(self.base_delay_s * self.backoff_factor ** (failures - 1), self.max_delay_s)
        )

    def step_for(self, action: str) -> Step:
        if action in self.retry_actions:
            return "retry"
        if action in self.reset_actions:
            return "reset_gpu"
        if action in self.stop_actions:
            return "stop"
        return "exclude_nodes"


@dataclass
class NodeXid(JsonState):
    node: str
    xid: int
    action: str
    ts: int


@dataclass
class Chain(JsonState):
    """One job name's attempts since it last trained."""

    attempt: int = 0
    trigger: str = "manual"  # who started the current attempt
    training: bool = False  # the current attempt has trained
    failures: int = 0  # failures in a row since the job last trained
    identical: int = 0  # of them, the same failure in a row
    signature: str | None = None
    reset_nodes: tuple[str, ...] = ()  # told to reset since the job last trained
    down_since: int | None = None  # a training attempt failed here; not trained since
    retrying: bool = False  # an automatic retry chain is open
    last: tuple[int, int, int] = (-1, 0, 0)  # (ts, attempt, state order) of the last applied


@dataclass
class RetryStats(JsonState):
    """Report 000's recovery figures: chains that recovered, manual sessions that trained,
    downtime from a training attempt's failure to training again."""

    chains: int = 0  # automatic retry chains opened (a failure, then an automatic retry)
    chains_recovered: int = 0  # of them, an automatic retry trained
    retries: int = 0  # automatic attempts in chains
    manual_sessions: int = 0
    manual_trained: int = 0
    downtime_auto_s: list[float] = field(default_factory=list)
    downtime_manual_s: list[float] = field(default_factory=list)
    advice: dict[str, int] = field(default_factory=dict)  # step -> times advised


@dataclass
class RetryState(JsonState):
    chains: dict[str, Chain] = field(default_factory=dict)
    xids: list[NodeXid] = field(default_factory=list)
    excluded: dict[str, int] = field(default_factory=dict)  # node -> when it was excluded
    stats: RetryStats = field(default_factory=RetryStats)


class RetryChains:
    """The retry advisor's state of every group: a job's chain outlives the group that
    scores its nodes (its frames stop while it restarts, and the group ends), so it is
    kept apart from the group's state, and persisted apart (the worker's ``retry-state``)."""

    def __init__(self, params: RetryParams, catalog: XidCatalog) -> None:
        self.params = params
        self.catalog = catalog
        self.states: dict[str, RetryState] = {}

    def __contains__(self, group: object) -> bool:
        return group in self.states

    def _of(self, group: str) -> RetryState:
        state = self.states.get(group)
        if state is None:
            state = self.states[group] = RetryState()
        return state

    def job_event(self, event: JobEvent) -> list[Advice]:
        """One job lifecycle event: a failed attempt gets its advice (``step_retry``)."""
        return step_retry(self._of(event.peer_group), self.params, self.catalog, event)

    def xid(self, group: str, node: str, xid: int, action: str, ts_ms: int) -> None:
        """An XID on ``node`` (with its action): a cause for a failure of its job soon."""
        observe_xid(self._of(group), self.params, node, xid, action, ts_ms)

    def figures(self, group: str) -> dict[str, Any]:
        """The group's chain success and downtimes (``retry_summary``)."""
        return retry_summary(self._of(group).stats)

    def snapshot(self, group: str) -> dict[str, Any]:
        return self._of(group).to_dict()

    def restore(self, group: str, snap: Mapping[str, Any]) -> None:
        self.states[group] = RetryState.from_dict(snap)

    def forget(self, group: str) -> None:
        self.states.pop(group, None)


def observe_xid(
    state: RetryState, params: RetryParams, node: str, xid: int, action: str, ts: int
) -> None:
    """An XID seen on ``node`` (with the action decided for it): a cause for a failure soon."""
    state.xids.append(NodeXid(node, xid, action, ts))
    horizon = max(x.ts for x in state.xids) - params.xid_window_s * 1000
    state.xids = [x for x in state.xids if x.ts >= horizon][-MAX_XIDS:]


def step_retry(
    state: RetryState, params: RetryParams, catalog: XidCatalog, event: JobEvent
) -> list[Advice]:
    """Apply one job event; a failed attempt gets one piece of advice."""
    chain = state.chains.get(event.name)
    if chain is None:
        if len(state.chains) >= params.max_chains:  # a job that never said it ended
            del state.chains[min(state.chains, key=lambda n: state.chains[n].last)]
        chain = state.chains[event.name] = Chain()
    key = (event.ts, event.attempt, _ORDER[event.state])
    if key <= chain.last:  # a redelivery, or older than what was applied
        return []
    chain.last = key
    stats = state.stats
    if event.state == "running":
        _started(state, chain, event)
    elif event.state == "training":
        _trained(stats, chain, event, params)
    elif event.state == "failed":
        return [_failed(state, params, catalog, chain, event)]
    else:  # completed or cancelled: the job is done, its chain with it
        del state.chains[event.name]
    return []


def _started(state: RetryState, chain: Chain, event: JobEvent) -> None:
    chain.attempt, chain.trigger, chain.training = event.attempt, event.started_by, False
    for node in event.nodes:  # the scheduler placed it again: no longer ours to hold out
        state.excluded.pop(node, None)
    if event.started_by == "manual":
        state.stats.manual_sessions += 1
        chain.retrying = False  # a person took over: the automatic chain did not recover
    elif chain.failures:
        if not chain.retrying:
            chain.retrying = True
            state.stats.chains += 1
        state.stats.retries += 1


def _trained(stats: RetryStats, chain: Chain, event: JobEvent, params: RetryParams) -> None:
    if chain.training:
        return
    chain.training = True
    if chain.down_since is not None:
        kept = stats.downtime_auto_s if chain.trigger == "auto" else stats.downtime_manual_s
        kept.append((event.ts - chain.down_since) / 1000.0)
        del kept[: -params.max_downtimes]
        chain.down_since = None
    if chain.trigger == "manual":
        stats.manual_trained += 1
    elif chain.retrying:
        stats.chains_recovered += 1
    chain.retrying = False
    chain.failures, chain.identical, chain.signature, chain.reset_nodes = 0, 0, None, ()


def _failed(
    state: RetryState, params: RetryParams, catalog: XidCatalog, chain: Chain, event: JobEvent
) -> Advice:
    if chain.training and chain.down_since is None:
        chain.down_since = event.ts
    chain.training = False
    causes = _causes(state, params, catalog, event)
    steps: dict[str, Step] = {}
    for cause in causes:
        node_step = params.step_for(cause.action)
        if node_step == "reset_gpu" and cause.node in chain.reset_nodes:
            node_step = "exclude_nodes"  # it was reset in this chain and failed again
        before = steps.get(cause.node)
        if before is None or _RANK[node_step] > _RANK[before]:
            steps[cause.node] = node_step
    step: Step = max(steps.values(), key=_RANK.__getitem__, default="retry")
    # application-class XIDs say nothing about which failure this is (any node may log one)
    codes = sorted({c.xid for c in causes if params.step_for(c.action) != "retry"})
    signature = f"{event.exit_reason or 'unknown'}|xid={','.join(map(str, codes))}"
    chain.identical = chain.identical + 1 if signature == chain.signature else 1
    chain.signature = signature
    chain.failures += 1

    horizon = event.ts - params.exclusion_s * 1000
    state.excluded = {n: t for n, t in state.excluded.items() if t > horizon}
    exclude = sorted(n for n, s in steps.items() if s in ("exclude_nodes", "stop"))
    for node in exclude:
        state.excluded[node] = event.ts
    gang = event.gang_size
    available = None
    if event.pool is not None:
        available = len(set(event.pool) - state.excluded.keys())

    why = "catalog" if step == "stop" else None
    if why is None and chain.identical >= params.max_identical:
        why = "identical_cap"
    elif why is None and chain.failures >= params.max_failures:
        why = "failure_cap"
    elif why is None and available is not None and available < gang:
        why = "gang_unschedulable"
    if why is not None:
        step = "stop"
    if step == "reset_gpu":
        reset = sorted(n for n, s in steps.items() if s == "reset_gpu")
        chain.reset_nodes = tuple(sorted({*chain.reset_nodes, *reset}))
    nodes = tuple(sorted(steps)) if step != "retry" else ()
    delay = None if step == "stop" else params.delay_s(chain.failures)
    state.stats.advice[step] = state.stats.advice.get(step, 0) + 1
    figures: dict[str, Figure] = {
        "job": event.name,
        "job_id": event.job_id,
        "attempt": event.attempt,
        "failures": chain.failures,
        "identical": chain.identical,
        "signature": signature,
        "xids": ",".join(f"{c.xid}@{c.node}:{c.action}" for c in causes) or None,
        "delay_s": delay,
        "gang": gang,
        "available": available,
        "excluded": ",".join(exclude) or None,
        "why": why,
    }
    return Advice(
        advisor=ADVISOR,
        kind=step,
        group=event.peer_group,
        bucket_ts=event.ts,
        summary=_summary(step, why, event, chain, delay, exclude, gang, available, signature),
        node=nodes[0] if len(nodes) == 1 else None,
        nodes=nodes,
        figures=tuple(sorted(figures.items())),
        action=_ACTION[step],
    )


def _causes(
    state: RetryState, params: RetryParams, catalog: XidCatalog, event: JobEvent
) -> list[NodeXid]:
    """The failure's XIDs: the scheduler's, and those seen on its nodes just before it."""
    out = {
        (x.node, x.xid): NodeXid(x.node, x.xid, catalog.lookup(x.xid, x.substatus).action, event.ts)
        for x in event.xids
    }
    nodes = set(event.nodes)
    since = event.ts - params.xid_window_s * 1000
    for x in state.xids:
        if x.node in nodes and since <= x.ts <= event.ts:
            out.setdefault((x.node, x.xid), x)
    return sorted(out.values(), key=lambda x: (x.node, x.xid))


def _summary(
    step: Step,
    why: str | None,
    event: JobEvent,
    chain: Chain,
    delay: float | None,
    exclude: Sequence[str],
    gang: int,
    available: int | None,
    signature: str,
) -> str:
    head = f"{event.name} attempt {event.attempt} failed ({signature}, failure {chain.failures})"
    wait = f"in {delay / 60:.0f} min" if delay is not None else ""
    if step == "retry":
        return f"{head}: retry {wait}"
    if step == "reset_gpu":
        return f"{head}: reset the GPUs of {', '.join(chain.reset_nodes)}, then retry {wait}"
    if step == "exclude_nodes":
        return f"{head}: exclude {', '.join(exclude)}, take spares and retry {wait}"
    because = {
        "catalog": "the catalog says stop",
        "identical_cap": f"the same failure {chain.identical} times in a row",
        "failure_cap": f"{chain.failures} failures in a row",
        "gang_unschedulable": f"the gang needs {gang} nodes and {available} are left",
    }[why or "catalog"]
    return f"{head}: stop retrying and page ({because})"


def retry_summary(stats: RetryStats) -> dict[str, Any]:
    """The figures report 000 gives: chain success, manual success, median downtimes."""

    def share(n: int, d: int) -> float | None:
        return n / d if d else None

    def median(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    return {
        "chains": stats.chains,
        "chains_recovered": stats.chains_recovered,
        "chain_success": share(stats.chains_recovered, stats.chains),
        "retries": stats.retries,
        "manual_sessions": stats.manual_sessions,
        "manual_trained": stats.manual_trained,
        "manual_success": share(stats.manual_trained, stats.manual_sessions),
        "median_downtime_auto_h": None
        if (m := median(stats.downtime_auto_s)) is None
        else m / 3600,
        "median_downtime_manual_h": None
        if (m := median(stats.downtime_manual_s)) is None
        else m / 3600,
        "advice": dict(sorted(stats.advice.items())),
    }
