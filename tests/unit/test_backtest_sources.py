"""History sources: the export / query_range parsers on bodies in the documented formats,
the selector, the time range, and chunks cut into time-ordered rounds (an in-process
transport stands in for the server, as httpx's own tests do)."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from pydantic import SecretStr

from streams.backtest.history import (
    BadRange,
    BadSelector,
    HistoryClient,
    LabelInterner,
    SourceRejected,
    SourceUnreachable,
    TimeRange,
    history_rounds,
    parse_time_ms,
    rounds_of,
    series_selector,
)
from streams.backtest.prometheus import (
    MAX_POINTS,
    PrometheusSource,
    parse_query_range,
    query_steps,
)
from streams.backtest.victoriametrics import VictoriaMetricsSource, parse_export_lines

T0 = 1759276800000  # 2025-10-01T00:00:00Z

# recorded from Debian's victoria-metrics 1.79.5 (GET /api/v1/export after an import)
VM_EXPORT = (
    b'{"metric":{"__name__":"m1","instance":"a:9100"},"values":[1,2,3],'
    b'"timestamps":[1759276800000,1759276830000,1759276860000]}\n'
)
# the Prometheus HTTP API's range-query answer (docs: "Range vectors are returned as
# result type matrix"; values are [unix seconds, "value"])
PROM_MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": "up", "instance": "localhost:9090", "job": "prometheus"},
                "values": [
                    [1435781430.781, "1"],
                    [1435781445.781, "NaN"],
                    [1435781460.781, "+Inf"],
                ],
            },
            {"metric": {"__name__": "up", "job": "node"}, "values": [[1435781430.781, "0"]]},
        ],
    },
}


def test_export_line_parses_to_labels_ms_and_floats() -> None:
    [(labels, stamps, values)] = list(parse_export_lines(VM_EXPORT.splitlines()))
    assert labels == {"__name__": "m1", "instance": "a:9100"}
    assert stamps == [T0, T0 + 30_000, T0 + 60_000]
    assert values == [1.0, 2.0, 3.0] and all(type(v) is float for v in values)


def test_export_blank_lines_are_skipped_and_strings_accepted() -> None:
    lines = ["", VM_EXPORT.decode().strip(), "  "]
    assert len(list(parse_export_lines(lines))) == 1


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"metric":{"__name__":"m"},"values":[1,2],"timestamps":[1]}',  # lengths differ
        b'{"metric":"m","values":[1],"timestamps":[1]}',
        b'{"values":[1],"timestamps":[1]}',
    ],
)
def test_export_bad_line_is_a_one_line_error(line: bytes) -> None:
    with pytest.raises(SourceRejected, match="line 1 of /api/v1/export"):
        list(parse_export_lines([line]))


def test_query_range_matrix_parses_seconds_and_string_values() -> None:
    first, second = parse_query_range(PROM_MATRIX)
    labels, stamps, values = first
    assert labels == {"__name__": "up", "instance": "localhost:9090", "job": "prometheus"}
    assert stamps == [1435781430781, 1435781445781, 1435781460781]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == math.inf
    assert second[1:] == ([1435781430781], [0.0])


def test_query_range_error_envelope_is_an_error() -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
    with pytest.raises(SourceRejected, match="bad_data: parse error at char 5"):
        list(parse_query_range(body))


def test_query_range_of_a_vector_is_refused() -> None:
    body = {"status": "success", "data": {"resultType": "vector", "result": []}}
    with pytest.raises(SourceRejected, match="not matrix"):
        list(parse_query_range(body))


def test_selector_is_narrowed_to_the_catalog_metrics() -> None:
    assert series_selector('{job="dcgm", cluster=~"b.*"}', ["b", "a", "a"]) == (
        '{__name__=~"a|b",job="dcgm", cluster=~"b.*"}'
    )
    assert series_selector("", ["a"]) == '{__name__=~"a"}'
    assert series_selector("{}", ["a"]) == '{__name__=~"a"}'


@pytest.mark.parametrize("bad", ["up", 'up{job="x"}', '{job="x"'])
def test_selector_without_braces_is_refused(bad: str) -> None:
    with pytest.raises(BadSelector, match="label matchers in braces"):
        series_selector(bad, ["a"])


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2025-10-01T00:00:00Z", T0),
        ("2025-10-01T02:00:00+02:00", T0),
        ("2025-10-01", T0),
        ("1759276800", T0),
        ("1759276800.5", T0 + 500),
        ("now", T0 + 7),
        ("now-1h", T0 + 7 - 3_600_000),
        ("now-55d", T0 + 7 - 55 * 86_400_000),
    ],
)
def test_times(text: str, ms: int) -> None:
    assert parse_time_ms(text, now_ms=T0 + 7) == ms


def test_unreadable_time_says_what_it_takes() -> None:
    with pytest.raises(BadRange, match="RFC 3339"):
        parse_time_ms("yesterday", now_ms=T0)


def test_range_is_put_on_the_grid_and_an_empty_one_refused() -> None:
    assert TimeRange.on_grid(T0 + 1, T0 + 59_000, 30_000) == TimeRange(T0, T0 + 60_000)
    with pytest.raises(BadRange, match="empty"):
        TimeRange.on_grid(T0, T0, 30_000)
    chunks = list(TimeRange(T0, T0 + 100).chunks(40))
    assert chunks == [(T0, T0 + 40), (T0 + 40, T0 + 80), (T0 + 80, T0 + 100)]


def test_rounds_cut_samples_by_step_in_time_order_and_keep_empty_rounds() -> None:
    interner = LabelInterner()
    parsed = [
        ({"__name__": "a"}, [T0 + 2_000, T0 + 32_000, T0 + 92_000], [1.0, 2.0, 3.0]),
        ({"__name__": "b"}, [T0 + 95_000, T0 + 25_000, T0 - 1], [9.0, 8.0, 7.0]),  # unsorted
    ]
    rounds = rounds_of(parsed, T0, T0 + 120_000, 30_000, interner)
    assert [t for t, _ in rounds] == [T0, T0 + 30_000, T0 + 60_000, T0 + 90_000]
    flat = [[(s.name, s.samples) for s in series] for _, series in rounds]
    assert flat == [
        [("a", [(T0 + 2_000, 1.0)]), ("b", [(T0 + 25_000, 8.0)])],
        [("a", [(T0 + 32_000, 2.0)])],
        [],
        [("a", [(T0 + 92_000, 3.0)]), ("b", [(T0 + 95_000, 9.0)])],
    ]


def test_one_label_dict_per_series_across_chunks() -> None:
    interner = LabelInterner()
    first = rounds_of(
        [({"__name__": "a", "x": "1"}, [T0], [1.0])], T0, T0 + 30_000, 30_000, interner
    )
    second = rounds_of(
        [({"x": "1", "__name__": "a"}, [T0 + 30_000], [2.0])],
        T0 + 30_000,
        T0 + 60_000,
        30_000,
        interner,
    )
    assert first[0][1][0].labels is second[0][1][0].labels
    assert len(interner) == 1


class _Server:
    """An in-process history server: answers from ``bodies`` by path, records requests."""

    def __init__(self, handler) -> None:
        self.requests: list[httpx.Request] = []
        self.handler = handler

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    def client(self, what: str, **options) -> HistoryClient:
        return HistoryClient(
            "http://history.test:8428", what, transport=httpx.MockTransport(self), **options
        )


def _vm_export(request: httpx.Request) -> httpx.Response:
    """Each series sampled every 10 s over the asked [start, end], both inclusive."""
    lo = round(float(request.url.params["start"]) * 1000)
    hi = round(float(request.url.params["end"]) * 1000)
    stamps = list(range(-(-lo // 10_000) * 10_000, hi + 1, 10_000))
    lines = [
        json.dumps(
            {
                "metric": {"__name__": n, "instance": "g1:9100"},
                "values": [float(t) for t in stamps],
                "timestamps": stamps,
            }
        )
        for n in ("a", "b")
    ]
    return httpx.Response(200, text="\n".join(lines) + "\n")


def test_victoriametrics_source_streams_chunks_without_overlap() -> None:
    server = _Server(_vm_export)
    source = VictoriaMetricsSource(
        server.client("VictoriaMetrics"), '{__name__=~"a|b"}', 30_000, 60_000
    )
    rounds = list(history_rounds(source, TimeRange(T0, T0 + 150_000)))
    assert [t for t, _ in rounds] == [T0 + k * 30_000 for k in range(5)]
    stamps = [ts for _, series in rounds for s in series if s.name == "a" for ts, _ in s.samples]
    assert stamps == list(range(T0, T0 + 150_000, 10_000))  # each sample once, in order
    asked = [(r.url.params["start"], r.url.params["end"]) for r in server.requests]
    assert asked == [
        ("1759276800.000", "1759276859.999"),
        ("1759276860.000", "1759276919.999"),
        ("1759276920.000", "1759276949.999"),
    ]
    assert {r.url.params["match[]"] for r in server.requests} == {'{__name__=~"a|b"}'}


def test_prometheus_source_puts_each_step_into_the_bucket_it_closes() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        p = request.url.params
        start, end, step = float(p["start"]), float(p["end"]), float(p["step"])
        points = [
            [start + k * step, str(start + k * step)] for k in range(int((end - start) / step) + 1)
        ]
        body = {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [{"metric": {"__name__": "a"}, "values": points}],
            },
        }
        return httpx.Response(200, json=body)

    server = _Server(answer)
    source = PrometheusSource(server.client("Prometheus"), '{__name__=~"a"}', 30_000, 90_000)
    rounds = list(history_rounds(source, TimeRange(T0, T0 + 120_000)))
    # the value Prometheus has at T + 30 s (scraped in [T, T + 30 s)) is bucket T's
    assert [[s.samples for s in series] for _, series in rounds] == [
        [[(T0 + k * 30_000 + 15_000, (T0 + (k + 1) * 30_000) / 1000)]] for k in range(4)
    ]
    asked = [
        (r.url.params["start"], r.url.params["end"], r.url.params["step"]) for r in server.requests
    ]
    assert asked == [
        ("1759276830.000", "1759276890.000", "30"),
        ("1759276920.000", "1759276920.000", "30"),
    ]


def test_a_prometheus_chunk_past_its_point_limit_is_asked_in_pieces_of_11000_steps() -> None:
    assert list(query_steps(T0, T0 + 120_000, 30_000, MAX_POINTS)) == [(T0 + 30_000, T0 + 120_000)]
    assert list(query_steps(T0, T0 + 100_000, 30_000, 2)) == [
        (T0 + 30_000, T0 + 60_000),
        (T0 + 90_000, T0 + 120_000),  # the step that closes the last, partial bucket
    ]
    pieces = list(query_steps(T0, T0 + 12_000_000, 1_000, MAX_POINTS))
    assert pieces == [(T0 + 1_000, T0 + 11_000_000), (T0 + 11_001_000, T0 + 12_000_000)]
    server = _Server(lambda r: httpx.Response(200, json=_matrix([])))
    source = PrometheusSource(server.client("Prometheus"), "{}", 1_000, 12_000_000)
    assert list(source.chunk(T0, T0 + 12_000_000)) == []
    asked = [(r.url.params["start"], r.url.params["end"]) for r in server.requests]
    assert asked == [("1759276801.000", "1759287800.000"), ("1759287801.000", "1759288800.000")]


def _matrix(result: list) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_the_split_asks_label_values_and_nothing_matching_is_no_part() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/label/__name__/values"
        data = ["a"] if '"a"' in request.url.params["match[]"] else []
        return httpx.Response(200, json={"status": "success", "data": data})

    server = _Server(answer)
    for selector, parts in (('{__name__=~"a"}', 1), ('{__name__=~"z"}', 0)):
        source = VictoriaMetricsSource(server.client("VictoriaMetrics"), selector, 30_000)
        assert len(source.split(TimeRange(T0, T0 + 30_000))) == parts
    assert {r.url.params["end"] for r in server.requests} == {"1759276829.999"}


def test_http_error_is_one_line_with_the_server_text() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text="cannot parse matches[]={job=:\n unexpected token")

    source = VictoriaMetricsSource(_Server(answer).client("VictoriaMetrics"), "{}", 30_000)
    with pytest.raises(SourceRejected) as caught:
        list(source.chunk(T0, T0 + 30_000))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("VictoriaMetrics at http://history.test:8428 answered HTTP 400")
    assert "unexpected token" in message


def test_unreachable_server_is_named_without_credentials() -> None:
    client = HistoryClient("http://user:pw-9f3@127.0.0.1:1", "Prometheus", timeout_s=2)
    source = PrometheusSource(client, "{}", 30_000)
    with pytest.raises(SourceUnreachable) as caught:
        source.split(TimeRange(T0, T0 + 30_000))
    assert "Prometheus at http://127.0.0.1:1 is unreachable (ConnectError" in str(caught.value)
    assert "pw-9f3" not in str(caught.value)


def test_bearer_token_is_sent_per_request_and_never_shown() -> None:
    server = _Server(lambda r: httpx.Response(200, json={"status": "success", "data": []}))
    client = server.client("VictoriaMetrics", token=SecretStr("tok-5c1e"))
    VictoriaMetricsSource(client, "{}", 30_000).split(TimeRange(T0, T0 + 30_000))
    assert server.requests[0].headers["Authorization"] == "Bearer tok-5c1e"
    assert "tok-5c1e" not in repr(client._client.auth)


def test_a_chunk_the_server_could_not_give_is_asked_again() -> None:
    answers = iter([httpx.Response(503, text="restarting"), None])

    def flaky(request: httpx.Request) -> httpx.Response:
        return next(answers) or _vm_export(request)

    server = _Server(flaky)
    source = VictoriaMetricsSource(server.client("VictoriaMetrics"), "{}", 30_000, 60_000)
    rounds = list(history_rounds(source, TimeRange(T0, T0 + 60_000), retry_waits_s=(0.0,)))
    assert len(server.requests) == 2
    assert [len(series) for _, series in rounds] == [2, 2]  # each sample once


def test_a_chunk_still_refused_after_the_retries_is_the_error() -> None:
    server = _Server(lambda r: httpx.Response(502, text="bad gateway"))
    source = VictoriaMetricsSource(server.client("VictoriaMetrics"), "{}", 30_000, 60_000)
    with pytest.raises(SourceRejected, match="HTTP 502"):
        list(history_rounds(source, TimeRange(T0, T0 + 60_000), retry_waits_s=(0.0, 0.0)))
    assert len(server.requests) == 3


def test_a_4xx_is_not_retried() -> None:
    server = _Server(lambda r: httpx.Response(400, text="cannot parse"))
    source = VictoriaMetricsSource(server.client("VictoriaMetrics"), "{}", 30_000, 60_000)
    with pytest.raises(SourceRejected, match="HTTP 400"):
        list(history_rounds(source, TimeRange(T0, T0 + 60_000), retry_waits_s=(0.0,)))
    assert len(server.requests) == 1
