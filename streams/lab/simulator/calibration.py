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

    # --- /dev/shm staging (report: 48 nodes stage ~48 GB of checkpoint, 12 nodes ~9 GB) ---------
    stage_bytes_heavy: float = 48e9
    stage_bytes_light: float = 9e9
    shmem_base_bytes: Range = (0.5e9, 2.0e9)  # per node: NCCL, CUDA IPC (assumed)
    mem_total_bytes: float = 2.0 * 2**40  # 2 TiB host memory (assumed, an HGX B200 host)
    mem_available_fraction: Range = (0.55, 0.70)  # per node, before staging (page cache etc.)
    mem_available_noise: float = 0.003

    # --- CPU time, run queue, context switches (assumed: the report gives no figures) -----------
    # Fractions of all CPU time; idle is what is left. The simulated host has
    # ``ClusterConfig.cpus_per_node`` CPUs; per-CPU shares scatter by ``cpu_noise``.
    cpu_user_train: Range = (0.18, 0.30)  # per node: data loaders, NCCL proxies, Python
    cpu_system_train: float = 0.06
    cpu_iowait_train: float = 0.004
    cpu_iowait_save: float = 0.10  # x fraction of the bucket saving (NFS writes)
    cpu_user_load: float = 0.12
    cpu_system_load: float = 0.10
    cpu_iowait_load: float = 0.06
    cpu_user_idle: float = 0.01
    cpu_system_idle: float = 0.005
    cpu_iowait_idle: float = 0.001
    cpu_noise: float = 0.08  # relative sd per CPU per scrape
    procs_blocked_train: float = 0.2  # Poisson means of node_procs_blocked (D state)
    procs_blocked_save: float = 4.0  # x fraction of the bucket saving
    procs_blocked_load: float = 3.0
    procs_blocked_idle: float = 0.05
    load_time_constant_s: float = 60.0  # node_load1 is a 1-min exponential average
    context_switches_train_per_s: float = 180_000.0
    context_switches_spread: float = 0.05  # persistent per node (relative sd)
    context_switches_load_per_s: float = 90_000.0
    context_switches_idle_per_s: Range = (15_000.0, 25_000.0)
    context_switches_noise: float = 0.03

    # --- InfiniBand compute fabric, per HCA port (assumed: NDR 400 Gb/s = 50 GB/s per port) ----
    ib_tx_train_bytes_per_s: float = 18e9  # gradient all-reduce, ~36 % of line rate on average
    ib_port_spread: float = 0.02  # persistent per port (relative sd)
    ib_noise: float = 0.04
    ib_idle_bytes_per_s: float = 2e5  # subnet management, heartbeats
    ib_load_bytes_per_s: float = 5e7  # checkpoints load over the storage network, not this one
    ib_xmit_wait_train_per_s: float = 2e6  # PortXmitWait ticks/s of a healthy, busy port
    ib_xmit_wait_sigma: float = 0.3  # log-normal scatter per port per scrape (bursty)
    ib_xmit_wait_idle_per_s: float = 1e3

    # --- GPU performance counters (assumed: B200 boost clock 1965 MHz) --------------------------
    sm_active_train: Range = (0.80, 0.88)  # per GPU; the rest of an iteration is communication
    sm_active_noise: float = 0.01
    sm_active_stalled: Range = (0.0, 0.08)  # while a save stalls compute
    sm_active_load: Range = (0.02, 0.15)
    sm_clock_train_mhz: Range = (1860.0, 1965.0)  # per GPU: where the power cap settles it
    sm_clock_noise_mhz: float = 15.0
    sm_clock_idle_mhz: float = 345.0
    power_cap_flicker: float = 0.02  # chance per GPU and scrape of the SW power cap bit in training
    power_wait_drop: float = 0.35  # a GPU waiting in collectives draws less: x (1 - drop x wait)
    mem_temp_offset_c: Range = (-2.0, 6.0)  # per GPU: HBM above (or below) the GPU die
    mem_temp_noise_c: float = 0.6

    # --- row remapping (assumed: a few GPUs carry old correctable remaps, flat) -----------------
    remap_gpu_fraction: float = 0.03
    remap_old_rows: Range = (1.0, 4.0)

    # --- the trainer's own metrics (assumed: a 480-GPU LLM pre-training job) ------------------
    iteration_time_s: Range = (5.0, 8.0)  # per job
    iteration_noise: float = 0.005  # relative sd per scrape, shared by the job
    tokens_per_iteration: float = 4 * 2**20  # global batch of 1,024 sequences x 4 K tokens

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
            "shmem_base_bytes",
            "mem_available_fraction",
            "cpu_user_train",
            "context_switches_idle_per_s",
            "sm_active_train",
            "sm_active_stalled",
            "sm_active_load",
            "sm_clock_train_mhz",
            "remap_old_rows",
            "iteration_time_s",
        ):
            _check_range(name, getattr(self, name))
        if max(self.gpu_util_save[1], self.gpu_util_load[1]) > 100.0:
            raise ValueError("GPU utilisation ranges must stay within 0-100 %")
        _check_range("mem_temp_offset_c", self.mem_temp_offset_c, low=-20.0)
        if max(self.sm_active_train[1], self.sm_active_load[1], self.sm_active_stalled[1]) > 1.0:
            raise ValueError("SM activity ranges must stay within 0-1")
        if self.cpu_user_train[1] + self.cpu_system_train + self.cpu_iowait_train >= 1.0:
            raise ValueError("training CPU shares must leave some idle time")
        if self.iteration_time_s[0] <= 0 or self.tokens_per_iteration <= 0:
            raise ValueError("iteration_time_s and tokens_per_iteration must be > 0")
        if not 0.0 <= self.remap_gpu_fraction <= 1.0 or not 0.0 <= self.power_cap_flicker <= 1.0:
            raise ValueError("remap_gpu_fraction and power_cap_flicker must be within [0, 1]")
        if self.load_time_constant_s <= 0:
            raise ValueError("load_time_constant_s must be > 0")
        if not 0.0 <= self.save_heavy_fraction <= 1.0:
            raise ValueError("save_heavy_fraction must be within [0, 1]")
        if not 0.0 <= self.read_queue_fraction < 1.0:
            raise ValueError("read_queue_fraction must be within [0, 1)")
        if self.gpu_temp_time_constant_s <= 0:
            raise ValueError("gpu_temp_time_constant_s must be > 0")
        for name in ("read_rpc_bytes", "write_rpc_bytes", "write_idle_rpc_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
