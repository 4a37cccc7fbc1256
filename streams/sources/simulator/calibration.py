"""The simulator's numbers, in one place, each traced to its source.

Most come from DESIGN.md section 7 (the 63-node B200 report, seed 000);
where the report gives no number the value is a plausible one for an
8 x B200 node and says so. The simulator reads nothing but this object, so
re-calibrating is editing data, not code.
"""

from __future__ import annotations

from dataclasses import dataclass

Range = tuple[float, float]


def _check_range(name: str, r: Range, *, low: float = 0.0) -> None:
    if not low <= r[0] <= r[1]:
        raise ValueError(f"{name} must be an ordered range with values >= {low}, got {r}")


@dataclass(frozen=True)
class Calibration:
    """Levels per activity phase, node-to-node spread and per-scrape noise.

    Ranges ``(lo, hi)`` are drawn uniformly, once per node (or per GPU) when
    the value is a persistent trait and once per scrape when it is noise.
    Relative spreads and noises are standard deviations as a fraction of the
    level. Rates are per second; byte sizes in bytes; times in seconds.
    """

    # --- node_intr_total (report: ~300 K/s on a training node, peers flat) ------------------------
    intr_train_per_s: float = 300_000.0
    intr_node_spread: float = 0.02  # persistent per-node offset (relative sd)
    intr_noise: float = 0.008  # per scrape (relative sd)
    intr_save_ratio: float = 0.9  # interrupts while stalled in a checkpoint save (assumed)
    intr_load_per_s: float = 160_000.0  # restart load: NFS reads, GPUs mostly waiting (assumed)
    intr_idle_per_s: Range = (42_000.0, 58_000.0)  # per node; job dead or spare (brief: 40-60 K)

    # --- node_procs_running (report: drops to 0 when the workers die) ----------------------------
    procs_train: Range = (12.0, 16.0)  # per-node base; scrape noise keeps it within 10-20
    procs_train_limits: Range = (10.0, 20.0)
    procs_noise: float = 1.2  # absolute sd, rounded to whole processes
    procs_load: Range = (6.0, 12.0)
    procs_idle: Range = (1.0, 2.0)

    # --- node_vmstat_pgpgout (kB paged out) -------------------------------------------------------
    pgpgout_train_per_s: Range = (200.0, 800.0)  # per node: logs, metrics (assumed)
    pgpgout_idle_per_s: Range = (20.0, 80.0)
    pgpgout_save_fraction: float = 0.5  # kB of writeback per kB of checkpoint written (assumed)

    # --- DCGM per GPU --------------------------------------------------------------------------
    gpu_util_train_noise: float = 0.5  # util = 100 - floor(|N(0, noise)|): mostly 100, some 99
    gpu_util_save: Range = (0.0, 30.0)  # while a save stalls compute (brief: ~0-30 %)
    gpu_util_load: Range = (5.0, 35.0)  # report: Load phase has GPU util < 50 %
    gpu_power_train_w: float = 945.0  # brief: 900-1000 W; capped at the 1000 W board limit
    gpu_power_spread_w: float = 15.0  # persistent per GPU
    gpu_power_noise_w: float = 10.0
    gpu_power_limits_w: Range = (900.0, 1000.0)
    gpu_power_save_w: Range = (250.0, 350.0)
    gpu_power_load_w: Range = (250.0, 400.0)
    gpu_power_idle_w: Range = (150.0, 195.0)  # per GPU; brief: idle ~150-200 W
    gpu_power_idle_noise_w: float = 2.0
    gpu_temp_train_c: Range = (58.0, 67.0)  # per GPU target; brief: 55-70 C
    gpu_temp_idle_c: Range = (32.0, 40.0)
    gpu_temp_noise_c: float = 0.6
    gpu_temp_time_constant_s: float = 90.0  # first-order thermal lag toward the target

    # --- NFS mountstats (report: WRITE 2.03 s/request, 1.89 s of it queue;
    #     READ 78.2 ms, 57 % queue)
    getattr_per_s: Range = (8.0, 20.0)  # per node (assumed)
    getattr_response_s: Range = (0.002, 0.004)  # per node; brief: a few ms
    getattr_queue_s: float = 40e-6
    getattr_save_factor: float = 2.0  # rate and response x (1 + factor * fraction of bucket saving)
    getattr_load_factor: float = 4.0
    read_idle_per_s: float = 0.2  # training reads come from the page cache (report: NFS ~ 0)
    read_idle_response_s: float = 0.020
    read_idle_queue_s: float = 0.005
    read_rpc_bytes: float = 440 * 1024.0  # report: 440 KB per READ
    read_request_s: float = 0.0782
    read_queue_fraction: float = 0.57
    write_idle_per_s: float = 0.5  # logs and small files outside saves (assumed)
    write_idle_rpc_bytes: float = 64 * 1024.0
    write_idle_response_s: float = 0.003
    write_idle_queue_s: float = 0.0005
    write_rpc_bytes: float = 1021 * 1024.0  # report: 1,021 KB per WRITE RPC
    write_save_queue_s: float = 1.89
    write_save_response_s: float = 0.14  # 2.03 s - 1.89 s
    nfs_node_spread: float = 0.08  # persistent per-node latency factor (relative sd)
    nfs_noise: float = 0.05

    # --- checkpoint volume (report: 48 nodes ~26 GB, 12 nodes ~2 GB per save) ------------------
    save_bytes_heavy: float = 26e9
    save_bytes_light: float = 2e9
    save_heavy_fraction: float = 0.8  # 48 of 60
    save_bytes_noise: float = 0.03

    # --- restart load (report: ~200 GB per node into the page cache) --------------------------
    load_bytes_per_node: float = 200e9

    def __post_init__(self) -> None:
        for name in (
            "intr_idle_per_s",
            "procs_train",
            "procs_train_limits",
            "procs_load",
            "procs_idle",
            "pgpgout_train_per_s",
            "pgpgout_idle_per_s",
            "gpu_util_save",
            "gpu_util_load",
            "gpu_power_limits_w",
            "gpu_power_save_w",
            "gpu_power_load_w",
            "gpu_power_idle_w",
            "gpu_temp_train_c",
            "gpu_temp_idle_c",
            "getattr_per_s",
            "getattr_response_s",
        ):
            _check_range(name, getattr(self, name))
        if max(self.gpu_util_save[1], self.gpu_util_load[1]) > 100.0:
            raise ValueError("GPU utilisation ranges must stay within 0-100 %")
        if not 0.0 <= self.save_heavy_fraction <= 1.0:
            raise ValueError("save_heavy_fraction must be within [0, 1]")
        if not 0.0 <= self.read_queue_fraction < 1.0:
            raise ValueError("read_queue_fraction must be within [0, 1)")
        if self.gpu_temp_time_constant_s <= 0:
            raise ValueError("gpu_temp_time_constant_s must be > 0")
        for name in ("read_rpc_bytes", "write_rpc_bytes", "write_idle_rpc_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
