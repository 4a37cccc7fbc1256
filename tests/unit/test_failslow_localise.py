"""detectors.failslow.localise: hand-built peer groups, one rule per test.

The seeded accuracy tables over whole synthetic jobs are in test_failslow_scenarios.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.failslow.localise import (
    HW_SLOWDOWN,
    HW_THERMAL,
    SW_POWER_CAP,
    LocaliseParams,
    NodeMetrics,
    combine_buckets,
    group_medians,
    localise,
)

N_NODES = 10


def node(i: int, **changes: object) -> NodeMetrics:
    """A healthy 2-GPU node with tiny, deterministic per-node variation."""
    wiggle = (i % 5 - 2) * 0.002
    base = NodeMetrics(
        sm_active=(0.75 + wiggle, 0.75 - wiggle),
        sm_clock_mhz=(1_980.0, 1_980.0 - (i % 3) * 5),
        power_w=(700.0 + i, 700.0 - i),
        temp_c=(60.0 + i % 4, 61.0),
        clock_event_reasons=(SW_POWER_CAP if i % 3 == 0 else 0, 0),
        cpu_busy=0.30 + wiggle,
        run_queue=18.0 + i % 3,
        link_xmit_wait=2e4 * (1 + 5 * wiggle),
        link_retransmits=0.0,
        link_congestion=50.0 * (1 - 5 * wiggle),
        link_tx_bytes=2e10 * (1 + wiggle),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def group(**per_node: Mapping[str, object]) -> dict[str, NodeMetrics]:
    """N_NODES healthy nodes "n0".."n9"; keyword ``n3={...}`` overrides fields of n3."""
    return {f"n{i}": node(i, **per_node.get(f"n{i}", {})) for i in range(N_NODES)}


def test_busy_gpu_while_peers_wait_is_the_compute_culprit() -> None:
    """n4's GPU 1 stays at 90 % SM activity while every other GPU waits at 75 %."""
    loc = localise(group(n4={"sm_active": (0.75, 0.90)}))
    (culprit,) = loc.culprits
    assert (culprit.node, culprit.gpu, culprit.klass) == ("n4", "1", "compute")
    assert loc.klass == "compute" and loc.confidence == culprit.confidence
    top = culprit.evidence[0]
    assert (top.feature, top.gpu, top.value) == ("sm_active", "1", 0.90)
    assert top.z > 4 and top.median == pytest.approx(0.75, abs=0.005)


def test_lower_sm_clock_convicts_and_a_slowdown_reason_corroborates() -> None:
    """A GPU at 1,500 MHz with HW slowdown set: compute, corroborated → higher confidence."""
    plain = localise(group(n2={"sm_clock_mhz": (1_500.0, 1_980.0)}))
    flagged = localise(
        group(n2={"sm_clock_mhz": (1_500.0, 1_980.0), "clock_event_reasons": (HW_SLOWDOWN, 0)})
    )
    assert [(c.node, c.gpu, c.klass) for c in plain.culprits] == [("n2", "0", "compute")]
    assert [(c.node, c.gpu) for c in flagged.culprits] == [("n2", "0")]
    assert flagged.culprits[0].confidence > plain.culprits[0].confidence
    assert "clock_event_reasons" in {s.feature for s in flagged.culprits[0].evidence}


def test_a_slowdown_reason_without_a_lower_clock_does_not_convict() -> None:
    loc = localise(group(n2={"clock_event_reasons": (HW_THERMAL, 0)}))
    assert loc.culprits == () and loc.klass == "cluster-wide"


@pytest.mark.parametrize("job_slow", [True, False])
def test_temperature_alone_never_convicts(job_slow: bool) -> None:
    """A GPU 30 °C hotter than its peers, clock and activity normal: named, not blamed."""
    loc = localise(group(n6={"temp_c": (95.0, 61.0)}), job_slow=job_slow)
    assert loc.culprits == ()
    assert loc.klass == ("cluster-wide" if job_slow else "none")
    assert "n6/gpu0" in loc.reason and "hot but not slow" in loc.reason


def test_hot_and_slow_gpu_is_blamed_for_the_slowness_with_temperature_as_context() -> None:
    loc = localise(group(n6={"temp_c": (95.0, 61.0), "sm_clock_mhz": (1_200.0, 1_980.0)}))
    (culprit,) = loc.culprits
    assert culprit.klass == "compute" and culprit.gpu == "0"
    assert {s.feature for s in culprit.evidence} >= {"sm_clock_mhz", "temp_c"}
    assert "hot but not slow" not in loc.reason


def test_cpu_contention_with_normal_gpus_is_cpu() -> None:
    loc = localise(group(n1={"cpu_busy": 0.97, "run_queue": 64.0}))
    (culprit,) = loc.culprits
    assert (culprit.node, culprit.gpu, culprit.klass) == ("n1", None, "cpu")
    assert {s.feature for s in culprit.evidence} == {"cpu_busy", "run_queue"}
    assert culprit.confidence == 1.0  # both strong: max strength + corroboration


def test_cpu_figures_on_a_compute_slow_node_are_evidence_not_a_second_culprit() -> None:
    loc = localise(group(n1={"cpu_busy": 0.97, "sm_active": (0.92, 0.75)}))
    (culprit,) = loc.culprits
    assert culprit.klass == "compute"
    assert "cpu_busy" in {s.feature for s in culprit.evidence}


def test_link_counters_out_of_line_are_network() -> None:
    """Transmit wait and congestion marks 10x the peers' on n7's link."""
    loc = localise(group(n7={"link_xmit_wait": 2e5, "link_congestion": 500.0}))
    (culprit,) = loc.culprits
    assert (culprit.node, culprit.gpu, culprit.klass) == ("n7", None, "network")
    assert {s.feature for s in culprit.evidence} >= {"link_xmit_wait", "link_congestion"}


def test_lower_transmit_rate_alone_is_not_network() -> None:
    """Sending less is what every waiting node does: corroboration only."""
    assert localise(group(n7={"link_tx_bytes": 1e10})).culprits == ()


def test_congestion_and_a_throttled_gpu_on_one_node_are_two_culprits() -> None:
    loc = localise(
        group(n3={"link_xmit_wait": 3e5, "sm_clock_mhz": (990.0, 1_980.0), "temp_c": (92.0, 61.0)})
    )
    assert {(c.node, c.gpu, c.klass) for c in loc.culprits} == {
        ("n3", None, "network"),
        ("n3", "0", "compute"),
    }


def test_a_movement_shared_by_many_nodes_blames_no_one() -> None:
    """4 of 10 nodes with congested links (> cluster_fraction 0.3): a group event."""
    congested = {f"n{i}": {"link_xmit_wait": 3e5, "link_congestion": 900.0} for i in range(4)}
    loc = localise(group(**congested))
    assert loc.culprits == () and loc.klass == "cluster-wide"
    assert "moved as a group" in loc.reason


def test_reference_gives_cluster_wide_its_evidence_and_confidence() -> None:
    before = group()
    after = {
        name: replace(
            m, link_xmit_wait=m.link_xmit_wait * 10, link_congestion=m.link_congestion * 8
        )
        for name, m in before.items()
    }
    without = localise(after)
    with_ref = localise(after, reference=group_medians(before))
    assert without.klass == with_ref.klass == "cluster-wide"
    assert (without.confidence, with_ref.confidence) == (0.6, 0.9)
    moved = {s.feature: (s.value, s.median) for s in with_ref.evidence}
    assert set(moved) == {"link_xmit_wait", "link_congestion"}
    value, median = moved["link_xmit_wait"]
    assert value == pytest.approx(10 * median)


def test_roles_compare_like_with_like() -> None:
    """Stage b runs at 60 % SM activity, stage a at 75 %: n9 at 75 % in stage b is the slow one."""
    metrics = group(
        **{f"n{i}": {"sm_active": (0.60, 0.60)} for i in range(5, 10)},
    )
    metrics["n9"] = replace(metrics["n9"], sm_active=(0.60, 0.75))
    roles = {f"n{i}": ("a" if i < 5 else "b") for i in range(N_NODES)}
    assert [(c.node, c.gpu) for c in localise(metrics, roles=roles).culprits] == [("n9", "1")]
    assert localise(metrics).culprits == ()  # mixed stages: the spread hides it


def test_too_few_peers_is_unknown_when_slow() -> None:
    metrics = {f"n{i}": node(i) for i in range(3)}
    loc = localise(metrics)
    assert loc.klass == "unknown" and loc.culprits == () and loc.confidence == 0.0
    assert "too few to compare" in loc.reason
    assert localise(metrics, job_slow=False).klass == "none"
    assert localise({}).klass == "unknown"


def test_missing_values_never_convict() -> None:
    """NaN figures and GPU-less nodes are skipped, not read as 0."""
    metrics = group(
        n0={"cpu_busy": math.nan, "link_xmit_wait": math.nan},
        n1={
            "sm_active": (),
            "sm_clock_mhz": (),
            "power_w": (),
            "temp_c": (),
            "clock_event_reasons": (),
        },
        n2={"sm_active": (math.nan, 0.75)},
    )
    assert localise(metrics).culprits == ()


def test_result_is_independent_of_node_order() -> None:
    metrics = group(n4={"sm_active": (0.75, 0.90)}, n7={"link_xmit_wait": 3e5})
    reordered = dict(reversed(list(metrics.items())))
    assert localise(metrics) == localise(reordered)


def test_localisation_is_json_safe() -> None:
    loc = localise(group(n4={"sm_active": (0.75, 0.90)}))
    data = json.loads(json.dumps(loc.to_dict(), allow_nan=False))
    assert data["culprits"][0]["node"] == "n4" and data["klass"] == "compute"


def test_combine_buckets_takes_medians_and_majority_bits() -> None:
    """Three buckets: per-feature median; a reason bit set in 2 of 3 buckets survives."""
    b1 = group(
        n0={"sm_active": (0.5, 0.7), "clock_event_reasons": (HW_SLOWDOWN, 0), "cpu_busy": 0.1}
    )
    b2 = group(
        n0={"sm_active": (0.9, 0.6), "clock_event_reasons": (HW_SLOWDOWN, 0), "cpu_busy": 0.9}
    )
    b3 = group(n0={"sm_active": (0.7, math.nan), "clock_event_reasons": (0, 0), "cpu_busy": 0.5})
    combined = combine_buckets([b1, b2, b3])
    n0 = combined["n0"]
    assert n0.sm_active == pytest.approx((0.7, 0.65))
    assert n0.clock_event_reasons == (HW_SLOWDOWN, 0)
    assert n0.cpu_busy == pytest.approx(0.5)
    assert combined["n1"] == node(1)
    assert combine_buckets([]) == {}


UNKNOWN_REASON = 2**63  # nvmlClocksEventReasonUnknown: a real DCGM value


def test_unknown_reason_bit_63_is_an_unsigned_mask_not_an_int64_overflow() -> None:
    """Bit 63 set beside HW slowdown: localise and combine_buckets keep every bit, no crash."""
    mask = UNKNOWN_REASON | HW_SLOWDOWN
    bucket = group(n2={"sm_clock_mhz": (1_500.0, 1_980.0), "clock_event_reasons": (mask, 0)})
    combined = combine_buckets([bucket, bucket, group()])
    assert combined["n2"].clock_event_reasons == (mask, 0)
    (culprit,) = localise(combined).culprits
    assert (culprit.node, culprit.gpu, culprit.klass) == ("n2", "0", "compute")
    reasons = [s for s in culprit.evidence if s.feature == "clock_event_reasons"]
    assert [s.value for s in reasons] == [float(mask)]


def test_a_mask_outside_64_bits_counts_as_no_reason() -> None:
    """A mask no NVML build can send (negative, 2^64) is read as 0 rather than crashing."""
    bucket = group(n2={"clock_event_reasons": (-1, 2**64)}, n3={"sm_clock_mhz": (1_500.0, 1_980.0)})
    assert bucket["n2"].reasons() == (0, 0)
    assert [(c.node, c.klass) for c in localise(bucket).culprits] == [("n3", "compute")]
    assert combine_buckets([bucket])["n2"].clock_event_reasons == (0, 0)


def test_group_medians_of_huge_finite_values_stay_finite() -> None:
    """Two GPUs at 1.7e308 (finite) have a finite median, not (a + b) / 2 = inf."""
    huge = group(**{f"n{i}": {"power_w": (1.7e308, 1.7e308 * (0.9 + 0.01 * i))} for i in range(10)})
    reference = group_medians(huge)
    assert reference["power_w"] == pytest.approx(1.7e308 * 0.975, rel=0.03)
    assert all(math.isfinite(v) for v in reference.values())
    assert math.isfinite(combine_buckets([huge, huge])["n3"].power_w[1])


def test_node_metrics_reject_ragged_gpu_tuples() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        NodeMetrics(sm_active=(0.9, 0.9), sm_clock_mhz=(1_980.0,))


@pytest.mark.parametrize(
    "kwargs",
    [{"z_threshold": 0.0}, {"min_peers": 2}, {"cluster_fraction": 0.5}, {"reference_shift": 0.0}],
)
def test_params_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LocaliseParams(**kwargs)  # type: ignore[arg-type]


finite = st.floats(0.0, 1e6, allow_nan=False, allow_subnormal=False)


@settings(max_examples=60, deadline=None)
@given(
    temps=st.lists(st.floats(20.0, 110.0), min_size=N_NODES, max_size=N_NODES),
    waits=st.lists(finite, min_size=N_NODES, max_size=N_NODES),
)
def test_any_input_gives_bounded_confidence_and_temperature_never_convicts(
    temps: list[float], waits: list[float]
) -> None:
    """Arbitrary temperatures and link waits: confidences in [0, 1]; no compute culprit
    (clocks and activity are normal), only network ones."""
    metrics = {
        f"n{i}": node(i, temp_c=(temps[i], temps[i]), link_xmit_wait=waits[i])
        for i in range(N_NODES)
    }
    loc = localise(metrics)
    assert 0.0 <= loc.confidence <= 1.0
    assert all(c.klass == "network" and 0.5 <= c.confidence <= 1.0 for c in loc.culprits)
