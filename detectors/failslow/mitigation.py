"""Staged mitigation advice: act only as far as the loss so far pays for (GREYHOUND S1–S4).

Stages, cheapest first:

* **S1** observe — change nothing (a short episode ends here).
* **S2** rebalance data-parallel micro-batches away from the slow worker
  (seconds of job time; GREYHOUND: up to 1.59× the degraded throughput).
* **S3** adjust the topology to isolate the slow worker(s) (minutes; up to 1.23×).
* **S4** checkpoint and restart without the node (checkpoint save + restart
  load, the report's median load 31 min, times every GPU of the job).

The loss of an episode is counted in GPU-seconds:

    loss = Σ_buckets max(0, 1 − throughput / baseline) × bucket_s × n_gpus

A stage costs ``downtime_s × n_gpus`` GPU-seconds and is expected to recover
a fraction of the loss *rate*: with the job at q = throughput / baseline and
the stage's best ``speedup``, ``recovered = (min(1, q · speedup) − q) / (1 − q)``
(S4 returns the job to its baseline: 1).

**Rule** (the ski-rental break-even): having lost ``loss`` so far, expect the
episode to last about as long again; a stage is *justified* when what it would
recover of that, ``loss × recovered``, reaches its cost. Cheaper stages are
justified first, so as the loss grows the advice climbs S1 → S2 → S3 → S4; the
advised stage is the costliest one justified, and is never withdrawn within an
episode (a stage that worked lowers the loss rate and so postpones the next).
Stages apply only to classes they can help (``StageCost.classes``): S2 cannot
speed up a congested link, and a cluster-wide or unknown slowdown has no node
to move work from, so it stays at S1.

State is a frozen :class:`MitigationState`; :func:`step_mitigation` returns
the new state and the bucket's :class:`Advice`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from detectors.checks import Checked, check_fields, int_rule, part, real, real_rule, rule
from detectors.features import DEFAULT_BUCKET_MS
from detectors.state_codec import JsonState

__all__ = [
    "STAGES",
    "Advice",
    "MitigationParams",
    "MitigationState",
    "Stage",
    "StageCost",
    "recovered_fraction",
    "step_mitigation",
]

Stage = Literal["S1", "S2", "S3", "S4"]
STAGES: tuple[Stage, ...] = ("S1", "S2", "S3", "S4")
ACTIONS: Mapping[Stage, str] = {
    "S1": "observe",
    "S2": "rebalance micro-batches away from the slow worker",
    "S3": "adjust the topology to isolate the slow worker",
    "S4": "checkpoint and restart without the node",
}
_NODE_CLASSES = frozenset({"compute", "cpu", "network"})


@dataclass(frozen=True)
class StageCost:
    """One action: whole-job seconds it costs, best speedup of the degraded throughput, classes.

    ``speedup`` = inf means "back to the baseline" (a restart without the node).
    """

    downtime_s: float = field(metadata=rule(real_rule(at_least=0)))
    speedup: float = field(
        metadata=rule(real_rule(at_least=1, inf=True, why="inf: back to baseline"))
    )
    classes: frozenset[str] = _NODE_CLASSES

    def __post_init__(self) -> None:
        check_fields(self)
        object.__setattr__(self, "classes", frozenset(self.classes))


@dataclass(frozen=True)
class MitigationParams(Checked):
    """Costs of S2–S4. Defaults: S2 10 s at 1.59× (compute / cpu only: rebalancing
    cannot speed a link), S3 2 min at 1.23×, S4 = ``checkpoint_save_s`` (30 s,
    the report's saves take 18–32 s) + ``restart_load_s`` (31 min, the report's
    median load), back to baseline. ``bucket_s``: seconds per bucket.
    """

    bucket_s: float = real(DEFAULT_BUCKET_MS / 1000, above=0)
    rebalance: StageCost = part(
        StageCost, lambda: StageCost(10.0, 1.59, frozenset({"compute", "cpu"}))
    )
    topology: StageCost = part(StageCost, lambda: StageCost(120.0, 1.23))
    checkpoint_save_s: float = real(30.0, at_least=0)
    restart_load_s: float = real(31.0 * 60.0, at_least=0)
    restart_classes: frozenset[str] = _NODE_CLASSES

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "restart_classes", frozenset(self.restart_classes))

    def escalation(self) -> tuple[tuple[Stage, StageCost], ...]:
        """S2–S4 with their cost models, cheapest first (S1 costs nothing)."""
        restart = StageCost(
            self.checkpoint_save_s + self.restart_load_s, math.inf, self.restart_classes
        )
        return (("S2", self.rebalance), ("S3", self.topology), ("S4", restart))


@dataclass(frozen=True)
class Advice(JsonState):
    """The stage to apply now, why, the episode's loss so far and the stage's cost (GPU-seconds)."""

    stage: Stage
    reason: str
    loss_gpu_s: float
    cost_gpu_s: float

    KEY_ORDER = ("stage", "action", "reason", "loss_gpu_s", "cost_gpu_s")  # action: derived

    @property
    def action(self) -> str:
        return ACTIONS[self.stage]


@dataclass(frozen=True)
class MitigationState(JsonState):
    """Open episode: loss so far (GPU-s), slow buckets counted, highest stage advised."""

    loss_gpu_s: float = real(0.0, at_least=0)
    buckets: int = 0
    stage: Stage = "S1"


def recovered_fraction(throughput_fraction: float, speedup: float) -> float:
    """Share of the loss rate a stage with ``speedup`` recovers at throughput fraction q."""
    q = throughput_fraction
    if not (math.isfinite(q) and q < 1):
        return 0.0
    q = max(q, 0.0)
    if math.isinf(speedup):  # back to the baseline, even from a stall
        return 1.0
    return (min(1.0, q * speedup) - q) / (1.0 - q)


_GPUS = int_rule(numpy=False)


def step_mitigation(
    state: MitigationState,
    params: MitigationParams,
    *,
    slow: bool,
    throughput_fraction: float,
    n_gpus: int,
    klass: str,
) -> tuple[MitigationState, Advice]:
    """Add one bucket to the episode and advise a stage.

    ``slow``: the job is in a confirmed slowdown (else the episode is over and
    the state resets). ``throughput_fraction``: throughput / baseline this
    bucket (NaN: unknown, no loss counted). ``klass``: the localisation class.
    """
    _GPUS("n_gpus", n_gpus)
    if not slow:
        return MitigationState(), Advice("S1", "no slowdown", 0.0, 0.0)
    q = float(throughput_fraction)
    loss = state.loss_gpu_s
    if math.isfinite(q):
        loss += max(0.0, 1.0 - q) * params.bucket_s * n_gpus
    chosen = state.stage
    for stage, cost in params.escalation():
        share = recovered_fraction(q, cost.speedup)
        price = cost.downtime_s * n_gpus
        # "reaches its cost", with room for the float sums of the loss (0.2 x 30 x 100 x 315)
        justified = klass in cost.classes and share > 0 and loss * share >= price * (1 - 1e-9)
        if justified and STAGES.index(stage) > STAGES.index(chosen):
            chosen = stage
    notes: list[str] = []
    for stage, cost in params.escalation():
        if STAGES.index(stage) <= STAGES.index(chosen):
            continue
        share = recovered_fraction(q, cost.speedup)
        if klass in cost.classes and share > 0:
            notes.append(f"next {stage} at loss {cost.downtime_s * n_gpus / share:,.0f} GPU·s")
            break
    new = MitigationState(loss_gpu_s=loss, buckets=state.buckets + 1, stage=chosen)
    price_now = _price(params, chosen, n_gpus)
    head = f"{chosen} {ACTIONS[chosen]}: loss {loss:,.0f} GPU·s"
    if chosen != "S1":
        head += f" justifies cost {price_now:,.0f} GPU·s"
    if klass in ("cluster-wide", "unknown", "none"):
        head += f" ({klass}: no node to act on)"
    return new, Advice(chosen, "; ".join([head, *notes]), loss, price_now)


def _price(params: MitigationParams, stage: Stage, n_gpus: int) -> float:
    for name, cost in params.escalation():
        if name == stage:
            return cost.downtime_s * n_gpus
    return 0.0
