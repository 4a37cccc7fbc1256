"""remote_write decode of one large body of distinct series (the label cache turning over).

    python -m bench.decode_distinct_bench [--mb 15] [--cache 200000]

Builds one valid remote_write body of about ``--mb`` MB (snappy-compressed) in
which every series is new (a distinct ``instance`` and ``id`` per series of a
metric the ingest reads), as one request from a large fleet, and decodes it
with the ingest's decoder (``metric_names`` prefilter on, as the ingest runs
it) and ``label_cache_size`` = ``--cache``. Prints series, body size and the
decode's process CPU time, for the body and for half of it (a linear decoder
takes about half the time). Not asserted anywhere: figures for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time

from streams.ingest.remote_write import WriteRequestDecoder, encode_write_request
from streams.ingest.series import Series


def distinct_series(n: int) -> list[Series]:
    """``n`` one-sample series of a metric the ingest reads, no two with the same labels."""
    return [
        Series(
            {
                "__name__": "node_procs_running",
                "cluster": "fleet",
                "instance": f"host-{i:08d}.example.internal:9100",
                "id": f"{i * 2654435761 % 4294967296:010d}-{i:08x}",
                "job": "node",
            },
            [(1_796_000_000_000 + i % 30_000, float(i % 97))],
        )
        for i in range(n)
    ]


def distinct_body(mb: float) -> tuple[bytes, int]:
    """A body of about ``mb`` MB of distinct series: (body, series)."""
    probe = 20_000
    per_series = len(encode_write_request(distinct_series(probe))) / probe
    n = int(mb * 1_000_000 / per_series)
    return encode_write_request(distinct_series(n)), n


def cpu_seconds_to_decode(body: bytes, cache: int) -> float:
    decoder = WriteRequestDecoder(
        metric_names={"node_procs_running"}, label_cache_size=cache, max_body_bytes=1 << 30
    )
    start = time.process_time()
    decoder.decode(body)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=15.0)
    parser.add_argument("--cache", type=int, default=200_000)
    args = parser.parse_args()
    for mb in (args.mb / 2, args.mb):
        body, n = distinct_body(mb)
        seconds = cpu_seconds_to_decode(body, args.cache)
        print(
            f"{len(body) / 1e6:6.1f} MB body, {n:>9,} distinct series, cache {args.cache:,}: "
            f"decode {seconds:8.2f} s CPU ({n / seconds:,.0f} series/s)"
        )


if __name__ == "__main__":
    main()
