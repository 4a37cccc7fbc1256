"""The worker's per-node series (``streams.telemetry.metrics.NodeSeries``):
what the dashboard draws.

Each scored bucket replaces its group's series, so only current nodes, remaps and
firing alerts are exported; a group's series go when it ends or moves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import generate_latest

from detectors.alerts import AlertChange
from detectors.fusion import NodeVerdict
from detectors.gpu_health import XID_ALERT
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.remap import UncorrectableRemap
from streams.lab.simulator.run import generate
from streams.settings import Settings
from streams.telemetry.metrics import WorkerMetrics, remapped_rows
from streams.worker.offline import score_rounds
from streams.worker.pipeline import Pipeline, Scored
from streams.worker.publishing import observe_bucket

MINUTE = 60_000


def verdict(node: str, score: float, *, silent: bool = False, scored: bool = True) -> NodeVerdict:
    return NodeVerdict(node, silent, scored, scored, score, score >= 4.0, (), (), "")


def alert(alertname: str, node: str | None, *, score: float = 1.0) -> AlertChange:
    return AlertChange(alertname, node, "job-a", "firing", "critical", score, (), "r", 0, 0, 0)


def exported(metrics: WorkerMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_scores_are_exported_for_the_scored_nodes_of_the_last_bucket() -> None:
    m = WorkerMetrics()
    m.nodes.observe("job-a", {"n1": verdict("n1", 0.5), "n2": verdict("n2", 7.25)}, {}, [])
    text = exported(m)
    assert 'peerwatch_node_score{group="job-a",node="n2"} 7.25' in text
    m.nodes.observe(
        "job-a",
        {
            "n1": verdict("n1", 0.0, silent=True),
            "n2": verdict("n2", 1.0, scored=False),
            "n3": verdict("n3", 0.25),
        },
        {},
        [],
    )
    text = exported(m)
    assert 'node="n1"' not in text and 'node="n2"' not in text  # silent, unscored: no value
    assert 'peerwatch_node_score{group="job-a",node="n3"} 0.25' in text


def test_remapped_rows_are_summed_over_gpus_for_nodes_with_any() -> None:
    frames = {
        "n1": {"remap_correctable@0": 3.0, "remap_correctable@5": 2.0, "remap_pending@5": 1.0},
        "n2": {"remap_correctable@0": 0.0, "remap_uncorrectable@0": 0.0, "intr_rate": 9.0},
    }
    m = WorkerMetrics()
    m.nodes.observe("job-a", {}, frames, [])
    text = exported(m)
    assert 'peerwatch_node_remapped_rows{group="job-a",kind="correctable",node="n1"} 5.0' in text
    assert 'peerwatch_node_remapped_rows{group="job-a",kind="pending",node="n1"} 1.0' in text
    assert 'node="n2"' not in text
    assert remapped_rows({"remap_bogus@1": 4.0, "remap_failure@2": float("nan")}) == {
        "correctable": 0.0,
        "uncorrectable": 0.0,
        "pending": 0.0,
        "failure": 0.0,
    }


def test_firing_alerts_are_those_active_after_the_last_bucket() -> None:
    m = WorkerMetrics()
    m.nodes.observe("job-a", {}, {}, [alert("PeerwatchNodeCollapse", "n1"), alert("G", None)])
    text = exported(m)
    firing = 'peerwatch_alert_firing{alertname="PeerwatchNodeCollapse",group="job-a",node="n1"'
    assert firing in text
    assert 'peerwatch_alert_firing{alertname="G",group="job-a",node="",severity="critical"}' in text
    m.nodes.observe("job-a", {}, {}, [alert("G", None)])
    assert firing not in exported(m)


def test_xid_alerts_count_by_node_and_xid() -> None:
    m = WorkerMetrics()
    m.nodes.count_xids("job-a", [alert(XID_ALERT, "n1", score=79.0), alert("Other", "n2")])
    m.nodes.count_xids("job-a", [alert(XID_ALERT, "n1", score=79.0)])
    text = exported(m)
    assert 'peerwatch_node_xid_alerts_total{group="job-a",node="n1",xid="79"} 2.0' in text
    assert 'node="n2"' not in text


def test_an_ended_groups_node_series_go_and_the_others_stay() -> None:
    m = WorkerMetrics()
    for group in ("job-a", "job-b"):
        m.nodes.observe(group, {"n1": verdict("n1", 1.0)}, {"n1": {"remap_failure@0": 1.0}}, [])
        m.nodes.count_xids(group, [alert(XID_ALERT, "n1", score=94.0)])
    m.forget_group("job-a")
    m.forget_group("never-seen")
    text = exported(m)
    assert 'group="job-a"' not in text
    for name in ("node_score", "node_remapped_rows", "node_xid_alerts_total"):
        assert f'peerwatch_{name}{{group="job-b"' in text


def test_skipped_frame_counters_exist_at_zero_before_the_first_skip() -> None:
    """A dashboard's rate() over them has a series from the start."""
    text = exported(WorkerMetrics())
    for stage in ("decode", "score"):
        assert f'peerwatch_worker_frames_failed_total{{stage="{stage}"}} 0.0' in text


def remap_rounds(
    victim: str = "gpu066", before_round: Callable[[Pipeline, int | None], None] | None = None
) -> Iterator[list[Scored]]:
    """Each round's scored buckets of a simulated job of 8 nodes and a spare whose
    ``victim`` gets an uncorrectable row remap (and its XID 94) after 15 minutes
    (``before_round`` as ``score_rounds``')."""
    start = 1_760_000_000_000 // MINUTE * MINUTE
    config = ClusterConfig(
        seed=3,
        job_name="job-a",
        job_nodes=8,
        spares=1,
        start_ms=start,
        metric_families=frozenset({"row_remap"}),
        faults=(UncorrectableRemap(node=victim, gpu=2, onset_ms=start + 15 * MINUTE + 7_000),),
    )
    settings = Settings(group_labels=["train_job"])
    rounds = generate(config, end_ms=start + 20 * MINUTE)
    for _, scored in score_rounds(rounds, settings, before_round):
        yield scored


def test_a_simulated_uncorrectable_remap_shows_in_the_node_series() -> None:
    """The pipeline's own output, wired as the worker wires it: every job node scored,
    the victim's remap and its XID 94 counted, its XID alert firing."""
    victim = "gpu066"
    m = WorkerMetrics()
    pipelines: list[Pipeline] = []
    for scored in remap_rounds(victim, lambda pipeline, _: pipelines.append(pipeline)):
        for item in scored:
            if not item.ended:
                observe_bucket(m, pipelines[0], item)
    text = exported(m)
    nodes = {
        line.split('node="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith('peerwatch_node_score{group="job-a"')
    }
    assert len(nodes) == 8 and victim in nodes
    row = f'peerwatch_node_remapped_rows{{group="job-a",kind="uncorrectable",node="{victim}"}} 1.0'
    assert row in text
    assert f'peerwatch_node_xid_alerts_total{{group="job-a",node="{victim}",xid="94"}} 1.0' in text
    assert f'alertname="{XID_ALERT}",group="job-a",node="{victim}"' in text


def test_a_node_that_comes_back_is_exported_again() -> None:
    """The series are kept between buckets; one removed must not be reused (it would no
    longer be in the registry)."""
    m = WorkerMetrics()
    for nodes in (["n1", "n2"], ["n2"], ["n1", "n2"]):
        m.nodes.observe("job-a", {n: verdict(n, 2.0) for n in nodes}, {}, [])
    assert 'peerwatch_node_score{group="job-a",node="n1"} 2.0' in exported(m)
    m.forget_group("job-a")
    m.nodes.observe("job-a", {"n1": verdict("n1", 3.0)}, {}, [])
    m.nodes.count_xids("job-a", [alert(XID_ALERT, "n1", score=79.0)])
    text = exported(m)
    assert 'peerwatch_node_score{group="job-a",node="n1"} 3.0' in text
    assert 'node="n2"' not in text
    assert 'peerwatch_node_xid_alerts_total{group="job-a",node="n1",xid="79"} 1.0' in text
