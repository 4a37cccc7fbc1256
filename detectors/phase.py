"""A group-bucket's training phase, by the source report's rules: known, not learned.

Save = aggregate NFS write > 20 GB/s; Load = GPU util < 50 % and aggregate NFS
read > 2 GB/s; else Training (DESIGN.md section 7). Idle is Training's "job not
running" case (every GPU near 0 %, no burst): reported, and left to the
group-shift guard as a job death. The rules need no history, so the first
bucket, and the first save right after a (re)start, are classified like any
other.

Aggregate, scaled per node. The report's thresholds are for its 60-node job:
0.33 GB/s and 33 MB/s per node. A 16-node job saving the same shards per node
writes a quarter of the aggregate, and a group missing a few frames would look
quieter than it is, so the rule compares the *mean per-node rate* of the nodes
that report the feature with ``threshold / reference_nodes``; the reported
aggregate is that mean times the group's size. A burst must also be the
group's: at least ``min_share`` of those nodes take part (rate at or above
``share_floor`` of the per-node threshold), so one node dumping 20 GB/s is no
save (its peers judge it as usual). The report's light and heavy checkpoint
writers (12 nodes ~2 GB, 48 ~26 GB per save) both take part. GPU util is the
median of the nodes' worst-GPU utilisation.

A phase that lasts past ``max_save_buckets`` / ``max_load_buckets`` is no
longer *expected* (a load stuck for hours is the group's problem): the guard
then judges it like any other bucket.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from detectors.checks import Checked, integer, is_finite, real, text
from detectors.state_codec import TRANSIENT, JsonState

__all__ = ["PHASES", "Phase", "PhaseName", "PhaseParams", "step_phase"]

PhaseName = Literal["training", "save", "load", "idle"]
PHASES: tuple[PhaseName, ...] = ("training", "save", "load", "idle")

# Error counters: a save or a load does not make a link or a memory throw errors,
# so they are judged in every phase.
_STEADY = (
    "pcie_replay_rate",
    "nvlink_crc_err_rate",
    "nvlink_replay_err_rate",
    "nvlink_recovery_err_rate",
    "ecc_sbe_rate",
    "ecc_dbe_rate",
)


@dataclass(frozen=True)
class PhaseParams(Checked):
    """The phase rules; defaults are the source report's (module docstring).

    ``save_write_bytes_per_s`` / ``load_read_bytes_per_s``: aggregate thresholds
    for ``reference_nodes`` nodes. ``load_gpu_util_below``: the Load rule's GPU
    util (%). ``idle_gpu_util_below``: below it on the median node, without a
    burst, the job is not running. ``min_share`` / ``share_floor``: the share
    of reporting nodes that must take part in a burst, and the fraction of the
    per-node threshold that counts as taking part. ``max_save_buckets`` (10 min)
    / ``max_load_buckets`` (80 min; the report: loads take a median 31 min,
    real ones up to an hour): how long a phase stays expected. ``steady``:
    features a phase does not move (judged as usual during it). The feature
    names are the catalog's.
    """

    save_write_bytes_per_s: float = real(20e9, above=0)
    load_read_bytes_per_s: float = real(2e9, above=0)
    load_gpu_util_below: float = real(50.0, above=0)
    idle_gpu_util_below: float = real(5.0, at_least=0)
    reference_nodes: int = integer(60)
    min_share: float = real(0.5, above=0, at_most=1)
    share_floor: float = real(0.1, above=0, at_most=1)
    max_save_buckets: int = integer(20)
    max_load_buckets: int = integer(160)
    write_feature: str = text("nfs_write_bytes_rate")
    read_feature: str = text("nfs_read_bytes_rate")
    gpu_feature: str = text("gpu_util")
    steady: tuple[str, ...] = _STEADY

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "steady", tuple(self.steady))


@dataclass(frozen=True)
class Phase(JsonState):
    """One bucket's phase. ``run``: consecutive buckets in it, this one included.

    ``expected``: a save or load within its maximum length (the guard excuses it).
    ``write_bytes_per_s`` / ``read_bytes_per_s``: the group's aggregate estimate
    (mean per reporting node x group size; None when no node reports it).
    ``gpu_util``: the median node's worst-GPU utilisation (None: none reported).
    None rather than NaN keeps phases (and the results holding them) comparable.
    """

    name: PhaseName = "training"
    run: int = integer(0, minimum=0)
    # What the next bucket needs is name and run: the readings are this bucket's only.
    expected: bool = field(default=False, metadata=TRANSIENT)
    write_bytes_per_s: float | None = field(default=None, metadata=TRANSIENT)
    read_bytes_per_s: float | None = field(default=None, metadata=TRANSIENT)
    gpu_util: float | None = field(default=None, metadata=TRANSIENT)

    def describe(self) -> str:
        """For alerts: "save (bucket 2, NFS write 41.3 GB/s)"."""
        if self.name == "save":
            return f"save (bucket {self.run}, NFS write {_gb(self.write_bytes_per_s)})"
        if self.name == "load":
            return (
                f"load (bucket {self.run}, NFS read {_gb(self.read_bytes_per_s)}, "
                f"GPU util {self.gpu_util or 0:.0f} %)"
            )
        return self.name


def step_phase(
    prev: Phase,
    frames: Mapping[str, Mapping[str, float]],
    nodes: Sequence[str],
    params: PhaseParams,
) -> Phase:
    """The phase of the bucket whose ``frames`` the group's ``nodes`` (its members) sent."""
    n = max(len(nodes), 1)
    write, write_share = _rate(frames, nodes, params.write_feature)
    read, read_share = _rate(frames, nodes, params.read_feature)
    gpu = _median(frames, nodes, params.gpu_feature)
    per_node_save = params.save_write_bytes_per_s / params.reference_nodes
    per_node_load = params.load_read_bytes_per_s / params.reference_nodes
    name: PhaseName
    if _burst(write, write_share, per_node_save, params):
        name = "save"
    elif gpu < params.load_gpu_util_below and _burst(read, read_share, per_node_load, params):
        name = "load"
    elif gpu < params.idle_gpu_util_below:
        name = "idle"
    else:  # GPU util unknown counts as training: nothing is excused without evidence
        name = "training"
    run = prev.run + 1 if name == prev.name else 1
    limit = {"save": params.max_save_buckets, "load": params.max_load_buckets}.get(name, 0)
    return Phase(name, run, run <= limit, _known(write * n), _known(read * n), _known(gpu))


def _rate(
    frames: Mapping[str, Mapping[str, float]], nodes: Sequence[str], feature: str
) -> tuple[float, np.ndarray]:
    """(mean per-node rate of the nodes reporting ``feature``, their rates); NaN mean: none."""
    values = np.array([_value(frames.get(node), feature) for node in nodes], dtype=np.float64)
    values = values[np.isfinite(values)]
    return (float(values.mean()) if values.size else math.nan), values


def _median(frames: Mapping[str, Mapping[str, float]], nodes: Sequence[str], feature: str) -> float:
    values = np.array([_value(frames.get(node), feature) for node in nodes], dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else math.nan


def _burst(mean: float, rates: np.ndarray, per_node: float, params: PhaseParams) -> bool:
    if not rates.size or not mean >= per_node:
        return False
    taking_part = np.count_nonzero(rates >= params.share_floor * per_node)
    return bool(taking_part >= params.min_share * rates.size)


def _value(frame: Mapping[str, float] | None, feature: str) -> float:
    x = None if frame is None else frame.get(feature)
    return float(x) if x is not None and is_finite(x) else math.nan


def _known(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _gb(rate: float | None) -> str:
    return "unknown" if rate is None else f"{rate / 1e9:.1f} GB/s"
