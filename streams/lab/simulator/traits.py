"""Persistent per-node, per-GPU and per-port properties, drawn once from the seed.

Two independent streams: the first holds what the simulator has always drawn
(in the same order, so a config's base series do not change when metric
families are added); the second holds everything the optional families need.
Faults may reshape traits once before the first round (``ShapesTraits``,
e.g. ``TwoPopulations`` choosing which nodes stage little).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from streams.lab.simulator.state import NFS_OPERATIONS

if TYPE_CHECKING:
    from streams.lab.simulator.config import ClusterConfig

# Seed-sequence keys that keep the simulator's random streams apart.
BASE_TRAITS_STREAM = 1
EXTRA_TRAITS_STREAM = 3


def _uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class NodeTraits:
    """What makes each node (GPU, port) itself: levels, offsets, identities."""

    def __init__(self, config: ClusterConfig):
        cal = config.calibration
        n, g = len(config.hosts), config.gpus_per_node
        rng = np.random.default_rng((config.seed, BASE_TRAITS_STREAM))
        jitter = config.scrape_jitter_ms
        low, high = jitter + 1, config.interval_ms - jitter - 1
        # one offset per scrape target: [node_exporter, dcgm] (+ trainer, below)
        base_offsets = rng.integers(low, high, size=(n, 2))
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
        self.heavy = rng.permutation(n) < round(cal.save_heavy_fraction * n)
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

        x = np.random.default_rng((config.seed, EXTRA_TRAITS_STREAM))
        p, c = config.ib_devices, config.cpus_per_node
        self.offset_ms = np.concatenate((base_offsets, x.integers(low, high, size=(n, 1))), axis=1)
        self.cpu_user_train = x.uniform(*cal.cpu_user_train, size=n)
        self.context_switches_train = cal.context_switches_train_per_s * np.clip(
            1.0 + cal.context_switches_spread * x.standard_normal(n), 0.8, 1.2
        )
        self.context_switches_idle = x.uniform(*cal.context_switches_idle_per_s, size=n)
        self.shmem_base = x.uniform(*cal.shmem_base_bytes, size=n)
        self.mem_available = cal.mem_total_bytes * x.uniform(*cal.mem_available_fraction, size=n)
        self.ib_tx_train = cal.ib_tx_train_bytes_per_s * np.clip(
            1.0 + cal.ib_port_spread * x.standard_normal((n, p)), 0.9, 1.1
        )
        self.sm_active_train = x.uniform(*cal.sm_active_train, size=(n, g))
        self.sm_clock_train = x.uniform(*cal.sm_clock_train_mhz, size=(n, g))
        self.mem_temp_offset = x.uniform(*cal.mem_temp_offset_c, size=(n, g))
        old = x.random((n, g)) < cal.remap_gpu_fraction
        rows = np.rint(x.uniform(*cal.remap_old_rows, size=(n, g)))
        self.remap_correctable = np.where(old, rows, 0.0)
        self.iteration_time_s = float(x.uniform(*cal.iteration_time_s))
        self.counters_start["context_switches"] = x.uniform(1e11, 1e12, size=n).round()
        self.counters_start["cpu_seconds"] = x.uniform(1e5, 1e6, size=(n, c, 1)) * np.array(
            [0.75, 0.01, 0.04, 0.2]  # idle, iowait, system, user: a mostly busy history
        )
        self.counters_start["ib"] = x.uniform(1e14, 1e15, size=(n, p, 3)).round()

        self.set_heavy(self.heavy, config)

    def set_heavy(self, heavy: np.ndarray, config: ClusterConfig) -> None:
        """Which nodes stage and write the large checkpoint share (the report's two populations).

        Heavy nodes write ``save_bytes_heavy`` per save (~26 GB) and keep
        ``stage_bytes_heavy`` in /dev/shm (~48 GB); the others ~2 GB and ~9 GB.
        """
        cal = config.calibration
        self.heavy = np.asarray(heavy, dtype=bool)
        self.save_bytes = np.where(self.heavy, cal.save_bytes_heavy, cal.save_bytes_light)
        self.stage_bytes = np.where(self.heavy, cal.stage_bytes_heavy, cal.stage_bytes_light)


class ShapesTraits(ABC):
    """A fault (or condition) that changes the cluster's persistent traits once."""

    @abstractmethod
    def shape_traits(self, traits: NodeTraits, config: ClusterConfig) -> None:
        """Reshape ``traits`` before the first round."""


def shaped_traits(config: ClusterConfig) -> NodeTraits:
    """The cluster's traits, as the config's faults shape them (in their order)."""
    traits = NodeTraits(config)
    for fault in config.faults:
        if isinstance(fault, ShapesTraits):
            fault.shape_traits(traits, config)
    return traits
