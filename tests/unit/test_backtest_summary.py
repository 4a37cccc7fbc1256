"""streams.backtest.summary: hand-made scored buckets against hand-computed figures."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from detectors.episodes import GROUP_NODES, ScoringWindows
from detectors.failslow.changepoint import ChangeVerdict
from detectors.failslow.localise import Culprit, Localisation
from detectors.failslow.mitigation import Advice as StageAdvice
from detectors.failslow.monitor import FailSlowVerdict
from detectors.families import GROUP_DEGRADED, NODE_DEVIATION, XID_ALERT
from detectors.fusion import NodeVerdict
from detectors.group import BucketResult
from detectors.vocabulary import Advice, AlertChange
from streams.backtest.summary import (
    RESULT_KEYS,
    Accumulator,
    EventsFileError,
    KnownEvent,
    load_events,
)
from streams.worker.pipeline import Scored
from streams.worker.windows import ClosedBucket

B = 30_000
DAY = 86_400_000
T0 = 20_000 * DAY  # a UTC midnight


def verdict(node: str, score: float) -> NodeVerdict:
    return NodeVerdict(node, False, True, True, score, False, (), (), "")


def alert(name: str, node: str | None, ts: int, status: str = "firing") -> AlertChange:
    severity = "critical" if name == XID_ALERT else "warning"
    return AlertChange(name, node, "job", status, severity, 1.0, (), "", ts, ts, ts)  # type: ignore[arg-type]


def scored(
    ts: int,
    scores: Mapping[str, float],
    changes: Sequence[AlertChange] = (),
    group: str = "job",
    failslow: FailSlowVerdict | None = None,
) -> Scored:
    verdicts = {n: verdict(n, s) for n, s in scores.items()}
    return Scored(
        ClosedBucket(group, ts, {}, {}, frozenset(scores)),
        BucketResult(group, ts, verdicts, (), (), ()),
        list(changes),
        [],
        0.0,
        failslow,
    )


NODES = ("n1", "n2", "n3", "n4", "n5")


def run_stream(
    events: Sequence[KnownEvent], alerts: Mapping[int, Sequence[AlertChange]], buckets: int
) -> dict:
    acc = Accumulator(events, B, windows=ScoringWindows(lookback_buckets=10))
    for i in range(buckets):
        ts = T0 + i * B
        acc.add(scored(ts, {n: 1.0 for n in NODES}, alerts.get(i, ())))
    return acc.result()


def at(i: int) -> int:
    return T0 + i * B


EVENTS = [
    KnownEvent(at(100) + 5_000, "n1", None, "xid79"),  # a deviation 3 buckets before it
    KnownEvent(at(200), "n2", "job", "xid94"),  # the XID alert in its own bucket
    KnownEvent(at(300), "n3", None, "xid79"),  # nothing
    KnownEvent(at(400), "n4", None, "xid79"),  # an alert 3 buckets after: past tolerance (2)
    KnownEvent(at(500), None, "job", "job_death"),  # a group alert one bucket before
    KnownEvent(at(5_000), "n1", None, "xid79"),  # after the scored span
]
ALERTS = {
    50: [alert(NODE_DEVIATION, "n1", at(50))],  # false: no event within the window
    60: [alert(NODE_DEVIATION, "n1", at(60), "resolved")],
    97: [alert(NODE_DEVIATION, "n1", at(97))],
    200: [alert(XID_ALERT, "n2", at(200))],
    403: [alert(NODE_DEVIATION, "n4", at(403))],  # late, but explained (aftermath 5)
    499: [alert(GROUP_DEGRADED, None, at(499))],
    550: [alert(NODE_DEVIATION, "n5", at(550))],  # false
}


def test_result_has_the_documented_keys_and_is_json() -> None:
    result = run_stream(EVENTS, ALERTS, 600)
    assert tuple(result) == RESULT_KEYS
    assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_lead_time_per_event_and_found_before_counts() -> None:
    lead = run_stream(EVENTS, ALERTS, 600)["lead_time"]
    rows = lead["rows"]
    assert [r["found"] for r in rows] == [True, True, False, False, True, False]
    assert [r["buckets_to_event"] for r in rows] == [-3, 0, None, None, -1, None]
    assert [r["lead_s"] for r in rows] == [90.0, 0.0, None, None, 30.0, None]
    assert [r["before"] for r in rows] == [True, False, False, False, True, False]
    assert rows[0]["first_alertname"] == NODE_DEVIATION
    assert rows[4]["first_alertname"] == GROUP_DEGRADED
    assert rows[5]["in_range"] is False
    assert (lead["events"], lead["found"], lead["before"], lead["at_or_before"]) == (5, 3, 2, 3)
    assert lead["out_of_range"] == 1
    assert lead["headline"] == "3/5 found, 2/5 before the event"
    assert lead["by_kind"]["xid79"] == {"events": 3, "found": 1, "before": 1}


def test_false_alerts_per_group_day_and_per_day() -> None:
    false = run_stream(EVENTS, ALERTS, 600)["false_alerts"]
    assert [(e["node"], e["fired_ts"]) for e in false["episodes"]] == [
        ("n1", at(50)),
        ("n5", at(550)),
    ]
    node_days = 5 * 600 * B / DAY  # 5 nodes × 600 buckets of 30 s
    assert false["node_days"] == pytest.approx(node_days)
    assert false["per_group_day"] == pytest.approx(2 / (node_days / GROUP_NODES))
    assert false["by_group"]["job"]["by_day"] == {"2024-10-04": 2}


def test_an_event_with_an_end_explains_the_alerts_on_its_node_until_then() -> None:
    """n5's alert 50 buckets after the event's time: false, unless the event lasted past it."""
    alerts = {550: [alert(NODE_DEVIATION, "n5", at(550))]}
    instant = [KnownEvent(at(500), "n5", None, "gpu_slow")]
    lasting = [KnownEvent(at(500), "n5", None, "gpu_slow", end_ms=at(546))]
    assert run_stream(instant, alerts, 600)["false_alerts"]["count"] == 1
    assert run_stream(lasting, alerts, 600)["false_alerts"]["count"] == 0  # 546 + 5 >= 550


def test_a_flap_within_the_merge_window_is_one_alert() -> None:
    flaps = {
        10: [alert(NODE_DEVIATION, "n5", at(10))],
        12: [alert(NODE_DEVIATION, "n5", at(12), "resolved")],
        15: [alert(NODE_DEVIATION, "n5", at(15))],  # 3 buckets later: merged (10)
        16: [alert(NODE_DEVIATION, "n5", at(16))],  # a re-send: nothing
        20: [alert(NODE_DEVIATION, "n5", at(20), "resolved")],
    }
    result = run_stream([], flaps, 30)
    assert [(a["fired_ts"], a["resolved_ts"], a["firings"]) for a in result["alerts"]] == [
        (at(10), at(20), 2)
    ]
    assert result["false_alerts"]["count"] == 1


def test_heatmap_keeps_the_max_per_column_and_widens_to_stay_bounded() -> None:
    acc = Accumulator([], 60_000, max_columns=4)
    for minute in range(10):
        scores = {"n1": float(minute)}
        if minute == 7:
            scores["n2"] = 2.5
        if minute == 3:
            scores["n2"] = math.nan  # silent: no score
        acc.add(scored(T0 + minute * 60_000, scores))
    heat = acc.result()["groups"]["job"]["heatmap"]
    # 10 one-minute columns > 4: widened to 5 minutes, two columns
    assert (heat["width_ms"], heat["start_ms"], heat["columns"]) == (300_000, T0, 2)
    assert heat["nodes"] == ["n1", "n2"]
    assert heat["scores"] == [[4.0, 9.0], [None, 2.5]]


def test_markers_place_known_events_and_xid_alerts_in_their_column() -> None:
    result = run_stream(EVENTS, ALERTS, 600)
    markers = result["groups"]["job"]["markers"]
    assert [(m["kind"], m["node"], m["source"], m["column"]) for m in markers] == [
        ("xid79", "n1", "known", 100),
        ("xid94", "n2", "known", 200),
        (XID_ALERT, "n2", "alert", 200),
        ("xid79", "n3", "known", 300),
        ("xid79", "n4", "known", 400),
        ("job_death", None, "known", 500),
    ]


def test_55_days_of_63_nodes_stay_small() -> None:
    """Sizes, not time: 10-min buckets stand in for 30-s ones (widened to the same 2 h)."""
    bucket = 600_000
    acc = Accumulator([], bucket)
    nodes = [f"gpu{i:03d}" for i in range(63)]
    verdicts = {n: verdict(n, 1.0) for n in nodes}
    buckets = 55 * DAY // bucket
    for i in range(buckets):
        ts = T0 + i * bucket
        acc.add(
            Scored(
                ClosedBucket("job", ts, {}, {}, frozenset()),
                BucketResult("job", ts, verdicts, (), (), ()),
                [],
                [],
                0.0,
            )
        )
    assert acc.buckets == buckets == 7_920
    assert acc.held()["heatmap_cells"] <= 63 * 1000
    result = acc.result()
    heat = result["groups"]["job"]["heatmap"]
    assert heat["columns"] <= 1000
    assert heat["width_ms"] == 2 * 3_600_000  # 55 days of hours is 1,320 > 1,000 columns
    assert heat["columns"] == 55 * 12
    assert len(json.dumps(result)) < 400_000


def slow_verdict(bucket: int, slow: bool, culprit: str = "n3") -> FailSlowVerdict:
    change = ChangeVerdict(
        bucket, slow, slow, "down" if slow else None, -0.2 if slow else 0.0, 5, 0
    )
    loc = (
        Localisation((Culprit(culprit, "0", "compute", 0.9, ()),), "compute", 0.9, "")
        if slow
        else None
    )
    return FailSlowVerdict(
        bucket, change, 0, loc, StageAdvice("S2" if slow else "S1", "", 40.0, 10.0)
    )


def test_failslow_episodes_from_confirmed_slow_buckets() -> None:
    acc = Accumulator([], B)
    pattern = [False, True, True, True, False, False]
    for i, slow in enumerate(pattern):
        acc.add(scored(at(i), {"n1": 0.0}, failslow=slow_verdict(i, slow)))
    acc.add(scored(at(6), {"n1": 0.0}, failslow=slow_verdict(6, True)))  # open at the end
    rows = acc.result()["failslow"]
    assert [(r["start_ts"], r["end_ts"], r["buckets"]) for r in rows] == [
        (at(1), at(4), 3),
        (at(6), None, 1),
    ]
    assert rows[0]["culprits"] == ["n3"]
    assert (rows[0]["klass"], rows[0]["stage"], rows[0]["max_magnitude"]) == ("compute", "S2", 0.2)


def test_advice_is_collected_once_per_distinct_advice_with_counts() -> None:
    acc = Accumulator([], B)
    for i in range(3):
        s = scored(at(i), {"n1": 0.0})
        s.advice = [
            Advice("ckpt", "lengthen_interval", "job", at(i), f"interval {i}"),
        ]
        acc.add(s)
    advice = acc.result()["advice"]
    assert len(advice["items"]) == 1
    item = advice["items"][0]
    assert (item["count"], item["first_ts"], item["last_ts"]) == (3, at(0), at(2))
    assert item["summary"] == "interval 2"


def test_advice_from_elsewhere_joins_the_same_list() -> None:
    acc = Accumulator([], B)
    acc.add_advice(Advice("retry", "exclude_node", "job", at(5), "exclude n2", node="n2"))
    acc.add_advice(Advice("retry", "exclude_node", "job", at(2), "exclude n2", node="n2"))
    items = acc.result()["advice"]["items"]
    assert [(i["advisor"], i["node"], i["first_ts"], i["last_ts"], i["count"]) for i in items] == [
        ("retry", "n2", at(2), at(5), 2)
    ]


def test_load_events_json_lines_and_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "events.jsonl"
    jsonl.write_text(
        '{"ts_ms": 1730000000000, "node": "gpu071", "group": "job-17", "kind": "xid79"}\n'
        "# a comment\n\n"
        '{"time": "2024-10-27T03:33:20+00:00", "node": "gpu096", "kind": "xid94"}\n'
        '{"ts_ms": 5, "end": "1970-01-01T00:00:01Z", "node": "gpu124", "kind": "gpu_slow"}\n'
    )
    csv = tmp_path / "events.csv"
    csv.write_text(
        "ts_ms,node,group,kind\n1730000000000,gpu071,job-17,xid79\n"
        "2024-10-27T03:33:20Z,,job-17,job_death\n"
    )
    assert load_events(jsonl) == [
        KnownEvent(5, "gpu124", None, "gpu_slow", end_ms=1000),
        KnownEvent(1730000000000, "gpu071", "job-17", "xid79"),
        KnownEvent(1730000000000, "gpu096", None, "xid94"),
    ]
    assert load_events(csv) == [
        KnownEvent(1730000000000, None, "job-17", "job_death"),
        KnownEvent(1730000000000, "gpu071", "job-17", "xid79"),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 2: not JSON"),
        ('{"node": "n1", "kind": "xid79"}', "line 2: ts_ms or time is missing"),
        ('{"ts_ms": 1, "kind": "xid79"}', "line 2: an event names a node, a group or both"),
        ('{"ts_ms": 1, "node": "n1"}', "line 2: kind is missing"),
        ('{"time": "2024-10-27 03:00", "node": "n1", "kind": "x"}', "has no zone"),
        ('{"ts_ms": 1, "node": "n1", "kind": "x", "gpu": 0}', "unknown fields ['gpu']"),
        ('{"ts_ms": -5, "node": "n1", "kind": "x"}', "ts_ms must be an int >= 0"),
        ('{"ts_ms": 9, "end_ms": 3, "node": "n1", "kind": "x"}', "end_ms must be an int >= ts_ms"),
    ],
)
def test_load_events_names_the_bad_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"ts_ms": 1, "node": "n1", "kind": "xid79"}\n' + line + "\n")
    with pytest.raises(EventsFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_events(path)


def test_load_events_csv_with_a_short_row(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text("ts_ms,node,group,kind\n1,n1,,xid79\n2,n1\n")
    with pytest.raises(EventsFileError, match=r"events.csv:.*line 3: 2 cells"):
        load_events(path)
