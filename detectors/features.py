"""Feature definitions: which Prometheus series become which node feature.

A *feature* is one number per node per 30-s bucket. It is built from one or
more source series (a metric name plus label matchers); counters become
per-second rates, per-GPU (or per-mount) series are reduced to the node's worst
one, and a ``per`` denominator turns totals into "seconds per request".

The catalog is data, not code branches: the ingest's frame builder and the
detectors both read it, and operators can select a subset in settings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

Kind = Literal["counter", "gauge"]
Reduce = Literal["max", "min", "sum"]
Direction = Literal["up", "down", "both"]


@dataclass(frozen=True)
class FeatureSpec:
    """How one node feature is derived from Prometheus series and how it is judged.

    ``metrics`` lists the source metric name first and aliases after it (e.g.
    all-smi names beside dcgm-exporter names). ``match`` holds extra label
    equalities a series must carry. ``per`` names a second counter with the same
    other labels; the feature is then rate(metric) / rate(per), e.g. NFS response
    seconds per request. ``reduce`` combines several series of one node (GPUs,
    mounts); for max/min the winning series' ``gpu`` label is remembered so the
    alert can name the GPU. ``direction`` says which deviation is bad.
    ``abs_floor`` and ``rel_floor`` bound the peer spread from below so z stays
    finite when peers are identical. ``collapse_ratio``: a value below this
    fraction of the peer median is a *hard* signature (fires at once), provided
    the median is at least ``collapse_min_median``. ``scored`` is False for
    features that are carried in frames but judged elsewhere (XID, row remaps).
    ``per_gpu`` keeps every GPU's value (frame key ``name@gpu``) instead of
    reducing them: per-GPU trackers (last XID, remapped rows) need each one.
    ``klass`` is the part of the machine a deviation points at (compute,
    network, memory, interconnect, host, cpu): a deviation alert led by this
    feature carries it. ``corroborating`` features (temperatures) only count
    when another feature of the node deviates too: heat alone convicts nothing.
    """

    name: str
    metrics: tuple[str, ...]
    kind: Kind
    reduce: Reduce = "max"
    direction: Direction = "both"
    abs_floor: float = 1e-6
    rel_floor: float = 0.01
    match: Mapping[str, str] = field(default_factory=dict)
    per: str | None = None
    collapse_ratio: float | None = None
    collapse_min_median: float = 0.0
    scored: bool = True
    per_gpu: bool = False
    klass: str | None = None
    corroborating: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.metrics:
            raise ValueError("a feature needs a name and at least one source metric")
        if self.abs_floor <= 0:
            raise ValueError(f"{self.name}: abs_floor must be > 0 (keeps z finite)")
        if self.rel_floor < 0:
            raise ValueError(f"{self.name}: rel_floor must be >= 0")
        if self.per is not None and self.kind != "counter":
            raise ValueError(f"{self.name}: a per-request ratio needs counters")
        if self.per_gpu and self.scored:
            raise ValueError(f"{self.name}: per-GPU features are not peer-scored (scored=False)")
        if self.collapse_ratio is not None and not 0 < self.collapse_ratio < 1:
            raise ValueError(f"{self.name}: collapse_ratio must be in (0, 1)")


# The default catalog. Floors are in the feature's own unit and sized to the
# exporter's resolution (e.g. 1 % GPU util, 1 process, 1 K interrupts/s), so a
# group of identical peers does not turn rounding noise into large z.
DEFAULT_FEATURES: tuple[FeatureSpec, ...] = (
    FeatureSpec(
        "gpu_util",
        ("DCGM_FI_DEV_GPU_UTIL", "all_smi_gpu_utilization"),
        "gauge",
        reduce="min",
        direction="down",
        abs_floor=2.0,
        rel_floor=0.02,
        klass="compute",
    ),
    FeatureSpec(
        "gpu_power_w",
        ("DCGM_FI_DEV_POWER_USAGE", "all_smi_gpu_power_consumption_watts"),
        "gauge",
        reduce="min",
        direction="both",
        abs_floor=10.0,
        rel_floor=0.02,
        klass="compute",
    ),
    FeatureSpec(
        "gpu_temp_c",
        ("DCGM_FI_DEV_GPU_TEMP", "all_smi_gpu_temperature_celsius"),
        "gauge",
        reduce="max",
        direction="up",
        abs_floor=1.5,
        rel_floor=0.01,
        klass="compute",
        corroborating=True,
    ),
    FeatureSpec(
        "intr_rate",
        ("node_intr_total",),
        "counter",
        reduce="sum",
        direction="down",
        abs_floor=2_000.0,
        rel_floor=0.02,
        collapse_ratio=0.5,
        collapse_min_median=20_000.0,
        klass="host",
    ),
    FeatureSpec(
        "procs_running",
        ("node_procs_running",),
        "gauge",
        reduce="sum",
        direction="down",
        abs_floor=1.0,
        rel_floor=0.05,
        collapse_ratio=0.2,
        collapse_min_median=3.0,
        klass="host",
    ),
    FeatureSpec(
        "pgpgout_rate",
        ("node_vmstat_pgpgout",),
        "counter",
        reduce="sum",
        direction="up",
        abs_floor=100.0,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_getattr_rtt_s",
        ("node_mountstats_nfs_operations_response_time_seconds_total",),
        "counter",
        match={"operation": "GETATTR"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=5e-4,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_write_queue_s",
        ("node_mountstats_nfs_operations_queue_time_seconds_total",),
        "counter",
        match={"operation": "WRITE"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=0.05,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "procs_blocked",
        ("node_procs_blocked",),
        "gauge",
        reduce="sum",
        direction="up",
        abs_floor=1.0,
        rel_floor=0.1,
        klass="cpu",
    ),
    FeatureSpec(
        "ctx_switch_rate",
        ("node_context_switches_total",),
        "counter",
        reduce="sum",
        direction="both",
        abs_floor=2_000.0,
        rel_floor=0.05,
        klass="cpu",
    ),
    FeatureSpec(
        "cpu_idle_cores",
        ("node_cpu_seconds_total",),
        "counter",
        match={"mode": "idle"},
        reduce="sum",
        direction="down",
        abs_floor=0.5,
        rel_floor=0.05,
        klass="cpu",
    ),
    FeatureSpec(
        "tcp_alloc",
        ("node_sockstat_TCP_alloc",),
        "gauge",
        reduce="sum",
        direction="both",
        abs_floor=10.0,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(  # kernel memory: slab growth precedes some driver / filesystem hangs
        "slab_bytes",
        ("node_memory_Slab_bytes",),
        "gauge",
        reduce="sum",
        direction="up",
        abs_floor=64e6,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_getattr_queue_s",
        ("node_mountstats_nfs_operations_queue_time_seconds_total",),
        "counter",
        match={"operation": "GETATTR"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=5e-4,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_read_rtt_s",
        ("node_mountstats_nfs_operations_response_time_seconds_total",),
        "counter",
        match={"operation": "READ"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=5e-3,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_read_queue_s",
        ("node_mountstats_nfs_operations_queue_time_seconds_total",),
        "counter",
        match={"operation": "READ"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=5e-3,
        rel_floor=0.05,
        klass="host",
    ),
    FeatureSpec(
        "nfs_write_rtt_s",
        ("node_mountstats_nfs_operations_response_time_seconds_total",),
        "counter",
        match={"operation": "WRITE"},
        per="node_mountstats_nfs_operations_requests_total",
        reduce="max",
        direction="up",
        abs_floor=0.05,
        rel_floor=0.05,
        klass="host",
    ),
    # NFS traffic in bytes/s (every mount summed): what the phase rules read
    # (detectors.phase: a checkpoint save is a write burst, a restart load a
    # read burst); carried in frames, not peer-scored.
    FeatureSpec(
        "nfs_write_bytes_rate",
        ("node_mountstats_nfs_write_bytes_total",),
        "counter",
        reduce="sum",
        scored=False,
    ),
    FeatureSpec(
        "nfs_read_bytes_rate",
        ("node_mountstats_nfs_read_bytes_total",),
        "counter",
        reduce="sum",
        scored=False,
    ),
    FeatureSpec(
        "gpu_sm_active",
        ("DCGM_FI_PROF_SM_ACTIVE",),
        "gauge",
        reduce="min",
        direction="both",
        abs_floor=0.02,
        rel_floor=0.02,
        klass="compute",
    ),
    FeatureSpec(
        "gpu_sm_clock_mhz",
        ("DCGM_FI_DEV_SM_CLOCK", "all_smi_gpu_frequency_mhz"),
        "gauge",
        reduce="min",
        direction="down",
        abs_floor=15.0,
        rel_floor=0.01,
        klass="compute",
    ),
    FeatureSpec(
        "gpu_mem_temp_c",
        ("DCGM_FI_DEV_MEMORY_TEMP",),
        "gauge",
        reduce="max",
        direction="up",
        abs_floor=1.5,
        rel_floor=0.01,
        klass="memory",
        corroborating=True,
    ),
    # Error counters: peers normally sit at 0/s, so the floor is what a handful
    # of errors in one bucket must beat.
    FeatureSpec(
        "pcie_replay_rate",
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.02,
        rel_floor=0.1,
        klass="interconnect",
    ),
    FeatureSpec(
        "nvlink_bw",
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",),
        "counter",
        reduce="min",
        direction="down",
        abs_floor=1e6,
        rel_floor=0.05,
        klass="interconnect",
    ),
    FeatureSpec(
        "nvlink_crc_err_rate",
        ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.02,
        rel_floor=0.1,
        klass="interconnect",
    ),
    FeatureSpec(
        "nvlink_replay_err_rate",
        ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.02,
        rel_floor=0.1,
        klass="interconnect",
    ),
    FeatureSpec(
        "nvlink_recovery_err_rate",
        ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.02,
        rel_floor=0.1,
        klass="interconnect",
    ),
    FeatureSpec(
        "ecc_sbe_rate",
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.02,
        rel_floor=0.1,
        klass="memory",
    ),
    FeatureSpec(
        "ecc_dbe_rate",
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=0.005,
        rel_floor=0.1,
        klass="memory",
    ),
    FeatureSpec(
        "ib_xmit_wait_rate",
        ("node_infiniband_port_transmit_wait_total",),
        "counter",
        reduce="max",
        direction="up",
        abs_floor=1_000.0,
        rel_floor=0.1,
        klass="network",
    ),
    FeatureSpec(
        "ib_tx_bytes_rate",
        ("node_infiniband_port_data_transmitted_bytes_total",),
        "counter",
        reduce="min",
        direction="down",
        abs_floor=1e6,
        rel_floor=0.05,
        klass="network",
    ),
    # The trainer's own view; equal on every rank of a synchronous job, so it
    # rarely separates a node from its peers — fail-slow reads it job-wide.
    FeatureSpec(
        "iteration_time_s",
        ("trainer_iteration_time_seconds",),
        "gauge",
        reduce="max",
        direction="up",
        abs_floor=0.01,
        rel_floor=0.02,
    ),
    FeatureSpec(
        "tokens_per_s",
        ("trainer_tokens_per_second",),
        "gauge",
        reduce="min",
        direction="down",
        abs_floor=100.0,
        rel_floor=0.02,
    ),
    # Per-GPU figures for fail-slow localisation (detectors.failslow): a slow GPU
    # stays busy while its peers wait, so its SM activity is *higher* than theirs
    # -- the node's min (gpu_sm_active) hides it; its clock is lower, and a
    # throttling reason bit says why. Compared per GPU against the role's GPUs.
    FeatureSpec("sm_active", ("DCGM_FI_PROF_SM_ACTIVE",), "gauge", scored=False, per_gpu=True),
    FeatureSpec(
        "sm_clock_mhz",
        ("DCGM_FI_DEV_SM_CLOCK", "all_smi_gpu_frequency_mhz"),
        "gauge",
        scored=False,
        per_gpu=True,
    ),
    FeatureSpec(  # NVML clock event (formerly "throttle") reasons: a bitmask
        "clock_event_reasons",
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        "gauge",
        scored=False,
        per_gpu=True,
    ),
    # Per-GPU health, judged by detectors.gpu_health (not against peers).
    # DCGM's XID gauge holds the *last* XID of each GPU: only changes matter.
    FeatureSpec("xid_last", ("DCGM_FI_DEV_XID_ERRORS",), "gauge", scored=False, per_gpu=True),
    FeatureSpec(
        "remap_correctable",
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",),
        "gauge",
        scored=False,
        per_gpu=True,
    ),
    FeatureSpec(
        "remap_uncorrectable",
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",),
        "gauge",
        scored=False,
        per_gpu=True,
    ),
    FeatureSpec(
        "remap_failure", ("DCGM_FI_DEV_ROW_REMAP_FAILURE",), "gauge", scored=False, per_gpu=True
    ),
    FeatureSpec(
        "remap_pending", ("DCGM_FI_DEV_ROW_REMAP_PENDING",), "gauge", scored=False, per_gpu=True
    ),
)


def per_gpu_key(feature: str, gpu: str) -> str:
    """The frame key of one GPU's value of a per-GPU feature."""
    return f"{feature}@{gpu}"


@lru_cache(maxsize=1 << 14)
def split_per_gpu_key(key: str) -> tuple[str, str] | None:
    """``(feature, gpu)`` for a per-GPU frame key, None for a node feature.

    Cached: every frame repeats the same ~100 keys, and the per-GPU health path
    splits each of them per node and bucket."""
    feature, sep, gpu = key.partition("@")
    return (feature, gpu) if sep else None


def select_features(
    catalog: Iterable[FeatureSpec], names: Iterable[str] | None
) -> tuple[FeatureSpec, ...]:
    """The catalog restricted to ``names`` (all of it when ``names`` is None)."""
    catalog = tuple(catalog)
    if names is None:
        return catalog
    wanted = list(names)
    known = {f.name for f in catalog}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(
            f"unknown feature(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return tuple(f for f in catalog if f.name in set(wanted))


def class_of(signals: Iterable[object], features: Iterable[FeatureSpec]) -> str | None:
    """The class of the strongest signal whose feature has one (signals come strongest first)."""
    klass = {f.name: f.klass for f in features}
    for signal in signals:
        found = klass.get(getattr(signal, "feature", ""))
        if found:
            return found
    return None
