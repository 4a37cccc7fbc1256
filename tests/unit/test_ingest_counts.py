"""The ingest exports what the frame builder counts outside ``add``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from streams.ingest.remote_write import encode_write_request
from streams.ingest.series import Series
from streams.ingest.server import Ingest, build_ingest
from streams.settings import Settings

B = 30_000


@pytest.fixture
def ingest() -> Iterator[Ingest]:
    ingest = build_ingest(Settings())
    yield ingest
    ingest._work.shutdown()
    if ingest.wal is not None:
        ingest.wal.close()


def _series(name: str, node: str, ts: int, value: float, **labels: str) -> Series:
    return Series(
        {"__name__": name, "instance": f"{node}:9100", "cluster": "c", **labels}, [(ts, value)]
    )


def _count(ingest: Ingest, name: str, **labels: str) -> float | None:
    return ingest.metrics.registry.get_sample_value(name, labels)


def test_a_feature_dropped_at_close_is_counted(ingest: Ingest) -> None:
    t = int(time.time() * 1000) // B * B - 4 * B
    body = encode_write_request(
        [
            _series("node_procs_running", "n1", t, 1e308, cpu="a"),
            _series("node_procs_running", "n1", t, 1e308, cpu="b"),
            _series("node_procs_running", "n2", t + 3 * B, 1.0),
        ]
    )
    ingest._decode_and_add(body)
    frames = ingest._close_due()
    assert [(f.node, f.values) for f in frames] == []  # n1's only feature dropped
    name = "peerwatch_ingest_frame_features_dropped_total"
    assert _count(ingest, name, reason="non_finite_result") == 1.0
    ingest._close_due()
    assert _count(ingest, name, reason="non_finite_result") == 1.0


def test_an_ha_failover_is_counted(ingest: Ingest) -> None:
    t = int(time.time() * 1000) // B * B - 8 * B
    for k, replica in ((0, "a"), (1, "b"), (4, "b")):
        series = [_series("node_procs_running", "n1", t + k * B, 1.0, prometheus_replica=replica)]
        ingest._decode_and_add(encode_write_request(series))
    ingest._close_due()
    assert _count(ingest, "peerwatch_ingest_ha_failovers_total") == 1.0
