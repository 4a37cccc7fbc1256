"""VictoriaMetrics history: ``/api/v1/export``, raw samples as JSON lines, streamed.

Each line is one series' samples in the export's range::

    {"metric":{"__name__":"up","instance":"gpu001:9100"},"values":[1,1],"timestamps":[1759276802000,1759276832000]}

(timestamps in ms, ascending). Lines are parsed as they arrive, so the body of a
chunk is never held whole. One export per part of the split (``ChunkedSource.split``:
a group, or a metric of the series in none), each under ``-search.maxExportSeries``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from streams.backtest.history import (
    ChunkedSource,
    ParsedSeries,
    SourceRejected,
    api_seconds,
    as_float,
)

EXPORT_PATH = "/api/v1/export"


def parse_export_lines(lines: Iterable[str | bytes]) -> Iterator[ParsedSeries]:
    """``(labels, timestamps_ms, values)`` per JSON line of an export (blank lines skipped)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            metric, stamps, values = item["metric"], item["timestamps"], item["values"]
            if not isinstance(metric, dict) or len(stamps) != len(values):
                raise ValueError("metric must be an object, timestamps and values alike long")
            yield (
                {str(k): str(v) for k, v in metric.items()},
                [int(t) for t in stamps],
                [as_float(v) for v in values],
            )
        except (ValueError, KeyError, TypeError) as exc:
            text = line if isinstance(line, str) else line.decode("utf-8", "replace")
            raise SourceRejected(
                f"line {number} of {EXPORT_PATH} is not an export line "
                f"({type(exc).__name__}: {exc}): {text[:120]}"
            ) from None


class VictoriaMetricsSource(ChunkedSource):
    """``selector``'s series from a VictoriaMetrics at ``client``, ``chunk_ms`` at a time."""

    what = "VictoriaMetrics"

    def fetch(self, selector: str, lo_ms: int, hi_ms: int) -> Iterator[ParsedSeries]:
        # start and end are both inclusive: end 1 ms short of the next chunk's start
        params = {
            "match[]": selector,
            "start": api_seconds(lo_ms),
            "end": api_seconds(hi_ms - 1),
        }
        with self.client.stream(EXPORT_PATH, params) as response:
            yield from parse_export_lines(response.iter_lines())
