"""What the simulated cluster looks like and what happens to it: ``ClusterConfig``.

Below every other simulator module (they read a config; it reads none of them
but the fault specs it holds and the calibration), so their imports form a tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from streams.lab.simulator.calibration import Calibration
from streams.lab.simulator.faults import Fault

__all__ = ["ALL_FAMILIES", "DEFAULT_START_MS", "METRIC_FAMILIES", "ClusterConfig"]

DEFAULT_START_MS = 1_759_276_800_000  # 2025-10-01T00:00:00Z, a multiple of 30 s
_MAX_GPUS = 16

# The optional metric families (``layout`` says which series each adds).
CPU, MEMORY, INFINIBAND, GPU_PERF, ROW_REMAP, TRAINER_FAMILY = (
    "cpu",
    "memory",
    "infiniband",
    "gpu_perf",
    "row_remap",
    "trainer",
)
METRIC_FAMILIES = frozenset({CPU, MEMORY, INFINIBAND, GPU_PERF, ROW_REMAP, TRAINER_FAMILY})
ALL_FAMILIES = METRIC_FAMILIES


@dataclass(frozen=True)
class ClusterConfig:
    """What the simulated cluster looks like and what happens to it.

    ``job_nodes`` run the training job, ``spares`` idle beside them (hosts are
    ``<host_prefix><number:03d>`` from ``first_host_number``; the spares are
    the last hosts). ``start_ms`` opens the simulation mid-training and must sit
    on the scrape grid (a multiple of the interval), so a round's samples fall
    in one bucket. Checkpoint saves come every ``checkpoint_interval_s``
    (median; log-normal jitter ``checkpoint_jitter``), the first one
    ``first_save_s`` after ``start_ms`` when set, and last ``save_duration_s``;
    a job killed by a fault restarts ``restart_delay_s`` after it died, then
    loads its checkpoint for ``restart_load_s``.
    ``emit_stale_markers`` makes series that stop (a node or exporter falling
    silent, a GPU vanishing, the trainer exiting) send Prometheus stale markers
    once, as a failed scrape does (off: they just stop).

    ``metric_families`` switches on optional series beyond the base
    node_exporter / dcgm-exporter set (see ``layout``): ``cpu``, ``memory``,
    ``infiniband``, ``gpu_perf``, ``row_remap``, ``trainer`` -- or
    ``ALL_FAMILIES``. They are off by default: all of them take a 63-node
    round from 2,898 to 9,885 series and its generation from ~1.5 to ~5 ms
    (4 to 14 s per simulated day); the scenario library turns them all on.
    ``cpus_per_node`` CPUs carry ``node_cpu_seconds_total`` (a small count --
    a real B200 host has 224 -- because the series are what cost, and detectors
    read the node's sums);
    ``ib_devices`` HCAs (``mlx5_<k>``, port 1) carry the InfiniBand counters;
    the trainer's ranks fill ``pipeline_stages`` stages in rank order.

    Real-fleet shapes (see ``fleet``; the defaults keep the simulator's
    original, tidy behaviour):

    - ``job_label_on``: which series carry ``job_label`` on allocated nodes:
      ``"all"`` (a relabel rule on every target) or ``"dcgm"`` (only
      dcgm-exporter's GPU series, as its ``hpc_job`` from Slurm's job-mapping
      files; node_exporter carries none). ``job_label=None``: no job label at
      all (group by ``cluster`` only).
    - ``job_label_vanishes_at_xid``: from the scrape round in which a
      job-stopping fault's XID first shows, the dying job's nodes carry no job
      label (the scheduler's epilog removed it) until the restart.
    - ``role_label``: a role label (e.g. ``pipeline_stage``) beside the job label,
      the node's pipeline stage by rank (``pipeline_stages`` stages).
    - ``scrape_offsets``: ``"inside"`` draws each target's offset so its samples
      (with jitter) stay inside their round's bucket; ``"spread"`` hashes the
      target (and replica, and seed) to an offset anywhere in the interval as
      Prometheus does, so with ``scrape_jitter_ms`` (up to 500 ms in real
      fleets) samples land up to that far past their round's bucket, in the
      next one (never before their round: a scrape shows its round's state).
    - ``replicas``: an HA Prometheus pair (or more): every series is sent once
      per replica, differing only in ``replica_label``; each replica scrapes at
      its own offsets and jitter (its counters read at its own times).
    - ``restart_first_save_s``: the first save after a restart comes this long
      after training resumes (None: one checkpoint interval).
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
    first_save_s: float | None = None  # None: one interval after start_ms
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
    metric_families: frozenset[str] = frozenset()
    cpus_per_node: int = 4
    ib_devices: int = 8
    pipeline_stages: int = 4
    trainer_job: str = "trainer"
    trainer_port: int = 9500
    job_label_on: str = "all"
    job_label_vanishes_at_xid: bool = False
    role_label: str | None = None
    scrape_offsets: str = "inside"
    replicas: tuple[str, ...] = ()
    replica_label: str = "prometheus_replica"
    restart_first_save_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(self.faults))
        object.__setattr__(self, "metric_families", frozenset(self.metric_families))
        unknown = sorted(self.metric_families - ALL_FAMILIES)
        if unknown:
            raise ValueError(
                f"unknown metric_families {unknown}; known: {', '.join(sorted(ALL_FAMILIES))}"
            )
        if not 1 <= self.cpus_per_node <= 256 or not 0 <= self.ib_devices <= 16:
            raise ValueError("need cpus_per_node within 1..256 and ib_devices within 0..16")
        if self.pipeline_stages < 1:
            raise ValueError("pipeline_stages must be >= 1")
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
        if self.first_save_s is not None and self.first_save_s < 0:
            raise ValueError("first_save_s must be >= 0")
        if self.restart_delay_s < 0 or self.restart_load_s < 0:
            raise ValueError("restart_delay_s and restart_load_s must be >= 0")
        self._check_fleet_shape()
        for fault in self.faults:
            if not isinstance(fault, Fault):
                raise ValueError(f"not a fault spec: {fault!r}")
            fault.check(self.hosts, self.gpus_per_node)

    def _check_fleet_shape(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        if self.job_label_on not in ("all", "dcgm"):
            raise ValueError("job_label_on must be 'all' or 'dcgm'")
        if self.scrape_offsets not in ("inside", "spread"):
            raise ValueError("scrape_offsets must be 'inside' or 'spread'")
        if self.scrape_jitter_ms > 1000:
            raise ValueError("scrape_jitter_ms must be <= 1000")
        if self.role_label is not None and (not self.role_label or self.job_label is None):
            raise ValueError("role_label needs a job_label beside it")
        if self.job_label_vanishes_at_xid and self.job_label is None:
            raise ValueError("job_label_vanishes_at_xid needs a job_label")
        if len(set(self.replicas)) != len(self.replicas) or not all(self.replicas):
            raise ValueError("replicas must be distinct non-empty names")
        if self.replicas and not self.replica_label:
            raise ValueError("replica_label must be non-empty")
        if self.restart_first_save_s is not None and self.restart_first_save_s < 0:
            raise ValueError("restart_first_save_s must be >= 0")

    @property
    def interval_ms(self) -> int:
        return int(self.scrape_interval_s * 1000)

    @property
    def job_label_layout(self) -> str:
        """``"all"``, ``"dcgm"`` or ``"none"``: which series carry the job label."""
        return "none" if self.job_label is None else self.job_label_on

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
