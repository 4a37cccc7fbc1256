"""Checkpoint I/O, per group: every save and load the phase classifier saw, and where its NFS
requests spent their time.

A save is a run of ``save`` buckets (:mod:`detectors.phase`) plus the training bucket either
side when its GPUs dipped: a save straddling a bucket edge writes part of itself in a bucket
below the burst threshold. Its cost δ (Young/Daly's checkpoint time) is the compute it took:
each bucket's GPU-util dip below the group's training level, in bucket-seconds (the whole
run's length when GPU util is unknown, an upper bound). A load is a run of ``load``
buckets; training lost all of it.

Bytes are the phase's aggregate rates times the bucket; throughput is the mean rate over the
classifier's buckets (the source's "30-s mean": saves 40.1 GB/s, 16.0 % of 250 GB/s; loads
150.8 GB/s, 21.5 % of 700 GB/s). NFS per-request queue and response time: WRITE for saves,
READ for loads, the mean over the job's nodes of each node's per-request figure
(``nfs_*_queue_s`` / ``nfs_*_rtt_s``), weighted across buckets by bytes. A request waits
(queue) then travels (response): queue-dominated I/O (source: WRITE 2.03 s per request,
1.89 s queued, 93.1 %) is bounded by client concurrency, the transport backlog or the
server's write handling, not by the network's bandwidth — the advice says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from detectors.checks import Checked, is_finite, real
from detectors.phase import Phase
from detectors.state_codec import JsonState
from detectors.vocabulary import Advice

__all__ = [
    "ADVISOR",
    "CheckpointIoParams",
    "CheckpointIoState",
    "IoEvent",
    "IoStep",
    "RpcTimes",
    "step_checkpoint_io",
]

ADVISOR = "checkpoint_io"
EventKind = Literal["save", "load"]
# a bucket in which the job ran: its GPU util says what training looks like
_TRAINING_UTIL_FROM = 50.0


@dataclass(frozen=True)
class CheckpointIoParams(Checked):
    """``write_max_bytes_per_s`` / ``read_max_bytes_per_s``: the storage's maxima (source:
    250 / 700 GB/s). ``queue_dominated_share``: the queue's share of the request time from
    which I/O is queue-dominated. ``util_drop_floor``: GPU-util points below the training
    level that are noise, not a save. ``util_alpha``: a training bucket's weight in that
    level. ``repeat_s``: the same advice again at most this often. Feature names: the
    catalog's per-request NFS times."""

    write_max_bytes_per_s: float = real(250e9, above=0)
    read_max_bytes_per_s: float = real(700e9, above=0)
    queue_dominated_share: float = real(0.5, above=0, at_most=1)
    util_drop_floor: float = real(2.0, at_least=0, below=100)
    util_alpha: float = real(0.05, above=0, at_most=1)
    repeat_s: float = real(86_400.0, above=0)
    write_queue_feature: str = "nfs_write_queue_s"
    write_response_feature: str = "nfs_write_rtt_s"
    read_queue_feature: str = "nfs_read_queue_s"
    read_response_feature: str = "nfs_read_rtt_s"


@dataclass(frozen=True)
class RpcTimes(JsonState):
    """Seconds per NFS request: waiting to be sent (queue), then until the reply (response)."""

    queue_s: float
    response_s: float

    @property
    def request_s(self) -> float:
        return self.queue_s + self.response_s

    @property
    def queue_share(self) -> float:
        return self.queue_s / self.request_s if self.request_s > 0 else math.nan


@dataclass(frozen=True)
class IoEvent(JsonState):
    """One save or load. ``buckets``: the classifier's; ``seconds``: their length;
    ``lost_s``: training time it took (a save's δ, a load's whole length); ``bytes_per_s``:
    mean aggregate rate over its buckets, ``storage_share`` of the storage's maximum;
    ``interval_s``: since the previous save's start in the same run (None: first of a run,
    or a load); ``rpc``: per-request WRITE (save) / READ (load) times (None: not reported)."""

    kind: EventKind
    start_ts: int
    buckets: int
    seconds: float
    lost_s: float
    bytes: float
    bytes_per_s: float
    storage_share: float
    interval_s: float | None = None
    rpc: RpcTimes | None = None


@dataclass(frozen=True)
class _Open(JsonState):
    """An event still running: sums so far."""

    kind: EventKind
    start_ts: int
    buckets: int = 0
    edge_lost_s: float = 0.0  # the dip in the training buckets either side (a save's)
    lost_s: float = 0.0
    bytes: float = 0.0
    rate_sum: float = 0.0
    rated: int = 0  # buckets whose rate was known
    queue_sum: float = 0.0  # byte-weighted sums of the node-mean per-request times
    response_sum: float = 0.0
    rpc_weight: float = 0.0


@dataclass(frozen=True)
class _Edge(JsonState):
    """The previous bucket, when it was training: where a save may have begun."""

    ts: int
    lost_s: float
    bytes: float


@dataclass(frozen=True)
class CheckpointIoState(JsonState):
    """``train_util``: the group's training GPU util (EWMA; None before any training bucket);
    ``last_save_ts``: the start of this run's last save (None once the job stopped);
    ``said``: advice kind -> the bucket it was last given."""

    train_util: float | None = None
    edge: _Edge | None = None
    open: _Open | None = None
    last_save_ts: int | None = None
    last_save: IoEvent | None = None
    last_load: IoEvent | None = None
    said: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IoStep:
    state: CheckpointIoState
    closed: IoEvent | None = None  # the save or load that ended with this bucket
    advice: tuple[Advice, ...] = ()


def step_checkpoint_io(
    state: CheckpointIoState,
    params: CheckpointIoParams,
    *,
    group: str,
    bucket_ts: int,
    bucket_s: float,
    phase: Phase,
    frames: Mapping[str, Mapping[str, float]],
) -> IoStep:
    """One closed bucket: its ``phase`` and the job's nodes' ``frames`` (node -> features)."""
    lost = _dip_s(state.train_util, phase, params, bucket_s)
    here = _Edge(bucket_ts, lost, _bytes(phase, "save", bucket_s))
    kind = phase.name if phase.name in ("save", "load") else None
    opened, closed = state.open, None
    edge = here if phase.name == "training" else None  # where the next save may begin
    if opened is not None and opened.kind != kind:
        if opened.kind == "save" and phase.name == "training" and lost > 0:
            opened = _with_edge(opened, here)  # the save's tail
            edge = None
        closed = _close(opened, state.last_save_ts, params, bucket_s)
        opened = None
    if kind is not None:
        if opened is None:
            began = state.edge if kind == "save" and state.edge and state.edge.lost_s > 0 else None
            opened = _Open(kind, bucket_ts if began is None else began.ts)
            if began is not None:
                opened = _with_edge(opened, began)
        opened = _add(opened, phase, frames, params, lost, bucket_s)
    last_save_ts = state.last_save_ts
    if closed is not None and closed.kind == "save":
        last_save_ts = closed.start_ts
    if phase.name in ("idle", "load"):
        last_save_ts = None  # the job stopped: the next save starts a run
    state = replace(
        state,
        train_util=state.train_util if lost > 0 else _train_util(state.train_util, phase, params),
        edge=edge,
        open=opened,
        last_save_ts=last_save_ts,
    )
    advice: tuple[Advice, ...] = ()
    if closed is not None:
        if closed.kind == "save":
            state = replace(state, last_save=closed)
        else:
            state = replace(state, last_load=closed)
        state, advice = _advise(state, params, closed, group, bucket_ts)
    return IoStep(state, closed, advice)


def _dip_s(
    train_util: float | None, phase: Phase, params: CheckpointIoParams, bucket_s: float
) -> float:
    """Compute time a bucket lost to a stall: the GPU-util dip below the training level."""
    if phase.name not in ("save", "training"):
        return 0.0
    if phase.gpu_util is None or train_util is None:
        return bucket_s if phase.name == "save" else 0.0  # unknown: the whole bucket, at most
    drop = train_util - phase.gpu_util
    if drop <= params.util_drop_floor:
        return 0.0
    return bucket_s * min(drop / train_util, 1.0)


def _train_util(level: float | None, phase: Phase, params: CheckpointIoParams) -> float | None:
    """The level moves with training buckets that did not dip (a save's tail would drag it)."""
    util = phase.gpu_util
    if phase.name != "training" or util is None or util < _TRAINING_UTIL_FROM:
        return level
    if level is None:
        return util
    return level + params.util_alpha * (util - level)


def _bytes(phase: Phase, kind: EventKind, bucket_s: float) -> float:
    rate = phase.write_bytes_per_s if kind == "save" else phase.read_bytes_per_s
    return 0.0 if rate is None else rate * bucket_s


def _with_edge(opened: _Open, edge: _Edge) -> _Open:
    return replace(
        opened, edge_lost_s=opened.edge_lost_s + edge.lost_s, bytes=opened.bytes + edge.bytes
    )


def _add(
    opened: _Open,
    phase: Phase,
    frames: Mapping[str, Mapping[str, float]],
    params: CheckpointIoParams,
    lost: float,
    bucket_s: float,
) -> _Open:
    rate = phase.write_bytes_per_s if opened.kind == "save" else phase.read_bytes_per_s
    if opened.kind == "save":
        features = (params.write_queue_feature, params.write_response_feature)
    else:
        features = (params.read_queue_feature, params.read_response_feature)
    rpc = _node_mean_rpc(frames, *features)
    weight = 1.0 if rate is None else rate * bucket_s
    opened = replace(
        opened,
        buckets=opened.buckets + 1,
        lost_s=opened.lost_s + (lost if opened.kind == "save" else bucket_s),
        bytes=opened.bytes + (0.0 if rate is None else rate * bucket_s),
        rate_sum=opened.rate_sum + (0.0 if rate is None else rate),
        rated=opened.rated + (rate is not None),
    )
    if rpc is None or weight <= 0:
        return opened
    return replace(
        opened,
        queue_sum=opened.queue_sum + weight * rpc.queue_s,
        response_sum=opened.response_sum + weight * rpc.response_s,
        rpc_weight=opened.rpc_weight + weight,
    )


def _node_mean_rpc(
    frames: Mapping[str, Mapping[str, float]], queue_feature: str, response_feature: str
) -> RpcTimes | None:
    """The mean over nodes reporting both of their per-request queue and response times."""
    queues, responses = [], []
    for values in frames.values():
        q, r = values.get(queue_feature), values.get(response_feature)
        if q is not None and r is not None and is_finite(q) and is_finite(r):
            queues.append(float(q))
            responses.append(float(r))
    if not queues:
        return None
    return RpcTimes(sum(queues) / len(queues), sum(responses) / len(responses))


def _close(
    opened: _Open, last_save_ts: int | None, params: CheckpointIoParams, bucket_s: float
) -> IoEvent:
    rate = opened.rate_sum / opened.rated if opened.rated else math.nan
    top = params.write_max_bytes_per_s if opened.kind == "save" else params.read_max_bytes_per_s
    interval = None
    if opened.kind == "save" and last_save_ts is not None:
        interval = (opened.start_ts - last_save_ts) / 1000.0
    rpc = None
    if opened.rpc_weight > 0:
        w = opened.rpc_weight
        rpc = RpcTimes(opened.queue_sum / w, opened.response_sum / w)
    return IoEvent(
        kind=opened.kind,
        start_ts=opened.start_ts,
        buckets=opened.buckets,
        seconds=opened.buckets * bucket_s,
        lost_s=opened.lost_s + opened.edge_lost_s,
        bytes=opened.bytes,
        bytes_per_s=rate,
        storage_share=rate / top,
        interval_s=interval,
        rpc=rpc,
    )


def _advise(
    state: CheckpointIoState,
    params: CheckpointIoParams,
    event: IoEvent,
    group: str,
    bucket_ts: int,
) -> tuple[CheckpointIoState, tuple[Advice, ...]]:
    rpc = event.rpc
    if rpc is None or not rpc.queue_share >= params.queue_dominated_share:
        return state, ()
    kind = f"queue_dominated_{'write' if event.kind == 'save' else 'read'}"
    last = state.said.get(kind)
    if last is not None and bucket_ts - last < params.repeat_s * 1000:
        return state, ()
    op = "WRITE" if event.kind == "save" else "READ"
    top = params.write_max_bytes_per_s if event.kind == "save" else params.read_max_bytes_per_s
    what = "saves" if event.kind == "save" else "loads"
    summary = (
        f"Checkpoint {what} wait in the NFS client's RPC queue: {op} {_time(rpc.request_s)} "
        f"per request, {_time(rpc.queue_s)} ({rpc.queue_share:.1%}) queued, "
        f"{_time(rpc.response_s)} response, at {event.bytes_per_s / 1e9:.1f} GB/s "
        f"({event.storage_share:.1%} of {top / 1e9:.0f} GB/s). A faster network would not "
        "help: look at client concurrency (nconnect, slot table), the transport backlog and "
        "the server's handling."
    )
    advice = Advice(
        advisor=ADVISOR,
        kind=kind,
        group=group,
        bucket_ts=bucket_ts,
        summary=summary,
        figures=(
            ("bytes_per_s", event.bytes_per_s),
            ("event_start_ts", event.start_ts),
            ("queue_s", rpc.queue_s),
            ("queue_share", rpc.queue_share),
            ("request_s", rpc.request_s),
            ("response_s", rpc.response_s),
            ("storage_share", event.storage_share),
        ),
    )
    return replace(state, said={**state.said, kind: bucket_ts}), (advice,)


def _time(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.1f} ms"
