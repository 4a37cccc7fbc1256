"""A job lifecycle event from the scheduler: one attempt of a job started, trained, failed, ended.

The retry advisor and the node-health ledger read the same record. Its JSON
form (one object per event; docs/architecture.md, "Job lifecycle events")::

    {"job_id": "sess-7f3a", "name": "llm-42", "attempt": 3, "state": "failed",
     "ts": 1764547200000, "nodes": ["gpu001", "gpu002"], "exit_reason": "xid",
     "xids": [{"node": "gpu002", "xid": 79}], "trigger": "auto",
     "gang": 60, "pool": ["gpu001", "gpu002", "gpu063"], "group": "cluster-a"}

``name`` chains attempts (the retries of one job share it; ``job_id`` is the
attempt's own session). ``state``: ``running`` (the attempt holds its nodes),
``training`` (it made progress: the first step, or throughput seen), ``failed``,
``completed``, ``cancelled`` (stopped by a person). ``trigger`` says who started
the attempt (``auto``: the scheduler's retry; ``manual``: a person, the first
submission too; default: ``manual`` for attempt 1, else ``auto``). ``xids``
are XIDs the scheduler attributes to the failure; ``gang`` the nodes the job
needs at once (default: its node count); ``pool`` the nodes it could be placed
on now (its own and the spares; unknown when absent). ``group`` is the peer
group the job's nodes are scored in (default: ``name``).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from detectors.checks import check_name
from detectors.errors import InputError
from detectors.state_codec import OPTIONAL, JsonRecord, omit

__all__ = ["JOB_STATES", "JobEvent", "JobEventError", "JobState", "JobXid", "Trigger"]

JobState = Literal["running", "training", "failed", "completed", "cancelled"]
JOB_STATES: tuple[str, ...] = get_args(JobState)
Trigger = Literal["auto", "manual"]
MAX_NODES = 100_000  # a bound on one event, far above any gang


class JobEventError(InputError):
    """A job event that cannot be read (the reason says which field)."""


@dataclass(frozen=True)
class JobXid(JsonRecord):
    """An XID the scheduler attributes to a failed attempt."""

    node: str
    xid: int
    substatus: str | None = field(default=None, metadata=omit(operator.not_))


@dataclass(frozen=True)
class JobEvent(JsonRecord):
    job_id: str
    name: str
    attempt: int
    state: JobState
    ts: int  # epoch ms
    nodes: tuple[str, ...] = ()
    exit_reason: str | None = field(default=None, metadata=OPTIONAL)
    xids: tuple[JobXid, ...] = field(default=(), metadata=omit(operator.not_))
    trigger: Trigger | None = field(default=None, metadata=OPTIONAL)
    gang: int | None = field(default=None, metadata=OPTIONAL)
    pool: tuple[str, ...] | None = field(default=None, metadata=OPTIONAL)
    group: str | None = field(default=None, metadata=OPTIONAL)

    # to_dict: the module docstring's record, optional keys only when set; from_dict is the
    # parser of the scheduler's input (its own error, bounds and name checks).
    KEY_ORDER = (
        "job_id", "name", "attempt", "state", "ts", "nodes", "exit_reason", "xids", "trigger",
        "gang", "group", "pool",
    )  # fmt: skip

    @property
    def peer_group(self) -> str:
        return self.group or self.name

    @property
    def started_by(self) -> Trigger:
        if self.trigger is not None:
            return self.trigger
        return "manual" if self.attempt == 1 else "auto"

    @property
    def gang_size(self) -> int:
        return self.gang if self.gang is not None else len(self.nodes)

    @classmethod
    def from_dict(cls, data: object) -> JobEvent:
        """The event from its JSON object; :class:`JobEventError` naming the bad field."""
        if not isinstance(data, Mapping):
            raise JobEventError(f"an event is a JSON object, got {type(data).__name__}")
        state = data.get("state")
        if state not in JOB_STATES:
            raise JobEventError(f"state must be one of {list(JOB_STATES)}, got {state!r:.80}")
        trigger = data.get("trigger")
        if trigger not in ("auto", "manual", None):
            raise JobEventError(f"trigger must be 'auto' or 'manual', got {trigger!r:.80}")
        attempt = _int(data.get("attempt"), "attempt", low=1)
        ts = _int(data.get("ts"), "ts", low=0)
        gang = data.get("gang")
        xids = data.get("xids", [])
        if not isinstance(xids, list) or len(xids) > MAX_NODES:
            raise JobEventError("xids must be a list of {node, xid} objects")
        pool = data.get("pool")
        exit_reason = data.get("exit_reason")
        group = data.get("group")
        return cls(
            job_id=_name(data.get("job_id"), "job_id"),
            name=_name(data.get("name"), "name"),
            attempt=attempt,
            state=state,
            ts=ts,
            nodes=_names(data.get("nodes", []), "nodes"),
            exit_reason=None if exit_reason is None else _name(exit_reason, "exit_reason"),
            xids=tuple(_xid(x) for x in xids),
            trigger=trigger,
            gang=None if gang is None else _int(gang, "gang", low=1),
            pool=None if pool is None else _names(pool, "pool"),
            group=None if group is None else _name(group, "group"),
        )


def _name(value: object, what: str) -> str:
    return check_name(value, what, JobEventError)


def _names(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise JobEventError(f"{what} must be a list of node names")
    if len(value) > MAX_NODES:
        raise JobEventError(f"more than {MAX_NODES} {what} in one event")
    return tuple(_name(n, f"a node name in {what}") for n in value)


def _int(value: object, what: str, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 1 << 53:
        raise JobEventError(f"{what} must be an integer >= {low}, got {value!r:.80}")
    return value


def _xid(value: object) -> JobXid:
    if not isinstance(value, Mapping):
        raise JobEventError("an entry of xids must be an object {node, xid}")
    sub = value.get("substatus")
    return JobXid(
        node=_name(value.get("node"), "xids node"),
        xid=_int(value.get("xid"), "xids xid", low=1),
        substatus=None if sub is None else _name(sub, "xids substatus"),
    )
