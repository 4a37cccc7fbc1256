"""One job's fail-slow pipeline per bucket: cycles → change point → culprit → advice → SLO.

This is the seam the stream worker calls once per (job, 30-s bucket). It owns
no maths of its own; it threads the state of the five parts and decides what
each sees:

1. the cycle model predicts whether a dip is due (``expected_dip``) *before*
   it learns from this bucket;
2. the change-point detector judges the throughput with that prediction;
3. while a confirmed drop is open the localiser compares the role peers on
   the median of the last ``localise_buckets`` buckets of node metrics (the
   confirmation window), against the group medians last seen while the job
   was steady (``reference``);
4. the mitigation chooser adds the bucket's loss against the pre-episode
   throughput and advises a stage for the localised class;
5. the SLO accountant books the bucket and the incident.

The node metrics window is the caller's (the worker already holds its
buckets); only the small per-job state lives here, JSON-safe.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from detectors.checks import Checked, integer, part
from detectors.failslow.changepoint import (
    ChangePointParams,
    ChangePointState,
    ChangeVerdict,
    step_changepoint,
)
from detectors.failslow.cycles import CycleParams, CycleState, expected_dip, step_cycles
from detectors.failslow.localise import (
    Localisation,
    LocaliseParams,
    NodeMetrics,
    combine_buckets,
    group_medians,
    localise,
)
from detectors.failslow.mitigation import (
    Advice,
    MitigationParams,
    MitigationState,
    step_mitigation,
)
from detectors.failslow.slo import SloParams, SloState, step_slo
from detectors.state_codec import JsonState, decode, hook

__all__ = ["FailSlowParams", "FailSlowState", "FailSlowVerdict", "step_failslow"]


@dataclass(frozen=True)
class FailSlowParams(Checked):
    """Parameters of the five parts, and how many buckets the localiser combines."""

    changepoint: ChangePointParams = part(ChangePointParams)
    cycles: CycleParams = part(CycleParams)
    localise: LocaliseParams = part(LocaliseParams)
    mitigation: MitigationParams = part(MitigationParams)
    slo: SloParams = part(SloParams)
    localise_buckets: int = integer(3)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mitigation.bucket_s != self.slo.bucket_s:
            raise ValueError("mitigation and slo must use the same bucket_s")

    def for_bucket(self, bucket_s: float) -> FailSlowParams:
        """These parameters for buckets of ``bucket_s`` seconds (loss and SLO time are seconds)."""
        return replace(
            self,
            mitigation=replace(self.mitigation, bucket_s=bucket_s),
            slo=replace(self.slo, bucket_s=bucket_s),
        )


def _finite_medians(data: Any, where: str) -> dict[str, float]:
    # A non-finite median (saved before group_medians kept them finite) is dropped,
    # not fatal: the reference refills with the next steady bucket.
    medians = decode(dict[str, float], data, where)
    return {k: v for k, v in medians.items() if math.isfinite(v)}


_FINITE_MEDIANS = hook(dict, _finite_medians)


@dataclass(frozen=True)
class FailSlowState(JsonState):
    """Per-job state: the parts' states and the steady-state group medians."""

    changepoint: ChangePointState = field(default_factory=ChangePointState)
    cycles: CycleState = field(default_factory=CycleState)
    mitigation: MitigationState = field(default_factory=MitigationState)
    slo: SloState = field(default_factory=SloState)
    reference: Mapping[str, float] = field(default_factory=dict, metadata=_FINITE_MEDIANS)


@dataclass(frozen=True)
class FailSlowVerdict(JsonState):
    """What one bucket concluded. ``localisation`` is None unless a drop is confirmed."""

    bucket: int
    change: ChangeVerdict
    expected_dip: int
    localisation: Localisation | None
    advice: Advice

    @property
    def slow(self) -> bool:
        return self.change.confirmed and self.change.direction == "down"


def step_failslow(
    state: FailSlowState,
    params: FailSlowParams,
    *,
    bucket: int,
    throughput: float,
    n_gpus: int,
    metrics: Sequence[Mapping[str, NodeMetrics]] = (),
    roles: Mapping[str, str] | None = None,
) -> tuple[FailSlowState, FailSlowVerdict]:
    """Advance one job by one bucket.

    ``throughput``: the job's figure this bucket (tokens/s, samples/s or
    1 / iteration time). ``metrics``: the node metrics of the latest buckets,
    oldest first, this bucket last (only the last ``localise_buckets`` are
    used). ``roles``: node → role for the localiser.
    """
    dip = expected_dip(state.cycles, bucket, params.cycles)
    cp_state, change = step_changepoint(
        state.changepoint, throughput, params.changepoint, bucket=bucket, expected_dip=dip
    )
    cycles = step_cycles(state.cycles, throughput, params.cycles, bucket=bucket)
    slow = change.confirmed and change.direction == "down"

    reference = state.reference
    localisation = None
    recent = list(metrics)[-params.localise_buckets :]
    if slow and recent:
        localisation = localise(
            combine_buckets(recent),
            roles=roles,
            job_slow=True,
            reference=reference,
            params=params.localise,
        )
    elif not change.changed and dip == 0 and recent:
        reference = group_medians(recent[-1])  # steady: the latest picture is the reference

    fraction = _fraction(cp_state, throughput) if slow else math.nan
    klass = localisation.klass if localisation is not None else "unknown"
    mitigation, advice = step_mitigation(
        state.mitigation,
        params.mitigation,
        slow=slow,
        throughput_fraction=fraction,
        n_gpus=n_gpus,
        klass=klass,
    )
    slo = step_slo(
        state.slo,
        params.slo,
        bucket=bucket,
        throughput=throughput,
        n_gpus=n_gpus,
        slow=slow,
        since_bucket=change.since_bucket if slow else None,
        expected_dip=dip > 0,
        localisation=localisation,
        advice=advice if slow else None,
    )
    new = FailSlowState(
        changepoint=cp_state,
        cycles=cycles,
        mitigation=mitigation,
        slo=slo,
        reference=reference,
    )
    return new, FailSlowVerdict(bucket, change, dip, localisation, advice)


def _fraction(state: ChangePointState, throughput: float) -> float:
    """Throughput as a fraction of the open episode's pre-slowdown level (NaN if unknown)."""
    episode = state.episode
    value = float(throughput)
    if episode is None or state.origin is None or not (math.isfinite(value) and value > 0):
        return math.nan
    return value / math.exp(state.origin + episode.reference)
