"""Prometheus history: ``/api/v1/query_range`` of the selector, one chunk per query.

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
    """``selector``'s series from a Prometheus at ``client``, ``chunk_ms`` at a time."""

    what = "Prometheus"
    max_steps = MAX_POINTS

    def chunk(self, lo_ms: int, hi_ms: int) -> Iterator[ParsedSeries]:
        # the steps that close the chunk's buckets: lo + step .. hi (both ends inclusive)
        step = self.step_ms
        last = lo_ms + -(-(hi_ms - lo_ms) // step) * step
        data = self.client.get_json(
            QUERY_RANGE_PATH,
            {
                "query": self.selector,
                "start": api_seconds(lo_ms + step),
                "end": api_seconds(last),
                "step": f"{step / 1000:g}",
            },
        )
        back = step - step // 2  # into the bucket the step closes, clear of its edges
        for labels, stamps, values in parse_query_range(data):
            yield labels, [t - back for t in stamps], values
