"""Prometheus history: ``/api/v1/query_range`` of the selector, one query per part of the
split (a group, or a metric of the series in none) and per 11,000 steps of a chunk.

The answer is the API's envelope around a matrix, timestamps in (fractional)
seconds and values as strings ("NaN", "+Inf" included)::

    {"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{"__name__":"up","instance":"gpu001:9100"},"values":[[1759276830,"1"]]}]}}

``step`` is the bucket. A series' value at step ``T`` is its newest sample at
or before ``T`` (within Prometheus' 5-minute lookback), stamped ``T``: with the
scrape interval the bucket, the sample from the bucket ``[T - step, T)``. So each
point is put back into that bucket (stamped ``T - step / 2``); stamped ``T``, every
alert would come a bucket late and every lead time a bucket short. Counter rates
come out as live when the scrape interval is the bucket; a scrape that lands a
step late shows as one bucket with no increase and the next with two, and a
series that ends goes on for the lookback. VictoriaMetrics' export has the raw
samples instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streams.backtest.history import (
    ChunkedSource,
    ParsedSeries,
    SourceRejected,
    api_seconds,
    as_float,
    raise_for_error_body,
)

QUERY_RANGE_PATH = "/api/v1/query_range"
MAX_POINTS = 11_000  # Prometheus refuses a range query of more points per series


def parse_query_range(data: Any) -> Iterator[ParsedSeries]:
    """``(labels, timestamps_ms, values)`` per series of a ``query_range`` answer."""
    raise_for_error_body(data, "Prometheus", QUERY_RANGE_PATH)
    try:
        body = data["data"]
        if body["resultType"] != "matrix":
            raise ValueError(f"resultType {body['resultType']!r}, not matrix")
        for item in body["result"]:
            values = item["values"]
            yield (
                {str(k): str(v) for k, v in item["metric"].items()},
                [round(float(t) * 1000) for t, _ in values],
                [as_float(v) for _, v in values],
            )
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceRejected(
            f"Prometheus sent no range-query matrix for {QUERY_RANGE_PATH} "
            f"({type(exc).__name__}: {exc})"
        ) from None


class PrometheusSource(ChunkedSource):
    """``selector``'s series from a Prometheus at ``client``, ``chunk_ms`` at a time: one
    range query per part of the split (``ChunkedSource.split``) and per 11,000 steps."""

    what = "Prometheus"

    def fetch(self, selector: str, lo_ms: int, hi_ms: int) -> Iterator[ParsedSeries]:
        # the steps that close the chunk's buckets: lo + step .. hi (both ends inclusive),
        # in queries of at most MAX_POINTS of them
        step = self.step_ms
        back = step - step // 2  # into the bucket the step closes, clear of its edges
        for first, last in query_steps(lo_ms, hi_ms, step, MAX_POINTS):
            data = self.client.get_json(
                QUERY_RANGE_PATH,
                {
                    "query": selector,
                    "start": api_seconds(first),
                    "end": api_seconds(last),
                    "step": f"{step / 1000:g}",
                },
            )
            for labels, stamps, values in parse_query_range(data):
                yield labels, [t - back for t in stamps], values


def query_steps(lo_ms: int, hi_ms: int, step_ms: int, max_points: int) -> Iterator[tuple[int, int]]:
    """The (first, last) steps, both inclusive, of the queries that close the buckets of
    ``[lo_ms, hi_ms)``: ``lo + step`` to the step at or after ``hi``, at most
    ``max_points`` steps a query (Prometheus refuses more: "exceeded maximum resolution
    of 11,000 points per timeseries")."""
    first = lo_ms + step_ms
    last = lo_ms + -(-(hi_ms - lo_ms) // step_ms) * step_ms
    while first <= last:
        end = min(last, first + (max_points - 1) * step_ms)
        yield first, end
        first = end + step_ms
