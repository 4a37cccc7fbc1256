"""detectors.failslow.slo: throughput-SLO figures against hand-computed values."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from detectors.failslow.localise import Culprit, Localisation
from detectors.failslow.mitigation import Advice
from detectors.failslow.slo import SloParams, SloState, step_slo, summarise

CULPRIT_GPU = Localisation(
    culprits=(Culprit("n1", "3", "compute", 0.8, ()),), klass="compute", confidence=0.8, reason=""
)
CULPRIT_NODE = Localisation(
    culprits=(Culprit("n1", None, "cpu", 0.7, ()),), klass="cpu", confidence=0.7, reason=""
)
CLUSTER = Localisation((), "cluster-wide", 0.6, "")


def play(params: SloParams, rows: list[tuple[Any, ...]], n_gpus: int = 16) -> SloState:
    """rows: (throughput, slow, since, expected_dip, localisation, advice) per bucket from 0."""
    state = SloState()
    for bucket, (tput, slow, since, dip, loc, advice) in enumerate(rows):
        state = step_slo(
            state,
            params,
            bucket=bucket,
            throughput=tput,
            n_gpus=n_gpus,
            slow=slow,
            since_bucket=since,
            expected_dip=dip,
            localisation=loc,
            advice=advice,
        )
    return state


def test_figures_match_a_hand_computed_job() -> None:
    """16 GPUs, 30-s buckets, expected 100 tokens/s, band 90 %.

    b0-b3 100 | b4 20 (checkpoint dip) | b5 100 | b6-b9 50 (slow since b6; GPU n1/3 named
    at b8, b9; S2 advised at b9) | b10 95 | b11 missing

    allocated 12 x 16 x 30 = 5,760 GPU·s = 1.6 h; in band b0-3, b5, b10: 6 x 480 = 0.8 h;
    below b4, b6-b9: 150 s, 30 s of it in a dip; lost 384 + 4 x 240 + 24 = 1,368 GPU·s
    = 0.38 h; waiting b8, b9: 2 x 15 x 30 = 900 GPU·s = 0.25 h; P50 of the 11 values
    (20, 50 x4, 95, 100 x5) at rank 5 = 95; P5 at rank 0 = 20.
    """
    params = SloParams(expected_throughput=100.0)
    s2 = Advice("S2", "", 1_000.0, 160.0)
    rows: list[tuple[Any, ...]] = [(100.0, False, None, False, None, None)] * 4
    rows += [(20.0, False, None, True, None, None), (100.0, False, None, False, None, None)]
    rows += [(50.0, True, 6, False, None, None)] * 2
    rows += [(50.0, True, 6, False, CULPRIT_GPU, None), (50.0, True, 6, False, CULPRIT_GPU, s2)]
    rows += [(95.0, False, None, False, None, None), (math.nan, False, None, False, None, None)]
    summary = summarise(play(params, rows), params)

    assert summary.baseline == 100.0
    assert summary.gpu_hours_allocated == pytest.approx(1.6)
    assert summary.gpu_hours_in_band == pytest.approx(0.8)
    assert summary.seconds_below == pytest.approx(150.0)
    assert summary.seconds_below_in_dips == pytest.approx(30.0)
    assert summary.seconds_unjudged == pytest.approx(30.0)
    assert summary.gpu_hours_lost == pytest.approx(0.38)
    assert summary.healthy_gpu_hours_waiting == pytest.approx(0.25)
    assert summary.p50 == pytest.approx(95.0, rel=0.005)
    assert summary.p5 == 20.0
    (incident,) = summary.incidents
    assert (incident.start_bucket, incident.end_bucket) == (6, 10)
    assert incident.culprits == (("n1", "3"),)
    assert (incident.klass, incident.confidence, incident.stage) == ("compute", 0.8, "S2")
    assert incident.loss_gpu_s == pytest.approx(960.0)
    assert incident.worst_fraction == pytest.approx(0.5)
    assert summary.incident_count == 1


def test_learned_baseline_is_the_median_of_healthy_buckets() -> None:
    """min_baseline_buckets 3: b0-b2 (100, 104, 98) are unjudged; b3 (80) is judged against
    their median 100 → below band, loss 8 GPUs x 0.2 x 30 s = 48 GPU·s; slow and dip
    buckets do not move the baseline."""
    params = SloParams(min_baseline_buckets=3)
    rows: list[tuple[Any, ...]] = [
        (x, False, None, False, None, None) for x in (100.0, 104.0, 98.0)
    ]
    rows += [(80.0, False, None, False, None, None)]
    rows += [(10.0, True, 4, False, None, None), (10.0, False, None, True, None, None)]
    state = play(params, rows, n_gpus=8)
    summary = summarise(state, params)
    assert summary.seconds_unjudged == pytest.approx(90.0)
    assert state.lost_gpu_s == pytest.approx(48.0 + 2 * 8 * 0.9 * 30.0, rel=0.01)
    # healthy buckets: 100, 104, 98, 80 → median (rank 1 of 4) = 98 within 0.5 %
    assert summary.baseline == pytest.approx(98.0, rel=0.005)


def test_node_level_culprit_counts_a_whole_node_of_gpus() -> None:
    """A cpu culprit (no GPU) holds gpus_per_node = 8: 16 - 8 = 8 healthy GPUs wait."""
    params = SloParams(expected_throughput=100.0)
    state = play(params, [(50.0, True, 0, False, CULPRIT_NODE, None)])
    assert state.waiting_gpu_s == pytest.approx(8 * 30.0)


def test_cluster_wide_slowdown_has_no_waiting_healthy_gpus() -> None:
    """No culprit: nobody is 'waiting on a slow dependency' — everyone is slow."""
    params = SloParams(expected_throughput=100.0)
    state = play(params, [(50.0, True, 0, False, CLUSTER, None)] * 3)
    assert state.waiting_gpu_s == 0.0
    assert state.incidents[0].klass == "cluster-wide"


@pytest.mark.parametrize(("gap", "expected"), [(10, 1), (2, 2)])
def test_a_slowdown_returning_within_the_merge_gap_reopens_its_incident(
    gap: int, expected: int
) -> None:
    """Slow b0-b1, fine b2-b4, slow again b5: one incident with a gap of 10, two with 2."""
    params = SloParams(expected_throughput=100.0, merge_gap_buckets=gap)
    slow, fine = (60.0, True, None, False, None, None), (100.0, False, None, False, None, None)
    state = play(params, [slow, slow, fine, fine, fine, slow, fine])
    assert len(state.incidents) == expected == state.incident_count
    assert state.incidents[-1].end_bucket == 6


def test_the_most_confident_localisation_is_kept() -> None:
    params = SloParams(expected_throughput=100.0)
    weak = Localisation((Culprit("n2", None, "network", 0.55, ()),), "network", 0.55, "")
    rows = [(50.0, True, 0, False, loc, None) for loc in (weak, CULPRIT_GPU, weak, None)]
    (incident,) = play(params, rows).incidents
    assert incident.culprits == (("n1", "3"),) and incident.confidence == 0.8


def test_only_the_last_incidents_are_kept_but_all_are_counted() -> None:
    params = SloParams(expected_throughput=100.0, max_incidents=2, merge_gap_buckets=0)
    slow, fine = (60.0, True, None, False, None, None), (100.0, False, None, False, None, None)
    state = play(params, [slow, fine, fine] * 4)
    assert state.incident_count == 4
    assert [i.start_bucket for i in state.incidents] == [6, 9]


def test_state_round_trips_through_json() -> None:
    params = SloParams(expected_throughput=100.0)
    rows = [(100.0, False, None, False, None, None), (50.0, True, 1, False, CULPRIT_GPU, None)]
    state = play(params, rows)
    again = SloState.from_dict(json.loads(json.dumps(state.to_dict(), allow_nan=False)))
    assert again == state
    json.dumps(summarise(again, params).to_dict(), allow_nan=False)


def test_inputs_are_validated() -> None:
    with pytest.raises(ValueError):
        SloParams(band=0.0)
    with pytest.raises(ValueError):
        SloParams(expected_throughput=-1.0)
    state = step_slo(SloState(), SloParams(), bucket=5, throughput=1.0, n_gpus=8)
    with pytest.raises(ValueError, match="not after"):
        step_slo(state, SloParams(), bucket=5, throughput=1.0, n_gpus=8)
    with pytest.raises(ValueError):
        step_slo(state, SloParams(), bucket=6, throughput=1.0, n_gpus=0)
