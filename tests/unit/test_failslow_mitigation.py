"""detectors.failslow.mitigation: the stage follows the loss/cost rule on hand-built loss curves.

Hand computation for the main curve (100 GPUs, 30-s buckets, default costs,
throughput held at 80 % of baseline, i.e. the stage applied did not help):

* loss per bucket = (1 − 0.8) × 30 s × 100 GPUs = 600 GPU·s
* S2: cost 10 s × 100 = 1,000 GPU·s; recovers (min(1, 0.8 × 1.59) − 0.8) / 0.2 = 100 %
  → justified once loss ≥ 1,000: bucket 2 (1,200)
* S3: cost 120 s × 100 = 12,000; recovers (min(1, 0.8 × 1.23) − 0.8) / 0.2 = 92 %
  → loss ≥ 12,000 / 0.92 = 13,043.5: bucket 22 (13,200)
* S4: cost (30 s + 31 min) × 100 = 189,000; recovers 100 % → loss ≥ 189,000: bucket 315
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

from detectors.failslow.mitigation import (
    Advice,
    MitigationParams,
    MitigationState,
    StageCost,
    recovered_fraction,
    step_mitigation,
)

PARAMS = MitigationParams()


def play(
    fractions: list[float],
    klass: str = "compute",
    n_gpus: int = 100,
    params: MitigationParams = PARAMS,
) -> list[Advice]:
    state, out = MitigationState(), []
    for q in fractions:
        state, advice = step_mitigation(
            state, params, slow=True, throughput_fraction=q, n_gpus=n_gpus, klass=klass
        )
        out.append(advice)
    return out


def switches(advice: list[Advice]) -> dict[str, int]:
    """Stage → 1-based bucket of the episode in which it is first advised."""
    first: dict[str, int] = {}
    for i, a in enumerate(advice, start=1):
        first.setdefault(a.stage, i)
    return first


def test_hand_built_loss_curve_switches_at_the_hand_computed_buckets() -> None:
    advice = play([0.8] * 320)
    assert switches(advice) == {"S1": 1, "S2": 2, "S3": 22, "S4": 315}
    assert advice[0].loss_gpu_s == pytest.approx(600.0)
    assert advice[1].loss_gpu_s == pytest.approx(1_200.0) and advice[1].cost_gpu_s == 1_000.0
    assert advice[20].stage == "S2" and advice[20].loss_gpu_s == pytest.approx(12_600.0)
    assert advice[21].loss_gpu_s == pytest.approx(13_200.0) and advice[21].cost_gpu_s == 12_000.0
    assert advice[313].stage == "S3" and advice[314].cost_gpu_s == pytest.approx(189_000.0)
    assert "next S3 at loss 13,043" in advice[1].reason
    assert "next S4 at loss 189,000" in advice[21].reason


def test_piecewise_curve_from_a_table() -> None:
    """64 GPUs, custom costs (S2 5 s at 1.5x, S3 60 s at 1.2x, S4 30 s + 10 min):

    buckets 1-2 at q 0.9: 192 GPU·s each; S2 (320, recovers 100 %) at bucket 2 (384).
    buckets 3-5 at q 0.5: 960 each (loss 3,264); S3 recovers (0.6 − 0.5)/0.5 = 20 %: not yet.
    from bucket 6 at q 0.6: 768 each; S3 recovers 30 % → needs 12,800: 3,264 + 768 k ≥ 12,800
    → k = 13 → bucket 18 (13,248); S4 (40,320, 100 %): k = 48 → bucket 53 (40,128)? no:
    3,264 + 768 × 48 = 40,128 < 40,320, k = 49 → bucket 54 (40,896).
    """
    params = MitigationParams(
        rebalance=StageCost(5.0, 1.5, frozenset({"compute", "cpu"})),
        topology=StageCost(60.0, 1.2),
        checkpoint_save_s=30.0,
        restart_load_s=600.0,
    )
    curve = [0.9, 0.9, 0.5, 0.5, 0.5] + [0.6] * 60
    advice = play(curve, n_gpus=64, params=params)
    assert switches(advice) == {"S1": 1, "S2": 2, "S3": 18, "S4": 54}
    assert advice[16].loss_gpu_s == pytest.approx(12_480.0)
    assert advice[17].loss_gpu_s == pytest.approx(13_248.0)
    assert advice[53].loss_gpu_s == pytest.approx(40_896.0)


def test_short_episode_ends_at_s1() -> None:
    """One slow bucket (600 GPU·s < S2's 1,000), then recovery: never past S1, state reset."""
    state, first = step_mitigation(
        MitigationState(), PARAMS, slow=True, throughput_fraction=0.8, n_gpus=100, klass="compute"
    )
    state, after = step_mitigation(
        state, PARAMS, slow=False, throughput_fraction=1.0, n_gpus=100, klass="compute"
    )
    assert (first.stage, after.stage) == ("S1", "S1")
    assert state == MitigationState()
    assert after.reason == "no slowdown"


def test_network_slowdown_skips_rebalancing() -> None:
    """S2 cannot speed a link: a congested node goes from S1 straight to S3 (bucket 22)."""
    assert switches(play([0.8] * 40, klass="network")) == {"S1": 1, "S3": 22}


@pytest.mark.parametrize("klass", ["cluster-wide", "unknown", "none"])
def test_no_node_to_act_on_stays_at_s1(klass: str) -> None:
    """Even at 10 % throughput on 1,024 GPUs for 10 h."""
    advice = play([0.1] * 1_200, klass=klass, n_gpus=1_024)
    assert {a.stage for a in advice} == {"S1"}
    assert "no node to act on" in advice[-1].reason


def test_a_stage_that_helps_postpones_the_next() -> None:
    """S2 brings the job to 97 %: the loss rate drops 7x, so S3 comes much later (or never)."""
    helped = [0.8, 0.8] + [0.97] * 200
    s = switches(play(helped))
    assert s["S2"] == 2
    # 1,200 + 90 k ≥ 12,000 (S3 recovers 100 % at q 0.97) → k = 120 → bucket 122
    assert s["S3"] == 122


def test_advice_is_never_withdrawn_within_an_episode() -> None:
    curve = [0.5] * 30 + [0.99] * 30
    stages = [a.stage for a in play(curve)]
    order = ["S1", "S2", "S3", "S4"]
    assert all(order.index(a) <= order.index(b) for a, b in itertools.pairwise(stages))


def test_unknown_throughput_adds_no_loss() -> None:
    advice = play([0.8, math.nan, 0.8])
    assert [a.loss_gpu_s for a in advice] == pytest.approx([600.0, 600.0, 1_200.0])


@pytest.mark.parametrize(
    ("q", "speedup", "expected"),
    [
        (0.8, 1.59, 1.0),
        (0.8, 1.23, 0.92),
        (0.5, 1.2, 0.2),
        (0.1, 1.59, 0.059 / 0.9),
        (0.0, 1.5, 0.0),
        (0.0, math.inf, 1.0),
        (1.0, 1.59, 0.0),
        (1.2, 1.59, 0.0),
        (math.nan, 1.59, 0.0),
    ],
)
def test_recovered_fraction(q: float, speedup: float, expected: float) -> None:
    assert recovered_fraction(q, speedup) == pytest.approx(expected)


def test_state_and_advice_are_json_safe() -> None:
    state, advice = step_mitigation(
        MitigationState(), PARAMS, slow=True, throughput_fraction=0.5, n_gpus=8, klass="cpu"
    )
    again = MitigationState.from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
    assert again == state
    data = json.loads(json.dumps(advice.to_dict(), allow_nan=False))
    assert data["stage"] == advice.stage and data["action"] == advice.action


@pytest.mark.parametrize(
    "build",
    [
        lambda: StageCost(-1.0, 1.5),
        lambda: StageCost(10.0, 0.9),
        lambda: MitigationParams(bucket_s=0.0),
        lambda: MitigationParams(restart_load_s=math.inf),
    ],
)
def test_params_are_validated(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        build()


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError):
        step_mitigation(
            MitigationState(), PARAMS, slow=True, throughput_fraction=0.5, n_gpus=0, klass="cpu"
        )
    with pytest.raises(ValueError):
        MitigationState.from_dict({"stage": "S9"})
