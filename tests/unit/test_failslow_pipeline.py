"""Fail-slow wired end to end: frames → Pipeline → PeerwatchFailSlow / PeerwatchJobSlow, SLO export.

The scenario tests run the scenario library's faults (reporting seed, so nothing
here was tuned on them) through ``streams.worker.offline.run_offline``, the worker's
own code path. To keep the file fast each run is shortened: the fault keeps its
drawn magnitude, node and in-bucket phase but starts 10 min into the run, the
run stops 8 min after it, and the 60-node jobs are cut to 16 nodes (the
culprit, if outside them, moves to the same position modulo 16).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

import pytest
from prometheus_client import generate_latest

from detectors.alerts import AlertChange
from detectors.failslow.alerts import (
    FAIL_SLOW,
    JOB_SLOW,
    FailSlowAlertParams,
    FailSlowAlertState,
    step_failslow_alerts,
)
from detectors.failslow.changepoint import ChangeVerdict
from detectors.failslow.family import FailSlow
from detectors.failslow.inputs import job_inputs, node_metrics
from detectors.failslow.localise import Culprit, Localisation, localise
from detectors.failslow.mitigation import Advice, Stage
from detectors.failslow.monitor import FailSlowVerdict
from detectors.failslow.slo import SloSummary
from detectors.fusion import Signal
from streams.frames import Frame
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.run import generate
from streams.lab.simulator.scenarios import REPORTING_SEEDS, get_scenario
from streams.settings import Settings
from streams.sinks.payloads import to_payload, to_record
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.offline import build_pair, run_offline
from streams.worker.pipeline import Pipeline

SEED = REPORTING_SEEDS[0]
SETTINGS = Settings(group_labels=["train_job"])
B = SETTINGS.bucket_ms
MINUTE = 60_000
ONSET_MIN = 10
AFTER_MIN = 8
GROUP = "llm-pretrain"


# -- shortened scenario runs -------------------------------------------------------------------


@dataclass(frozen=True)
class Short:
    """A shortened scenario run: its config, the fault's node / GPU / onset, the end."""

    config: ClusterConfig
    node: str | None
    gpu: int | None
    onset_ms: int
    end_ms: int

    def rounds(self) -> Iterator[tuple[int, list]]:
        return generate(self.config, self.config.start_ms, self.end_ms)

    @property
    def onset_bucket(self) -> int:
        return self.onset_ms - self.onset_ms % B


def shortened(name: str, nodes: int = 16, **overrides: object) -> Short:
    """Scenario ``name`` at ``SEED``: fault 10 min in, run until 8 min after it."""
    config = get_scenario(name).config_for(SEED)
    small_hosts = config.job_hosts[:nodes]
    onset = config.start_ms + ONSET_MIN * MINUTE
    faults = []
    for fault in config.faults:
        shift = onset + fault.onset_ms % B - fault.onset_ms
        changes: dict[str, object] = {"onset_ms": fault.onset_ms + shift}
        names = {f.name for f in fields(fault)}
        if "end_ms" in names and getattr(fault, "end_ms", None) is not None:
            changes["end_ms"] = fault.end_ms + shift  # type: ignore[attr-defined]
        node = getattr(fault, "node", None)
        if node is not None and node not in small_hosts:
            changes["node"] = small_hosts[config.job_hosts.index(node) % nodes]
        faults.append(replace(fault, **changes))  # type: ignore[arg-type]
    small = replace(config, job_nodes=nodes, faults=tuple(faults), **overrides)  # type: ignore[arg-type]
    fault = small.faults[0] if small.faults else None
    return Short(
        small,
        getattr(fault, "node", None),
        getattr(fault, "gpu", None),
        fault.onset_ms if fault is not None else onset,
        onset + AFTER_MIN * MINUTE,
    )


def failslow_changes(run: Short) -> list[AlertChange]:
    changes = run_offline(run.rounds(), SETTINGS).changes
    return [c for c in changes if c.alertname in (FAIL_SLOW, JOB_SLOW)]


def first_firing(changes: list[AlertChange], alertname: str) -> AlertChange:
    return next(c for c in changes if c.alertname == alertname and c.status == "firing")


@pytest.mark.parametrize(
    ("scenario", "klass"),
    [("gpu-slow-16", "compute"), ("cpu-contention", "cpu"), ("network-congestion", "network")],
)
def test_culprit_node_and_class_named_within_3_buckets(scenario: str, klass: str) -> None:
    """A node-level slowdown: PeerwatchFailSlow on the culprit, right class, <= 3 buckets."""
    run = shortened(scenario)
    changes = failslow_changes(run)
    alert = first_firing(changes, FAIL_SLOW)
    labels = dict(alert.labels)
    assert alert.node == run.node
    assert labels["class"] == klass
    assert (alert.bucket_ts - run.onset_bucket) // B <= 3
    assert alert.severity == "warning" and alert.action and alert.action.startswith("S")
    assert {c.node for c in changes if c.alertname == FAIL_SLOW} == {run.node}
    assert not any(c.alertname == JOB_SLOW for c in changes)
    if klass == "compute":
        assert labels["gpu"] == str(run.gpu)


@pytest.mark.parametrize("scenario", ["fabric-congestion", "power-cap"])
def test_job_wide_slowdown_raises_job_alert_and_blames_no_node(scenario: str) -> None:
    run = shortened(scenario)
    changes = failslow_changes(run)
    alert = first_firing(changes, JOB_SLOW)
    assert alert.node is None
    assert dict(alert.labels)["class"] == "cluster-wide"
    assert alert.action == "S1_OBSERVE"
    assert not any(c.alertname == FAIL_SLOW for c in changes)


def test_hot_gpu_raises_no_fail_slow_alert() -> None:
    assert failslow_changes(shortened("hot-gpu")) == []


def test_checkpoint_dips_raise_no_fail_slow_alert() -> None:
    """Saves every 6 min (3 in the run, 18-32 s each, every node at once): never a slowdown."""
    run = shortened("checkpoint-saves", checkpoint_interval_s=360.0, first_save_s=240.0)
    assert failslow_changes(run) == []


def test_snapshot_restore_keeps_the_fail_slow_state_and_its_alerts() -> None:
    """Restored mid-episode (JSON round trip), the worker neither re-fires nor forgets the alert."""
    run = shortened("gpu-slow-16")
    builder, pipeline = build_pair(SETTINGS)
    changes: list[AlertChange] = []
    restored = False
    for t_ms, series in run.rounds():
        now_s = t_ms / 1000.0
        builder.add(series, now_s=now_s)
        frames = builder.close_due_by_watermark(now_s=now_s, idle_s=SETTINGS.ingest_idle_flush_s)
        for f in frames:
            pipeline.add(f, now_s)
        for scored in pipeline.due(GROUP, now_s):
            changes.extend(scored.changes)
        if not restored and any(c.alertname == FAIL_SLOW for c in changes):
            snap = json.loads(json.dumps(pipeline.snapshot(GROUP), allow_nan=False))
            before = pipeline.figures(GROUP).get(FailSlow.name)
            pipeline = Pipeline.from_settings(SETTINGS)
            pipeline.restore(GROUP, snap)
            assert pipeline.snapshot(GROUP) == snap
            assert pipeline.figures(GROUP).get(FailSlow.name) == before
            restored = True
    assert restored
    fired = [c for c in changes if c.alertname == FAIL_SLOW and c.status == "firing"]
    assert len({c.starts_bucket_ts for c in fired}) == 1  # re-sends only, no second episode
    assert snap["failslow"]["state"]["changepoint"]["episode"] is not None
    summary = pipeline.figures(GROUP).get(FailSlow.name)
    assert summary is not None and summary.incident_count == 1
    assert summary.incidents[0].culprits == ((run.node, str(run.gpu)),)


# -- hostile gauges through the worker's path --------------------------------------------------

UNKNOWN_REASON = 2**63  # nvmlClocksEventReasonUnknown, as DCGM exports it (a float gauge)


def hand_frames(index: int, slow: bool, huge: float | None = None) -> dict[str, dict[str, float]]:
    """16 two-GPU ranks; when ``slow`` the job drops 30 % and n3's GPU 0 clocks down.

    n3's GPU 0 always carries the unknown reason bit; ``huge`` replaces every gauge
    but the throughput (finite values near the float limit)."""
    frames = {}
    for i in range(16):
        values = {"tokens_per_s": 3.5e4 if slow else 5e4}
        for g in range(2):
            clocked_down = slow and i == 3 and g == 0
            values[f"sm_active@{g}"] = 0.75 if huge is None else huge
            values[f"sm_clock_mhz@{g}"] = (
                (1_500.0 if clocked_down else 1_980.0) if huge is None else huge * (1 - i / 100)
            )
            values[f"clock_event_reasons@{g}"] = (
                float(UNKNOWN_REASON | 8) if i == 3 and g == 0 else 0.0
            )
        if huge is not None:
            values.update(
                {"procs_running": huge, "ib_xmit_wait_rate": huge, "cpu_idle_cores": huge}
            )
        frames[f"n{i}"] = values
    return frames


def feed(pipeline: Pipeline, buckets: range, slow_from: int, huge: float | None = None) -> list:
    """Score ``buckets`` of :func:`hand_frames`; the fail-slow verdicts in order."""
    verdicts = []
    for b in buckets:
        now_s = (b + 1) * B / 1000 + 1
        for node, values in hand_frames(b, b >= slow_from, huge).items():
            pipeline.add(Frame(GROUP, node, b * B, values), now_s)
        verdicts.extend(s.failslow for s in pipeline.due(GROUP, now_s))
    return verdicts


def test_unknown_reason_bit_63_on_a_confirmed_slowdown_is_localised_not_a_crash() -> None:
    """DCGM's 2^63 reason on the slow GPU: the drop is confirmed and n3/gpu0 blamed."""
    verdicts = feed(Pipeline.from_settings(SETTINGS), range(60), slow_from=40)
    blamed = {(c.node, c.gpu) for v in verdicts if v.slow for c in v.localisation.culprits}
    assert blamed == {("n3", "0")}


def test_huge_finite_gauges_snapshot_restore_and_keep_scoring() -> None:
    """Gauges at 1.7e308: the saved state is finite JSON, restores, and scoring goes on."""
    pipeline = Pipeline.from_settings(SETTINGS)
    assert len(feed(pipeline, range(30), slow_from=99, huge=1.7e308)) == 30
    snap = json.loads(json.dumps(pipeline.snapshot(GROUP), allow_nan=False))
    assert snap["failslow"]["state"]["reference"]  # a reference was taken, and it is finite
    restored = Pipeline.from_settings(SETTINGS)
    restored.restore(GROUP, snap)
    verdicts = feed(restored, range(30, 60), slow_from=40)
    assert {(c.node, c.gpu) for v in verdicts if v.slow for c in v.localisation.culprits} == {
        ("n3", "0")
    }


def test_state_saved_with_an_infinite_reference_still_restores() -> None:
    """A snapshot written before the fix (reference = inf) restores; the inf is dropped."""
    pipeline = Pipeline.from_settings(SETTINGS)
    feed(pipeline, range(5), slow_from=99)
    snap = pipeline.snapshot(GROUP)
    snap["failslow"]["state"]["reference"]["sm_active"] = math.inf
    restored = Pipeline.from_settings(SETTINGS)
    restored.restore(GROUP, json.loads(json.dumps(snap)))
    assert "sm_active" not in restored.snapshot(GROUP)["failslow"]["state"]["reference"]
    assert len(feed(restored, range(5, 8), slow_from=99)) == 3


# -- the frame adapter -------------------------------------------------------------------------


def test_throughput_is_median_tokens_else_inverse_median_iteration_time() -> None:
    tokens = {"a": {"tokens_per_s": 100.0}, "b": {"tokens_per_s": 90.0}, "c": {}}
    assert job_inputs(tokens).throughput == 95.0
    iterations = {"a": {"iteration_time_s": 2.0}, "b": {"iteration_time_s": 4.0}}
    inputs = job_inputs(iterations)
    assert inputs.throughput == pytest.approx(1 / 3) and inputs.source == "1/iteration_time_s"
    none = job_inputs({"a": {"gpu_util": 90.0}})
    assert math.isnan(none.throughput) and none.source == "none" and none.n_gpus == 8


def test_node_metrics_take_per_gpu_keys_in_gpu_order() -> None:
    values = {
        "sm_active@10": 0.5,
        "sm_active@2": 0.9,
        "sm_clock_mhz@2": 1_900.0,
        "clock_event_reasons@10": 8.0,
        "cpu_idle_cores": 3.5,
        "procs_running": 12.0,
        "ib_xmit_wait_rate": 1e6,
        "xid_last@2": 0.0,
    }
    m = node_metrics(values)
    assert m.gpus == ("2", "10")
    assert m.sm_active == (0.9, 0.5)
    assert m.sm_clock_mhz[0] == 1_900.0 and math.isnan(m.sm_clock_mhz[1])
    assert m.clock_event_reasons == (0, 8)
    assert (m.cpu_idle_cores, m.run_queue, m.link_xmit_wait) == (3.5, 12.0, 1e6)
    assert math.isnan(m.link_tx_bytes)
    assert job_inputs({"n": values}).n_gpus == 2
    masks = node_metrics(
        {f"clock_event_reasons@{g}": v for g, v in enumerate([2.0**63, 2.0**64, -8.0])}
    )
    assert masks.clock_event_reasons == (UNKNOWN_REASON, 0, 0)  # 64-bit masks only
    other_ids = node_metrics({"sm_clock_mhz@GPU-a1": 1_900.0, "sm_clock_mhz@16": 1_850.0})
    assert other_ids.gpus == ("16", "GPU-a1") and other_ids.sm_clock_mhz == (1_850.0, 1_900.0)


def test_reduced_clock_stands_in_when_frames_have_no_per_gpu_keys() -> None:
    """Without per-GPU keys a throttled GPU still shows as its node's lowest clock."""
    frames = {
        f"n{i}": {"gpu_sm_clock_mhz": 1_600.0 if i == 3 else 1_980.0 + i, "gpu_sm_active": 0.7}
        for i in range(8)
    }
    gpus = {"n3": {"gpu_sm_clock_mhz": "5"}}
    metrics = job_inputs(frames, gpus).metrics
    assert metrics["n3"].gpus == ("5",)
    loc = localise(metrics)
    assert [(c.node, c.gpu, c.klass) for c in loc.culprits] == [("n3", "5", "compute")]


def test_fewer_idle_cores_than_peers_convicts_cpu() -> None:
    """cpu_idle_cores needs no CPU count: a node with 0.1 of ~2.8 idle cores is the cpu culprit."""
    frames = {
        f"n{i}": {
            "cpu_idle_cores": 0.1 if i == 2 else 2.8 + 0.02 * i,
            "procs_running": 13.0 + i % 2,
            "sm_active@0": 0.7,
        }
        for i in range(10)
    }
    loc = localise(job_inputs(frames).metrics)
    assert [(c.node, c.klass) for c in loc.culprits] == [("n2", "cpu")]
    assert loc.culprits[0].evidence[0].feature == "cpu_idle_cores"


def test_node_wide_throttling_names_the_node_not_one_gpu() -> None:
    """Every GPU of n5 clocked down (a node-wide thermal problem): the culprit has no GPU."""
    frames = {
        f"n{i}": {
            **{f"sm_clock_mhz@{g}": (1_500.0 + g if i == 5 else 1_980.0 - g) for g in range(4)},
            **{f"sm_active@{g}": 0.7 for g in range(4)},
        }
        for i in range(8)
    }
    (culprit,) = localise(job_inputs(frames).metrics).culprits
    assert (culprit.node, culprit.gpu, culprit.klass) == ("n5", None, "compute")
    assert all(s.gpu is None for s in culprit.evidence)


# -- the alert lifecycle (hand-built verdicts) -------------------------------------------------

PARAMS = FailSlowAlertParams(resolve_after=4, bucket_ms=B)


def verdict(
    bucket: int,
    *,
    slow: bool = True,
    culprits: tuple[tuple[str, str | None, str], ...] = (),
    klass: str = "cluster-wide",
    stage: Stage = "S1",
    localised: bool = True,
) -> FailSlowVerdict:
    """Bucket ``bucket``'s verdict: a 20 % drop since bucket 10 (or none), its culprits."""
    change = ChangeVerdict(bucket, slow, slow, "down" if slow else None, 0.2 if slow else 0.0,
                           3, 10 if slow else 0)  # fmt: skip
    blamed = tuple(
        Culprit(n, g, k, 0.8, (Signal("sm_clock_mhz", -6.0, 1_600.0, 1_980.0, g),))  # type: ignore[arg-type]
        for n, g, k in culprits
    )
    loc = None
    if slow and localised:
        top = blamed[0].klass if blamed else klass
        loc = Localisation(blamed, top, 0.8 if blamed else 0.6, "test")  # type: ignore[arg-type]
    advice = Advice(stage, f"{stage} test", 0.0, 0.0)
    return FailSlowVerdict(bucket, change, 0, loc, advice)


def run_alerts(verdicts: list[FailSlowVerdict]) -> list[tuple[int, str, str | None, str, str]]:
    state = FailSlowAlertState()
    out = []
    for v in verdicts:
        step = step_failslow_alerts(state, v, group="job", bucket_ts=v.bucket * B, params=PARAMS)
        state = step.state
        json.dumps(state.to_dict(), allow_nan=False)
        assert FailSlowAlertState.from_dict(state.to_dict()) == state
        out.extend((v.bucket, c.alertname, c.node, c.status, c.action or "") for c in step.changes)
    return out


def test_intermittent_culprit_is_one_alert_and_resolves_after_the_hysteresis() -> None:
    """Blamed, 3 quiet buckets, blamed again, then quiet: one firing, one resolution."""
    culprit = (("n1", "3", "compute"),)
    seq = [verdict(12, culprits=culprit)]
    seq += [verdict(b, slow=False) for b in (13, 14, 15)]
    seq += [verdict(16, culprits=culprit)]
    seq += [verdict(b, slow=False) for b in range(17, 22)]
    assert run_alerts(seq) == [
        (12, FAIL_SLOW, "n1", "firing", "S1_OBSERVE"),
        (20, FAIL_SLOW, "n1", "resolved", "S1_OBSERVE"),
    ]


def test_stage_escalation_replaces_the_alert_once_and_is_never_withdrawn() -> None:
    """``action`` is a label: a climb resolves the old alert and fires the new one."""
    culprit = (("n1", None, "cpu"),)
    stages: list[Stage] = ["S1", "S2", "S2", "S1", "S3"]
    seq = [verdict(12 + i, culprits=culprit, stage=s) for i, s in enumerate(stages)]
    assert run_alerts(seq) == [
        (12, FAIL_SLOW, "n1", "firing", "S1_OBSERVE"),
        (13, FAIL_SLOW, "n1", "resolved", "S1_OBSERVE"),
        (13, FAIL_SLOW, "n1", "firing", "S2_REBALANCE"),
        (16, FAIL_SLOW, "n1", "resolved", "S2_REBALANCE"),
        (16, FAIL_SLOW, "n1", "firing", "S3_ISOLATE"),
    ]


def test_job_alert_gives_way_to_a_node_alert_and_unknown_buckets_freeze() -> None:
    """Cluster-wide first, then a culprit: the job alert resolves at once; no metrics: frozen."""
    seq = [
        verdict(12),
        verdict(13, localised=False),
        verdict(14, culprits=(("n2", None, "network"),)),
    ]
    seq += [verdict(b, localised=False) for b in range(15, 25)]
    assert run_alerts(seq) == [
        (12, JOB_SLOW, None, "firing", "S1_OBSERVE"),
        (14, FAIL_SLOW, "n2", "firing", "S1_OBSERVE"),
        (14, JOB_SLOW, None, "resolved", "S1_OBSERVE"),
    ]


def test_alerts_reach_alertmanager_and_the_topic_with_summary_labels_and_action() -> None:
    state = FailSlowAlertState()
    step = step_failslow_alerts(
        state, verdict(12, culprits=(("n1", "3", "compute"),), stage="S2"), group="job",
        bucket_ts=12 * B, params=PARAMS,
    )  # fmt: skip
    (change,) = step.changes
    payload = to_payload(change)
    assert payload["labels"] | {"node": "n1", "class": "compute", "gpu": "3"} == payload["labels"]
    assert payload["annotations"]["action"] == "S2_REBALANCE"
    assert "fail-slow culprit" in payload["annotations"]["summary"]
    assert to_record(change).action == "S2_REBALANCE"
    job = step_failslow_alerts(state, verdict(12), group="job", bucket_ts=12 * B, params=PARAMS)
    assert "no node to blame" in to_payload(job.changes[0])["annotations"]["summary"]


# -- SLO export --------------------------------------------------------------------------------


def test_worker_exports_slo_figures_and_counters_advance_by_growth() -> None:
    metrics = WorkerMetrics()
    first = SloSummary(1_000.0, 990.0, 800.0, 60.0, 0.0, 0.0, 2.0, 1.5, 0.2, 0.1, (), 1)
    metrics.observe_slo("job", first, slow=True)
    metrics.observe_slo("job", replace(first, gpu_hours_allocated=3.0), slow=False)
    text = generate_latest(metrics.registry).decode()
    assert 'peerwatch_job_throughput_baseline{group="job"} 1000.0' in text
    assert 'peerwatch_job_throughput_p5{group="job"} 800.0' in text
    # GPU-hours in the summary, GPU-seconds on /metrics (base units)
    assert 'peerwatch_job_allocated_gpu_seconds_total{group="job"} 10800.0' in text
    assert 'peerwatch_job_in_band_gpu_seconds_total{group="job"} 5400.0' in text
    assert 'peerwatch_job_healthy_waiting_gpu_seconds_total{group="job"} 360.0' in text
    assert 'peerwatch_job_below_slo_seconds_total{group="job"} 60.0' in text
    assert 'peerwatch_job_slow{group="job"} 0.0' in text


def test_slo_counters_exist_from_zero_once_the_job_is_seen() -> None:
    """A counter that first appears at its value hides that growth from increase() and
    leaves a dashboard panel empty until the job first runs below its band."""
    metrics = WorkerMetrics()
    metrics.observe_slo(
        "job", SloSummary(None, None, None, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, (), 0)
    )
    counters = [
        f
        for f in metrics.registry.collect()
        if f.type == "counter" and f.name.startswith("peerwatch_job_")
    ]
    assert len(counters) == 6
    for family in counters:
        (total,) = [s for s in family.samples if s.name.endswith("_total")]
        assert total.labels == {"group": "job"} and total.value == 0.0, family.name
