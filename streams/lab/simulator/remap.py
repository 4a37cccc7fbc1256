"""Row-remapping faults: a weeks-long correctable creep, and uncorrectable remaps at an XID.

The source report's two cases (DESIGN.md section 7):

- ``RowRemapCreep``: one GPU's correctable remapped rows crept for ~7 weeks,
  then rose by more than 200 in one week to 254, with no XID, and the GPU
  vanished from the host. The counter is a pure function of time (remap times
  drawn once from the fault's own seed), so the full simulator and the fast
  path below agree sample for sample.
- ``UncorrectableRemap``: uncorrectable remapped rows rise (a remap pending)
  and XID 94 follows at once; the job dies a bucket later.

Fast path. Simulating weeks at 30 s for 63 nodes costs minutes; the creep's
evidence is one GPU's counter. ``remap_series(fault, step_s)`` returns just
that GPU's four remap gauges on a coarse grid over the whole creep, for an
evaluator to feed a row-remap tracker directly. The full simulator emits the
same counters (``row_remap`` family) for every GPU every scrape, so a short
full-resolution run around the disappearance shows them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from streams.lab.simulator.faults import GpuFault, GroundTruth
from streams.lab.simulator.state import TRAINER, RoundState

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS


@dataclass(frozen=True)
class RowRemapCreep(GpuFault):
    """Correctable remapped rows creep, then surge, then the GPU falls off the host.

    From ``onset_ms`` the GPU remaps ``creep_rows`` rows at random times until
    ``surge_ms`` before ``gone_ms`` (report: ~7 weeks); in that last stretch
    (report: one week) it remaps the rest up to ``total_rows`` (report: 254),
    ever faster, the last one ``quiet_ms`` before it vanishes. At ``gone_ms`` its
    dcgm series vanish (no XID), the job dies a bucket later and restarts
    without the node. Remap times are drawn from ``seed``. The ground-truth
    row's ``end_ms`` is ``gone_ms``.
    """

    kind: ClassVar[str] = "row_remap_creep"

    node: str
    gpu: int
    onset_ms: int
    gone_ms: int
    surge_ms: int = WEEK_MS
    quiet_ms: int = 6 * 3_600_000
    creep_rows: int = 40
    total_rows: int = 254
    seed: int = 0

    def __post_init__(self) -> None:
        if self.surge_ms <= 0 or self.gone_ms - self.surge_ms <= self.onset_ms:
            raise ValueError(f"{self.kind}: need onset_ms < gone_ms - surge_ms, surge_ms > 0")
        if not 0 <= self.quiet_ms < self.surge_ms:
            raise ValueError(f"{self.kind}: need 0 <= quiet_ms < surge_ms")
        if not 0 <= self.creep_rows <= self.total_rows <= 512:
            raise ValueError(f"{self.kind}: need 0 <= creep_rows <= total_rows <= 512")

    @property
    def excludes_node(self) -> bool:
        return True

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.gone_ms

    @property
    def remap_times_ms(self) -> np.ndarray:
        """When each row was remapped (sorted, all before ``gone_ms``)."""
        return _remap_times(self)

    def correctable_at(self, t_ms: int | np.ndarray) -> np.ndarray:
        """Correctable rows remapped by time ``t_ms`` (scalar or array)."""
        return np.searchsorted(self.remap_times_ms, t_ms, side="right")

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        if state.reached(self.gone_ms):
            state.gpu_gone[node, self.gpu] = True
            if state.rounds_since(self.gone_ms) == 0:
                state.target_silent[node, TRAINER] = True  # its rank died with it
            return
        rows = float(self.correctable_at(state.t_ms))  # as the fast path samples it
        state.remap_correctable[node, self.gpu] += rows

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(self.kind, self.node, self.gpu, self.onset_ms, end_ms=self.gone_ms)


@lru_cache(maxsize=64)
def _remap_times(fault: RowRemapCreep) -> np.ndarray:
    rng = np.random.default_rng((fault.seed, 0x2E3A))
    surge_start = fault.gone_ms - fault.surge_ms
    creep = rng.uniform(fault.onset_ms, surge_start, size=fault.creep_rows)
    # the surge's rate grows linearly towards its end: CDF ~ t^2, so t = sqrt(u)
    surge = surge_start + (fault.surge_ms - fault.quiet_ms) * np.sqrt(
        rng.uniform(0.0, 1.0, size=fault.total_rows - fault.creep_rows)
    )
    times = np.sort(np.concatenate((creep, surge))).astype(np.int64)
    times.setflags(write=False)
    return times


@dataclass(frozen=True)
class UncorrectableRemap(GpuFault):
    """Uncorrectable remapped rows rise on ``gpu``, then XID 94 at once: the job dies.

    At ``onset_ms`` ``rows`` uncorrectable remaps appear with the pending flag
    (the remap takes effect at the next GPU reset); the XID follows
    ``xid_after_s`` later (0: in the same bucket, as in the report) and the job
    dies a bucket after the XID. XID 94 is RESTART_APP: the restart keeps the node.
    """

    kind: ClassVar[str] = "uncorrectable_remap"

    node: str
    gpu: int
    onset_ms: int
    rows: int = 1
    xid_after_s: float = 0.0
    xid: int = 94

    def __post_init__(self) -> None:
        if not 1 <= self.rows <= 8 or self.xid_after_s < 0 or self.xid <= 0:
            raise ValueError(f"{self.kind}: need 1 <= rows <= 8, xid_after_s >= 0, a positive xid")

    @property
    def xid_ms(self) -> int:
        return self.onset_ms + int(self.xid_after_s * 1000)

    @property
    def stops_job_at_ms(self) -> int | None:
        return self.xid_ms

    def apply_to(self, state: RoundState, node: int) -> None:
        if not state.reached(self.onset_ms):
            return
        state.remap_uncorrectable[node, self.gpu] += self.rows
        state.remap_pending[node, self.gpu] = 1.0
        if state.reached(self.xid_ms):
            state.xid[node, self.gpu] = self.xid

    def ground_truth(self) -> GroundTruth:
        return GroundTruth(
            self.kind, self.node, self.gpu, self.onset_ms, xid=self.xid, xid_ms=self.xid_ms
        )


@dataclass(frozen=True)
class RemapSeries:
    """One GPU's remap gauges on a coarse grid (the fast path): parallel arrays."""

    node: str
    gpu: int
    t_ms: np.ndarray  # sample times (int64)
    correctable: np.ndarray
    uncorrectable: np.ndarray
    failure: np.ndarray
    pending: np.ndarray
    gone_ms: int  # the GPU's series end here (no sample at or after it)

    def samples(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(t_ms, correctable, uncorrectable, failure, pending)`` per sample."""
        columns = (self.t_ms, self.correctable, self.uncorrectable, self.failure, self.pending)
        yield from zip(*(c.tolist() for c in columns), strict=True)


def remap_series(
    fault: RowRemapCreep,
    step_s: float = 3600.0,
    start_ms: int | None = None,
    end_ms: int | None = None,
    *,
    base_rows: int = 0,
) -> RemapSeries:
    """The faulty GPU's remap gauges every ``step_s`` from ``start_ms`` until it vanishes.

    ``start_ms`` defaults to a day before the creep's onset; samples stop
    before ``gone_ms`` (or ``end_ms``, if earlier). ``base_rows``: correctable
    rows the GPU carried before the creep (the full simulator adds the GPU's
    own old remaps, usually 0). Pure and fast: weeks at 1 h are ~1,400 samples.
    """
    if step_s <= 0:
        raise ValueError("step_s must be > 0")
    step = int(step_s * 1000)
    start = fault.onset_ms - DAY_MS if start_ms is None else start_ms
    stop = fault.gone_ms if end_ms is None else min(end_ms, fault.gone_ms)
    t = np.arange(start, stop, step, dtype=np.int64)
    rows = fault.correctable_at(t) + base_rows
    zeros = np.zeros(len(t), dtype=np.int64)
    return RemapSeries(
        fault.node, fault.gpu, t, rows.astype(np.int64), zeros, zeros, zeros, fault.gone_ms
    )
