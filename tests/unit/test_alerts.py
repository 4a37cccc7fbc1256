"""detectors.alerts: lifecycle pending → firing → resolved, hysteresis, one alert per family."""

from __future__ import annotations

import json

import numpy as np
import pytest

from detectors.alerts import (
    FAMILIES,
    GROUP_DEGRADED,
    NODE_COLLAPSE,
    NODE_DEVIATION,
    NODE_SILENT,
    AlertParams,
    AlertState,
    Observation,
    step_alerts,
)
from detectors.features import FeatureSpec
from detectors.fusion import Signal
from detectors.group import GroupState, ScoringParams, score_bucket

PARAMS = AlertParams()  # persistence 3, silent_buckets 2, resolve_after 4
BUCKET = 30_000


def run(alertname: str, pattern: str, params: AlertParams = PARAMS, node: str | None = "n1"):
    """Feed a pattern of P(resent) / A(bsent) / U(nknown) evidence; return transitions per bucket.

    The result has one character per bucket: '.' nothing, 'F' firing, 'R' resolved.
    """
    key = (alertname, node)
    alerts: dict = {}
    out = []
    steps = []
    for i, c in enumerate(pattern):
        evidence = {"P": "present", "A": "absent", "U": "unknown"}[c]
        obs = {key: Observation(evidence, 10.0, (), "r")} if c != "A" else {}
        step = step_alerts(alerts, obs, group="g", bucket_ts=i * BUCKET, params=params)
        alerts = dict(step.alerts)
        steps.append(step)
        statuses = [ch.status for ch in step.changes]
        assert len(statuses) <= 1
        out.append({"firing": "F", "resolved": "R"}[statuses[0]] if statuses else ".")
    return "".join(out), steps


@pytest.mark.parametrize(
    ("alertname", "pattern", "expected"),
    [
        # hard signature fires in the very bucket it appears, and only once
        (NODE_COLLAPSE, "P", "F"),
        (NODE_COLLAPSE, "PPPPPP", "F....."),
        # soft evidence needs `persistence` (3) consecutive buckets
        (NODE_DEVIATION, "PP", ".."),
        (NODE_DEVIATION, "PPP", "..F"),
        (NODE_DEVIATION, "PPPPPP", "..F..."),
        # one-bucket blips (checkpoint dip out of phase, late scrape) never fire
        (NODE_DEVIATION, "PAPAPAPAPA", ".........."),
        (NODE_DEVIATION, "PPAPPAPPA", "........."),
        # unknown (node silent / too few peers) freezes the streak, neither grows nor resets it
        (NODE_DEVIATION, "PPUP", "...F"),
        (NODE_DEVIATION, "PUUUUP", "......"),
        # silent after silent_buckets (2) consecutive buckets; one late scrape is nothing
        (NODE_SILENT, "P", "."),
        (NODE_SILENT, "PP", ".F"),
        (NODE_SILENT, "PAPAPA", "......"),
        # hysteresis: resolve only after resolve_after (4) buckets without evidence
        (NODE_DEVIATION, "PPPAAA", "..F..."),
        (NODE_DEVIATION, "PPPAAAA", "..F...R"),
        (NODE_COLLAPSE, "PAAAPAAAA", "F.......R"),  # evidence in between restarts the count
        (NODE_COLLAPSE, "PUUUUUUAAA", "F........."),  # unknown never resolves
        (NODE_COLLAPSE, "PUUAUAAUA", "F.......R"),  # unknown does not break the absent count
        (NODE_COLLAPSE, "PAAAAP", "F...RF"),  # after resolving, new evidence is a new alert
        # group-level degradation is soft: persistence applies
        (GROUP_DEGRADED, "PP", ".."),
        (GROUP_DEGRADED, "PPP", "..F"),
    ],
)
def test_lifecycle(alertname, pattern, expected) -> None:
    node = None if alertname == GROUP_DEGRADED else "n1"
    got, _ = run(alertname, pattern, node=node)
    assert got == expected


@pytest.mark.parametrize(
    ("params", "alertname", "pattern", "expected"),
    [
        (AlertParams(persistence=2), NODE_DEVIATION, "PP", ".F"),
        (AlertParams(persistence=1), NODE_DEVIATION, "P", "F"),
        (AlertParams(silent_buckets=3), NODE_SILENT, "PPP", "..F"),
        (AlertParams(resolve_after=1), NODE_COLLAPSE, "PA", "FR"),
        (AlertParams(persistence=5), NODE_COLLAPSE, "P", "F"),  # hard ignores persistence
    ],
)
def test_lifecycle_follows_params(params, alertname, pattern, expected) -> None:
    assert run(alertname, pattern, params)[0] == expected


def test_firing_and_resolved_changes_carry_buckets_and_severity() -> None:
    """Firing names its first-firing bucket and evidence start; resolved keeps both."""
    _, steps = run(NODE_DEVIATION, "PPPAAAA")
    fired = steps[2].changes[0]
    assert (fired.status, fired.severity, fired.node, fired.group) == (
        "firing",
        "warning",
        "n1",
        "g",
    )
    assert (fired.bucket_ts, fired.starts_bucket_ts, fired.evidence_since_ts) == (
        2 * BUCKET,
        2 * BUCKET,
        0,
    )
    resolved = steps[6].changes[0]
    assert (resolved.status, resolved.bucket_ts, resolved.starts_bucket_ts) == (
        "resolved",
        6 * BUCKET,
        2 * BUCKET,
    )
    assert resolved.reason.startswith("no evidence for 4 buckets")


@pytest.mark.parametrize(
    ("alertname", "severity"),
    [
        (NODE_COLLAPSE, "critical"),
        (NODE_SILENT, "critical"),
        (NODE_DEVIATION, "warning"),
        (GROUP_DEGRADED, "warning"),
    ],
)
def test_family_severity(alertname, severity) -> None:
    assert FAMILIES[alertname].severity == severity


def test_active_lists_firing_alerts_only_and_keeps_them_while_firing() -> None:
    """Pending alerts are not active; a firing one is re-listed every bucket until resolved."""
    _, steps = run(NODE_DEVIATION, "PPPAAAA")
    assert [len(s.active) for s in steps] == [0, 0, 1, 1, 1, 1, 0]
    assert all(
        a.status == "firing" and a.starts_bucket_ts == 2 * BUCKET for s in steps for a in s.active
    )
    assert steps[4].active[0].bucket_ts == 4 * BUCKET


def test_firing_alert_keeps_its_strongest_signals() -> None:
    """While firing, score/signals/reason are those of the strongest bucket so far."""
    key = (NODE_DEVIATION, "n1")
    alerts: dict = {}
    for i, score in enumerate([9.0, 8.5, 20.0, 9.0]):
        sig = (Signal("gpu_util", -score, 50.0, 99.0, "3"),)
        obs = {key: Observation("present", score, sig, f"score {score}")}
        step = step_alerts(alerts, obs, group="g", bucket_ts=i, params=PARAMS)
        alerts = dict(step.alerts)
    (active,) = step.active
    assert active.score == 20.0 and active.signals[0].z == -20.0 and active.reason == "score 20.0"
    assert active.starts_bucket_ts == 2


def test_one_alert_per_family_not_a_storm() -> None:
    """A node failing on many features for many buckets yields one firing per family, once."""
    keys = [(NODE_COLLAPSE, "n1"), (NODE_DEVIATION, "n1")]
    alerts: dict = {}
    changes = []
    for i in range(10):
        obs = {k: Observation("present", 30.0, (), "bad") for k in keys}
        step = step_alerts(alerts, obs, group="g", bucket_ts=i, params=PARAMS)
        alerts = dict(step.alerts)
        changes += step.changes
        assert len(step.active) <= 2
    assert sorted((c.alertname, c.status) for c in changes) == [
        (NODE_COLLAPSE, "firing"),
        (NODE_DEVIATION, "firing"),
    ]


def test_node_leaving_the_group_resolves_its_alert_at_once() -> None:
    """Alerts of a node no longer in the membership resolve (firing) or vanish (pending)."""
    obs = {
        (NODE_COLLAPSE, "n1"): Observation("present", 20.0),
        (NODE_DEVIATION, "n1"): Observation("present", 9.0),
    }
    step = step_alerts({}, obs, group="g", bucket_ts=0, params=PARAMS, members={"n1"})
    step = step_alerts(step.alerts, {}, group="g", bucket_ts=1, params=PARAMS, members=set())
    assert [(c.alertname, c.status) for c in step.changes] == [(NODE_COLLAPSE, "resolved")]
    assert "left the group" in step.changes[0].reason
    assert step.alerts == {} and step.active == ()


def test_step_does_not_mutate_its_input() -> None:
    alerts: dict = {}
    step_alerts(
        alerts,
        {(NODE_COLLAPSE, "n1"): Observation("present", 1.0)},
        group="g",
        bucket_ts=0,
        params=PARAMS,
    )
    assert alerts == {}


@pytest.mark.parametrize(
    "key", [("NoSuchAlert", "n1"), (GROUP_DEGRADED, "n1"), (NODE_COLLAPSE, None)]
)
def test_unknown_alertname_or_wrong_level_is_rejected(key) -> None:
    """Group alerts never name a node, node alerts always do; unknown names raise."""
    with pytest.raises(ValueError):
        step_alerts({}, {key: Observation("present")}, group="g", bucket_ts=0, params=PARAMS)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"persistence": 0},
        {"silent_buckets": 0},
        {"resolve_after": 0},
        {"persistence": 2.5},
        {"resolve_after": True},
    ],
)
def test_alert_params_are_validated(kwargs) -> None:
    with pytest.raises(ValueError):
        AlertParams(**kwargs)


def test_alert_state_round_trips_through_json() -> None:
    _, steps = run(NODE_DEVIATION, "PPPA")
    for state in steps[-1].alerts.values():
        text = json.dumps(state.to_dict(), allow_nan=False)
        assert AlertState.from_dict(json.loads(text)) == state


# --- through score_bucket: cluster-wide events never page as node faults ------------------

FEATURES = (
    FeatureSpec(
        "gpu_util",
        ("DCGM_FI_DEV_GPU_UTIL",),
        "gauge",
        reduce="min",
        direction="down",
        abs_floor=2.0,
        rel_floor=0.02,
    ),
    FeatureSpec(
        "nfs_write_queue_s", ("q",), "counter", direction="up", abs_floor=0.05, rel_floor=0.05
    ),
)
NODES = [f"node-{i:02d}" for i in range(60)]


def _bucket(rng, dipped: set[str]) -> dict[str, dict[str, float]]:
    """Training: util ~99.5 %, write queue ~0.1 s; a checkpoint save dips util, queues writes."""
    frames = {}
    for n in NODES:
        if n in dipped:
            frames[n] = {
                "gpu_util": 40.0 + rng.normal(0, 3),
                "nfs_write_queue_s": 1.9 + rng.normal(0, 0.1),
            }
        else:
            frames[n] = {
                "gpu_util": 99.5 + rng.normal(0, 0.2),
                "nfs_write_queue_s": 0.1 + rng.normal(0, 0.01),
            }
    return frames


def _run_buckets(dips: list[set[str]]):
    rng = np.random.default_rng(3)
    state = GroupState()
    results = []
    for i, dipped in enumerate(dips):
        state, result = score_bucket(
            state, "job-1", i * BUCKET, _bucket(rng, dipped), {}, NODES, FEATURES, ScoringParams()
        )
        results.append(result)
    return results


def test_checkpoint_dip_of_59_of_60_nodes_gives_no_node_alert() -> None:
    """59 nodes dip together for one bucket: the median moves with them; nobody is paged."""
    dips = [set(), set(), set(NODES[:59]), set(), set(), set(), set(), set()]
    results = _run_buckets(dips)
    assert [c for r in results for c in r.changes] == []
    assert all(v.status == "ok" for r in results for v in r.verdicts.values())


def test_out_of_phase_checkpoint_is_a_group_event_not_node_evidence() -> None:
    """25 nodes dip one bucket early, the other 35 a bucket later: a group event, no node alert.

    Bucket 1: 25/60 deviate the bad way (> 30 %) → group event, no node evidence. Bucket 2:
    the 35 dip → the median moves with them; the 25 early ones look better, which is harmless.
    """
    dips = [set(), set(NODES[:25]), set(NODES[25:]), set(), set(), set()]
    results = _run_buckets(dips)
    assert [c for r in results for c in r.changes] == []
    assert {(e.feature, e.direction) for e in results[1].group_events} == {
        ("gpu_util", "down"),
        ("nfs_write_queue_s", "up"),
    }
    assert all(r.group_events == () for r in results[2:])
    assert all(v.score == 0.0 for r in results for v in r.verdicts.values())


def test_sustained_split_group_fires_group_degraded_without_a_node_label() -> None:
    """25 of 60 nodes degraded together for 3 buckets → one PeerwatchGroupDegraded, node None."""
    dips = [set(), set(NODES[:25]), set(NODES[:25]), set(NODES[:25]), set(NODES[:25])]
    results = _run_buckets(dips)
    changes = [c for r in results for c in r.changes]
    assert [(c.alertname, c.node, c.status, c.bucket_ts) for c in changes] == [
        (GROUP_DEGRADED, None, "firing", 3 * BUCKET),
    ]
    assert "gpu_util down on 25/60 nodes" in changes[0].reason
    assert {s.feature for s in changes[0].signals} == {"gpu_util", "nfs_write_queue_s"}


# --- alert identity: the labels an alert fired with stay until it resolves -----------------------


def _collapse_run(gpus: list[str]):  # type: ignore[no-untyped-def]
    """A node collapse growing stronger each bucket, its worst GPU moving; then clear."""
    key = (NODE_COLLAPSE, "n1")
    alerts: dict = {}
    out = []
    for i, gpu in enumerate([*gpus, None, None, None, None]):
        obs = {}
        if gpu is not None:
            signal = Signal("gpu_util", -(5.0 + i), 0.0, 99.0, gpu)
            obs = {key: Observation("present", 5.0 + i, (signal,), f"collapse {i}")}
        step = step_alerts(alerts, obs, group="g", bucket_ts=i * BUCKET, params=PARAMS)
        alerts = dict(step.alerts)
        out.append(step)
    return out


def test_a_node_alert_keeps_its_labels_while_its_worst_gpu_changes() -> None:
    """Alertmanager keys on the label set: one node incident, one label set until resolved."""
    from streams.sinks.payloads import to_payload

    steps = _collapse_run(["2", "5", "7"])
    sent = [to_payload(c) for s in steps for c in (*s.changes, *s.active)]
    assert {tuple(sorted(p["labels"].items())) for p in sent} == {
        tuple(
            sorted(
                {
                    "alertname": NODE_COLLAPSE,
                    "severity": "critical",
                    "group": "g",
                    "source": "peerwatch",
                    "node": "n1",
                }.items()
            )
        )
    }
    assert [p["status"] for p in sent][-1] == "resolved"
    # the worst GPU is detail: an annotation that follows the strongest signal
    worst = [to_payload(s.active[0])["annotations"].get("worst_gpu") for s in steps[:3]]
    assert worst == ["2", "5", "7"]


def test_keep_identity_holds_fired_labels_until_the_alert_resolves() -> None:
    from detectors.alerts import AlertChange, keep_identity

    def change(status: str, klass: str, ts: int) -> AlertChange:
        return AlertChange(
            NODE_DEVIATION,
            "n1",
            "g",
            status,
            "warning",
            5.0,
            (),
            "r",
            ts,
            0,
            0,
            labels=(("class", klass),),
        )

    fired, changes, active = keep_identity({}, [change("firing", "host", 0)], [])
    assert fired == {} and changes[0].labels == (("class", "host"),)
    fired, changes, active = keep_identity(
        {}, [change("firing", "host", 0)], [change("firing", "host", 0)]
    )
    assert fired == {(NODE_DEVIATION, "n1"): (("class", "host"),)}
    # a stronger signal of another class takes the lead: the label stays
    fired, _, active = keep_identity(fired, [], [change("firing", "cpu", BUCKET)])
    assert active[0].labels == (("class", "host"),)
    fired, changes, active = keep_identity(fired, [change("resolved", "cpu", 2 * BUCKET)], [])
    assert changes[0].labels == (("class", "host"),) and fired == {}
    # a new incident after the resolve is a new alert with its own labels
    _, changes, _ = keep_identity(fired, [change("firing", "cpu", 3 * BUCKET)], [])
    assert changes[0].labels == (("class", "cpu"),)
