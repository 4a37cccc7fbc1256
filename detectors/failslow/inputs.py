"""One bucket of a job's frames → the fail-slow monitor's inputs (throughput, GPUs, node metrics).

A frame is one node's features for one bucket (``detectors.features``): node-level
reductions (``tokens_per_s``, ``iteration_time_s``, ``cpu_idle_cores``,
``procs_running``, ``ib_xmit_wait_rate`` = the node's worst port, …) and per-GPU
keys ``name@gpu`` for the features kept per GPU. This module reads them as
:func:`detectors.failslow.monitor.step_failslow` wants them:

* **job throughput** — the median over the reporting ranks of ``tokens_per_s``;
  when no rank exports tokens, 1 / the median ``iteration_time_s``; NaN when
  neither is there (the job is not training, or its exporter is away). In a
  synchronous job every rank reports the same pace, so the median only guards
  against one stale or odd rank.
* **GPUs allocated** — per node the GPUs named in its per-GPU keys (those of
  the localiser's features, else of any per-GPU feature), else ``gpus_per_node``.
* **node metrics** — per node a :class:`~detectors.failslow.localise.NodeMetrics`:
  per GPU the SM activity, SM clock and clock-event reasons (frame keys
  ``sm_active@g``, ``sm_clock_mhz@g``, ``clock_event_reasons@g``); per node the
  idle CPU cores, the run queue (``procs_running``) and the InfiniBand transmit
  wait and bytes. Without per-GPU keys (a catalog restricted by the operator)
  the node's reduced ``gpu_sm_clock_mhz`` / ``gpu_sm_active`` stand in as one
  GPU, named by the frame's ``gpus`` map: a throttled GPU still shows as the
  node's lowest clock, while the busy-while-peers-wait sign is lost.

Pure: mappings in, a frozen :class:`JobInputs` out.

>>> frames = {
...     "n1": {"tokens_per_s": 5e4, "sm_active@0": 0.9, "sm_clock_mhz@0": 1980.0},
...     "n2": {"tokens_per_s": 5e4, "sm_active@0": 0.6, "sm_clock_mhz@0": 1600.0},
... }
>>> job = job_inputs(frames)
>>> job.throughput, job.source, job.n_gpus, job.metrics["n2"].sm_clock_mhz
(50000.0, 'tokens_per_s', 2, (1600.0,))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from detectors.checks import Checked, integer, text
from detectors.failslow.localise import MASK_MAX, NodeMetrics, overflow_safe_median
from detectors.features import per_gpu_key

__all__ = ["InputParams", "JobInputs", "job_inputs", "job_throughput", "node_metrics"]

Source = Literal["tokens_per_s", "1/iteration_time_s", "none"]

# frame feature → NodeMetrics field, for the node-level figures
_NODE_FIELDS: Mapping[str, str] = {
    "cpu_idle_cores": "cpu_idle_cores",
    "procs_running": "run_queue",
    "ib_xmit_wait_rate": "link_xmit_wait",
    "ib_tx_bytes_rate": "link_tx_bytes",
}
# per-GPU frame feature → NodeMetrics field
_GPU_FIELDS: Mapping[str, str] = {
    "sm_active": "sm_active",
    "sm_clock_mhz": "sm_clock_mhz",
    "clock_event_reasons": "clock_event_reasons",
}
_GPU_PREFIXES = tuple(f"{feature}@" for feature in _GPU_FIELDS)
_PROBED_GPUS = 16
_PROBES = tuple(
    (attr, tuple((str(g), per_gpu_key(feature, str(g))) for g in range(_PROBED_GPUS)))
    for feature, attr in _GPU_FIELDS.items()
)
# reduced stand-ins when a frame has no per-GPU keys (see the module docstring)
_REDUCED_FIELDS: Mapping[str, str] = {
    "gpu_sm_clock_mhz": "sm_clock_mhz",
    "gpu_sm_active": "sm_active",
}


@dataclass(frozen=True)
class InputParams(Checked):
    """Which frame features carry the job's pace, and GPUs per node when frames do not say.

    ``tokens_feature`` (higher is better) is preferred; ``iteration_feature``
    (seconds, lower is better) is inverted. ``min_ranks``: ranks that must
    report for the figure to count.
    """

    tokens_feature: str = text("tokens_per_s")
    iteration_feature: str = text("iteration_time_s")
    min_ranks: int = integer(1)
    gpus_per_node: int = integer(8)


@dataclass(frozen=True)
class JobInputs:
    """One bucket of a job as the monitor takes it.

    ``throughput``: NaN when no figure; ``source``: where it came from;
    ``ranks``: nodes that reported it; ``n_gpus``: GPUs allocated (>= 1).
    """

    throughput: float
    source: Source
    ranks: int
    n_gpus: int
    metrics: Mapping[str, NodeMetrics] = field(default_factory=dict)


def job_inputs(
    frames: Mapping[str, Mapping[str, float]],
    gpus: Mapping[str, Mapping[str, str]] | None = None,
    params: InputParams | None = None,
) -> JobInputs:
    """Throughput, GPUs and per-node metrics of one bucket's frames (node → values).

    ``gpus``: node → the frame's "worst GPU" map (used only by the reduced stand-in).
    """
    params = params or InputParams()
    throughput, source, ranks = job_throughput(frames, params)
    metrics: dict[str, NodeMetrics] = {}
    n_gpus = 0
    for node, values in frames.items():
        metrics[node], named = _read_frame(values, (gpus or {}).get(node))
        n_gpus += named or params.gpus_per_node
    return JobInputs(throughput, source, ranks, max(n_gpus, 1), metrics)


def job_throughput(
    frames: Mapping[str, Mapping[str, float]], params: InputParams | None = None
) -> tuple[float, Source, int]:
    """(throughput, source, ranks reporting) — the median over ranks; NaN, "none", 0 if absent."""
    params = params or InputParams()
    tokens = _positive(v.get(params.tokens_feature) for v in frames.values())
    if len(tokens) >= params.min_ranks:
        return overflow_safe_median(tokens), "tokens_per_s", len(tokens)
    times = _positive(v.get(params.iteration_feature) for v in frames.values())
    if len(times) >= params.min_ranks:
        return 1.0 / overflow_safe_median(times), "1/iteration_time_s", len(times)
    return math.nan, "none", 0


def node_metrics(values: Mapping[str, float], gpus: Mapping[str, str] | None = None) -> NodeMetrics:
    """One node's frame as :class:`NodeMetrics` (missing figures stay NaN / empty)."""
    return _read_frame(values, gpus)[0]


def _read_frame(
    values: Mapping[str, float], gpus: Mapping[str, str] | None
) -> tuple[NodeMetrics, int]:
    """The node's metrics and how many GPUs its frame names (0: it does not say)."""
    layout = _layout(tuple(values))
    kwargs: dict[str, object] = {
        attr: _finite_or_nan(values.get(feature)) for feature, attr in _NODE_FIELDS.items()
    }
    if layout.gpus:
        for attr, keys in layout.fields:  # a GPU without the key reads None: NaN, or 0 bits
            read = _bits if attr == "clock_event_reasons" else _finite_or_nan
            kwargs[attr] = tuple(map(read, map(values.get, keys)))  # type: ignore[arg-type]
        kwargs["gpus"] = layout.gpus
        return NodeMetrics(**kwargs), len(layout.gpus)  # type: ignore[arg-type]
    reduced = {
        attr: _finite_or_nan(values.get(feature)) for feature, attr in _REDUCED_FIELDS.items()
    }
    if any(math.isfinite(v) for v in reduced.values()):
        kwargs.update({attr: (v,) for attr, v in reduced.items()})
        worst = gpus or {}
        name = worst.get("gpu_sm_clock_mhz") or worst.get("gpu_sm_active")
        kwargs["gpus"] = (name,) if name is not None else ()
    return NodeMetrics(**kwargs), layout.named  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Layout:
    """Where a frame's per-GPU figures of the localiser's features are, by its keys alone."""

    gpus: tuple[str, ...]  # the GPUs they name, in GPU order (empty: none)
    fields: tuple[tuple[str, tuple[str | None, ...]], ...]  # NodeMetrics field, key per GPU
    named: int  # GPUs named by any per-GPU key


@lru_cache(maxsize=256)
def _layout(keys: tuple[str, ...]) -> _Layout:
    """The layout of a frame with ``keys``. Every node's frame has the same keys bucket
    after bucket: this reads them once per key set, not per node and bucket."""
    by_field = _per_gpu_keys(keys)
    gpus = tuple(sorted({g for by_gpu in by_field.values() for g in by_gpu}, key=_gpu_order))
    fields = tuple((attr, tuple(by_gpu.get(g) for g in gpus)) for attr, by_gpu in by_field.items())
    named = len({key.partition("@")[2] for key in keys if "@" in key})  # any per-GPU feature
    return _Layout(gpus, fields, named)


def _per_gpu_keys(keys: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """NodeMetrics field → {gpu: key} among the keys of the localiser's per-GPU features.

    The usual GPU ids (0 … ``_PROBED_GPUS`` - 1) are looked up by their precomputed keys;
    the keys are scanned only when that finds nothing or a field fills every probe (other
    id schemes, larger nodes).
    """
    present = set(keys)
    found: dict[str, dict[str, str]] = {}
    for attr, probes in _PROBES:
        by_gpu = {gpu: key for gpu, key in probes if key in present}
        if by_gpu:
            found[attr] = by_gpu
    if found and all(len(by_gpu) < _PROBED_GPUS for by_gpu in found.values()):
        return found
    scanned: dict[str, dict[str, str]] = {}
    for key in keys:
        if key.startswith(_GPU_PREFIXES):
            feature, _, gpu = key.partition("@")  # the key format of features.per_gpu_key
            scanned.setdefault(_GPU_FIELDS[feature], {})[gpu] = key
    return scanned


def _positive(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def _finite_or_nan(value: float | None) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def _bits(value: float | None) -> int:
    """A 64-bit mask gauge as an int (0 when missing or not a whole number in [0, 2^64))."""
    if value is None or not math.isfinite(value) or value < 0 or value != int(value):
        return 0
    mask = int(value)
    return mask if mask <= MASK_MAX else 0


def _gpu_order(name: str) -> tuple[int, int | str]:
    """GPU ids in numeric order ("2" before "10"); other names after, alphabetically."""
    return (0, int(name)) if name.isdigit() else (1, name)
