"""One scrape round's values before they become series: what a fault may change.

The simulator fills a ``RoundState`` from the job's phase (training, saving,
loading, idle), hands it to every fault in turn, settles what follows from the
faults (a slower job makes every peer wait), then integrates the rates into
counters and turns the arrays into Prometheus series. Rates are per second;
per-request NFS times are seconds; gauges are what the exporter reports.
Arrays are indexed by node (and GPU, NFS operation, CPU, InfiniBand port).

Time is quantised to rounds on purpose: an event at ``ms`` takes effect in
the round whose bucket ``[t_ms, t_ms + interval_ms)`` contains it, for every
exporter of the node at once. That is the resolution the pipeline sees (one
30-s bucket), and it keeps a fault's signature, its XID and the ground truth
in the same bucket.

Fail-slow in a synchronous job. Every iteration ends with collectives, so the
whole job runs at the pace of its slowest member. A fault that slows the job
multiplies ``job_factor`` (iteration time x factor) and, when a GPU itself is
the bottleneck (it computes slower), multiplies that GPU's ``gpu_busy`` by the
same factor. After the faults the simulator settles every GPU's SM activity to
``base x min(1, gpu_busy / job_factor)``: the bottleneck stays busy, everyone
else waits in collectives; link throughput and the trainer's iteration time
follow ``job_factor``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Column order of the per-operation NFS arrays.
NFS_OPERATIONS: tuple[str, ...] = ("GETATTR", "READ", "WRITE")
GETATTR, READ, WRITE = range(3)

# Scrape targets of a node, in the column order of ``RoundState.target_silent``.
TARGETS: tuple[str, ...] = ("node", "dcgm", "trainer")
NODE_EXPORTER, DCGM, TRAINER = range(3)

# NVML clock event reasons (DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits).
CLOCK_GPU_IDLE = 0x1
CLOCK_SW_POWER_CAP = 0x4
CLOCK_HW_SLOWDOWN = 0x8
CLOCK_SW_THERMAL = 0x20
CLOCK_HW_THERMAL = 0x40


@dataclass(slots=True, eq=False)
class RoundState:
    """The mutable values of one round; faults edit them in place."""

    t_ms: int  # round start (= bucket start)
    prev_t_ms: int | None  # the previous round this simulator computed, if any
    origin_ms: int  # the round grid's origin (config.start_ms)
    interval_ms: int
    rng: np.random.Generator  # this round's generator, for faults' own noise

    # --- the job (read-only for faults, except the two slowdown multipliers) ---------------
    member: np.ndarray  # (nodes,) bool: running the job this round
    training: bool  # the job trains this round (not loading its checkpoint, not down)
    job_factor: float  # iteration time multiplier (1 = normal); faults multiply it
    gpu_busy: np.ndarray  # (nodes, gpus) how much longer the GPU itself computes (>= 1)

    # --- node_exporter ------------------------------------------------------------------
    intr_per_s: np.ndarray  # (nodes,)
    procs_running: np.ndarray  # (nodes,)
    pgpgout_per_s: np.ndarray  # (nodes,)
    nfs_requests_per_s: np.ndarray  # (nodes, ops)
    nfs_response_s: np.ndarray  # (nodes, ops) seconds per request
    nfs_queue_s: np.ndarray  # (nodes, ops) seconds per request
    nfs_read_bytes_per_s: np.ndarray  # (nodes,)
    nfs_write_bytes_per_s: np.ndarray  # (nodes,)
    cpu_user: np.ndarray  # (nodes,) fraction of CPU time; idle is what is left
    cpu_system: np.ndarray  # (nodes,)
    cpu_iowait: np.ndarray  # (nodes,)
    procs_blocked: np.ndarray  # (nodes,)
    context_switches_per_s: np.ndarray  # (nodes,)
    shmem_bytes: np.ndarray  # (nodes,) /dev/shm (checkpoint staging)
    mem_available_bytes: np.ndarray  # (nodes,)
    ib_tx_bytes_per_s: np.ndarray  # (nodes, ports)
    ib_rx_bytes_per_s: np.ndarray  # (nodes, ports)
    ib_xmit_wait_per_s: np.ndarray  # (nodes, ports) ticks with data to send but no credit

    # --- dcgm-exporter ------------------------------------------------------------------
    gpu_util: np.ndarray  # (nodes, gpus) percent
    gpu_power_w: np.ndarray  # (nodes, gpus)
    gpu_temp_target_c: np.ndarray  # (nodes, gpus) the temperature lags toward it
    mem_temp_offset_c: np.ndarray  # (nodes, gpus) HBM temperature above the GPU's
    sm_active: np.ndarray  # (nodes, gpus) 0-1, before the job's wait is settled
    sm_clock_mhz: np.ndarray  # (nodes, gpus)
    clock_reasons: np.ndarray  # (nodes, gpus) int64 bitmask (CLOCK_* bits)
    xid: np.ndarray  # (nodes, gpus) last XID; persists across rounds (the simulator owns it)
    remap_correctable: np.ndarray  # (nodes, gpus) remapped rows
    remap_uncorrectable: np.ndarray  # (nodes, gpus)
    remap_failure: np.ndarray  # (nodes, gpus) 0/1
    remap_pending: np.ndarray  # (nodes, gpus) 0/1
    idle_gpu_power_w: np.ndarray  # (nodes, gpus) each GPU's idle draw (read-only trait)
    idle_gpu_temp_c: np.ndarray  # (nodes, gpus) each GPU's idle temperature (read-only trait)

    # --- what reaches the receiver --------------------------------------------------------
    silent: np.ndarray  # (nodes,) bool: emit nothing this round
    target_silent: np.ndarray  # (nodes, targets) bool: that exporter emits nothing
    gpu_gone: np.ndarray  # (nodes, gpus) bool: the GPU fell off the host (no dcgm series)
    reboot: np.ndarray  # (nodes,) bool: kernel counters restart from zero this round
    delay_rounds: np.ndarray  # (nodes,) int: the round's samples arrive this many rounds late
    ts_shift_ms: np.ndarray  # (nodes,) int: the scrapes started this much late

    def reached(self, ms: int) -> bool:
        """True once the event at ``ms`` is in effect (its bucket is this round or earlier)."""
        return ms < self.t_ms + self.interval_ms

    def active(self, onset_ms: int, end_ms: int | None) -> bool:
        """True from the round of ``onset_ms`` until the round before ``end_ms``'s."""
        return self.reached(onset_ms) and (end_ms is None or not self.reached(end_ms))

    def crossed(self, ms: int) -> bool:
        """True in the first computed round in which the event at ``ms`` is in effect."""
        if not self.reached(ms):
            return False
        return self.prev_t_ms is None or ms >= self.prev_t_ms + self.interval_ms

    def rounds_since(self, ms: int) -> int:
        """Whole rounds between the round containing ``ms`` and this one (0 in that round)."""
        bucket = self.origin_ms + (ms - self.origin_ms) // self.interval_ms * self.interval_ms
        return (self.t_ms - bucket) // self.interval_ms

    def slow_job(self, factor: float) -> None:
        """The job's iterations take ``factor`` times as long (only while it trains)."""
        if self.training:
            self.job_factor *= factor
