"""Splitting a fleet's history into requests the server takes (issue 25): the plan from the
label values, the halving of a refused request, what a refusal says, the labels a server
does not store, and why a run that read samples scored nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import httpx
import pytest

from streams.backtest.history import (
    BadSelector,
    HistoryClient,
    NothingScored,
    Part,
    SourceLimited,
    SourceRejected,
    TimeRange,
    equals,
    extra_labels,
    in_halves,
    is_limit,
    limit_flag,
    refusal,
    split_parts,
)
from streams.backtest.run import BacktestStats, nothing_scored, run_backtest
from streams.backtest.victoriametrics import VictoriaMetricsSource
from streams.settings import Settings

T0 = 1759276800000

# recorded from Debian's victoria-metrics 1.79.5: GET /api/v1/series of 30,240 series
VM_SERIES_422 = {
    "status": "error",
    "errorType": "422",
    "error": 'cannot fetch time series for "filters=[{__name__=~\\"metric_.*\\"}], '
    'timeRange=[2025-09-30T23:58:20Z..2025-10-01T00:03:20Z]": cannot find metric names: '
    "error when searching tsids: the number of matching timeseries exceeds 30000; either "
    "narrow down the search or increase -search.max* command-line flag values at vmselect; "
    "see https://docs.victoriametrics.com/#resource-usage-limits",
}
# ... and GET /api/v1/export with -search.maxExportSeries=100: HTTP 400, plain text
VM_EXPORT_400 = (
    "error when exporting data on the time range (start=1759276700000, end=1759277000000): "
    'cannot fetch data for "filters=[{__name__=~\\"metric_.*\\"}], timeRange=[2025-09-30T23:58:20Z'
    '..2025-10-01T00:03:20Z]": search error after reading 0 data blocks: error when searching '
    "tsids: the number of matching timeseries exceeds 101; either narrow down the search or "
    "increase -search.max* command-line flag values at vmselect\n"
)


class Fleet:
    """A server's label index: ``values_of`` over a list of label sets, as the label
    values API answers it (the series of ``names`` matching every ``label="v"``)."""

    def __init__(self, series: list[dict[str, str]]) -> None:
        self.series = series
        self.asked: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def __call__(self, label: str, names: Sequence[str], matchers: Sequence[str]) -> list[str]:
        self.asked.append((label, tuple(names), tuple(matchers)))
        found = set()
        for labels in self.series:
            if labels["__name__"] not in names:
                continue
            wanted = all(labels.get(k, "") == json.loads(v) for k, _, v in map(_eq, matchers))
            if wanted and labels.get(label):
                found.add(labels[label])
        return sorted(found)


def _eq(matcher: str) -> tuple[str, str, str]:
    label, _, quoted = matcher.partition("=")
    return label, "=", quoted


def _fleet(**shape: str) -> list[dict[str, str]]:
    """Two metrics on three nodes; ``shape`` maps a node to its cluster ("" for none)."""
    return [
        {"__name__": name, "instance": f"{node}:9100", **({"cluster": c} if c else {})}
        for node, c in shape.items()
        for name in ("a", "b")
    ]


def test_a_fleet_is_read_one_group_at_a_time() -> None:
    fleet = Fleet(_fleet(n1="x", n2="y", n3="y"))
    parts = split_parts(fleet, ["a", "b", "c"], ["cluster"])
    assert parts == [
        Part(("a", "b"), ('cluster="x"',)),  # "c" is not on the server: not asked for
        Part(("a", "b"), ('cluster="y"',)),
    ]
    # the metrics, the groups, then whether any series has no group: three small answers
    assert [label for label, _, _ in fleet.asked] == ["__name__", "cluster", "__name__"]
    assert fleet.asked[-1] == ("__name__", ("a", "b"), ('cluster=""',))


def test_series_without_the_first_group_label_are_split_by_the_next_then_by_metric() -> None:
    series = _fleet(n1="x", n2="", n3="")
    series[0]["train_job"] = series[1]["train_job"] = "llm"  # n1 runs a job
    series[2]["cluster"] = series[3]["cluster"] = "x"  # n2 is a spare of cluster x
    parts = split_parts(Fleet(series), ["a", "b"], ["train_job", "cluster"])
    assert parts == [
        Part(("a", "b"), ('train_job="llm"',)),
        Part(("a", "b"), ('train_job=""', 'cluster="x"')),
        # n3 carries no group label: one request per metric, never the fleet at once
        Part(("a",), ('train_job=""', 'cluster=""')),
        Part(("b",), ('train_job=""', 'cluster=""')),
    ]


def test_a_fleet_without_a_stored_group_label_is_read_one_metric_at_a_time() -> None:
    parts = split_parts(Fleet(_fleet(n1="", n2="")), ["b", "a"], ["cluster"])
    assert parts == [Part(("a",)), Part(("b",))]


def test_nothing_matching_is_no_part() -> None:
    fleet = Fleet(_fleet(n1="x"))
    assert split_parts(fleet, ["z"], ["cluster"]) == []
    assert len(fleet.asked) == 1  # one question, not one per label


def test_a_refused_request_is_asked_again_in_halves_down_to_one_metric() -> None:
    asked: list[tuple[str, ...]] = []

    def ask(part: Part) -> list[str]:
        asked.append(part.names)
        if len(part.names) > 2:
            raise SourceLimited("the number of matching timeseries exceeds 2")
        return list(part.names)

    assert in_halves(ask, Part(("a", "b", "c", "d", "e"), ('cluster="x"',))) == list("abcde")
    assert asked == [("a", "b", "c", "d", "e"), ("a", "b"), ("c", "d", "e"), ("c",), ("d", "e")]

    def never(part: Part) -> list[str]:
        raise SourceLimited("exceeds")

    with pytest.raises(SourceLimited):
        in_halves(never, Part(("a", "b")))


def test_matchers_quote_values_as_promql_reads_them() -> None:
    assert equals("cluster", "b200-a") == 'cluster="b200-a"'
    assert equals("job", 'a"b\\c\nd') == r'job="a\"b\\c\nd"'
    assert equals("cluster", "") == 'cluster=""'


@pytest.mark.parametrize(
    ("what", "path", "text", "flag"),
    [
        ("VictoriaMetrics", "/api/v1/series", VM_SERIES_422["error"], "-search.maxSeries"),
        ("VictoriaMetrics", "/api/v1/export", VM_EXPORT_400, "-search.maxExportSeries"),
        (
            "VictoriaMetrics",
            "/api/v1/label/cluster/values",
            "the number of matching timeseries exceeds 101; either narrow down the search or "
            "increase -search.max* command-line flag values at vmselect",
            "-search.maxUniqueTimeseries",
        ),
        (
            "Prometheus",
            "/api/v1/query_range",
            "execution: query processing would load too many samples into memory in query "
            "execution",
            "--query.max-samples",
        ),
        ("VictoriaMetrics", "/api/v1/export", "cannot parse match[]", None),
        ("Prometheus", "/api/v1/query_range", "bad_data: parse error at char 5", None),
    ],
)
def test_a_refusal_names_the_server_flag_that_raises_its_limit(
    what: str, path: str, text: str, flag: str | None
) -> None:
    assert limit_flag(what, path, text) == flag
    assert is_limit(text) == (flag is not None)


def test_a_refusal_keeps_the_servers_whole_reason_on_one_line() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json=VM_SERIES_422)

    client = HistoryClient(
        "http://vm.test:8428", "VictoriaMetrics", transport=httpx.MockTransport(answer)
    )
    with pytest.raises(SourceLimited) as caught:
        client.get_json("/api/v1/series", {"match[]": "{}"})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "VictoriaMetrics at http://vm.test:8428 answered HTTP 422 to /api/v1/series: 422: "
        'cannot fetch time series for "filters=[{__name__=~\\"metric_.*\\"}]'
    )
    assert "exceeds 30000; either narrow down the search or increase -search.max* " in message
    assert message.endswith(
        "#resource-usage-limits -- raise the server's -search.maxSeries or narrow --selector"
    )


def test_a_very_long_refusal_loses_its_middle_never_its_end() -> None:
    page = "<html>" + "x" * 10_000 + " the cause and the fix"
    error = refusal("Proxy answered HTTP 413 to /api/v1/export", "VictoriaMetrics", "/x", page)
    assert type(error) is SourceRejected
    assert len(str(error)) < 4_100 and str(error).endswith("the cause and the fix")


def _export(series: list[dict[str, str]], limit: int):
    """A VictoriaMetrics export of ``series`` (one sample each at T0) that refuses more than
    ``limit`` series per request as 1.79.5 does (HTTP 400, plain text)."""

    def answer(request: httpx.Request) -> httpx.Response:
        selector = request.url.params["match[]"]
        names = selector.split('"')[1].split("|")
        cluster = re.search(r'cluster="([^"]*)"', selector)
        matching = [s for s in series if s["__name__"] in names
                    and (cluster is None or s.get("cluster", "") == cluster[1])]  # fmt: skip
        if len(matching) > limit:
            return httpx.Response(400, text=VM_EXPORT_400.replace("101", str(limit + 1)))
        lines = [json.dumps({"metric": s, "values": [1.0], "timestamps": [T0]}) for s in matching]
        return httpx.Response(200, text="\n".join(lines) + "\n")

    return answer


def test_a_chunk_refused_for_a_limit_is_read_in_halves_and_stays_split() -> None:
    series = [
        {"__name__": name, "cluster": "x", "instance": f"n{k}:9100"}
        for name in ("a", "b", "c", "d")
        for k in range(3)
    ]
    requests: list[httpx.Request] = []
    answer = _export(series, limit=6)

    def server(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return answer(request)

    client = HistoryClient(
        "http://vm.test", "VictoriaMetrics", transport=httpx.MockTransport(server)
    )
    source = VictoriaMetricsSource(client, "", 30_000, names=["a", "b", "c", "d"])
    source.parts = [Part(("a", "b", "c", "d"), ('cluster="x"',))]
    got = list(source.chunk(T0, T0 + 30_000))
    assert len(got) == 12 and len(requests) == 3  # refused, then two halves of six series
    assert source.parts == [Part(("a", "b"), ('cluster="x"',)), Part(("c", "d"), ('cluster="x"',))]
    requests.clear()
    assert len(list(source.chunk(T0 + 30_000, T0 + 60_000))) == 12 and len(requests) == 2

    source.parts = [Part(("a",), ())]  # one metric of three series, over a limit of two
    client = HistoryClient(
        "http://vm.test", "VictoriaMetrics", transport=httpx.MockTransport(_export(series, 2))
    )
    source.client = client
    with pytest.raises(
        SourceLimited, match=r"exceeds 3; .* raise the server's -search.maxExportSeries"
    ):
        list(source.chunk(T0, T0 + 30_000))


def test_extra_labels_join_every_series_and_a_stored_one_wins() -> None:
    series = [{"__name__": "a", "instance": "n1:9100"}, {"__name__": "a", "cluster": "own"}]
    client = HistoryClient(
        "http://vm.test", "VictoriaMetrics", transport=httpx.MockTransport(_export(series, 10))
    )
    source = VictoriaMetricsSource(
        client, "", 30_000, names=["a"], extra_labels={"cluster": "b200-a"}
    )
    got = [labels for labels, _, _ in source.chunk(T0, T0 + 30_000)]
    assert got == [
        {"cluster": "b200-a", "__name__": "a", "instance": "n1:9100"},
        {"cluster": "own", "__name__": "a"},
    ]


def test_extra_label_options_are_name_value_pairs() -> None:
    assert extra_labels(["cluster=b200-a", "dc=x=y"]) == {"cluster": "b200-a", "dc": "x=y"}
    for bad in ("cluster", "cluster=", "0x=1", "a-b=1"):
        with pytest.raises(BadSelector):
            extra_labels([bad])


class _Memory:
    """A history source of series without a group label."""

    what = "memory"
    step_ms = 30_000
    chunk_ms = 3_600_000

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def split(self, time_range: TimeRange) -> list[Part]:
        return [Part()]

    def chunk(self, lo_ms: int, hi_ms: int):
        for ts in range(lo_ms, hi_ms, 30_000):
            yield dict(self.labels), [ts + 1_000], [50.0]


def test_a_run_that_scores_nothing_says_why_and_what_to_change() -> None:
    source = _Memory({"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": "gpu1:9400", "gpu": "0"})
    with pytest.raises(NothingScored) as caught:
        run_backtest(source, TimeRange(T0, T0 + 600_000), Settings(), lambda _: None)
    message = str(caught.value)
    assert message.startswith(
        "no bucket was scored: 20 samples of 1 series read, 0 taken by the frame builder, "
        "1 still held when the history ended; dropped: no_group 19; "
    )  # the 20th still waited for a group at the end
    assert "no series carried a group label (group_labels=[cluster]); the series carry gpu, " \
           "instance: pass --group-label NAME" in message  # fmt: skip
    assert "--extra-label cluster=<your cluster>" in message


def test_series_without_a_node_label_say_so() -> None:
    stats = BacktestStats(samples=40, series=2, dropped={"no_node": 40})
    message = nothing_scored(stats, Settings(node_labels=["instance"]), ["__name__", "host"])
    assert "dropped: no_node 40; no_node: no series carried a node label (node_labels=" \
           "[instance]); the series carry host: pass --node-label NAME" in message  # fmt: skip
