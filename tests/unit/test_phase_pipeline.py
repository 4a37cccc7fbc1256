"""Checkpoint saves and restart loads through the worker's own path never page a healthy node.

The simulator (its save cadence, first-save time, save length and restart-load knobs) →
frames → ``Pipeline``, via ``streams.worker.offline``. Jobs are cut to 16 nodes to keep the file
fast; the phase rules scale per node, so the same thresholds apply.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from prometheus_client import generate_latest

from detectors.alerts import (
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    AlertChange,
)
from detectors.gpu_health import XID_ALERT
from detectors.phase import PHASES
from streams.lab.simulator.calibration import Calibration
from streams.lab.simulator.conditions import PlannedRestart
from streams.lab.simulator.config import METRIC_FAMILIES, ClusterConfig
from streams.lab.simulator.faults import CHECKPOINT_SAVE, NvlinkBusFault
from streams.lab.simulator.run import generate, ground_truth
from streams.settings import Settings
from streams.sinks.payloads import alert_annotations, alert_labels
from streams.telemetry.metrics import WorkerMetrics
from streams.worker.offline import run_offline, score_rounds

SETTINGS = Settings(group_labels=["train_job"])
MINUTE = 60_000
PEER_ALERTS = (GROUP_DEGRADED, NODE_COLLAPSE, NODE_DEVIATION, NODE_SILENT)
BASE = ClusterConfig(seed=11, job_nodes=16, spares=0, metric_families=METRIC_FAMILIES)


def firing(config: ClusterConfig, minutes: float) -> list[AlertChange]:
    """Peer scoring's firing alerts: PeerwatchGroupDegraded and the node alerts.

    (Fail-slow's PeerwatchJobSlow has its own test: it takes expected phases as no
    throughput.)
    """
    end = config.start_ms + int(minutes * MINUTE)
    changes = run_offline(generate(config, config.start_ms, end), SETTINGS).changes
    return [c for c in changes if c.status == "firing" and c.alertname in PEER_ALERTS]


def long_saves() -> ClusterConfig:
    """Saves of 80-100 s (78 GB per heavy writer at the report's bandwidth) every 20 min."""
    calibration = replace(Calibration(), save_bytes_heavy=78e9, save_bytes_light=6e9)
    return replace(
        BASE,
        first_save_s=60.0,
        checkpoint_interval_s=1200.0,
        save_duration_s=(80.0, 100.0),
        calibration=calibration,
    )


def saves_within(config: ClusterConfig, minutes: float) -> int:
    end = config.start_ms + int(minutes * MINUTE)
    rows = ground_truth(config, end)
    return sum(1 for g in rows if g.kind == CHECKPOINT_SAVE and g.onset_ms < end)


@pytest.mark.parametrize(
    ("cadence_s", "minutes"),
    [(1200.0, 130.0), (3600.0, 130.0)],
    ids=["every-20-min", "every-hour"],
)
def test_saves_from_the_first_minute_page_nothing(cadence_s: float, minutes: float) -> None:
    """Saves from 1 min in (before any level is learned), every 20 min or hour: no alert."""
    config = replace(BASE, first_save_s=60.0, checkpoint_interval_s=cadence_s)
    assert saves_within(config, minutes) >= 2
    assert Counter(c.alertname for c in firing(config, minutes)) == {}


def test_long_first_save_is_not_learned_as_the_usual() -> None:
    """A 3-bucket save at the report's bandwidth, 1 min in: not learned, no GroupDegraded.

    A bigger checkpoint (78 GB per heavy writer) at the same per-node bandwidth takes
    80-100 s. Before phases the guard's warm-up learned it as the usual level and
    called the training after it a group shift.
    """
    assert Counter(c.alertname for c in firing(long_saves(), 45.0)) == {}


def test_long_saves_are_no_job_slowdown() -> None:
    """Fail-slow knows the phase too: 80-100 s saves every 20 min raise no PeerwatchJobSlow."""
    config = long_saves()
    end = config.start_ms + 120 * MINUTE
    changes = run_offline(generate(config, config.start_ms, end), SETTINGS).changes
    assert saves_within(config, 120.0) >= 5
    assert [c.alertname for c in changes if c.status == "firing"] == []


def test_history_that_begins_in_a_restart_load_pages_nothing() -> None:
    """The worker starts during a 25-min restart load: the load is not learned as usual."""
    restart = PlannedRestart(BASE.start_ms + MINUTE // 2, delay_s=0.0)
    config = replace(BASE, faults=(restart,), checkpoint_interval_s=1200.0)
    assert Counter(c.alertname for c in firing(config, 75.0)) == {}


def test_restart_load_right_after_the_stop_pages_nothing() -> None:
    """A planned restart that loads at once (no idle gap): the 10-min load raises nothing."""
    restart = PlannedRestart(BASE.start_ms + 20 * MINUTE, delay_s=0.0)
    config = replace(BASE, faults=(restart,), restart_load_s=600.0, checkpoint_interval_s=1200.0)
    assert Counter(c.alertname for c in firing(config, 60.0)) == {}


def test_phase_rides_on_alerts_as_an_annotation_not_a_label() -> None:
    """The job stop before a restart load is a group alert; it carries the phase annotation."""
    restart = PlannedRestart(BASE.start_ms + 20 * MINUTE, delay_s=180.0)
    config = replace(BASE, faults=(restart,), restart_load_s=600.0)
    end = config.start_ms + 40 * MINUTE
    phases: list[str] = []
    for _frames, scored in score_rounds(generate(config, config.start_ms, end), SETTINGS):
        for item in scored:
            for change in item.changes:
                assert "phase" not in alert_labels(change)
                phases.append(alert_annotations(change)["phase"])
    assert "idle" in phases  # fired while the job was stopped
    assert any(p.startswith("load") for p in phases)  # resolved during the load


def test_fail_stop_during_a_save_still_pages_its_xid_and_collapse() -> None:
    """An NVLink + bus fault 5 s into a save: XID and collapse at the fault's bucket."""
    node = BASE.job_hosts[5]
    onset = BASE.start_ms + 10 * MINUTE + 5_000
    config = replace(
        BASE,
        first_save_s=600.0,
        faults=(NvlinkBusFault(node=node, gpu=2, onset_ms=onset),),
    )
    bucket = onset - onset % SETTINGS.bucket_ms
    end = config.start_ms + 20 * MINUTE
    changes, phase_at_fault = [], None
    for _frames, scored in score_rounds(generate(config, config.start_ms, end), SETTINGS):
        for item in scored:
            changes += item.changes
            if item.bucket.ts == bucket:
                phase_at_fault = item.result.phase
    assert phase_at_fault is not None and phase_at_fault.name == "save"
    first = {(c.alertname, c.node): c.bucket_ts for c in reversed(changes) if c.status == "firing"}
    assert first[(XID_ALERT, node)] <= bucket
    assert first[(NODE_COLLAPSE, node)] == bucket
    assert {n for (_, n) in first} <= {node, None}


def test_group_phase_metric_is_one_series_per_phase() -> None:
    """peerwatch_group_phase{group,phase}: 1 for the bucket's phase, 0 for the others."""
    metrics = WorkerMetrics()
    metrics.observe_phase("job-a", "load")
    metrics.observe_phase("job-a", "save")
    text = generate_latest(metrics.registry).decode()
    for phase in PHASES:
        value = 1.0 if phase == "save" else 0.0
        assert f'peerwatch_group_phase{{group="job-a",phase="{phase}"}} {value}' in text


def test_annotations_survive_the_alert_record_round_trip() -> None:
    """AlertChange.to_dict / from_dict keep the phase annotation (replay, evaluation)."""
    change = AlertChange(
        GROUP_DEGRADED, None, "job-a", "firing", "warning", 1.0, (), "r", 0, 0, 0,
        annotations=(("phase", "idle"),),
    )  # fmt: skip
    assert AlertChange.from_dict(change.to_dict()) == change
    assert alert_annotations(change)["phase"] == "idle"
