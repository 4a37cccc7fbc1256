"""One scrape round's values before they become series: what a fault may change.

The simulator fills a ``RoundState`` from the job's phase (training, saving,
loading, idle), hands it to every fault in turn, then integrates the rates
into counters and turns the arrays into Prometheus series. Rates are per
second; per-request NFS times are seconds; gauges are what the exporter
reports. Arrays are indexed by node (and GPU, and NFS operation).

Time is quantised to rounds on purpose: an event at ``ms`` takes effect in
the round whose bucket ``[t_ms, t_ms + interval_ms)`` contains it, for every
exporter of the node at once. That is the resolution the pipeline sees (one
30-s bucket), and it keeps a fault's signature, its XID and the ground truth
in the same bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Column order of the per-operation NFS arrays.
NFS_OPERATIONS: tuple[str, ...] = ("GETATTR", "READ", "WRITE")
GETATTR, READ, WRITE = range(3)


@dataclass(slots=True, eq=False)
class RoundState:
    """The mutable values of one round; faults edit them in place."""

    t_ms: int  # round start (= bucket start)
    prev_t_ms: int | None  # the previous round this simulator computed, if any
    origin_ms: int  # the round grid's origin (config.start_ms)
    interval_ms: int
    rng: np.random.Generator  # this round's generator, for faults' own noise

    intr_per_s: np.ndarray  # (nodes,)
    procs_running: np.ndarray  # (nodes,)
    pgpgout_per_s: np.ndarray  # (nodes,)
    nfs_requests_per_s: np.ndarray  # (nodes, ops)
    nfs_response_s: np.ndarray  # (nodes, ops) seconds per request
    nfs_queue_s: np.ndarray  # (nodes, ops) seconds per request
    nfs_read_bytes_per_s: np.ndarray  # (nodes,)
    nfs_write_bytes_per_s: np.ndarray  # (nodes,)
    gpu_util: np.ndarray  # (nodes, gpus) percent
    gpu_power_w: np.ndarray  # (nodes, gpus)
    gpu_temp_target_c: np.ndarray  # (nodes, gpus) the temperature lags toward it
    xid: np.ndarray  # (nodes, gpus) last XID; persists across rounds (the simulator owns it)
    idle_gpu_power_w: np.ndarray  # (nodes, gpus) each GPU's idle draw (read-only trait)
    idle_gpu_temp_c: np.ndarray  # (nodes, gpus) each GPU's idle temperature (read-only trait)
    silent: np.ndarray  # (nodes,) bool: emit nothing this round
    reboot: np.ndarray  # (nodes,) bool: kernel counters restart from zero this round

    def reached(self, ms: int) -> bool:
        """True once the event at ``ms`` is in effect (its bucket is this round or earlier)."""
        return ms < self.t_ms + self.interval_ms

    def crossed(self, ms: int) -> bool:
        """True in the first computed round in which the event at ``ms`` is in effect."""
        if not self.reached(ms):
            return False
        return self.prev_t_ms is None or ms >= self.prev_t_ms + self.interval_ms

    def rounds_since(self, ms: int) -> int:
        """Whole rounds between the round containing ``ms`` and this one (0 in that round)."""
        bucket = self.origin_ms + (ms - self.origin_ms) // self.interval_ms * self.interval_ms
        return (self.t_ms - bucket) // self.interval_ms
