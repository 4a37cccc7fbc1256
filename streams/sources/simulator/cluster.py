"""A seeded synthetic GPU cluster that answers scrapes the way its exporters would.

Every node runs node_exporter (``<host>:9100``: interrupts, processes, vmstat,
NFS mountstats) and dcgm-exporter (``<host>:9400``: per-GPU utilisation,
power, temperature, last XID). ``ClusterSimulator.scrape(t_ms)`` returns one
scrape round of all of them as raw Prometheus series, so the simulated data
goes through the same remote_write ingest as real data:

- counters are cumulative (they start at a random "uptime" value) and only
  restart at an explicit reboot;
- every target is scraped at its own fixed offset within the interval plus a
  few ms of jitter, and every sample carries ``instance``, ``job`` and
  ``cluster`` labels like a real scrape;
- nodes differ persistently (offsets per node and GPU) and noisily (per scrape).

What the nodes do comes from the job's plan (``timeline.plan_job``: training
with synchronised checkpoint saves, death, restart on a spare, load) and from
the config's faults. The numbers are in ``calibration.Calibration``.

Speed: each round is a handful of numpy operations per metric family on
(nodes,) or (nodes, gpus) arrays; the only per-series Python work is building
the ``Series`` objects. Label dicts are built once and shared by every round's
series: treat them as read-only (the ingest decoder has the same contract).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import NamedTuple

import numpy as np

from streams.ingest.series import Series
from streams.sources.simulator.calibration import Calibration
from streams.sources.simulator.faults import Fault
from streams.sources.simulator.state import GETATTR, NFS_OPERATIONS, READ, WRITE, RoundState
from streams.sources.simulator.timeline import JobPlan, plan_job

DEFAULT_START_MS = 1_759_276_800_000  # 2025-10-01T00:00:00Z, a multiple of 30 s

# PCI bus ids of the eight GPUs on an HGX board, as nvidia-smi prints them.
_HGX_BUS_IDS = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")
_MAX_GPUS = 16

# Series layout of one node: node_exporter columns, then dcgm-exporter columns.
_NFS_COUNTERS = (
    "node_mountstats_nfs_operations_requests_total",
    "node_mountstats_nfs_operations_response_time_seconds_total",
    "node_mountstats_nfs_operations_queue_time_seconds_total",
)
_NODE_SCALARS = ("node_intr_total", "node_procs_running", "node_vmstat_pgpgout")
_NFS_BYTES = ("node_mountstats_nfs_read_bytes_total", "node_mountstats_nfs_write_bytes_total")
_GPU_GAUGES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_XID_ERRORS",
)
_NODE_COLUMNS = len(_NODE_SCALARS) + len(_NFS_COUNTERS) * len(NFS_OPERATIONS) + len(_NFS_BYTES)

# Seed-sequence keys that keep the simulator's random streams apart.
_TRAITS_STREAM = 1
_ROUND_STREAM = 2


def pci_bus_id(gpu: int) -> str:
    """The PCI bus id dcgm-exporter reports for GPU ``gpu`` of a node."""
    bus = _HGX_BUS_IDS[gpu] if gpu < len(_HGX_BUS_IDS) else f"{0xE8 + gpu:02X}"
    return f"00000000:{bus}:00.0"


@dataclass(frozen=True)
class ClusterConfig:
    """What the simulated cluster looks like and what happens to it.

    ``job_nodes`` run the training job, ``spares`` idle beside them (hosts are
    ``<host_prefix><number:03d>`` from ``first_host_number``; the spares are
    the last hosts). ``start_ms`` opens the simulation mid-training and must sit
    on the scrape grid (a multiple of the interval), so a round's samples fall
    in one bucket. Checkpoint saves come every ``checkpoint_interval_s``
    (median; log-normal jitter ``checkpoint_jitter``) and last
    ``save_duration_s``; a job killed by a fault restarts ``restart_delay_s``
    after it died, then loads its checkpoint for ``restart_load_s``.
    ``emit_stale_markers`` makes a node that falls silent send Prometheus stale
    markers once, as a failed scrape does (off: it just stops).
    """

    seed: int = 0
    cluster: str = "b200-a"
    # The scheduler's label on the nodes allocated to the job (as a relabel rule
    # would add it); spares and excluded nodes do not carry it. None: no label.
    job_label: str | None = "train_job"
    job_name: str = "llm-pretrain"
    job_nodes: int = 60
    spares: int = 3
    gpus_per_node: int = 8
    start_ms: int = DEFAULT_START_MS
    scrape_interval_s: float = 30.0
    scrape_jitter_ms: int = 25
    checkpoint_interval_s: float = 2.23 * 3600.0  # report: median 2.23 h at 4 K sequence length
    checkpoint_jitter: float = 0.25
    save_duration_s: tuple[float, float] = (18.0, 32.0)  # report: 18-31.7 s
    restart_delay_s: float = 600.0  # report: auto-retry after ~10 min
    restart_load_s: float = 1500.0  # report: ~200 GB per node in ~25 min
    faults: tuple[Fault, ...] = ()
    host_prefix: str = "gpu"
    first_host_number: int = 64
    model_name: str = "NVIDIA B200"
    node_exporter_job: str = "node"
    node_exporter_port: int = 9100
    dcgm_job: str = "dcgm"
    dcgm_port: int = 9400
    nfs_export: str = "nfs-ckpt:/ckpt"
    nfs_mountaddress: str = "10.10.0.10"
    nfs_protocol: str = "tcp"
    emit_stale_markers: bool = False
    calibration: Calibration = field(default_factory=Calibration)

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(self.faults))
        object.__setattr__(self, "save_duration_s", tuple(self.save_duration_s))
        if self.seed < 0 or self.job_nodes < 1 or self.spares < 0:
            raise ValueError("need seed >= 0, job_nodes >= 1 and spares >= 0")
        if not 1 <= self.gpus_per_node <= _MAX_GPUS:
            raise ValueError(f"gpus_per_node must be within 1..{_MAX_GPUS}")
        if not self.cluster or not self.host_prefix or self.first_host_number < 0:
            raise ValueError("cluster and host_prefix must be non-empty, first_host_number >= 0")
        interval = self.scrape_interval_s * 1000.0
        if interval < 1000.0 or interval != int(interval):
            raise ValueError("scrape_interval_s must be >= 1 s and a whole number of ms")
        if self.scrape_jitter_ms < 0 or 4 * self.scrape_jitter_ms + 4 >= interval:
            raise ValueError("scrape_jitter_ms must be >= 0 and well below the interval")
        if self.start_ms % int(interval):
            raise ValueError(
                f"start_ms must be a multiple of the scrape interval ({int(interval)} ms); "
                f"e.g. {self.start_ms // int(interval) * int(interval)}"
            )
        lo, hi = self.save_duration_s
        if not 0 < lo <= hi:
            raise ValueError("save_duration_s must be an ordered (min, max) range above 0")
        if self.checkpoint_interval_s <= 2 * hi or self.checkpoint_jitter < 0:
            raise ValueError(
                "checkpoint_interval_s must exceed twice the longest save; jitter >= 0"
            )
        if self.restart_delay_s < 0 or self.restart_load_s < 0:
            raise ValueError("restart_delay_s and restart_load_s must be >= 0")
        for fault in self.faults:
            if not isinstance(fault, Fault):
                raise ValueError(f"not a fault spec: {fault!r}")
            fault.check(self.hosts, self.gpus_per_node)

    @property
    def interval_ms(self) -> int:
        return int(self.scrape_interval_s * 1000)

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        """Every host, job nodes first, spares last."""
        first = self.first_host_number
        return tuple(
            f"{self.host_prefix}{first + i:03d}" for i in range(self.job_nodes + self.spares)
        )

    @property
    def job_hosts(self) -> tuple[str, ...]:
        """The hosts the job starts on."""
        return self.hosts[: self.job_nodes]

    @property
    def spare_hosts(self) -> tuple[str, ...]:
        return self.hosts[self.job_nodes :]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while a round's series are built.

    A round allocates thousands of small acyclic objects; left on, the collector
    runs several times per round and rescans every series still held downstream,
    which more than doubles the cost of a round.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Traits:
    """Persistent per-node and per-GPU properties, drawn once from the seed."""

    def __init__(self, config: ClusterConfig):
        cal = config.calibration
        n, g = len(config.hosts), config.gpus_per_node
        rng = np.random.default_rng((config.seed, _TRAITS_STREAM))
        jitter = config.scrape_jitter_ms
        # one offset per scrape target: [node_exporter, dcgm]
        self.offset_ms = rng.integers(jitter + 1, config.interval_ms - jitter - 1, size=(n, 2))
        self.intr_train = cal.intr_train_per_s * (
            1.0 + cal.intr_node_spread * rng.standard_normal(n)
        )
        self.intr_idle = rng.uniform(*cal.intr_idle_per_s, size=n)
        self.procs_train = np.rint(rng.uniform(*cal.procs_train, size=n))
        self.pgpgout_train = rng.uniform(*cal.pgpgout_train_per_s, size=n)
        self.pgpgout_idle = rng.uniform(*cal.pgpgout_idle_per_s, size=n)
        self.getattr_rate = rng.uniform(*cal.getattr_per_s, size=n)
        self.getattr_response = rng.uniform(*cal.getattr_response_s, size=n)
        self.nfs_latency = np.clip(1.0 + cal.nfs_node_spread * rng.standard_normal(n), 0.7, 1.3)
        heavy = rng.permutation(n) < round(cal.save_heavy_fraction * n)
        self.save_bytes = np.where(heavy, cal.save_bytes_heavy, cal.save_bytes_light)
        self.power_train = cal.gpu_power_train_w + cal.gpu_power_spread_w * rng.standard_normal(
            (n, g)
        )
        self.power_idle = rng.uniform(*cal.gpu_power_idle_w, size=(n, g))
        self.temp_train = rng.uniform(*cal.gpu_temp_train_c, size=(n, g))
        self.temp_idle = rng.uniform(*cal.gpu_temp_idle_c, size=(n, g))
        self.uuids = [
            [_uuid(rng.integers(0, 256, size=16, dtype=np.uint8).tobytes()) for _ in range(g)]
            for _ in range(n)
        ]
        # counters start at what days of uptime leave behind
        self.counters_start = {
            "intr": rng.uniform(1e10, 1e11, size=n).round(),
            "pgpgout": rng.uniform(1e8, 1e9, size=n).round(),
            "nfs_requests": rng.uniform(1e5, 1e7, size=(n, len(NFS_OPERATIONS))).round(),
            "read_bytes": rng.uniform(1e12, 1e13, size=n).round(),
            "write_bytes": rng.uniform(1e12, 1e13, size=n).round(),
        }


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _sorted_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: labels[k] for k in sorted(labels)}


def _series_labels(config: ClusterConfig, uuids: list[list[str]]) -> list[list[dict[str, str]]]:
    """Per node, the label sets of its series in column order (see ``_NODE_COLUMNS``)."""
    out = []
    mount = {
        "export": config.nfs_export,
        "mountaddress": config.nfs_mountaddress,
        "protocol": config.nfs_protocol,
    }
    for i, host in enumerate(config.hosts):
        node = {
            "cluster": config.cluster,
            "instance": f"{host}:{config.node_exporter_port}",
            "job": config.node_exporter_job,
        }
        dcgm = {
            "cluster": config.cluster,
            "instance": f"{host}:{config.dcgm_port}",
            "job": config.dcgm_job,
            "Hostname": host,
            "modelName": config.model_name,
        }
        labels = [{**node, "__name__": name} for name in _NODE_SCALARS]
        labels += [
            {**node, **mount, "__name__": name, "operation": op}
            for name in _NFS_COUNTERS
            for op in NFS_OPERATIONS
        ]
        labels += [{**node, **mount, "__name__": name} for name in _NFS_BYTES]
        labels += [
            {
                **dcgm,
                "__name__": name,
                "gpu": str(gpu),
                "UUID": uuids[i][gpu],
                "pci_bus_id": pci_bus_id(gpu),
                "device": f"nvidia{gpu}",
            }
            for name in _GPU_GAUGES
            for gpu in range(config.gpus_per_node)
        ]
        out.append([_sorted_labels(lbl) for lbl in labels])
    return out


class _Phase(NamedTuple):
    """What the job does in a round: who runs it, whether it loads, how much a save covers."""

    member: np.ndarray  # (nodes,) bool: running the job this round
    loading: bool  # restart load (else training, or nobody runs)
    stall: float  # fraction of the bucket a checkpoint save covers
    save_share: float  # fraction of one save's data written in the bucket


class _Noise(NamedTuple):
    """One round's baseline random draws."""

    z: np.ndarray  # (nodes, 7) standard normal
    zg: np.ndarray  # (nodes, gpus, 3) standard normal
    u: np.ndarray  # (nodes,) uniform
    ug: np.ndarray  # (nodes, gpus, 2) uniform


class ClusterSimulator:
    """Answers scrape rounds for a ``ClusterConfig``; deterministic for a given seed.

    Rounds are asked for in increasing time on the scrape grid (skipping is
    allowed: counters then integrate the current rates over the gap). The
    noise of round ``r`` depends only on the seed and ``r``; counters and
    temperatures carry state from the rounds computed before.
    """

    def __init__(self, config: ClusterConfig):
        self.config = config
        self.plan: JobPlan = plan_job(config)
        self.hosts = config.hosts
        n, g = len(self.hosts), config.gpus_per_node
        self._traits = _Traits(config)
        self._labels = _series_labels(config, self._traits.uuids)
        self._job_labels = (
            [[_sorted_labels({**lbl, config.job_label: config.job_name}) for lbl in node]
             for node in self._labels]
            if config.job_label else self._labels
        )
        self._faults = [(f, self.hosts.index(f.node)) for f in config.faults]
        self._member_masks: dict[int, np.ndarray] = {}
        start = self._traits.counters_start
        self._intr = start["intr"].copy()
        self._pgpgout = start["pgpgout"].copy()
        self._nfs_requests = start["nfs_requests"].copy()
        mean_request_s = np.array([0.003, 0.05, 0.5])  # uptime's mix of quiet and busy periods
        self._nfs_response = (self._nfs_requests * mean_request_s * 0.4).round(3)
        self._nfs_queue = (self._nfs_requests * mean_request_s * 0.6).round(3)
        self._read_bytes = start["read_bytes"].copy()
        self._write_bytes = start["write_bytes"].copy()
        self._xid = np.zeros((n, g))
        self._temp: np.ndarray | None = None
        self._prev_t: int | None = None
        self._prev_ts: np.ndarray | None = None  # (nodes, 2) last sample time per target
        self._prev_silent = np.zeros(n, dtype=bool)
        self._newly_silent = self._prev_silent
        self._temp_reported = np.zeros((n, g))

    # --- public ---------------------------------------------------------------------------

    def scrape(self, t_ms: int) -> list[Series]:
        """Every series of every reporting node for the scrape round starting at ``t_ms``."""
        state, ts = self._step(t_ms)
        return self._series(state, ts)

    def advance(self, t_ms: int) -> None:
        """Compute the round at ``t_ms`` without building series (to fast-forward)."""
        self._step(t_ms)

    # --- one round ------------------------------------------------------------------------

    def _member_mask(self, epoch_index: int) -> np.ndarray:
        mask = self._member_masks.get(epoch_index)
        if mask is None:
            mask = np.zeros(len(self.hosts), dtype=bool)
            mask[list(self.plan.epochs[epoch_index].members)] = True
            self._member_masks[epoch_index] = mask
        return mask

    def _phase(self, t_ms: int) -> _Phase:
        n = len(self.hosts)
        epoch = self.plan.running_at(t_ms)
        if epoch is None:
            return _Phase(np.zeros(n, dtype=bool), False, 0.0, 0.0)
        member = self._member_mask(epoch.index)
        if t_ms < epoch.train_ms:
            return _Phase(member, True, 0.0, 0.0)
        interval = self.config.interval_ms
        overlap = self.plan.save_overlap(epoch, t_ms, t_ms + interval)
        return _Phase(member, False, overlap.stalled_ms / interval, overlap.save_share)

    def _step(self, t_ms: int) -> tuple[RoundState, np.ndarray]:
        cfg = self.config
        interval = cfg.interval_ms
        if t_ms < cfg.start_ms or (t_ms - cfg.start_ms) % interval:
            raise ValueError(f"t_ms={t_ms} is not on the scrape grid from {cfg.start_ms}")
        if self._prev_t is not None and t_ms <= self._prev_t:
            raise ValueError(f"rounds must move forward: {t_ms} after {self._prev_t}")
        n, g = len(self.hosts), cfg.gpus_per_node
        rng = np.random.default_rng((cfg.seed, _ROUND_STREAM, (t_ms - cfg.start_ms) // interval))
        # all of the round's baseline noise, drawn in a fixed order whatever the phase
        noise = _Noise(
            z=rng.standard_normal((n, 7)),
            zg=rng.standard_normal((n, g, 3)),
            u=rng.random(n),
            ug=rng.random((n, g, 2)),
        )
        jitter = rng.integers(-cfg.scrape_jitter_ms, cfg.scrape_jitter_ms + 1, size=(n, 2))
        ts = t_ms + self._traits.offset_ms + jitter

        phase = self._phase(t_ms)
        state = RoundState(
            t_ms=t_ms,
            prev_t_ms=self._prev_t,
            origin_ms=cfg.start_ms,
            interval_ms=interval,
            rng=rng,
            **self._node_rates(phase, noise),
            **self._gpu_gauges(phase, noise),
            xid=self._xid,
            idle_gpu_power_w=self._traits.power_idle,
            idle_gpu_temp_c=self._traits.temp_idle,
            silent=np.zeros(n, dtype=bool),
            reboot=np.zeros(n, dtype=bool),
        )
        for fault, node in self._faults:
            fault.apply(state, node)
        self._integrate(state, ts, noise.zg[:, :, 2])
        self._prev_t = t_ms
        self._newly_silent = state.silent & ~self._prev_silent
        self._prev_silent = state.silent
        return state, ts

    def _node_rates(self, phase: _Phase, noise: _Noise) -> dict[str, np.ndarray]:
        """node_exporter's rates and gauges: interrupts, processes, page-outs, NFS."""
        cal, tr = self.config.calibration, self._traits
        member, stall, z, u = phase.member, phase.stall, noise.z, noise.u
        interval_s = self.config.interval_ms / 1000.0
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
            pgpgout * (1.0 + 0.1 * np.abs(z[:, 6]))
            + write_save / 1024.0 * cal.pgpgout_save_fraction
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
        if phase.loading and self.config.restart_load_s > 0:
            rate = cal.load_bytes_per_node / self.config.restart_load_s * (1.0 + 0.05 * z[:, 5])
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
            * (
                idle_requests * cal.write_idle_response_s
                + save_requests * cal.write_save_response_s
            )
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

    def _gpu_gauges(self, phase: _Phase, noise: _Noise) -> dict[str, np.ndarray]:
        """dcgm-exporter's per-GPU gauges (and the temperature they lag toward)."""
        cal, tr = self.config.calibration, self._traits
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

    def _integrate(self, state: RoundState, ts: np.ndarray, temp_noise: np.ndarray) -> None:
        """Advance counters and temperatures to this round's sample times."""
        cal, interval_s = self.config.calibration, self.config.interval_ms / 1000.0
        # the first round reports the starting values
        dt = np.zeros(ts.shape) if self._prev_ts is None else (ts - self._prev_ts) / 1000.0
        self._prev_ts = ts
        reboot = state.reboot
        if reboot.any():
            for counter in (
                self._intr,
                self._pgpgout,
                self._read_bytes,
                self._write_bytes,
                self._nfs_requests,
                self._nfs_response,
                self._nfs_queue,
            ):
                counter[reboot] = 0.0
            dt[reboot] = np.minimum(dt[reboot], interval_s)  # up for less than a round
        dt_node = dt[:, 0]
        self._intr += np.rint(state.intr_per_s * dt_node)
        self._pgpgout += np.rint(state.pgpgout_per_s * dt_node)
        new_requests = np.rint(state.nfs_requests_per_s * dt_node[:, None])
        self._nfs_requests += new_requests
        self._nfs_response += new_requests * state.nfs_response_s
        self._nfs_queue += new_requests * state.nfs_queue_s
        self._read_bytes += np.rint(state.nfs_read_bytes_per_s * dt_node)
        self._write_bytes += np.rint(state.nfs_write_bytes_per_s * dt_node)

        target = state.gpu_temp_target_c
        if self._temp is None:
            self._temp = target.copy()
        else:
            alpha = 1.0 - np.exp(-dt[:, 1] / cal.gpu_temp_time_constant_s)
            self._temp += alpha[:, None] * (target - self._temp)
        self._temp_reported = np.rint(self._temp + cal.gpu_temp_noise_c * temp_noise)

    # --- series ---------------------------------------------------------------------------

    def _allocated(self, t_ms: int) -> np.ndarray:
        """Nodes of the job's latest epoch (still allocated while the job is down)."""
        try:
            return self._member_mask(self.plan.epoch_at(t_ms).index)
        except ValueError:
            return np.zeros(len(self.hosts), dtype=bool)

    def _series(self, state: RoundState, ts: np.ndarray) -> list[Series]:
        n = len(self.hosts)
        g = self.config.gpus_per_node
        node = np.empty((n, _NODE_COLUMNS))
        node[:, 0] = self._intr
        node[:, 1] = state.procs_running
        node[:, 2] = self._pgpgout
        node[:, 3:6] = self._nfs_requests
        node[:, 6:9] = self._nfs_response.round(6)
        node[:, 9:12] = self._nfs_queue.round(6)
        node[:, 12] = self._read_bytes
        node[:, 13] = self._write_bytes
        gpu = np.empty((n, len(_GPU_GAUGES), g))
        gpu[:, 0] = np.clip(np.rint(state.gpu_util), 0.0, 100.0)
        gpu[:, 1] = state.gpu_power_w.round(3)
        gpu[:, 2] = self._temp_reported
        gpu[:, 3] = state.xid
        values = np.concatenate((node, gpu.reshape(n, -1)), axis=1)
        stamps = np.empty(values.shape, dtype=np.int64)
        stamps[:, :_NODE_COLUMNS] = ts[:, :1]
        stamps[:, _NODE_COLUMNS:] = ts[:, 1:]
        live = ~state.silent
        allocated = self._allocated(state.t_ms)
        labels = list(
            chain.from_iterable(
                (self._job_labels if allocated[i] else self._labels)[i]
                for i in np.flatnonzero(live)
            )
        )
        if not live.all():
            values, stamps = values[live], stamps[live]
        with _gc_paused():
            out = [
                Series(lbl, [(t, v)])
                for lbl, t, v in zip(
                    labels, stamps.ravel().tolist(), values.ravel().tolist(), strict=True
                )
            ]
        if self.config.emit_stale_markers:
            out.extend(self._stale_markers(self._newly_silent, ts))
        return out

    def _stale_markers(self, newly_silent: np.ndarray, ts: np.ndarray) -> list[Series]:
        """Stale markers for every series of the nodes that fell silent this round."""
        if not newly_silent.any():
            return []
        from streams.ingest.remote_write import STALE_NAN

        node_columns = range(_NODE_COLUMNS)
        return [
            Series(labels, [(int(ts[i, 0] if column in node_columns else ts[i, 1]), STALE_NAN)])
            for i in np.flatnonzero(newly_silent)
            for column, labels in enumerate(self._labels[i])
        ]
