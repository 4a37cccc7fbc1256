"""Who is a peer: a group's job population and the idle nodes beside it.

A peer group keyed by ``cluster`` (the default) holds every node that reports
with that label: the job's nodes *and* the spares and idle nodes beside them
(the source cluster: 63 nodes, 60 in the job, 3 spares). An idle spare's
interrupts, processes and GPU utilisation are a fraction of a training node's;
scored as a peer it looks collapsed at first sight. So each group keeps two
populations:

* **job** -- nodes that have been busy (worst-GPU utilisation at least
  ``busy_level``) with the others; they are scored against each other;
* **idle** -- nodes seen only idle: reported (composition), never scored and
  never paged. XIDs and GPU health are judged per GPU elsewhere and still page.

A *collapse* is a change: a job node that goes idle stays in the job
population, so its peers' median convicts it at once. It leaves the job only
when it stays idle for ``release_buckets`` while the job runs on without it
(at least ``running_share`` of the job busy: it was excluded and replaced),
and its node alerts resolve as it leaves. While the whole job is idle (the
job died, a restart load) nobody is released: that is the group-shift guard's
case. An idle node that turns busy joins the job at once, without a page (a
spare taken in after a failure). Membership is sticky through silence and
through buckets that lack the activity feature (dcgm-exporter down is an
exporter gap of a job node, not a change of population); a node seen for the
first time without it is a job node, as before populations existed.

Roles. A job has roles (pipeline stages, data-loader or storage nodes, node
pools); where the frames carry one (``role_labels``), each role of at least
``min_peers`` reporting nodes is its own peer population (:func:`role_peer_stats`):
its nodes' z and medians come from the role alone, so a role that always
differs from the rest is no one's fault. Smaller roles, and nodes without a
role, are compared with the whole job.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from detectors.arrays import FloatArray
from detectors.checks import Checked, integer, real, text
from detectors.peer import PeerStats, peer_zscores
from detectors.state_codec import SORTED_KEYS, JsonState

__all__ = [
    "Composition",
    "PopulationParams",
    "Populations",
    "role_peer_stats",
    "step_populations",
]


@dataclass(frozen=True)
class PopulationParams(Checked):
    """``activity_feature`` (a frame feature; worst-GPU utilisation, %), ``busy_level`` (busy at
    or above it), ``release_buckets`` (idle buckets while the job runs on before a job node
    leaves it: 120 = 1 h), ``running_share`` (share of the job busy for "runs on")."""

    activity_feature: str = text("gpu_util")
    busy_level: float = real(50.0, above=0)
    release_buckets: int = integer(120)
    running_share: float = real(0.5, above=0, at_most=1)


@dataclass(frozen=True)
class Composition:
    """A group's make-up after one bucket: job nodes (busy now or not) and idle nodes."""

    job: int
    busy: int
    idle: int

    def describe(self) -> str:
        return f"{self.job} job nodes ({self.busy} busy), {self.idle} idle"


@dataclass(frozen=True)
class Populations(JsonState):
    """The job and idle populations of one group; ``idle_streak``: job nodes' idle buckets
    while the job ran on (only nonzero entries)."""

    job: frozenset[str] = frozenset()
    idle: frozenset[str] = frozenset()
    idle_streak: Mapping[str, int] = field(default_factory=dict, metadata=SORTED_KEYS)

    def restored(self) -> Populations:
        """A node in both is a job node; streaks only of job nodes, only nonzero."""
        job = self.job
        streak = {n: k for n, k in self.idle_streak.items() if n in job and k > 0}
        return Populations(job, self.idle - job, streak)


def step_populations(
    prior: Populations,
    frames: Mapping[str, Mapping[str, float]],
    members: Iterable[str],
    params: PopulationParams,
    known: Collection[str] = (),
) -> tuple[Populations, Composition]:
    """One bucket: place every member in the job or idle population (nodes outside
    ``members`` are forgotten).

    ``frames`` are the bucket's frames, ``members`` the group's expected nodes,
    ``known`` nodes the group's detectors already hold state for (open alerts,
    learned baselines): seen for the first time after a restore, they are job
    nodes whatever they do now, so a collapsed culprit is not mistaken for a
    spare.
    """
    nodes = sorted(set(members))
    busy: dict[str, bool | None] = {}
    for node in nodes:
        value = frames.get(node, {}).get(params.activity_feature)
        busy[node] = (
            None if value is None or not math.isfinite(value) else (value >= params.busy_level)
        )
    job = {n for n in nodes if n in prior.job}
    idle = {n for n in nodes if n in prior.idle}
    for node in nodes:
        if node in job or node in idle:
            continue
        if busy[node] is False and node not in known:
            idle.add(node)
        else:
            job.add(node)
    joining = {n for n in idle if busy[n]}
    job |= joining
    idle -= joining

    busy_job = sum(1 for n in job if busy[n])
    running = bool(job) and busy_job >= params.running_share * len(job)
    streak: dict[str, int] = {}
    for node in sorted(job):
        kept = prior.idle_streak.get(node, 0)
        if busy[node] is False and running:
            streak[node] = kept + 1
        elif kept and not busy[node]:
            # silent, no activity feature, or the whole job paused (a save): no evidence
            streak[node] = kept
    released = {n for n, k in streak.items() if k >= params.release_buckets}
    job -= released
    idle |= released
    for node in released:
        del streak[node]
    populations = Populations(frozenset(job), frozenset(idle), streak)
    return populations, Composition(len(job), sum(1 for n in job if busy[n]), len(idle))


def role_peer_stats(
    values: FloatArray,
    nodes: Sequence[str],
    roles: Mapping[str, str],
    job: PeerStats,
    abs_floor: FloatArray,
    rel_floor: FloatArray,
    min_peers: int,
) -> tuple[FloatArray, FloatArray]:
    """Each node's z and peer median (nodes x features) against its role where the role is a
    population of its own (``min_peers`` or more nodes), else against the whole ``job``."""
    z = job.z.copy()
    median = np.broadcast_to(job.median, z.shape).copy()
    rows_of: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        role = roles.get(node)
        if role:
            rows_of.setdefault(role, []).append(i)
    for rows in rows_of.values():
        if len(rows) < min_peers or len(rows) == len(nodes):
            continue
        own = peer_zscores(values[rows], abs_floor, rel_floor, min_peers)
        # a feature too sparse inside the role keeps the job's reference
        cols = np.isfinite(own.median)
        idx = np.ix_(np.asarray(rows, dtype=np.intp), np.flatnonzero(cols))
        z[idx] = own.z[:, cols]
        median[idx] = np.broadcast_to(own.median[cols], (len(rows), int(cols.sum())))
    return z, median
