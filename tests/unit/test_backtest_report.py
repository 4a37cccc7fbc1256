"""streams.backtest.report: one self-contained HTML file, every fleet-given text escaped."""

from __future__ import annotations

import base64
import re
import warnings

from detectors.episodes import ScoringWindows
from detectors.families import NODE_DEVIATION, XID_ALERT
from detectors.vocabulary import Advice
from streams.backtest.report import render_html
from streams.backtest.summary import Accumulator, KnownEvent
from tests.unit.test_backtest_summary import T0, B, alert, scored

EVIL = "<script>alert(1)</script>"
DOLLAR = "gpu$x^2$"  # mathtext in a matplotlib label unless escaped


def result_with(nodes: tuple[str, ...], group: str = "job") -> dict:
    events = [
        KnownEvent(T0 + 50 * B, nodes[0], None, "xid79<b>"),
        KnownEvent(T0 + 100 * B, None, group, "job_death"),
    ]
    acc = Accumulator(events, B, windows=ScoringWindows(lookback_buckets=10))
    for i in range(120):
        ts = T0 + i * B
        changes = []
        if i == 47:
            changes = [alert(NODE_DEVIATION, nodes[0], ts)]
        if i == 50:
            changes = [alert(XID_ALERT, nodes[0], ts)]
        if i == 100:
            changes = [alert(NODE_DEVIATION, nodes[1], ts)]
        s = scored(ts, {n: float(i % 7) for n in nodes}, changes, group=group)
        s.advice = [Advice("ledger", "exclude_node", group, ts, f"exclude {EVIL}", node=nodes[0])]
        acc.add(s)
    return acc.result()


def test_html_is_self_contained() -> None:
    page = render_html(result_with(("n1", "n2", "n3")))
    assert page.startswith("<!DOCTYPE html>")
    images = re.findall(r'src="([^"]*)"', page)
    text = re.sub(r'src="data:image/png;base64,[A-Za-z0-9+/=]*"', "", page)
    assert not re.search(r"https?:|//|<script|<link|<iframe|@import|url\(|href=", text, re.I)
    assert len(images) == 3  # heatmap, timeline, false alerts per day
    assert all(src.startswith("data:image/png;base64,") for src in images)
    for src in images:
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG")


def test_fleet_text_is_escaped_and_a_dollar_is_no_mathtext() -> None:
    page = render_html(result_with((EVIL, DOLLAR), group="a&b"))
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "xid79&lt;b&gt;" in page
    assert "group a&amp;b" in page
    assert DOLLAR in page


def test_the_headline_and_tables_carry_the_figures() -> None:
    page = render_html(result_with(("n1", "n2", "n3")))
    assert "2/2 found, 1/2 before the event" in page
    assert '<td class="num">90 s</td>' in page  # n1's deviation three buckets before its XID
    assert "exclude_node" in page


def test_the_run_says_where_the_history_came_from_escaped() -> None:
    result = Accumulator([], B).result()
    result["run"] = {"source": "victoriametrics", "selector": '{job="<x>"}'}
    page = render_html(result)
    assert "source victoriametrics · selector {job=&quot;&lt;x&gt;&quot;}" in page


def test_an_empty_backtest_still_renders() -> None:
    page = render_html(Accumulator([], B).result())
    assert "no buckets scored" in page
    assert "No known events were given." in page
    assert "No alert fired." in page
    assert "<th>fired (UTC)</th>" not in page  # no empty alert table


def test_a_timeline_of_more_rows_than_it_draws_says_so() -> None:
    nodes = [f"n{i:02d}" for i in range(61)]
    acc = Accumulator([], B)
    for i in range(3):
        ts = T0 + i * B
        changes = [alert(NODE_DEVIATION, n, ts) for n in nodes] if i == 1 else []
        acc.add(scored(ts, {n: 0.0 for n in nodes}, changes))
    page = render_html(acc.result())
    assert "The timeline shows 60 of 61 node and alert rows" in page


def test_a_group_that_alerts_without_scores_still_draws_its_timeline() -> None:
    acc = Accumulator([], B)
    acc.add(scored(T0, {}, [alert(NODE_DEVIATION, "n1", T0)]))  # no node verdicts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of an empty time axis
        page = render_html(acc.result())
    assert page.count("data:image/png;base64,") == 2  # the timeline and false alerts per day
