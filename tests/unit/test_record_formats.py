"""Wire and report records keep the bytes the hand-written to_dicts wrote (key order
included): alert changes (Kafka, the Grafana outbox), advice, peer-scoring alert state,
group events, known events, job events and the evaluation's rows. The expected strings
were printed by those to_dicts before the state codec took them over."""

from __future__ import annotations

import json
import math

import pytest

from detectors.advisors.jobs import JobEvent, JobXid
from detectors.alerts import AlertState
from detectors.fusion import GroupEvent
from detectors.lifecycle import Firing
from detectors.vocabulary import Advice, AlertChange, Signal
from streams.backtest.events import KnownEvent
from streams.lab.evaluation.scoring import EventOutcome, FaultOutcome

SIGNALS = (
    Signal("gpu_util", -5.25, 40.0, 99.5, "3"),
    Signal("frames", math.nan, 3.0, 60.0, None),
    Signal("a", -5.2, 10.0, 40.0, "3", residual=-0.4, usual=-4.9, share=0.25),
    Signal("b", math.inf, -math.inf, 1.0, None, residual=math.nan, usual=2.0),
)
FIRING = AlertChange(
    "PeerwatchNodeDeviation", "gpu001", "job", "firing", "warning", 3.5, SIGNALS, "why",
    1000, 900, 800,
)  # fmt: skip
RESOLVED = AlertChange(
    "PeerwatchXid", "gpu002", "job", "resolved", "critical", math.nan, (), "r", 2, 1, 0,
    action="RESET_GPU", labels=(("class", "memory"), ("gpu", "1"), ("xid", "94")),
    lead_s=120.5, annotations=(("phase", "training"),),
)  # fmt: skip
ADVICE = Advice(
    "checkpoint_interval", "lengthen_interval", "job-7", 1_700_000_010_000, "s",
    nodes=("gpu001", "gpu002"),
    figures=(("bad", math.inf), ("interval_s", 600.0), ("name", "x"), ("none", None),
             ("optimum_s", 1800.0), ("saves", 12)),  # sorted, as read back
    action="set_checkpoint_interval",
)  # fmt: skip

_SIGNALS_JSON = (
    '[{"feature": "gpu_util", "z": -5.25, "value": 40.0, "median": 99.5, "gpu": "3"}, '
    '{"feature": "frames", "z": null, "value": 3.0, "median": 60.0, "gpu": null}, '
    '{"feature": "a", "z": -5.2, "value": 10.0, "median": 40.0, "gpu": "3", '
    '"residual": -0.4, "usual": -4.9, "share": 0.25}, '
    '{"feature": "b", "z": null, "value": null, "median": 1.0, "gpu": null, "usual": 2.0}]'
)
READABLE = [
    (
        FIRING,
        '{"action": null, "labels": {}, "lead_s": null, "annotations": {}, '
        '"alertname": "PeerwatchNodeDeviation", "node": "gpu001", "group": "job", '
        '"status": "firing", "severity": "warning", "score": 3.5, '
        f'"signals": {_SIGNALS_JSON}, "reason": "why", "bucket_ts": 1000, '
        '"starts_bucket_ts": 900, "evidence_since_ts": 800}',
    ),
    (
        RESOLVED,
        '{"action": "RESET_GPU", "labels": {"class": "memory", "gpu": "1", "xid": "94"}, '
        '"lead_s": 120.5, "annotations": {"phase": "training"}, "alertname": "PeerwatchXid", '
        '"node": "gpu002", "group": "job", "status": "resolved", "severity": "critical", '
        '"score": null, "signals": [], "reason": "r", "bucket_ts": 2, "starts_bucket_ts": 1, '
        '"evidence_since_ts": 0}',
    ),
    (
        ADVICE,
        '{"advisor": "checkpoint_interval", "kind": "lengthen_interval", "group": "job-7", '
        '"bucket_ts": 1700000010000, "summary": "s", "node": null, '
        '"nodes": ["gpu001", "gpu002"], "figures": {"bad": null, "interval_s": 600.0, '
        '"name": "x", "none": null, "optimum_s": 1800.0, "saves": 12}, '
        '"action": "set_checkpoint_interval"}',
    ),
    (
        AlertState(
            "PeerwatchNodeDeviation", "gpu001", "pending", 2, 0, 800, None, 2.5, SIGNALS[:1], "r"
        ),
        '{"alertname": "PeerwatchNodeDeviation", "node": "gpu001", "phase": "pending", '
        '"streak": 2, "clear_streak": 0, "evidence_since_ts": 800, "starts_bucket_ts": null, '
        '"score": 2.5, "signals": [{"feature": "gpu_util", "z": -5.25, "value": 40.0, '
        '"median": 99.5, "gpu": "3"}], "reason": "r"}',
    ),
    (
        Firing(RESOLVED, 3, 2),
        '{"change": {"action": "RESET_GPU", "labels": {"class": "memory", "gpu": "1", '
        '"xid": "94"}, "lead_s": 120.5, "annotations": {"phase": "training"}, '
        '"alertname": "PeerwatchXid", "node": "gpu002", "group": "job", "status": "resolved", '
        '"severity": "critical", "score": null, "signals": [], "reason": "r", "bucket_ts": 2, '
        '"starts_bucket_ts": 1, "evidence_since_ts": 0}, "last": 3, "clear": 2}',
    ),
    (
        KnownEvent(5, None, "g", "job_death", 9),
        '{"ts_ms": 5, "node": null, "group": "g", "kind": "job_death", "end_ms": 9}',
    ),
]


@pytest.mark.parametrize(
    ("value", "expected"), READABLE, ids=[type(v).__name__ for v, _ in READABLE]
)
def test_a_record_is_written_as_before_and_read_back_to_the_same_bytes(
    value: object, expected: str
) -> None:
    text = json.dumps(value.to_dict())  # type: ignore[attr-defined]
    assert text == expected
    back = type(value).from_dict(json.loads(text))  # type: ignore[attr-defined]
    assert json.dumps(back.to_dict()) == expected


def test_records_older_than_their_optional_keys_still_read() -> None:
    """A firing entry from before ``last``/``clear`` (its last evidence: the change's bucket),
    an alert state without signals or reason, a signal without learned parts."""
    firing = Firing.from_dict({"change": RESOLVED.to_dict()})
    assert (firing.last_evidence_ts, firing.clear_streak) == (RESOLVED.bucket_ts, 0)
    assert Firing.from_dict({"change": RESOLVED.to_dict(), "last": None}) == firing
    state = AlertState("PeerwatchGroupDegraded", None, "firing", 5, 1, 800, 900, 1.0)
    short = {k: v for k, v in state.to_dict().items() if k not in ("signals", "reason")}
    assert AlertState.from_dict(short) == state
    assert Signal.from_dict({"feature": "a", "z": None, "value": 1, "median": 2}).value == 1.0


def test_an_int_figure_stays_an_int_and_extra_keys_are_ignored() -> None:
    back = Advice.from_dict({**ADVICE.to_dict(), "record": "advice"})
    assert dict(back.figures)["saves"] == 12 and isinstance(dict(back.figures)["saves"], int)
    assert back.figures == tuple((k, None if v == math.inf else v) for k, v in ADVICE.figures)


def test_an_alert_state_of_an_unknown_family_is_refused() -> None:
    data = {**READABLE[3][0].to_dict(), "alertname": "NoSuchAlert"}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown alertname 'NoSuchAlert'"):
        AlertState.from_dict(data)


def test_output_rows_are_written_as_before() -> None:
    """Write-only rows (no reader): a derived key in place, fields a row leaves out."""
    events = [
        GroupEvent("gpu_util", "down", 25, 60, -9.0, 50.0, 99.0),
        GroupEvent("_silence", "missing", 60, 60, math.nan, math.nan, math.nan),
    ]
    assert [json.dumps(e.to_dict()) for e in events] == [
        '{"feature": "gpu_util", "direction": "down", "count": 25, "present": 60, '
        '"fraction": 0.4166666666666667, "z": -9.0, "value": 50.0, "median": 99.0}',
        '{"feature": "_silence", "direction": "missing", "count": 60, "present": 60, '
        '"fraction": 1.0, "z": null, "value": null, "median": null}',
    ]
    event = EventOutcome("k", None, 1, None, 9, ("a", "b"), True)
    assert json.dumps(event.to_dict()) == (
        '{"kind": "k", "node": null, "onset_ms": 1, "end_ms": null, "blamed_nodes": ["a", "b"], '
        '"group_alerted": true}'
    )
    fault = FaultOutcome(
        kind="gpu-slow", category="fail_slow", node="n1", gpu=2, onset_ms=10, xid=79,
        xid_ms=50, end_ms=None, slowdown=0.5, window_start_ts=0, deadline_ts=99,
        detected=True, first_alert_ts=30, first_alertname="PeerwatchNodeDeviation",
        buckets_to_xid=-1, detect_buckets=1, detect_s=30.0, lead_s=20.0,
        culprit_node_correct=True, gpu_named="2", gpu_correct=True, alert_class="compute",
        class_correct=False,
    )  # fmt: skip
    assert json.dumps(fault.to_dict()) == (
        '{"kind": "gpu-slow", "category": "fail_slow", "node": "n1", "gpu": 2, '
        '"onset_ms": 10, "xid": 79, "xid_ms": 50, "end_ms": null, "slowdown": 0.5, '
        '"detected": true, "first_alert_ts": 30, "first_alertname": "PeerwatchNodeDeviation", '
        '"buckets_to_xid": -1, "at_or_before_xid": true, "detect_buckets": 1, "detect_s": 30.0, '
        '"lead_s": 20.0, "culprit_node_correct": true, "gpu_named": "2", "gpu_correct": true, '
        '"alert_class": "compute", "class_correct": false}'
    )


def test_a_job_event_writes_its_optional_keys_only_when_set() -> None:
    """The scheduler's record (detectors/advisors/jobs.py docstring) as before: optional keys
    left out while unset, an XID's substatus only when given; its parser reads it back."""
    full = JobEvent(
        "s2", "llm", 3, "failed", 9, ("gpu001", "gpu002"), "xid",
        (JobXid("gpu002", 79), JobXid("gpu001", 94, "a:b")), "auto", 60, ("gpu001", "gpu063"),
        "cluster-a",
    )  # fmt: skip
    text = json.dumps(full.to_dict())
    assert text == (
        '{"job_id": "s2", "name": "llm", "attempt": 3, "state": "failed", "ts": 9, '
        '"nodes": ["gpu001", "gpu002"], "exit_reason": "xid", "xids": [{"node": "gpu002", '
        '"xid": 79}, {"node": "gpu001", "xid": 94, "substatus": "a:b"}], "trigger": "auto", '
        '"gang": 60, "group": "cluster-a", "pool": ["gpu001", "gpu063"]}'
    )
    assert JobEvent.from_dict(json.loads(text)) == full
    bare = JobEvent("s1", "llm", 1, "running", 5, pool=())
    assert json.dumps(bare.to_dict()) == (
        '{"job_id": "s1", "name": "llm", "attempt": 1, "state": "running", "ts": 5, '
        '"nodes": [], "pool": []}'
    )
