"""Fail-slow faults: nothing crashes, no XID, the synchronous job just runs slower.

Calibrated to GREYHOUND (DESIGN.md section 7): single-node compute fail-slow
(CPU contention, one GPU ~20 % slow) lasting ~10 min and adding ~11.8 % to the
job's time; network congestion episodes of ~24 min adding ~15 %; a production
case of congestion plus thermal throttling down to 10 % of normal throughput.
Job-wide slowdowns (fabric congestion, a power cap) move every member alike:
they have no culprit and must not page a node.

How a slowdown shows (see ``state``): the job's iteration time is multiplied
by ``1 + slowdown`` on every member (``RoundState.slow_job``); a GPU that is
itself slower is marked busy for the whole longer iteration, so after
settling its SM activity stays high while every peer's drops (they wait in
collectives); link throughput falls with the job's pace. Each fault adds its
own evidence on the culprit: clock and throttle reasons, CPU and run queue,
InfiniBand transmit wait. A slowdown only acts while its node trains in the job.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from streams.lab.simulator.faults import (
    FABRIC_CONGESTION,
    POWER_CAP,
    Fault,
    GpuFault,
    GroundTruth,
    JobFault,
    NodeFault,
    check_window,
)
from streams.lab.simulator.state import (
    CLOCK_HW_SLOWDOWN,
    CLOCK_HW_THERMAL,
    CLOCK_SW_POWER_CAP,
    CLOCK_SW_THERMAL,
    RoundState,
)


def _check_slowdown(kind: str, slowdown: float) -> None:
    if not 0.0 < slowdown <= 50.0:
        raise ValueError(f"{kind}: slowdown must be within (0, 50], got {slowdown}")


def _slows_job(state: RoundState, node: int) -> bool:
    return state.training and bool(state.member[node])


@dataclass(frozen=True)
class GpuSlow(GpuFault):
    """One GPU computes ``slowdown`` slower (clock down, throttle ``reasons`` set).

    Every member's iteration time rises by ``slowdown``; the slow GPU stays busy
    (SM activity ~unchanged) while all other GPUs -- its node's too -- wait.
    ``reasons`` 0 models a silent degradation (no throttle bit).
    """

    kind: ClassVar[str] = "gpu_slow"

    node: str
    gpu: int
    onset_ms: int
    end_ms: int | None = None
    slowdown: float = 0.2
    reasons: int = CLOCK_HW_SLOWDOWN

    def __post_init__(self) -> None:
        check_window(self, self.onset_ms, self.end_ms)
        _check_slowdown(self.kind, self.slowdown)
        if self.reasons < 0:
            raise ValueError(f"{self.kind}: reasons must be a bitmask >= 0")

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.active(self.onset_ms, self.end_ms) or not _slows_job(state, node):
            return
        factor = 1.0 + self.slowdown
        state.slow_job(factor)
        state.gpu_busy[node, self.gpu] *= factor
        state.sm_clock_mhz[node, self.gpu] /= factor
        state.clock_reasons[node, self.gpu] |= self.reasons
        state.gpu_power_w[node, self.gpu] *= 1.0 - 0.5 * (1.0 - 1.0 / factor)

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind,
            self.node,
            self.gpu,
            self.onset_ms,
            end_ms=self.end_ms,
            slowdown=self.slowdown,
        )


class _Slowdown(Fault):
    """The job slows for ``duration_s`` from the onset, no one GPU at fault: its row spans
    onset to ``end_ms`` with the ``slowdown`` (a node's fault, or job-wide with no node)."""

    duration_s: float

    @property
    def end_ms(self) -> int:
        """When the slowdown is over: ``duration_s`` after its onset."""
        return self.onset_ms + int(self.duration_s * 1000)

    @property
    @abstractmethod
    def slowdown(self) -> float:
        """How much longer the job's iterations take meanwhile (0.2 = +20 %)."""

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind, self.node, None, self.onset_ms, end_ms=self.end_ms, slowdown=self.slowdown
        )


@dataclass(frozen=True)
class CpuContention(NodeFault, _Slowdown):
    """Another process hogs the node's CPUs for ``duration_s`` (GREYHOUND: mean 10 min).

    The node's CPUs run ~``cpu_busy`` busy, ``extra_runnable`` threads queue
    (procs running, load), context switches multiply by ``switch_factor``; its
    ranks feed their GPUs late, so every member's iteration takes ``slowdown``
    longer (GREYHOUND: +11.79 %) and every GPU, the culprit's too, waits.
    """

    kind: ClassVar[str] = "cpu_contention"

    node: str
    onset_ms: int
    duration_s: float = 600.0
    slowdown: float = 0.118
    cpu_busy: float = 0.97
    extra_runnable: int = 48
    switch_factor: float = 2.5

    def __post_init__(self) -> None:
        _check_slowdown(self.kind, self.slowdown)
        if self.duration_s <= 0 or not 0.0 < self.cpu_busy <= 1.0 or self.extra_runnable < 0:
            raise ValueError(f"{self.kind}: need duration_s > 0, 0 < cpu_busy <= 1, runnable >= 0")

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.active(self.onset_ms, self.end_ms):
            return
        taken = state.cpu_system[node] + state.cpu_iowait[node]
        state.cpu_user[node] = max(self.cpu_busy - taken, state.cpu_user[node])
        state.procs_running[node] += self.extra_runnable
        state.context_switches_per_s[node] *= self.switch_factor
        if _slows_job(state, node):
            state.slow_job(1.0 + self.slowdown)


@dataclass(frozen=True)
class NetworkCongestion(NodeFault, _Slowdown):
    """The node's links congest for ``duration_s``, on and off (GREYHOUND: mean 24 min, +15 %).

    While congested its InfiniBand transmit wait runs ``wait_factor`` times
    its usual rate (on ``ports``; None: every port) and every member's iteration
    takes ``slowdown`` longer. ``intermittent`` episodes: congested spells of
    3-8 min separated by 1-3 min of relief, drawn from ``seed``; the first
    spell starts at ``onset_ms``. The ground truth spans first to last spell.
    """

    kind: ClassVar[str] = "network_congestion"

    node: str
    onset_ms: int
    duration_s: float = 1440.0
    slowdown: float = 0.15
    wait_factor: float = 30.0
    intermittent: bool = True
    ports: tuple[int, ...] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        _check_slowdown(self.kind, self.slowdown)
        if self.duration_s <= 0 or self.wait_factor < 1.0:
            raise ValueError(f"{self.kind}: need duration_s > 0 and wait_factor >= 1")
        if self.ports is not None:
            object.__setattr__(self, "ports", tuple(self.ports))

    @cached_property
    def spells_ms(self) -> tuple[tuple[int, int], ...]:
        """The congested spells as ``(start_ms, end_ms)``."""
        end = self.onset_ms + int(self.duration_s * 1000)
        if not self.intermittent:
            return ((self.onset_ms, end),)
        rng = np.random.default_rng((self.seed, 0xC0E5))
        spells: list[tuple[int, int]] = []
        t = self.onset_ms
        while t < end:
            stop = min(t + int(rng.uniform(180_000, 480_000)), end)
            if spells and stop - t < 60_000:
                break  # no stub of a spell at the very end
            spells.append((t, stop))
            t = stop + int(rng.uniform(60_000, 180_000))
        return tuple(spells)

    @property
    def end_ms(self) -> int:
        return self.spells_ms[-1][1]

    def congested(self, state: RoundState) -> bool:
        return any(state.active(a, b) for a, b in self.spells_ms)

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.active(self.onset_ms, self.end_ms) or not self.congested(state):
            return
        ports = slice(None) if self.ports is None else list(self.ports)
        state.ib_xmit_wait_per_s[node, ports] *= self.wait_factor
        if _slows_job(state, node):
            state.slow_job(1.0 + self.slowdown)


@dataclass(frozen=True)
class CompoundCongestionThermal(NodeFault, _Slowdown):
    """Congestion on the node's links plus thermal throttling of its GPUs (a production case).

    The job runs at ``throughput`` of its normal pace (GREYHOUND: 10 %). The
    slowdown splits into a network part ``(1/throughput) ** network_share`` (the
    node's transmit wait x ``wait_factor``) and a thermal part (its GPUs
    ``temp_rise_c`` hotter, SW + HW thermal slowdown bits, SM clock down by
    that factor, busy throughout); everyone else waits.
    """

    kind: ClassVar[str] = "congestion_thermal"

    node: str
    onset_ms: int
    duration_s: float = 2400.0
    throughput: float = 0.1
    network_share: float = 0.4
    wait_factor: float = 40.0
    temp_rise_c: float = 22.0

    def __post_init__(self) -> None:
        if not 0.01 <= self.throughput < 1.0 or not 0.0 <= self.network_share <= 1.0:
            raise ValueError(f"{self.kind}: need 0.01 <= throughput < 1, network_share in [0, 1]")
        if self.duration_s <= 0 or self.wait_factor < 1.0 or self.temp_rise_c < 0:
            raise ValueError(
                f"{self.kind}: need duration_s > 0, wait_factor >= 1, temp_rise_c >= 0"
            )

    @property
    def slowdown(self) -> float:
        return 1.0 / self.throughput - 1.0

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.active(self.onset_ms, self.end_ms):
            return
        total = 1.0 / self.throughput
        thermal = total / total**self.network_share
        state.ib_xmit_wait_per_s[node] *= self.wait_factor
        state.gpu_temp_target_c[node] += self.temp_rise_c
        state.mem_temp_offset_c[node] += 0.3 * self.temp_rise_c
        if not _slows_job(state, node):
            return
        state.slow_job(total)
        state.gpu_busy[node] *= thermal
        state.sm_clock_mhz[node] /= thermal
        state.clock_reasons[node] |= CLOCK_SW_THERMAL | CLOCK_HW_THERMAL
        state.gpu_power_w[node] *= 0.6


@dataclass(frozen=True)
class FabricCongestion(JobFault, _Slowdown):
    """The fabric congests: every member's transmit wait rises together; no culprit.

    Each member's wait rate is multiplied by ``wait_factor`` (scattered by
    ``spread`` per node, drawn from the round) and the job slows by ``slowdown``.
    """

    kind: ClassVar[str] = FABRIC_CONGESTION

    onset_ms: int
    duration_s: float = 1200.0
    slowdown: float = 0.15
    wait_factor: float = 12.0
    spread: float = 0.1

    def __post_init__(self) -> None:
        _check_slowdown(self.kind, self.slowdown)
        if self.duration_s <= 0 or self.wait_factor < 1.0 or self.spread < 0:
            raise ValueError(f"{self.kind}: need duration_s > 0, wait_factor >= 1, spread >= 0")

    def apply_to_job(self, state: RoundState) -> None:
        if not state.active(self.onset_ms, self.end_ms) or not state.training:
            return
        n = len(state.member)
        factor = self.wait_factor * np.exp(self.spread * state.rng.standard_normal(n))
        state.ib_xmit_wait_per_s *= np.where(state.member, factor, 1.0)[:, None]
        state.slow_job(1.0 + self.slowdown)


@dataclass(frozen=True)
class PowerCap(JobFault, _Slowdown):
    """Every member GPU is power-capped at ``cap_w``: SW power cap bit, clocks down; no culprit.

    All GPUs compute ``slowdown`` slower together, so nobody waits for anybody
    (SM activity stays level) while the job slows.
    """

    kind: ClassVar[str] = POWER_CAP

    onset_ms: int
    duration_s: float = 1200.0
    slowdown: float = 0.15
    cap_w: float = 700.0

    def __post_init__(self) -> None:
        _check_slowdown(self.kind, self.slowdown)
        if self.duration_s <= 0 or self.cap_w <= 0:
            raise ValueError(f"{self.kind}: need duration_s > 0 and cap_w > 0")

    def apply_to_job(self, state: RoundState) -> None:
        if not state.active(self.onset_ms, self.end_ms) or not state.training:
            return
        factor = 1.0 + self.slowdown
        member = state.member[:, None]
        capped = self.cap_w * (1.0 + 0.01 * state.rng.standard_normal(state.gpu_power_w.shape))
        state.gpu_power_w[:] = np.where(
            member, np.minimum(state.gpu_power_w, capped), state.gpu_power_w
        )
        state.clock_reasons[:] = np.where(
            member, state.clock_reasons | CLOCK_SW_POWER_CAP, state.clock_reasons
        )
        state.sm_clock_mhz[:] = np.where(member, state.sm_clock_mhz / factor, state.sm_clock_mhz)
        state.gpu_busy[:] = np.where(member, state.gpu_busy * factor, state.gpu_busy)
        state.slow_job(factor)
