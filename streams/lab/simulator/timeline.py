"""The training job's life on the simulated cluster: who runs it, when it saves, dies, restarts.

``plan_job`` turns a ``ClusterConfig`` into a ``JobPlan``: a list of epochs
(one per run of the job). An epoch starts on a set of member nodes (in rank
order), loads its checkpoint for ``restart_load_s`` (not the first epoch: the
simulation opens mid-training), trains with synchronised checkpoint saves, and
ends when a job-stopping fault's XID (or its stop, for a fault without one) is
one bucket old. After ``restart_delay_s`` (or the fault's own delay, e.g. a
planned restart's) the next epoch starts; nodes that a fault excludes are
replaced in place by the first healthy spare (by host order), or dropped when
none is left.

Checkpoint saves are drawn per epoch from their own seeded stream, lazily, so
an endless simulation needs no horizon: intervals are log-normal around
``checkpoint_interval_s`` and durations uniform in ``save_duration_s``. The
first save of a (re)started job comes one interval after training begins,
unless ``first_save_s`` places it in the first epoch (the simulation opens
mid-training, anywhere in the save cycle) or ``restart_first_save_s`` after a
restart load (frameworks that save right after resuming).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from streams.lab.simulator.faults import (
    CHECKPOINT_SAVE,
    JOB_DEATH,
    RESTART_LOAD,
    SPARE_JOINED,
    Fault,
    GroundTruth,
)

if TYPE_CHECKING:
    from streams.lab.simulator.config import ClusterConfig

_CHECKPOINT_STREAM = 0xC4E  # seed-sequence key that keeps save draws apart from other streams


@dataclass(frozen=True)
class JobEpoch:
    """One run of the job, from (re)start to death."""

    index: int
    members: tuple[int, ...]  # node indices in rank order
    start_ms: int  # processes start (restart)
    train_ms: int  # checkpoint loaded, training begins
    end_ms: int | None  # the job died (None: runs on)
    cause: Fault | None = None

    def running_at(self, t_ms: int) -> bool:
        return self.start_ms <= t_ms and (self.end_ms is None or t_ms < self.end_ms)


class _SaveSchedule:
    """An epoch's checkpoint saves, drawn on demand: parallel lists of start and end (ms)."""

    def __init__(self, config: ClusterConfig, epoch: JobEpoch):
        self._rng = np.random.default_rng((config.seed, _CHECKPOINT_STREAM, epoch.index))
        self._median_ms = config.checkpoint_interval_s * 1000.0
        self._sigma = config.checkpoint_jitter
        self._duration_ms = (config.save_duration_s[0] * 1000.0, config.save_duration_s[1] * 1000.0)
        self._end_ms = epoch.end_ms
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.durations: list[int] = []
        first = config.first_save_s if epoch.index == 0 else config.restart_first_save_s
        self._next_ms = epoch.train_ms + (
            self._interval_ms() if first is None else int(first * 1000)
        )

    def _interval_ms(self) -> int:
        return int(self._median_ms * float(np.exp(self._sigma * self._rng.standard_normal())))

    def extend_to(self, t_ms: int) -> None:
        """Draw saves until one starts at or after ``t_ms`` (or the epoch has ended)."""
        while self._next_ms < t_ms and (self._end_ms is None or self._next_ms < self._end_ms):
            start = self._next_ms
            duration = int(self._rng.uniform(*self._duration_ms))
            end = start + duration if self._end_ms is None else min(start + duration, self._end_ms)
            self.starts.append(start)
            self.ends.append(end)
            self.durations.append(duration)
            self._next_ms = start + max(self._interval_ms(), duration)


@dataclass(frozen=True)
class SaveOverlap:
    """How much of a time window a checkpoint save covers."""

    stalled_ms: int  # time of the window spent saving
    save_share: float  # fraction of one save's data written in the window


class JobPlan:
    """The job's epochs and their checkpoint saves for one ``ClusterConfig``."""

    def __init__(self, config: ClusterConfig, epochs: list[JobEpoch]):
        self.config = config
        self.epochs = tuple(epochs)
        self._starts = [e.start_ms for e in epochs]
        self._saves = [_SaveSchedule(config, e) for e in epochs]

    def epoch_at(self, t_ms: int) -> JobEpoch:
        """The latest epoch that started at or before ``t_ms`` (it may have died since)."""
        i = bisect_right(self._starts, t_ms) - 1
        if i < 0:
            raise ValueError(f"{t_ms} is before the simulation starts ({self._starts[0]})")
        return self.epochs[i]

    def running_at(self, t_ms: int) -> JobEpoch | None:
        """The epoch running at ``t_ms``; None while the job is down."""
        epoch = self.epoch_at(t_ms)
        return epoch if epoch.running_at(t_ms) else None

    def members_at(self, t_ms: int) -> tuple[str, ...]:
        """Hosts running the job at ``t_ms`` (empty while it is down)."""
        epoch = self.running_at(t_ms)
        hosts = self.config.hosts
        return () if epoch is None else tuple(hosts[i] for i in epoch.members)

    def saves(self, epoch: JobEpoch, until_ms: int) -> list[tuple[int, int]]:
        """The epoch's saves that start before ``until_ms``, as (start_ms, end_ms)."""
        schedule = self._saves[epoch.index]
        schedule.extend_to(until_ms)
        n = bisect_left(schedule.starts, until_ms)
        return list(zip(schedule.starts[:n], schedule.ends[:n], strict=True))

    def save_overlap(self, epoch: JobEpoch, begin_ms: int, end_ms: int) -> SaveOverlap:
        """How the epoch's saves cover the window ``[begin_ms, end_ms)``."""
        schedule = self._saves[epoch.index]
        schedule.extend_to(end_ms)
        stalled = 0
        share = 0.0
        i = bisect_left(schedule.starts, end_ms) - 1
        while i >= 0 and schedule.ends[i] > begin_ms:
            covered = min(schedule.ends[i], end_ms) - max(schedule.starts[i], begin_ms)
            stalled += covered
            share += covered / schedule.durations[i]
            i -= 1
        return SaveOverlap(stalled, share)

    def ground_truth(self, end_ms: int | None = None) -> list[GroundTruth]:
        """Cluster events (job deaths, restart loads, spares joining; saves before ``end_ms``)."""
        hosts = self.config.hosts
        rows: list[GroundTruth] = []
        for prev, epoch in pairwise(self.epochs):
            if prev.end_ms is not None:  # always, for an epoch that has a successor
                rows.append(GroundTruth(JOB_DEATH, None, None, prev.end_ms, end_ms=epoch.start_ms))
            if epoch.train_ms > epoch.start_ms:
                load_end = (
                    epoch.train_ms if epoch.end_ms is None else min(epoch.train_ms, epoch.end_ms)
                )
                rows.append(GroundTruth(RESTART_LOAD, None, None, epoch.start_ms, end_ms=load_end))
            rows.extend(
                GroundTruth(SPARE_JOINED, hosts[i], None, epoch.start_ms)
                for i in epoch.members
                if i not in prev.members
            )
        if end_ms is not None:
            for epoch in self.epochs:
                rows.extend(
                    GroundTruth(CHECKPOINT_SAVE, None, None, start, end_ms=end)
                    for start, end in self.saves(epoch, end_ms)
                )
        return rows


def _replace_excluded(members: list[int], excluded: set[int], nodes: int) -> list[int]:
    """Members with each excluded node swapped in place for the first healthy spare, or dropped."""
    spares = [i for i in range(nodes) if i not in excluded and i not in members]
    spares.reverse()  # pop() from the end takes the lowest host first
    kept: list[int] = []
    for m in members:
        if m not in excluded:
            kept.append(m)
        elif spares:
            kept.append(spares.pop())
    return kept


def plan_job(config: ClusterConfig) -> JobPlan:
    """The job's epochs implied by the config's faults (see the module docstring)."""
    index = {host: i for i, host in enumerate(config.hosts)}
    interval = config.interval_ms
    events = sorted(
        (
            (f.stops_job_at_ms if f.stops_job_at_ms is not None else f.onset_ms, n, f)
            for n, f in enumerate(config.faults)
            if f.stops_job_at_ms is not None or f.excludes_node
        ),
        key=lambda e: (e[0], e[1]),
    )
    epochs: list[JobEpoch] = []
    excluded: set[int] = set()
    members = list(range(config.job_nodes))
    start = train = config.start_ms
    for at_ms, _, fault in events:
        node = None if fault.node is None else index[fault.node]
        if fault.excludes_node and node is not None:
            excluded.add(node)
        if at_ms < start:  # broke while the job was down: the pending (re)start goes without it
            members = _replace_excluded(members, excluded, len(config.hosts))
        elif fault.stops_job_at_ms is not None and (node is None or node in members):
            bucket = config.start_ms + (at_ms - config.start_ms) // interval * interval
            death = bucket + interval
            epochs.append(JobEpoch(len(epochs), tuple(members), start, train, death, fault))
            members = _replace_excluded(members, excluded, len(config.hosts))
            delay_s = (
                config.restart_delay_s if fault.restart_delay_s is None else fault.restart_delay_s
            )
            start = death + int(delay_s * 1000)
            train = start + int(config.restart_load_s * 1000)
    epochs.append(JobEpoch(len(epochs), tuple(members), start, train, None))
    return JobPlan(config, epochs)
