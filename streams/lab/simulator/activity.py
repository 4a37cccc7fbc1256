"""What a node's exporters would read in one round, from what the job is doing.

``baseline`` turns the job's phase (a member training, saving, loading its
checkpoint; a spare or a node of a dead job idling) and the round's noise into
the values of a ``RoundState`` before any fault; ``settle`` applies what
follows from the faults in a synchronous job (see ``state``): peers wait for a
slow member, links carry less, the trainer's iteration takes longer.

The numbers come from ``calibration.Calibration``; which noise is drawn, and
in which order, is fixed whatever the phase so a round's values depend only on
the seed and the round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from streams.lab.simulator.state import (
    CLOCK_GPU_IDLE,
    CLOCK_SW_POWER_CAP,
    GETATTR,
    READ,
    WRITE,
    RoundState,
)

if TYPE_CHECKING:
    from streams.lab.simulator.config import ClusterConfig
    from streams.lab.simulator.traits import NodeTraits


class Phase(NamedTuple):
    """What the job does in a round: who runs it, whether it loads, how much a save covers."""

    member: np.ndarray  # (nodes,) bool: running the job this round
    allocated: np.ndarray  # (nodes,) bool: the job's latest nodes (also while it is down)
    loading: bool  # restart load (else training, or nobody runs)
    stall: float  # fraction of the bucket a checkpoint save covers
    save_share: float  # fraction of one save's data written in the bucket

    @property
    def training(self) -> bool:
        return not self.loading and bool(self.member.any())


class Noise(NamedTuple):
    """One round's draws for the base series (the simulator's first stream)."""

    z: np.ndarray  # (nodes, 7) standard normal
    zg: np.ndarray  # (nodes, gpus, 3) standard normal
    u: np.ndarray  # (nodes,) uniform
    ug: np.ndarray  # (nodes, gpus, 2) uniform


class ExtraNoise(NamedTuple):
    """One round's draws for the optional families (a stream of their own)."""

    zc: np.ndarray  # (nodes, cpus, 3) per-CPU scatter of user / system / iowait
    zh: np.ndarray  # (nodes, 2) context switches, available memory
    zi: np.ndarray  # (nodes, ports, 3) transmit wait, transmitted, received
    zg: np.ndarray  # (nodes, gpus, 3) SM activity, SM clock, memory temperature
    ug: np.ndarray  # (nodes, gpus, 2) power-cap flicker, stalled SM activity
    blocked: np.ndarray  # (nodes,) uniform, turned into a Poisson count
    z_job: float  # the trainer's iteration noise (one per job)
    jitter: np.ndarray  # (nodes,) the trainer target's scrape jitter in ms

    @classmethod
    def draw(cls, rng: np.random.Generator | None, config: ClusterConfig) -> ExtraNoise:
        """The draws of the enabled families, in a fixed order (zeros for the others)."""
        n, g = len(config.hosts), config.gpus_per_node
        c, p, j = config.cpus_per_node, config.ib_devices, config.scrape_jitter_ms
        families = config.metric_families

        def normal(family: str, shape: tuple[int, ...]) -> np.ndarray:
            if rng is None or family not in families:
                return np.zeros(shape)
            return rng.standard_normal(shape)

        def uniform(family: str, shape: tuple[int, ...]) -> np.ndarray:
            if rng is None or family not in families:
                return np.ones(shape)
            return rng.random(shape)

        jitter = (
            rng.integers(-j, j + 1, size=n)
            if rng is not None and "trainer" in families
            else np.zeros(n, dtype=np.int64)
        )
        return cls(
            zc=normal("cpu", (n, c, 3)),
            zh=normal("cpu", (n, 2)),
            zi=normal("infiniband", (n, p, 3)),
            zg=normal("gpu_perf", (n, g, 3)),
            ug=uniform("gpu_perf", (n, g, 2)),
            blocked=uniform("cpu", (n,)) * 0.5,
            z_job=float(normal("trainer", (1,))[0]),
            jitter=jitter,
        )


def baseline(
    config: ClusterConfig, traits: NodeTraits, phase: Phase, noise: Noise, extra: ExtraNoise
) -> dict[str, object]:
    """Every ``RoundState`` field that depends on the phase, before faults.

    Fields of a family that is off are zeros (faults may still write to them):
    the base series then cost what they always did.
    """
    n, g = len(config.hosts), config.gpus_per_node
    families = config.metric_families
    host = "cpu" in families or "memory" in families
    return {
        "member": phase.member,
        "training": phase.training,
        "job_factor": 1.0,
        "gpu_busy": np.ones((n, g)),
        **_node_rates(config, traits, phase, noise),
        **_gpu_gauges(config, traits, phase, noise),
        **(_host(config, traits, phase, extra) if host else _zeros(_HOST_FIELDS, (n,))),
        **(
            _fabric(config, traits, phase, extra)
            if "infiniband" in families
            else _zeros(_FABRIC_FIELDS, (n, config.ib_devices))
        ),
        **(
            _gpu_perf(config, traits, phase, extra)
            if "gpu_perf" in families
            else {**_zeros(_GPU_PERF_FIELDS, (n, g)), "clock_reasons": np.zeros((n, g), np.int64)}
        ),
        "remap_correctable": traits.remap_correctable.copy(),
        "remap_uncorrectable": np.zeros((n, g)),
        "remap_failure": np.zeros((n, g)),
        "remap_pending": np.zeros((n, g)),
    }


_HOST_FIELDS = (
    "cpu_user",
    "cpu_system",
    "cpu_iowait",
    "procs_blocked",
    "context_switches_per_s",
    "shmem_bytes",
    "mem_available_bytes",
)
_FABRIC_FIELDS = ("ib_xmit_wait_per_s", "ib_tx_bytes_per_s", "ib_rx_bytes_per_s")
_GPU_PERF_FIELDS = ("sm_active", "sm_clock_mhz", "mem_temp_offset_c")


def _zeros(fields: tuple[str, ...], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {name: np.zeros(shape) for name in fields}


def _node_rates(
    config: ClusterConfig, tr: NodeTraits, phase: Phase, noise: Noise
) -> dict[str, np.ndarray]:
    """node_exporter's base rates and gauges: interrupts, processes, page-outs, NFS."""
    cal = config.calibration
    member, stall, z, u = phase.member, phase.stall, noise.z, noise.u
    interval_s = config.interval_ms / 1000.0
    if phase.loading:
        intr_active: np.ndarray | float = cal.intr_load_per_s
        procs_active = np.rint(cal.procs_load[0] + u * (cal.procs_load[1] - cal.procs_load[0]))
    else:
        intr_active = tr.intr_train * (1.0 - stall * (1.0 - cal.intr_save_ratio))
        procs_active = np.clip(
            np.rint(tr.procs_train + cal.procs_noise * z[:, 1]), *cal.procs_train_limits
        )
    intr = np.where(member, intr_active, tr.intr_idle) * (1.0 + cal.intr_noise * z[:, 0])
    procs_idle = np.rint(cal.procs_idle[0] + u * (cal.procs_idle[1] - cal.procs_idle[0]))
    write_save = np.where(member, tr.save_bytes * phase.save_share / interval_s, 0.0)
    write_save *= 1.0 + cal.save_bytes_noise * z[:, 2]
    pgpgout = np.where(member & (not phase.loading), tr.pgpgout_train, tr.pgpgout_idle)
    pgpgout = (
        pgpgout * (1.0 + 0.1 * np.abs(z[:, 6])) + write_save / 1024.0 * cal.pgpgout_save_fraction
    )

    # NFS mountstats: requests per second and seconds per request, per operation
    n = len(member)
    latency = tr.nfs_latency * (1.0 + cal.nfs_noise * z[:, 3])
    requests = np.empty((n, 3))
    response = np.empty((n, 3))
    queue = np.empty((n, 3))
    busy = cal.getattr_load_factor if phase.loading else 1.0 + cal.getattr_save_factor * stall
    getattr_factor = np.where(member, busy, 0.5)
    requests[:, GETATTR] = tr.getattr_rate * getattr_factor * (1.0 + 0.1 * z[:, 4])
    response[:, GETATTR] = tr.getattr_response * np.maximum(getattr_factor, 1.0) * latency
    queue[:, GETATTR] = cal.getattr_queue_s * latency

    read_bytes = np.full(n, cal.read_idle_per_s * cal.read_rpc_bytes)
    requests[:, READ] = cal.read_idle_per_s
    response[:, READ] = cal.read_idle_response_s * latency
    queue[:, READ] = cal.read_idle_queue_s * latency
    if phase.loading and config.restart_load_s > 0:
        rate = cal.load_bytes_per_node / config.restart_load_s * (1.0 + 0.05 * z[:, 5])
        read_bytes = np.where(member, rate, read_bytes)
        requests[:, READ] = np.where(member, rate / cal.read_rpc_bytes, requests[:, READ])
        per_request = cal.read_request_s * latency
        queue[:, READ] = np.where(member, per_request * cal.read_queue_fraction, queue[:, READ])
        response[:, READ] = np.where(
            member, per_request * (1.0 - cal.read_queue_fraction), response[:, READ]
        )

    # a bucket's WRITEs: the steady trickle plus its share of a checkpoint save
    save_requests = write_save / cal.write_rpc_bytes
    idle_requests = cal.write_idle_per_s
    requests[:, WRITE] = idle_requests + save_requests
    response[:, WRITE] = (
        latency
        * (idle_requests * cal.write_idle_response_s + save_requests * cal.write_save_response_s)
        / requests[:, WRITE]
    )
    queue[:, WRITE] = (
        latency
        * (idle_requests * cal.write_idle_queue_s + save_requests * cal.write_save_queue_s)
        / requests[:, WRITE]
    )
    return {
        "intr_per_s": intr,
        "procs_running": np.where(member, procs_active, procs_idle),
        "pgpgout_per_s": pgpgout,
        "nfs_requests_per_s": requests,
        "nfs_response_s": response,
        "nfs_queue_s": queue,
        "nfs_read_bytes_per_s": read_bytes,
        "nfs_write_bytes_per_s": idle_requests * cal.write_idle_rpc_bytes + write_save,
    }


def _gpu_gauges(
    config: ClusterConfig, tr: NodeTraits, phase: Phase, noise: Noise
) -> dict[str, np.ndarray]:
    """dcgm-exporter's base per-GPU gauges (and the temperature they lag toward)."""
    cal = config.calibration
    stall, zg, ug = phase.stall, noise.zg, noise.ug
    if phase.loading:
        lo, hi = cal.gpu_util_load
        util_active = lo + ug[:, :, 0] * (hi - lo)
        lo, hi = cal.gpu_power_load_w
        power_active = lo + ug[:, :, 1] * (hi - lo)
        temp_active = 0.5 * (tr.temp_train + tr.temp_idle)
    else:
        # a save stalls compute for the part of the bucket it covers
        util_train = 100.0 - np.floor(np.abs(cal.gpu_util_train_noise * zg[:, :, 0]))
        lo, hi = cal.gpu_util_save
        util_active = (1.0 - stall) * util_train + stall * (lo + ug[:, :, 0] * (hi - lo))
        power_train = np.clip(
            tr.power_train + cal.gpu_power_noise_w * zg[:, :, 1], *cal.gpu_power_limits_w
        )
        lo, hi = cal.gpu_power_save_w
        power_active = (1.0 - stall) * power_train + stall * (lo + ug[:, :, 1] * (hi - lo))
        temp_active = (1.0 - stall) * tr.temp_train + stall * tr.temp_idle
    power_idle = tr.power_idle + cal.gpu_power_idle_noise_w * zg[:, :, 1]
    member = phase.member[:, None]
    return {
        "gpu_util": np.where(member, util_active, 0.0),
        "gpu_power_w": np.where(member, power_active, power_idle),
        "gpu_temp_target_c": np.where(member, temp_active, tr.temp_idle),
    }


def _host(
    config: ClusterConfig, tr: NodeTraits, phase: Phase, x: ExtraNoise
) -> dict[str, np.ndarray]:
    """CPU shares, blocked processes, context switches, /dev/shm and available memory."""
    cal = config.calibration
    member, stall = phase.member, phase.stall
    if phase.loading:
        user: np.ndarray | float = cal.cpu_user_load
        switches: np.ndarray | float = cal.context_switches_load_per_s
        system, iowait = cal.cpu_system_load, cal.cpu_iowait_load
        blocked = cal.procs_blocked_load
    else:
        user = tr.cpu_user_train * (1.0 - 0.5 * stall)
        system = cal.cpu_system_train * (1.0 + stall)
        iowait = cal.cpu_iowait_train + cal.cpu_iowait_save * stall
        blocked = cal.procs_blocked_train + cal.procs_blocked_save * stall
        switches = tr.context_switches_train * (1.0 - 0.4 * stall)
    lam = np.where(member, blocked, cal.procs_blocked_idle)
    shmem = tr.shmem_base + np.where(phase.allocated, tr.stage_bytes, 0.0)
    return {
        "cpu_user": np.where(member, user, cal.cpu_user_idle),
        "cpu_system": np.where(member, system, cal.cpu_system_idle),
        "cpu_iowait": np.where(member, iowait, cal.cpu_iowait_idle),
        "procs_blocked": _poisson(lam, x.blocked),
        "context_switches_per_s": np.where(member, switches, tr.context_switches_idle)
        * (1.0 + cal.context_switches_noise * x.zh[:, 0]),
        "shmem_bytes": shmem,
        "mem_available_bytes": (tr.mem_available - shmem)
        * (1.0 + cal.mem_available_noise * x.zh[:, 1]),
    }


def _poisson(lam: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Poisson counts by inversion of uniforms (small means; keeps one draw per node)."""
    count = np.zeros_like(lam)
    p = np.exp(-lam)
    cdf = p.copy()
    k = 0
    while k < 40 and (u > cdf).any():
        k += 1
        p = p * lam / k
        count = np.where(u > cdf, k, count)
        cdf = cdf + p
    return count


def _fabric(
    config: ClusterConfig, tr: NodeTraits, phase: Phase, x: ExtraNoise
) -> dict[str, np.ndarray]:
    """InfiniBand port rates: gradient traffic while training, near nothing otherwise."""
    cal = config.calibration
    member = phase.member[:, None]
    if phase.loading:
        tx_active: np.ndarray | float = cal.ib_load_bytes_per_s
        wait_active: np.ndarray | float = cal.ib_xmit_wait_idle_per_s
    else:
        tx_active = tr.ib_tx_train * (1.0 - phase.stall)
        wait_active = (
            cal.ib_xmit_wait_train_per_s
            * np.exp(cal.ib_xmit_wait_sigma * x.zi[:, :, 0] - cal.ib_xmit_wait_sigma**2 / 2)
            * (1.0 - phase.stall)
        )
    ports = np.ones((len(phase.member), config.ib_devices))
    tx = np.where(member, tx_active, cal.ib_idle_bytes_per_s) * ports
    return {
        "ib_xmit_wait_per_s": np.where(member, wait_active, cal.ib_xmit_wait_idle_per_s) * ports,
        "ib_tx_bytes_per_s": tx * (1.0 + cal.ib_noise * x.zi[:, :, 1]),
        "ib_rx_bytes_per_s": tx * (1.0 + cal.ib_noise * x.zi[:, :, 2]),
    }


def _gpu_perf(
    config: ClusterConfig, tr: NodeTraits, phase: Phase, x: ExtraNoise
) -> dict[str, np.ndarray]:
    """SM activity and clock, clock event reasons, HBM temperature offset."""
    cal = config.calibration
    member = phase.member[:, None]
    zg, ug = x.zg, x.ug
    if phase.loading:
        lo, hi = cal.sm_active_load
        active = lo + ug[:, :, 1] * (hi - lo)
        reasons_active: np.ndarray | int = 0
    else:
        lo, hi = cal.sm_active_stalled
        working = tr.sm_active_train * (1.0 + cal.sm_active_noise * zg[:, :, 0])
        active = (1.0 - phase.stall) * working + phase.stall * (lo + ug[:, :, 1] * (hi - lo))
        reasons_active = np.where(ug[:, :, 0] < cal.power_cap_flicker, CLOCK_SW_POWER_CAP, 0)
    clock = tr.sm_clock_train + cal.sm_clock_noise_mhz * zg[:, :, 1]
    return {
        "sm_active": np.where(member, np.clip(active, 0.0, 1.0), 0.0),
        "sm_clock_mhz": np.where(member, clock, cal.sm_clock_idle_mhz),
        "clock_reasons": np.where(member, reasons_active, CLOCK_GPU_IDLE).astype(np.int64),
        "mem_temp_offset_c": tr.mem_temp_offset.copy(),
    }


def settle(state: RoundState, config: ClusterConfig) -> None:
    """Apply the job's slowdown to every member: the bottleneck stays busy, the rest wait."""
    if state.job_factor == 1.0 and not (state.gpu_busy != 1.0).any():
        return
    member = state.member[:, None]
    busy = np.minimum(state.gpu_busy / state.job_factor, 1.0)
    wait = np.where(member, 1.0 - busy, 0.0)
    state.sm_active *= 1.0 - wait
    state.gpu_power_w *= 1.0 - config.calibration.power_wait_drop * wait
    traffic = np.where(member, 1.0 / state.job_factor, 1.0)
    state.ib_tx_bytes_per_s *= traffic
    state.ib_rx_bytes_per_s *= traffic


def iteration_time_s(
    state: RoundState, traits: NodeTraits, phase: Phase, x: ExtraNoise, config: ClusterConfig
) -> float:
    """The job's last iteration time: its pace times the slowdown, plus any save stall."""
    cal = config.calibration
    stalled_s = phase.stall * config.interval_ms / 1000.0
    pace = traits.iteration_time_s * state.job_factor * (1.0 + cal.iteration_noise * x.z_job)
    return pace + stalled_s
